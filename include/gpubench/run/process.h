// Child processes: run a command with a timeout, its stdout and stderr passed through. The one
// place that forks: a worker of one phase (run_process) and the workers of a data-parallel run's
// ranks, watched together (start_process, poll_process), start alike.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

struct ProcessResult {
  int exit_code = -1;      ///< the child's exit status; -1 if it did not exit normally
  int signal = 0;          ///< the signal that ended it (0 if none)
  bool timed_out = false;  ///< killed because it ran past the timeout
  double seconds = 0;      ///< wall time

  /// "exited with code 3", "killed by signal 11 (Segmentation fault)", "timed out after 30 s".
  std::string describe() const;
};

/// How start_process sets up a child beyond its command and environment.
struct StartOptions {
  /// Made the child's standard input (a pre-started worker's socket to its parent); -1: it
  /// inherits this process's. The descriptor itself should be close-on-exec.
  int stdin_fd = -1;
  /// Added to the child's nice value before it execs (0: none): a pre-started worker prepares
  /// and waits at a lower priority.
  int nice_increment = 0;
  /// The child runs under SCHED_BATCH instead of SCHED_OTHER until it says otherwise (taken
  /// only where this thread runs under SCHED_OTHER; any process may switch back).
  bool batch_scheduling = false;
};

/// Starts argv[0] with arguments argv[1..] in a process group of its own (so that a stop reaches
/// everything it started) that dies with this process, even one killed with SIGKILL. Its
/// environment is this process's with each "NAME=VALUE" of `environment_changes` in place of
/// NAME's value. Returns once the child has called exec, its death signal armed (it also dies
/// with the thread that called this, as PR_SET_PDEATHSIG goes), with its pid, which is also its
/// group's id; AbortError when it cannot fork.
pid_t start_process(const std::vector<std::string>& argv,
                    const std::vector<std::string>& environment_changes = {},
                    const StartOptions& options = {});

/// Whether the process `pid` (from start_process) ended, without waiting: how it ended (exit code
/// and signal; not `seconds`), reaping it, or none while it runs. A waitpid that fails (the child
/// is no longer this process's) counts as an end.
std::optional<ProcessResult> poll_process(pid_t pid);

/// Sends `signal_number` to every process of the group that start_process gave `pid`.
void signal_process_group(pid_t pid, int signal_number);

/// Waits for the process `pid` to end and reaps it.
void reap_process(pid_t pid);

/// Waits up to `timeout_s` seconds (<= 0: no limit), counted from this call, for the process
/// `pid` (from start_process) to end, and reaps it; past the limit its whole process group gets
/// SIGTERM, then SIGKILL. A stop signal (StopSignals) stops the group and throws Interrupted.
ProcessResult wait_process(pid_t pid, double timeout_s);

/// Runs argv[0] with arguments argv[1..] (start_process) and waits for it (wait_process).
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s);

/// This thread's scheduling, as a pre-started worker is told to run its phase with: its nice
/// value and whether its policy is SCHED_OTHER (the default one).
struct Priority {
  int nice = 0;
  bool sched_other = true;
};
Priority current_priority();

/// Whether a thread of this process that raised its nice value by `increment` may lower it back
/// (CAP_SYS_NICE, or RLIMIT_NICE high enough): tried on a thread of its own, which ends with it
/// (nice values are per thread on Linux), so that the caller's priority never changes.
bool nice_is_reversible(int increment);

/// Gives every thread of this process `priority`'s nice value and, where `priority` says
/// SCHED_OTHER, that policy (leaving SCHED_BATCH). False when the system refuses one of them.
bool restore_priority(const Priority& priority);

/// While alive, SIGINT, SIGTERM and SIGHUP (those the user did not choose to ignore, as nohup
/// and background jobs do) are remembered instead of ending the process: run_process stops its
/// child and throws Interrupted, and stop_if_asked() throws it between children. Nests.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr int kCount = 3;
  struct Saved;  // the handlers it replaced (signal.h stays out of this header)
  std::unique_ptr<Saved> saved_;
};

/// Throws Interrupted when a stop signal arrived under a StopSignals and was not yet acted on.
void stop_if_asked();

/// Path of the running executable (/proc/self/exe).
std::string current_executable();

}  // namespace gpubench
