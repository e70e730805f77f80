#include "src/run/worker_progress.h"

#include "gpubench/base/env.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iostream>

namespace gpubench {

namespace {

/// Who is speaking in a worker's progress lines: "[2:13] job 3/12 nasnet-large" in a suite.
struct ProgressPrefix {
  std::string label;
  double started_unix = 0;
};
ProgressPrefix& progress_prefix() {
  static ProgressPrefix prefix;
  return prefix;
}

/// When the worker last said something (steady clock, ns): the heartbeat speaks after silence.
std::atomic<int64_t> g_last_log_ns{0};
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void set_progress_prefix(const std::string& label, double started_unix) {
  progress_prefix() = {label, started_unix};
}

void worker_log(const std::string& model, const std::string& text) {
  g_last_log_ns = now_ns();
  if (const char* quiet = env::get(env::Switch::kQuiet); quiet && *quiet == '1') return;
  const ProgressPrefix& p = progress_prefix();
  std::string prefix = p.label.empty() ? model : p.label;
  if (p.started_unix > 0) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto elapsed = static_cast<int64_t>(std::max(0.0, now - p.started_unix));
    const int64_t h = elapsed / 3600, m = elapsed / 60 % 60, sec = elapsed % 60;
    // As the parent's lines: m:ss, or h:mm:ss past an hour.
    prefix = h > 0 ? fmt::format("[{}:{:02}:{:02}] {}", h, m, sec, prefix)
                   : fmt::format("[{}:{:02}] {}", m, sec, prefix);
  }
  static std::mutex m;  // the heartbeat's thread logs too
  const std::lock_guard<std::mutex> lock(m);
  std::cerr << fmt::format("  {}: {}\n", prefix, terminal_safe(text)) << std::flush;
}

Heartbeat::Heartbeat(std::string model) : model_(std::move(model)) {
  if (const char* s = env::get(env::Switch::kHeartbeatSeconds); s && *s) silence_s_ = std::atof(s);
  if (!(silence_s_ > 0)) silence_s_ = 10;
  g_last_log_ns = now_ns();
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
  const auto tick = std::chrono::duration<double>(std::min(1.0, silence_s_ / 2));
  std::unique_lock<std::mutex> lock(m_);
  while (!cv_.wait_for(lock, tick, [this] { return stop_; })) {
    const double quiet_s = static_cast<double>(now_ns() - g_last_log_ns) / 1e9;
    if (phase_.empty() || quiet_s < silence_s_) continue;
    worker_log(model_, fmt::format("{}: still running after {:.0f} s", phase_,
                                   seconds_since(phase_started_)));
  }
}

}  // namespace gpubench
