#include "gpubench/run/launcher.h"

#include "gpubench/run/process.h"
#include "gpubench/run/worker.h"

#include <fmt/format.h>

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

WorkerLauncher::WorkerLauncher(std::string executable)
    : executable_(executable.empty() ? current_executable() : std::move(executable)) {}

JobRecord WorkerLauncher::launch(const JobSpec& spec, double timeout_s) {
  const WorkerFiles files(spec);
  const ProcessResult process = run_process(files.command(executable_), timeout_s);
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
