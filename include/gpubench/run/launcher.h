// How the parent runs a phase: the worker protocol. The parent writes the JobSpec to a work file,
// starts `gpubench worker --spec FILE --out FILE` (run/process.h), waits for it within the
// job's timeout, and reads the JobRecord the worker wrote; a worker that crashed, hung or wrote
// nothing still gives a record that says so. A data-parallel run's launcher
// (distributed/launcher.h) starts one such worker per rank.
//
// Pre-started workers (run.prestart_workers, `run --no-prestart` turns them off): while a
// worker runs, the launcher keeps the next one waiting, `gpubench worker --wait`, started at a
// lower CPU priority, which loads libtorch and the shipped configs and then blocks on a read of
// its standard input, a socket to the parent, without touching a GPU. The next phase goes to it:
// the parent writes the spec and record files' paths (two lines) once the previous worker has
// exited, the waiting worker gives its threads the parent's priority back, answers "ok" and runs
// the phase as `--spec FILE --out FILE` would. One that died or declined (no "ok") is replaced
// by a fresh `--spec --out` worker, so no phase is lost; one that was never used is killed and
// reaped when the launcher goes, and one whose parent died reads end-of-file (or gets SIGKILL,
// PR_SET_PDEATHSIG) and ends without a word.
#pragma once

#include "gpubench/records/result.h"
#include "gpubench/run/job_spec.h"

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// The worker processes a launcher started, and how many of them were pre-started.
struct WorkerCounts {
  bool prestart = false;  ///< whether the launcher pre-starts workers (run.prestart_workers)
  int processes = 0;
  int prestarted = 0;
};

/// Runs a phase somewhere (a worker process, or this process in tests) and returns its record.
class PhaseLauncher {
 public:
  virtual ~PhaseLauncher() = default;
  virtual JobRecord launch(const JobSpec& spec, double timeout_s) = 0;
  /// The worker processes started so far (one per launch); none for a launcher that starts no
  /// counted workers (in this process, a data-parallel run).
  virtual std::optional<WorkerCounts> worker_counts() const {
    return std::nullopt;
  }
};

/// Runs each phase in `gpubench worker` (a fresh process): the default.
class WorkerLauncher : public PhaseLauncher {
 public:
  /// `executable`: the gpubench binary (default: this one). `prestart`: keep the next worker
  /// waiting while one runs (the file's comment); off, each phase starts its worker as it
  /// comes.
  explicit WorkerLauncher(std::string executable = "", bool prestart = false);
  ~WorkerLauncher() override;
  WorkerLauncher(WorkerLauncher&&) noexcept;
  WorkerLauncher& operator=(WorkerLauncher&&) noexcept;

  JobRecord launch(const JobSpec& spec, double timeout_s) override;
  std::optional<WorkerCounts> worker_counts() const override;

  /// The waiting worker's pid, or -1 when none waits (tests).
  pid_t waiting_pid() const;

  /// Nice-value steps a waiting worker runs below the parent, where it may step back.
  static constexpr int kWaitingNice = 10;
  /// Seconds a waiting worker may take to take a phase (it may still be loading); past them
  /// a fresh worker runs it.
  static constexpr double kTakeTimeoutS = 120;
  /// Waiting workers that died or declined in a row after which the launcher stops
  /// pre-starting (a worker binary that cannot wait would otherwise cost a process a phase).
  static constexpr int kMaxWaitingFailures = 2;

 private:
  struct Waiting;
  /// The phase of these files handed to the waiting worker: its pid once it took it; none where
  /// none waits or it died or declined (then it is reaped).
  std::optional<pid_t> hand_over(const std::string& spec_path, const std::string& out_path);
  /// Starts the next waiting worker, unless one waits or pre-starting is off or gave up; a
  /// failure to start one only means there is none.
  void start_waiting() noexcept;

  std::string executable_;
  bool prestart_ = false;
  std::unique_ptr<Waiting> waiting_;
  WorkerCounts counts_;
  int failures_in_a_row_ = 0;
  std::optional<bool> nice_reversible_;  ///< asked once, at the first waiting worker
};

/// Runs each phase in this process (tests, debugging).
class InProcessLauncher : public PhaseLauncher {
 public:
  JobRecord launch(const JobSpec& spec, double timeout_s) override;
};

/// The files of one `gpubench worker` run: the spec, written when this is made, and the record
/// the worker writes. Both are removed when this goes, however the run ends (a record read, a
/// failure, or the user stopping the run).
class WorkerFiles {
 public:
  explicit WorkerFiles(const JobSpec& spec);
  ~WorkerFiles();
  WorkerFiles(const WorkerFiles&) = delete;
  WorkerFiles& operator=(const WorkerFiles&) = delete;

  /// The command that runs the worker: `executable worker --spec FILE --out FILE`.
  std::vector<std::string> command(const std::string& executable) const;
  const std::string& spec_path() const { return spec_path_; }
  const std::string& out_path() const { return out_path_; }
  /// What the worker wrote to its record file; none where there is no file to read.
  std::optional<std::string> output() const;

 private:
  std::string spec_path_;
  std::string out_path_;
};

}  // namespace gpubench
