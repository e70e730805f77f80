// One rank of a data-parallel timed run, the worker's side: the process group joined, the
// bucketed all-reduce handed to the step as its gradient sync, and every rank's numbers
// gathered after the window. The worker reaches it through run/worker.h's DataParallelRank, so
// that run/ does not depend on this folder; `gpubench worker` (worker_main) is where the two
// meet.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/distributed/comm.h"
#include "gpubench/distributed/environment.h"
#include "gpubench/records/result.h"
#include "gpubench/run/process.h"
#include "gpubench/run/worker.h"

#include <torch/types.h>

#include <memory>
#include <string>

namespace gpubench {

namespace distributed {

/// After a rank's timed phase: every rank's result through the store, and the record's
/// `data_parallel` field (world size, backend, per-rank step times, interconnect, the gradient
/// sync's buckets). The throughput becomes the sum over ranks (weak scaling), and
/// data_parallel.throughput_per_gpu their mean; a rank that did not train makes the job fail with
/// its message.
void finish_timed_phase(JobRecord& record, Communicator& communicator, const RankSpec& spec,
                        const BucketedGradientSync& sync);

/// The worker's RankJoiner: joins the process group that `distributed` (a RankSpec's JSON)
/// describes (connect) with a BucketedGradientSync over it, and finishes with
/// finish_timed_phase.
std::unique_ptr<DataParallelRank> join_rank(const Json& distributed, const torch::Device& device);

}  // namespace distributed

/// `gpubench worker --spec FILE --out FILE`: run_worker, with data-parallel ranks joined through
/// c10d (distributed::join_rank).
int worker_main(const std::string& spec_path, const std::string& out_path);

/// `gpubench worker --wait`: run_waiting_worker, its phase run at `run_at`, with data-parallel
/// ranks joined through c10d.
int waiting_worker_main(const Priority& run_at);

}  // namespace gpubench
