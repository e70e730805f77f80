// How the parent runs a phase: the worker protocol. The parent writes the JobSpec to a work file,
// starts `gpubench worker --spec FILE --out FILE` (run/process.h), waits for it within the
// job's timeout, and reads the JobRecord the worker wrote; a worker that crashed, hung or wrote
// nothing still gives a record that says so. A data-parallel run's launcher
// (distributed/launcher.h) starts one such worker per rank.
#pragma once

#include "gpubench/records/result.h"
#include "gpubench/run/job_spec.h"

#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// Runs a phase somewhere (a worker process, or this process in tests) and returns its record.
class PhaseLauncher {
 public:
  virtual ~PhaseLauncher() = default;
  virtual JobRecord launch(const JobSpec& spec, double timeout_s) = 0;
};

/// Runs each phase in `gpubench worker` (a fresh process): the default.
class WorkerLauncher : public PhaseLauncher {
 public:
  /// `executable`: the gpubench binary (default: this one).
  explicit WorkerLauncher(std::string executable = "");
  JobRecord launch(const JobSpec& spec, double timeout_s) override;

 private:
  std::string executable_;
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
  /// What the worker wrote to its record file; none where there is no file to read.
  std::optional<std::string> output() const;

 private:
  std::string spec_path_;
  std::string out_path_;
};

}  // namespace gpubench
