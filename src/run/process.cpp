#include "gpubench/run/process.h"

#include "gpubench/base/errors.h"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace gpubench {

namespace {

/// The signal (SIGINT, SIGTERM, SIGHUP) that asked this process to stop while it waited for a
/// child; the child runs in its own process group, so it would not hear it otherwise.
volatile sig_atomic_t g_stop_signal = 0;

void remember_stop(int signo) { g_stop_signal = signo; }

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

}  // namespace

struct StopSignals::Saved {
  struct sigaction old[kCount];
  bool installed[kCount] = {};
};

StopSignals::StopSignals() : saved_(std::make_unique<Saved>()) {
  struct sigaction action {};
  action.sa_handler = remember_stop;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < kCount; ++i) {
    sigaction(kStopSignals[i], nullptr, &saved_->old[i]);
    // A signal the user chose to ignore (nohup, a background job) stays ignored.
    saved_->installed[i] = saved_->old[i].sa_handler != SIG_IGN;
    if (saved_->installed[i]) sigaction(kStopSignals[i], &action, nullptr);
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kCount; ++i) {
    if (saved_->installed[i]) sigaction(kStopSignals[i], &saved_->old[i], nullptr);
  }
}

void stop_if_asked() {
  const int signal_number = g_stop_signal;
  if (signal_number == 0) return;
  g_stop_signal = 0;
  throw Interrupted(signal_number);
}

std::string ProcessResult::describe() const {
  if (timed_out) return fmt::format("timed out after {:.0f} s", seconds);
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exited with code {}", exit_code);
}

pid_t start_process(const std::vector<std::string>& argv,
                    const std::vector<std::string>& environment_changes,
                    const StartOptions& options) {
  GPUBENCH_ASSERT(!argv.empty());
  // Everything the child needs is built here: between fork and exec only async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) {
    const bool changed = std::any_of(
        environment_changes.begin(), environment_changes.end(), [&](const std::string& change) {
          const std::size_t name = change.find('=') + 1;  // "NAME=" with its '='
          return std::strncmp(*e, change.c_str(), name) == 0;
        });
    if (!changed) environment.emplace_back(*e);
  }
  environment.insert(environment.end(), environment_changes.begin(), environment_changes.end());
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // The child's scheduling, worked out here too: nice values are per thread, and the child
  // starts with this thread's.
  const Priority here = current_priority();
  const int child_nice = std::min(here.nice + std::max(options.nice_increment, 0), 19);
  const bool child_batch = options.batch_scheduling && here.sched_other;

  // The child's parent-death signal is armed before this call returns: PR_SET_PDEATHSIG fires
  // when the *thread* that forked ends, and a thread that ended before the child reached prctl
  // would leave the child without it. So this thread waits until the child has called exec (or
  // died): the close-on-exec pipe's write end closes then, and its read end sees end of file.
  int armed[2] = {-1, -1};
  const bool have_pipe = pipe2(armed, O_CLOEXEC) == 0;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    if (have_pipe) {
      close(armed[0]);
      close(armed[1]);
    }
    throw AbortError(
        fmt::format("cannot start a worker process: {} (too many processes or too "
                    "little memory?)",
                    std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills everything the worker started
    // A worker never outlives its parent, even one killed with SIGKILL.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);
    if (options.stdin_fd >= 0 && dup2(options.stdin_fd, 0) < 0) _exit(127);  // no CLOEXEC on 0
    if (child_batch) {
      struct sched_param param {};
      sched_setscheduler(0, SCHED_BATCH, &param);
    }
    if (child_nice != here.nice) setpriority(PRIO_PROCESS, 0, child_nice);
    execve(args[0], args.data(), envp.data());
    static const char kMessage[] = "error: cannot start the gpubench worker executable\n";
    [[maybe_unused]] const ssize_t n = ::write(2, kMessage, sizeof kMessage - 1);
    _exit(127);
  }
  setpgid(pid, pid);
  if (have_pipe) {
    close(armed[1]);
    char byte = 0;
    while (read(armed[0], &byte, 1) < 0 && errno == EINTR) {
    }
    close(armed[0]);
  }
  return pid;
}

