// Test helpers: temporary folders, files, running the real gpubench executable, and an
// EXPECT_THROWS_WITH that checks an exception's type and message.
#pragma once

#include "gpubench/measure/timing.h"
#include "gpubench/records/enums.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

namespace gpubench::testing {

/// A fresh folder under $TMPDIR, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// path() + "/" + name
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Writes `content` to `path`.
void write_file(const std::string& path, const std::string& content);
/// The content of `path` ("" if it does not exist).
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);

/// The gpubench executable built beside the test binary.
std::string gpubench_exe();

/// Result of running a command through the shell.
struct CommandResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};
/// Runs gpubench with `args` (shell-quoted by the caller), capturing stdout and stderr; in the
/// folder `cwd` when one is given, with `env` (shell-quoted `env` arguments: "-u NAME",
/// "NAME=value") changing its environment. Tests run with GPUBENCH_JOURNAL_DIR set to a folder
/// of their own (test_main.cpp), so a run without --journal leaves nothing in the user's home.
CommandResult run_gpubench(const std::string& args, const std::string& cwd = "",
                           const std::string& env = "");

/// A JSON config overlay that shrinks a workload to its smoke size (its config's `smoke:`
/// section) with a short CPU timing window, so end-to-end runs on the CPU take seconds.
std::string smoke_config_json(const std::string& model);
/// The same for several workloads in one overlay.
std::string smoke_configs_json(const std::vector<std::string>& models);

/// The job records in a journal so far (its lines but the header; 0 when it does not exist).
int journal_job_lines(const std::string& journal);

/// An executable script in `dir` standing in for the worker: it runs gpubench's own worker,
/// except for `model`'s jobs, whose worker sleeps for ten minutes (so that a kill or a Ctrl-C
/// lands while a worker runs, however slow the machine; the shell stays, so `pgrep -f` finds
/// it by its path). Returns its path.
std::string hanging_worker(const TempDir& dir, const std::string& model);

}  // namespace gpubench::testing

namespace gpubench {
// A failed EXPECT_EQ on a status or phase shows its string, not its bytes.
inline void PrintTo(JobStatus status, std::ostream* os) { *os << to_string(status); }
inline void PrintTo(WorkerPhase phase, std::ostream* os) { *os << to_string(phase); }
inline void PrintTo(AttemptPhase phase, std::ostream* os) { *os << to_string(phase); }
inline void PrintTo(WarmupEnd reason, std::ostream* os) { *os << '"' << to_string(reason) << '"'; }
inline void PrintTo(WindowStop stop, std::ostream* os) { *os << '"' << to_string(stop) << '"'; }
}  // namespace gpubench

/// Expects `statement` to throw `type` with `substring` in its message.
#define EXPECT_THROWS_WITH(statement, type, substring)                            \
  do {                                                                            \
    try {                                                                         \
      statement;                                                                  \
      ADD_FAILURE() << "expected " #type " containing \"" << (substring) << "\""; \
    } catch (const type& e) {                                                     \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)         \
          << "message: " << e.what();                                             \
    }                                                                             \
  } while (false)
