#include "src/run/worker_progress.h"

#include "gpubench/base/env.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/terminal.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>

namespace gpubench {

namespace {

/// Who is speaking in a worker's progress: "[2:13] job 3/12 nasnet-large" in a suite.
struct ProgressPrefix {
  std::string label;
  double started_unix = 0;
  double eta_unix = 0;
};
ProgressPrefix& progress_prefix() {
  static ProgressPrefix prefix;
  return prefix;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// As the parent's lines: m:ss, or h:mm:ss past an hour.
std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  const int64_t h = s / 3600, m = s / 60 % 60, sec = s % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, sec) : fmt::format("{}:{:02}", m, sec);
}

/// "[2:13] job 3/12 nasnet-large", or the model's name outside a suite.
std::string speaker(const std::string& model) {
  const ProgressPrefix& p = progress_prefix();
  const std::string who = p.label.empty() ? model : p.label;
  if (p.started_unix <= 0) return who;
  return fmt::format("[{}] {}", clock_text(unix_seconds() - p.started_unix), who);
}

/// Seconds of silence before a plain heartbeat line (GPUBENCH_HEARTBEAT_S, default 10).
double heartbeat_seconds() {
  double seconds = 10;
  if (const char* s = env::get(env::Switch::kHeartbeatSeconds); s && *s) seconds = std::atof(s);
  return seconds > 0 ? seconds : 10;
}

/// How this worker prints: as GPUBENCH_PROGRESS says (the run sets it), none under
/// GPUBENCH_QUIET=1, else a status line when stderr is a terminal and plain lines elsewhere.
ProgressMode worker_mode() {
  if (const char* quiet = env::get(env::Switch::kQuiet); quiet && *quiet == '1') {
    return ProgressMode::kNone;
  }
  if (const char* mode = env::get(env::Switch::kProgress); mode && *mode) {
    if (const auto parsed = parse_progress_mode(mode)) return *parsed;
  }
  return progress_mode("auto", is_terminal(STDERR_FILENO));
}

/// This worker's printer on stderr; made again at the start of each phase (Heartbeat), so that
/// phases run in this process (InProcessLauncher) follow the environment of their run.
std::unique_ptr<ProgressPrinter>& printer_slot() {
  static std::unique_ptr<ProgressPrinter> printer;
  return printer;
}
ProgressPrinter& printer() {
  std::unique_ptr<ProgressPrinter>& slot = printer_slot();
  if (!slot) {
    const std::size_t columns = terminal_columns(STDERR_FILENO);
    slot = std::make_unique<ProgressPrinter>(std::cerr, worker_mode(), columns ? columns : 80,
                                             heartbeat_seconds());
  }
  return *slot;
}

}  // namespace

void set_progress_prefix(const std::string& label, double started_unix, double eta_unix) {
  progress_prefix() = {label, started_unix, eta_unix};
}

void worker_log(const std::string& model, const std::string& text) {
  printer().line(terminal_safe(fmt::format("  {}: {}", speaker(model), text)));
}

Heartbeat::Heartbeat(std::string model) : model_(std::move(model)) {
  silence_s_ = heartbeat_seconds();
  printer_slot().reset();  // no thread prints here now: the last phase's heartbeat is gone
  printer();
  thread_ = std::thread([this] { loop(); });
  current() = this;
}

Heartbeat::~Heartbeat() {
  current() = nullptr;
  {
    const std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  printer().clear_status();  // what the parent prints next starts on a clean line
}

void Heartbeat::phase(const std::string& what) {
  Heartbeat* h = current();
  if (h == nullptr) return;
  const std::lock_guard<std::mutex> lock(h->m_);
  h->phase_ = what;
  h->phase_started_ = std::chrono::steady_clock::now();
}

Heartbeat*& Heartbeat::current() {
  static Heartbeat* h = nullptr;
  return h;
}

void Heartbeat::loop() {
  ProgressPrinter& out = printer();
  if (out.mode() == ProgressMode::kNone) return;
  const bool terminal = out.mode() == ProgressMode::kTerminal;
  const auto tick = std::chrono::duration<double>(std::min(1.0, silence_s_ / 2));
  std::unique_lock<std::mutex> lock(m_);
  while (!cv_.wait_for(lock, tick, [this] { return stop_; })) {
    if (phase_.empty()) {
      out.status("");  // terminal: nothing is going on; plain: nothing to say
      continue;
    }
    const double in_phase = seconds_since(phase_started_);
    if (!terminal) {
      // The printer drops it unless the worker has said nothing for silence_s_.
      out.status(terminal_safe(fmt::format("  {}: {}: still running after {:.0f} s",
                                           speaker(model_), phase_, in_phase)));
      continue;
    }
    std::string left;
    if (const double eta = progress_prefix().eta_unix; eta > 0 && eta > unix_seconds()) {
      left = fmt::format("; about {} left", clock_text(eta - unix_seconds()));
    }
    out.status(terminal_safe(
        fmt::format("  {}: {} ({}){}", speaker(model_), phase_, clock_text(in_phase), left)));
  }
}

}  // namespace gpubench
