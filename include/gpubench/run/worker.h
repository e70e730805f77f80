// The worker side of a job: what `gpubench worker` does in its fresh process. It reads a JobSpec,
// runs one phase (the search's probes, a timed run, or a memory tier's confirm) and answers with
// a JobRecord, whose status says what happened: a failure of the model never escapes as an
// exception. The parent side is run/job.h; run/launcher.h carries specs and records between them.
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/measure/batch_search.h"
#include "gpubench/records/result.h"
#include "gpubench/run/job_spec.h"
#include "gpubench/run/process.h"
#include "gpubench/train/runtime.h"
#include "gpubench/train/workload.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gpubench {

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

/// A step's losses as the runner reads them, outside the timed region (reading synchronizes):
/// each value (null where not finite) and the first that is not finite.
struct LossReading {
  Json values = Json::object();
  std::string non_finite;        ///< name of the first non-finite loss ("" when all are finite)
  std::string non_finite_value;  ///< "NaN", "+inf" or "-inf"
};
LossReading read_losses(const TrainStep& step);

/// The decisions that end a timed phase's warm-up and window, taken alike on every rank of a
/// data-parallel run: a rank that took one step more than the others would wait in an all-reduce
/// without partners. Every rank calls decide() at the same points, in the same order.
class StepAgreement {
 public:
  virtual ~StepAgreement() = default;
  /// The decision every rank takes where this rank alone would take `local`; in one process,
  /// `local`.
  virtual bool decide(bool local) { return local; }
};

/// The timed phase on a prepared architecture: the step built, its optimizer state allocated
/// before its first run (TrainStep::allocate_optimizer_state: where the search's probe put it),
/// warm-up, the losses, the timed window, the losses and the workload's degeneracy check again.
/// Fills `record`; a step whose losses are not finite at either end of the window, or that says
/// it is degenerate, gets status "diverged", a message naming the loss, and no throughput (the
/// measured one is kept as diverged_throughput). Model errors propagate (run_phase records
/// them). A data-parallel rank passes its `agreement`, which ends the warm-up and the window at
/// the same step on every rank.
void time_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx,
                const RunSettings& run, StepAgreement* agreement = nullptr);

/// A memory tier's confirm, in a fresh process at the searched batch: the step built as the
/// search built it, its optimizer state allocated first (as the timed phase does), then the
/// steps that autotune (every distinct batch shape once) and one more. Fills `record`'s batch
/// info, peaks and status; out of memory propagates (run_phase records `oom`); no window is
/// timed.
void confirm_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx);

/// This worker's part in a data-parallel timed run. An interface that the worker owns, so that
/// run/ does not depend on the data-parallel code: distributed/rank.h joins one through c10d.
class DataParallelRank {
 public:
  virtual ~DataParallelRank() = default;
  /// The gradient sync the step trains with: its updates average the gradients over the ranks.
  virtual std::shared_ptr<train::GradientSync> gradient_sync() const = 0;
  /// Where the ranks agree when the warm-up and the timed window end.
  virtual StepAgreement& agreement() = 0;
  /// After this rank's timed phase: every rank's numbers in `record` (its data_parallel field;
  /// the throughput summed over the ranks).
  virtual void finish(JobRecord& record) = 0;
};

/// Joins the data-parallel run that a spec's `distributed` field describes, training on
/// `device`.
using RankJoiner = std::function<std::unique_ptr<DataParallelRank>(const Json& distributed,
                                                                   const torch::Device& device)>;

/// Runs one phase in this process: what `gpubench worker` does. Never throws for a failure of
/// the model (out of memory, a libtorch error): the record's status says what happened. A spec
/// with a data-parallel rank joins it with `join_rank` (one without it fails the job).
JobRecord run_phase(const JobSpec& spec, const ConfigStore& store,
                    const RankJoiner& join_rank = nullptr);

/// `gpubench worker --spec FILE --out FILE` with the ranks joined by `join_rank`: runs one phase
/// and writes its record atomically (worker_main in distributed/rank.h passes c10d's).
int run_worker(const std::string& spec_path, const std::string& out_path,
               const RankJoiner& join_rank);

/// `gpubench worker --wait`: a pre-started worker (run/launcher.h). It parses and checks the
/// shipped configs, then blocks on a read of its standard input (a socket to its parent) for a
/// phase: a line with the spec file's path and one with the record's. Given them, it gives every
/// thread of its process `run_at`'s priority back, answers "ok\n" and runs the phase as
/// run_worker does. End of file first (its parent ended, or needs no worker), or a priority it
/// cannot take back (it then declines: the parent starts a fresh worker), ends it quietly with
/// kExitOk. Nothing before the phase touches a GPU (no CUDA call, device query or NVML).
int run_waiting_worker(const Priority& run_at, const RankJoiner& join_rank);

}  // namespace gpubench
