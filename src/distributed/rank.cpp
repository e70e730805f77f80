#include "gpubench/distributed/rank.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace gpubench {

namespace distributed {

void finish_timed_phase(JobRecord& record, Communicator& comm, const RankSpec& spec,
                        const BucketedGradientSync& sync) {
  if (record.ok() && sync.updates() == 0) {
    record.status = JobStatus::failed;
    record.message =
        "data-parallel: this workload's step updated without the runtime's gradient sync "
        "(train::Runtime::update), so its ranks did not train one model";
  }
  RankResult mine;
  mine.rank = spec.rank;
  mine.device = record.device.name;
  mine.status = record.status;
  mine.message = record.message;
  mine.throughput = record.throughput;
  mine.units_per_step = record.units_per_step;
  mine.steps = record.timing.steps;
  mine.step_time_ms_median = record.timing.median_ms;
  mine.step_time_ms_mean = record.timing.mean_ms;
  mine.step_time_ms = record.step_time_ms;
  const std::vector<std::string> all = comm.exchange("result", mine.to_json().dump());
  DataParallelRecord dp;
  double total = 0, slowest = 0, fastest = 0;
  std::string failed;
  for (std::size_t r = 0; r < all.size(); ++r) {
    Json sent = Json::parse(all[r]);
    // The ranks are this gpubench's own workers: a status that is not one of JobStatus's
    // counts as failed, the message naming its rank.
    const Json* status = json_at(sent, {"status"});
    if (sent.is_object() &&
        !(status && status->is_string() && parse_job_status(status->get<std::string>()))) {
      sent["status"] = to_string(JobStatus::failed);
    }
    RankResult entry = RankResult::from_json(sent, fmt::format("rank {}'s result", r));
    if (!spec.devices.empty() && r < spec.devices.size()) entry.device_index = spec.devices[r];
    if (entry.status != JobStatus::ok && failed.empty()) {
      failed = fmt::format("rank {}: {}", r, entry.message);
      if (record.ok()) record.status = entry.status;
    }
    total += entry.throughput;
    const double median = entry.step_time_ms_median;
    slowest = r == 0 ? median : std::max(slowest, median);
    fastest = r == 0 ? median : std::min(fastest, median);
    dp.ranks.push_back(std::move(entry));
  }
  dp.world_size = spec.world_size;
  dp.backend = spec.backend;
  dp.interconnect = spec.interconnect;
  dp.devices = spec.devices;
  dp.per_rank_batch = record.batch;
  dp.global_batch = record.batch * spec.world_size;
  dp.scaling = "weak: every rank at the per-rank batch; throughput summed";
  dp.rank_throughput = record.throughput;
  dp.step_time_spread_pct = fastest > 0 ? (slowest - fastest) / fastest * 100 : 0.0;
  dp.gradient_sync = sync.info();
  // single_gpu_throughput and scaling_efficiency stay null: known once a one-GPU record of the
  // same job at the same per-rank batch sits beside it (report's scaling table).
  if (failed.empty()) dp.throughput_per_gpu = total / static_cast<double>(all.size());
  record.data_parallel = std::move(dp);
  if (!failed.empty()) {
    record.message = record.message.empty() ? failed : record.message;
    record.throughput = 0;
    return;
  }
  record.throughput = total;
}

namespace {

/// The ranks' agreement through the store: rank 0's decision at each look, under a key of its
/// own ("agree/N"), so that every rank runs the same warm-up and window steps.
class RankZeroDecides final : public StepAgreement {
 public:
  explicit RankZeroDecides(Communicator& communicator) : communicator_(communicator) {}
  bool decide(bool local) override {
    return communicator_.from_rank_zero(fmt::format("agree/{}", ++looks_), local ? "1" : "0") ==
           "1";
  }

 private:
  Communicator& communicator_;
  int64_t looks_ = 0;
};

/// A rank of the process group, training with the bucketed all-reduce over it.
class C10dRank final : public DataParallelRank {
 public:
  C10dRank(RankSpec spec, const torch::Device& device)
      : spec_(std::move(spec)),
        communicator_(connect(spec_, device)),
        sync_(std::make_shared<BucketedGradientSync>(communicator_)),
        agreement_(*communicator_) {}

  std::shared_ptr<train::GradientSync> gradient_sync() const override { return sync_; }
  StepAgreement& agreement() override { return agreement_; }
  void finish(JobRecord& record) override {
    finish_timed_phase(record, *communicator_, spec_, *sync_);
  }

 private:
  RankSpec spec_;
  std::shared_ptr<Communicator> communicator_;
  std::shared_ptr<BucketedGradientSync> sync_;
  RankZeroDecides agreement_;
};

}  // namespace

std::unique_ptr<DataParallelRank> join_rank(const Json& distributed, const torch::Device& device) {
  return std::make_unique<C10dRank>(RankSpec::from_json(distributed), device);
}

}  // namespace distributed

int worker_main(const std::string& spec_path, const std::string& out_path) {
  return run_worker(spec_path, out_path, distributed::join_rank);
}

int waiting_worker_main(const Priority& run_at) {
  return run_waiting_worker(run_at, distributed::join_rank);
}

}  // namespace gpubench
