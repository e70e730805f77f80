// Suites: a planned list of jobs run one after another, each phase in its own worker process
// with a timeout, each finished job appended to the results journal. A crash, a hang or a
// sticky CUDA error loses one job and the rest go on; a killed suite continues from its journal
// (`gpubench run --resume FILE`) and repeats only what is missing.
#pragma once

#include "gpubench/records/journal.h"
#include "gpubench/run/job.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// One job of a suite.
struct SuiteJob {
  std::string model;
  std::optional<double> memory_cap_gib;  ///< a memory tier (search only) when set
  bool search_only = false;

  /// "bert-base", "bert-base @24GiB (search only)"
  std::string label() const;
  /// Whether `record` is this job's result.
  bool matches(const JobRecord& record) const;
  Json to_json() const;
  static SuiteJob from_json(const Json& json);
};

/// Everything needed to run (and later continue) a suite; recorded in the journal's header.
struct SuitePlan {
  std::vector<SuiteJob> jobs;
  std::string device = "cpu";           ///< "cpu" | "cuda:N"
  std::string device_name;              ///< "NVIDIA H200": a resume must run on the same kind
  std::optional<int64_t> fixed_batch;   ///< --batch N: every job without its own
  std::map<std::string, int64_t> model_batches;  ///< --batch MODEL=N: that model's jobs
  bool same_batch = false;  ///< --same-batch: model_batches are the RTX 8000's 2020 batches
  /// The fixed batch of `model`'s jobs (its own, else the plan's), none for a search.
  std::optional<int64_t> fixed_batch_of(const std::string& model) const;
  std::vector<ConfigOverlay> overlays;  ///< config file, then the command line
  /// Timed runs on several ranks (distributed::DataParallelPlan); null on one device.
  Json data_parallel;

  Json to_json() const;
  /// Throws ConfigError naming `file` for a plan this gpubench cannot continue.
  static SuitePlan from_json(const Json& json, const std::string& file);
};

/// Builds the plan's jobs: each model, or each model at each memory tier (search only).
std::vector<SuiteJob> plan_jobs(const std::vector<std::string>& models,
                                const std::vector<double>& memory_tiers_gib);

/// Whether a journal record means its job needs no rerun: it measured something ("ok") or found
/// that nothing fits ("no-fit"). Failed, crashed and timed-out jobs are tried again.
bool job_is_done(const JobRecord& record);

/// The config store one job runs with: the plan's overlays, then the job's memory tier.
std::vector<ConfigOverlay> job_overlays(const SuitePlan& plan, const SuiteJob& job);

struct SuiteCallbacks {
  std::function<void(const std::string&)> log;      ///< progress lines
  std::function<void(const JobRecord&)> job_ended;  ///< after each job is journaled
};

struct SuiteOutcome {
  std::vector<JobRecord> records;  ///< the journal's earlier records, then this run's
  int ran = 0;                     ///< jobs run now
  int skipped = 0;                 ///< jobs the journal already had
  int failed = 0;                  ///< jobs that failed, crashed or timed out now
};

/// Runs the plan's jobs that `earlier` (records of a journal being continued) does not already
/// hold as done, appending each result to `journal` as soon as it ends.
SuiteOutcome run_suite(const SuitePlan& plan, const std::vector<JobRecord>& earlier,
                       PhaseLauncher& launcher, JournalWriter& journal,
                       const SuiteCallbacks& callbacks);

/// "1:05", "12:40", "1:02:03"
std::string format_clock(double seconds);

}  // namespace gpubench
