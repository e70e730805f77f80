// Child processes: run a command with a timeout, its stdout and stderr passed through.
#pragma once

#include <memory>
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

/// Runs argv[0] with arguments argv[1..] and waits up to `timeout_s` seconds (<= 0: no limit);
/// past it the child's whole process group gets SIGTERM, then SIGKILL.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s);

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