namespace {
/// How a child ended, from waitpid's status.
ProcessResult process_end(int status) {
  ProcessResult result;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}
}  // namespace

std::optional<ProcessResult> poll_process(pid_t pid) {
  int status = 0;
  const pid_t done = waitpid(pid, &status, WNOHANG);
  if (done == pid || (done < 0 && errno != EINTR)) return process_end(status);
  return std::nullopt;
}

void signal_process_group(pid_t pid, int signal_number) { kill(-pid, signal_number); }

void reap_process(pid_t pid) { waitpid(pid, nullptr, 0); }

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s) {
  const StopSignals stop_signals;  // from before the start: a stop then still stops the child
  return wait_process(start_process(argv), timeout_s);
}

ProcessResult wait_process(pid_t pid, double timeout_s) {
  const auto started = std::chrono::steady_clock::now();
  const StopSignals stop_signals;

  std::optional<ProcessResult> end;
  bool timed_out = false;
  bool terminated = false;
  auto deadline_passed = [&](double extra) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return timeout_s > 0 && elapsed > timeout_s + extra;
  };
  int stop_signal = 0;
  double stop_at = 0;
  while (!(end = poll_process(pid))) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (g_stop_signal != 0 && stop_signal == 0) {
      // Asked to stop: stop the worker too (it is in its own process group), then stop.
      stop_signal = g_stop_signal;
      stop_at = elapsed;
      kill(-pid, SIGTERM);
    } else if (stop_signal != 0 && elapsed > stop_at + 5) {
      kill(-pid, SIGKILL);
    }
    if (!terminated && deadline_passed(0)) {
      timed_out = true;
      kill(-pid, SIGTERM);
      terminated = true;
    } else if (terminated && deadline_passed(10)) {
      kill(-pid, SIGKILL);  // ignored SIGTERM for 10 s
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (stop_signal == 0) stop_signal = g_stop_signal;  // arrived as the worker was ending
  if (stop_signal != 0) {
    kill(-pid, SIGKILL);  // anything the worker left in its group
    g_stop_signal = 0;
    // The caller cleans up and says what was kept; the CLI then ends as the signal would.
    throw Interrupted(stop_signal);
  }
  ProcessResult result = *end;
  result.timed_out = timed_out;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

Priority current_priority() {
  Priority p;
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, 0);  // Linux: this thread's
  if (errno == 0) p.nice = nice;
  p.sched_other = sched_getscheduler(0) == SCHED_OTHER;
  return p;
}

bool nice_is_reversible(int increment) {
  bool reversible = false;
  try {
    std::thread probe([&] {
      const auto tid = static_cast<id_t>(syscall(SYS_gettid));
      errno = 0;
      const int before = getpriority(PRIO_PROCESS, tid);
      if (errno != 0) return;
      if (setpriority(PRIO_PROCESS, tid, std::min(before + increment, 19)) != 0) return;
      reversible = setpriority(PRIO_PROCESS, tid, before) == 0;
    });
    probe.join();
  } catch (const std::exception&) {
    return false;  // no thread to try it on: do not lower anything
  }
  return reversible;
}

bool restore_priority(const Priority& priority) {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return false;  // the threads cannot be listed: none is known restored
  bool restored = true;
  while (const dirent* entry = readdir(tasks)) {
    char* end = nullptr;
    const long tid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || tid <= 0) continue;  // "." and ".."
    const auto task = static_cast<pid_t>(tid);
    // A thread that ended since the listing (ESRCH) needs nothing.
    if (priority.sched_other && sched_getscheduler(task) == SCHED_BATCH) {
      struct sched_param param {};
      if (sched_setscheduler(task, SCHED_OTHER, &param) != 0 && errno != ESRCH) restored = false;
    }
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(task));
    if (errno == 0 && nice != priority.nice &&
        setpriority(PRIO_PROCESS, static_cast<id_t>(task), priority.nice) != 0 && errno != ESRCH) {
      restored = false;
    }
  }
  closedir(tasks);
  return restored;
}

std::string current_executable() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "gpubench";
  buffer[n] = '\0';
  return buffer;
}

}  // namespace gpubench
