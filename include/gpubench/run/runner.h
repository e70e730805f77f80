// Running jobs. The parent (the CLI) plans one job per model and runs each phase in a worker
// process of the same binary: the search in one, the timed run in a fresh one that confirms the
// batch (stepping down if it does not fit). A crash, a sticky CUDA error or a hang costs one
// job, and every job starts with a fresh caching allocator.
#pragma once

#include "gpubench/measure/batch_search.h"
#include "gpubench/config/config.h"
#include "gpubench/records/result.h"
#include "gpubench/train/workload.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {

/// One config document applied on top of the shipped configs: {file label, document}.
using ConfigOverlay = std::pair<std::string, Json>;

/// A device's dense-matmul peak as one timed run of a suite measured it, for the jobs after it:
/// measured once per device and kind instead of in every job (0.5-1 s each on the H200).
struct MatmulPeak {
  std::string device;       ///< "cuda:0"
  std::string kind;         ///< "fp32", "tf32", "bf16" or "fp16" (matmul_peak_kind)
  double tflops = 0;        ///< measure_matmul_peak_tflops
  std::string measured_by;  ///< the job whose timed run measured it: "bert-base"

  Json to_json() const;
  static MatmulPeak from_json(const Json& json);
};

/// What a worker is asked to do.
struct JobSpec {
  std::string model;                      ///< workload name
  std::string phase = "time";             ///< "search" | "time"
  int64_t batch = 0;                      ///< batch of the timed run (phase "time")
  std::string device = "cpu";             ///< "cpu" | "cuda:N"
  std::vector<ConfigOverlay> overlays;    ///< user config file, then the command line
  std::optional<SearchHint> search_hint;  ///< an earlier search's memory line (phase "search")
  /// Probes of this search that an earlier worker made before it became unusable: the search
  /// goes on from them (phase "search").
  std::vector<ProbeRecord> search_probes;
  int search_worker = 0;  ///< which worker of the search this is, from 0
  /// No timed run follows the search (a memory tier): its probes build the workload exactly as a
  /// timed run would, without the workload's probe_memory_format (phase "search").
  bool search_only = false;
  std::string progress_label;             ///< "job 3/12 nasnet-large": prefix of progress lines
  double progress_started_unix = 0;       ///< when the suite started (for elapsed times)
  /// A data-parallel timed run: this worker's rank (distributed::RankSpec); null otherwise.
  Json distributed;
  /// Phase "time": the peak an earlier job of the suite measured, used instead of measuring it
  /// again where it is for this device and the run's kind (choose_matmul_peak).
  std::optional<MatmulPeak> matmul_peak;

  Json to_json() const;
  static JobSpec from_json(const Json& json);
};

/// Rebuilds the config store a job runs with: the shipped configs plus the overlays.
ConfigStore resolve_store(const std::vector<ConfigOverlay>& overlays);

/// One search probe: builds the step at ctx.batch, runs one full step after
/// TrainStep::prepare_probe() (optimizer state allocated, the batches that may peak highest
/// next: one run() of a token-budget step trains each of them), or two when the
/// step cannot be readied (the first allocates the optimizer state, the second peaks with it in
/// place), reads the peak and resident memory, and releases everything. Out-of-memory (and the
/// cuDNN/cuBLAS failures that mean the same) is caught and reported as not fitting; when the device
/// no longer works after it, the outcome says the worker is unusable. Other errors propagate.
/// `headroom_bytes` (search.headroom of the capacity) are held in a ballast tensor through the
/// probe, so that the batch fits only with them to spare; on a GPU only (0 on the CPU).
ProbeOutcome probe_step(const Architecture& arch, const StepContext& ctx,
                        int64_t headroom_bytes = 0);

/// The model parameters a search probe builds with: `model`, with `memory_format` set to the
/// workload's `probe_memory_format` where it declares one that is not "same", unless no timed
/// run follows (`search_only`: a memory tier, whose answer no timed run confirms).
Params probe_model_params(const Architecture& arch, const Params& model, bool search_only);

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

/// A step's losses as the runner reads them, outside the timed region (reading synchronizes):
/// each value (null where not finite) and the first that is not finite.
struct LossReading {
  Json values = Json::object();
  std::string non_finite;        ///< name of the first non-finite loss ("" when all are finite)
  std::string non_finite_value;  ///< "NaN", "+inf" or "-inf"
};
LossReading read_losses(const TrainStep& step);

/// The timed phase on a prepared architecture: the step built, its optimizer state allocated
/// before its first run (TrainStep::allocate_optimizer_state: where the search's probe put it),
/// warm-up, the losses, the timed window, the losses and the workload's degeneracy check again.
/// Fills `record`; a step whose losses are not finite at either end of the window, or that says
/// it is degenerate, gets status "diverged", a message naming the loss, and no throughput (the
/// measured one is kept as diverged_throughput). Model errors propagate (run_phase records
/// them).
void time_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx,
                const RunSettings& run);

/// A memory tier's confirm, in a fresh process at the searched batch: the step built as the
/// search built it, its optimizer state allocated first (as the timed phase does), then the
/// steps that autotune (every distinct batch shape once) and one more. Fills `record`'s batch
/// info, peaks and status; out of memory propagates (run_phase records `oom`); no window is
/// timed.
void confirm_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx);

/// The matmul peak a timed run's record uses, and where it came from.
struct PeakChoice {
  std::optional<double> tflops;
  std::string source;       ///< "measured" (by this run), "reused", or "" for none
  std::string measured_by;  ///< "reused": the job that measured it
};
/// `given` where it was measured on `device` at `kind` (source "reused"), else what `measure`
/// returns (source "measured"; none on the CPU or when the measurement failed).
PeakChoice choose_matmul_peak(const std::optional<MatmulPeak>& given, const std::string& device,
                              const std::string& kind,
                              const std::function<std::optional<double>()>& measure);
/// The record's `compute` (compute_summary) with where its peak came from: `peak_source`, and
/// `peak_measured_by` for a reused one; neither without a peak.
Json compute_with_peak(double throughput, std::optional<double> flops_per_unit,
                       const std::string& kind, const PeakChoice& peak);
/// The peak `record`'s timed run on `device` measured itself (compute.peak_source "measured"),
/// for the jobs after it; none when it reused one or has none.
std::optional<MatmulPeak> measured_matmul_peak(const JobRecord& record, const std::string& device);

/// Runs one phase in this process: what `gpubench worker` does. Never throws for a failure of
/// the model (out of memory, a libtorch error): the record's status says what happened.
JobRecord run_phase(const JobSpec& spec, const ConfigStore& store);

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

/// `gpubench worker --spec FILE --out FILE`: runs one phase and writes its record atomically.
int worker_main(const std::string& spec_path, const std::string& out_path);

}  // namespace gpubench
