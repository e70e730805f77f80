#include "gpubench/run/launcher.h"

#include "gpubench/base/errors.h"
#include "gpubench/run/process.h"
#include "gpubench/run/worker.h"

#include <fmt/format.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace gpubench {

WorkerFiles::WorkerFiles(const JobSpec& spec)
    : spec_path_(make_work_file("spec")), out_path_(make_work_file("out")) {
  try {
    write_file_atomically(spec_path_, spec.to_json().dump());
  } catch (...) {
    std::remove(spec_path_.c_str());
    std::remove(out_path_.c_str());
    throw;
  }
  std::remove(out_path_.c_str());  // the worker writes it (atomically): none until then
}

WorkerFiles::~WorkerFiles() {
  std::remove(spec_path_.c_str());
  std::remove(out_path_.c_str());
}

std::vector<std::string> WorkerFiles::command(const std::string& executable) const {
  return {executable, "worker", "--spec", spec_path_, "--out", out_path_};
}

std::optional<std::string> WorkerFiles::output() const {
  std::ifstream in(out_path_);
  if (!in.good()) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// The waiting worker: its process (its own process group) and the parent's end of its socket.
/// Going, it kills and reaps a worker that did not take a phase.
struct WorkerLauncher::Waiting {
  pid_t pid = -1;
  int socket = -1;
  Waiting() = default;
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;
  ~Waiting() {
    if (socket >= 0) close(socket);
    if (pid > 0) {
      signal_process_group(pid, SIGKILL);
      reap_process(pid);
    }
  }
};

WorkerLauncher::WorkerLauncher(std::string executable, bool prestart)
    : executable_(executable.empty() ? current_executable() : std::move(executable)),
      prestart_(prestart) {
  counts_.prestart = prestart;
}

WorkerLauncher::~WorkerLauncher() = default;
WorkerLauncher::WorkerLauncher(WorkerLauncher&&) noexcept = default;
WorkerLauncher& WorkerLauncher::operator=(WorkerLauncher&&) noexcept = default;

std::optional<WorkerCounts> WorkerLauncher::worker_counts() const { return counts_; }

pid_t WorkerLauncher::waiting_pid() const { return waiting_ ? waiting_->pid : -1; }

void WorkerLauncher::start_waiting() noexcept {
  if (!prestart_ || waiting_ || failures_in_a_row_ >= kMaxWaitingFailures) return;
  try {
    // Lower its nice value only where it can take the parent's back: a phase never runs at a
    // lower priority than a fresh worker's. SCHED_BATCH it can always leave.
    if (!nice_reversible_) nice_reversible_ = nice_is_reversible(kWaitingNice);
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return;
    auto waiting = std::make_unique<Waiting>();
    waiting->socket = ends[0];
    const Priority here = current_priority();
    // --nice=N in one word: a negative N is then no option of its own.
    std::vector<std::string> argv = {executable_, "worker", "--wait",
                                     "--nice=" + std::to_string(here.nice)};
    if (here.sched_other) argv.emplace_back("--sched-other");
    StartOptions options;
    options.stdin_fd = ends[1];
    options.nice_increment = *nice_reversible_ ? kWaitingNice : 0;
    options.batch_scheduling = true;
    try {
      waiting->pid = start_process(argv, {}, options);
    } catch (...) {
      close(ends[1]);
      return;
    }
    close(ends[1]);  // the worker's end is its standard input now
    waiting_ = std::move(waiting);
  } catch (...) {
    // No waiting worker: the next phase starts a fresh one, as without pre-starting.
  }
}

std::optional<pid_t> WorkerLauncher::hand_over(const std::string& spec_path,
                                               const std::string& out_path) {
  const std::unique_ptr<Waiting> waiting = std::move(waiting_);
  if (!waiting) return std::nullopt;
  // One path a line: a path with a newline in it (a TMPDIR so named) goes the fresh way.
  if (spec_path.find('\n') != std::string::npos || out_path.find('\n') != std::string::npos) {
    return std::nullopt;
  }
  const std::string message = spec_path + "\n" + out_path + "\n";
  auto declined = [&]() -> std::optional<pid_t> {
    ++failures_in_a_row_;
    return std::nullopt;  // `waiting` goes: killed and reaped
  };
  for (std::size_t sent = 0; sent < message.size();) {
    // MSG_NOSIGNAL: a worker that died is EPIPE here, not SIGPIPE for the parent.
    const ssize_t n = send(waiting->socket, message.data() + sent, message.size() - sent,
                           MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return declined();
    sent += static_cast<std::size_t>(n);
  }
  // Its answer, or the end of its socket when it died or declined. It may still be loading.
  const auto asked = std::chrono::steady_clock::now();
  while (true) {
    stop_if_asked();  // a stop now: `waiting` is killed as the exception leaves
    pollfd fd{waiting->socket, POLLIN, 0};
    const int ready = poll(&fd, 1, 100);
    if (ready < 0 && errno != EINTR) return declined();
    if (ready > 0) break;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    if (waited > kTakeTimeoutS) return declined();
  }
  char answer[8] = {};
  ssize_t n = 0;
  do {
    n = read(waiting->socket, answer, sizeof answer);
  } while (n < 0 && errno == EINTR);
  if (n < 2 || answer[0] != 'o' || answer[1] != 'k') return declined();
  failures_in_a_row_ = 0;
  const pid_t pid = waiting->pid;
  waiting->pid = -1;  // the phase's worker now: waited for as a fresh one is
  return pid;
}

JobRecord WorkerLauncher::launch(const JobSpec& spec, double timeout_s) {
  const WorkerFiles files(spec);
  ProcessResult process;
  if (!prestart_) {
    process = run_process(files.command(executable_), timeout_s);
    ++counts_.processes;
  } else {
    // From before the hand-over: a stop during it stops the worker too.
    const StopSignals stop_signals;
    std::optional<pid_t> pid = hand_over(files.spec_path(), files.out_path());
    const bool prestarted = pid.has_value();
    if (!pid) pid = start_process(files.command(executable_));
    ++counts_.processes;
    if (prestarted) ++counts_.prestarted;
    // The previous worker has exited: the next one starts while this one runs. It touches no
    // GPU until it is handed a phase, which is after this one has exited.
    start_waiting();
    process = wait_process(*pid, timeout_s);
  }
  JobRecord record;
  const std::optional<std::string> output = files.output();
  if (output && process.exit_code == 0) {
    try {
      record = JobRecord::from_json(Json::parse(*output));
    } catch (const std::exception& e) {
      // A worker that wrote garbage fails its own job, not the run.
      record = JobRecord();
      record.model = spec.model;
      record.status = JobStatus::failed;
      record.message = fmt::format("the worker's record cannot be read: {}", e.what());
    }
  } else {
    record.model = spec.model;
    record.status = process.timed_out ? JobStatus::timeout
                    : process.signal  ? JobStatus::crashed
                                      : JobStatus::failed;
    record.message = fmt::format("{} worker {}",
                                 spec.phase == WorkerPhase::search ? "the search's"
                                 : spec.phase == WorkerPhase::time ? "the timed run's"
                                                                   : "the confirm's",
                                 process.describe());
  }
  return record;
}

JobRecord InProcessLauncher::launch(const JobSpec& spec, double /*timeout_s*/) {
  return run_phase(spec, resolve_store(spec.overlays));
}

}  // namespace gpubench
