// The parent side of a job. The parent (the CLI) plans one job per model and runs each phase in
// a worker process of the same binary (run/launcher.h, run/worker.h): the search in one, the
// timed run in a fresh one that confirms the batch (stepping down if it does not fit). A crash,
// a sticky CUDA error or a hang costs one job, and every job starts with a fresh caching
// allocator.
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/config/reference.h"
#include "gpubench/measure/batch_search.h"
#include "gpubench/records/result.h"
#include "gpubench/run/job_spec.h"
#include "gpubench/run/launcher.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {

/// Worker processes one search may use: a probe that leaves its worker unusable is probed again
/// in a fresh one, with the probes so far.
constexpr int kMaxSearchWorkers = 3;
/// Timed runs one job may make: the search's batch, then steps down (1% of it, doubling) until
/// one fits, then halves of [largest fit, smallest failure] while that is wider than the first
/// step.
constexpr int kMaxTimedAttempts = 6;

/// The next batch of a job's timed run after `attempts` ({batch, fitted}, in order; the first is
/// the search's batch), or 0 when there is none to make: the last one did not run out of
/// memory, the budget is spent, or the bracket is as narrow as the first step.
int64_t next_timed_batch(const std::vector<std::pair<int64_t, bool>>& attempts,
                         const SearchSettings& search);

/// One model's job as the parent runs it.
struct JobPlan {
  std::string model;
  std::string device = "cpu";          ///< "cpu" | "cuda:N"
  std::optional<int64_t> fixed_batch;  ///< --batch: no search
  /// --same-batch: fixed_batch is the baseline GPU's 2020 batch; the record's batch_source says
  /// "2020", so reports keep it beside the max-batch record of the same job.
  bool same_batch = false;
  std::vector<ConfigOverlay> overlays;
  bool search_only = false;               ///< a memory tier: the search is the result
  std::optional<SearchHint> search_hint;  ///< memory line of an earlier search of this model
  std::string progress_label;             ///< passed to the workers' progress lines
  double progress_started_unix = 0;       ///< when the suite started
  double progress_eta_unix = 0;           ///< when the suite should end (0: no estimate yet)
  /// The matmul peak an earlier job of the suite measured on this device at this job's kind:
  /// its timed runs reuse it. Without one, the first timed run measures and its repeats reuse.
  std::optional<MatmulPeak> matmul_peak;
};

/// Runs a job: search (on a GPU without --batch), then the timed run with step-down, then the
/// normalized score; a search-only job ends after the search. The record always names the
/// model, its family and units, the precision and the device, even when a worker died before
/// it could say. `log` receives progress lines (stderr in the CLI).
JobRecord run_job(const JobPlan& plan, const ConfigStore& store, PhaseLauncher& launcher,
                  const std::function<void(const std::string&)>& log);

/// Fills record.normalized from the workload's 2020 row (no-op for twins or failed jobs).
void normalize(JobRecord& record, const ModelConfig& config, const ReferenceTable& reference);

}  // namespace gpubench
