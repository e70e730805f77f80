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
  const Json mine = {{"rank", spec.rank},
                     {"device", record.device.name},
                     {"status", to_string(record.status)},
                     {"message", record.message},
                     {"throughput", record.throughput},
                     {"units_per_step", record.units_per_step},
                     {"steps", record.timing.steps},
                     {"step_time_ms_median", record.timing.median_ms},
                     {"step_time_ms_mean", record.timing.mean_ms},
                     {"step_time_ms", record.step_time_ms}};
  const std::vector<std::string> all = comm.exchange("result", mine.dump());
  Json ranks = Json::array();
  double total = 0, slowest = 0, fastest = 0;
  std::string failed;
  for (std::size_t r = 0; r < all.size(); ++r) {
    Json entry = Json::parse(all[r]);
    if (!spec.devices.empty() && r < spec.devices.size()) entry["device_index"] = spec.devices[r];
    const std::string status = entry.value("status", std::string("failed"));
    const std::optional<JobStatus> parsed = parse_job_status(status);
    if (parsed != JobStatus::ok && failed.empty()) {
      failed = fmt::format("rank {}: {}", r, entry.value("message", status));
      // The ranks are this gpubench's own workers: a status that is not one of JobStatus's
      // counts as failed, the message naming its rank.
      if (record.ok()) record.status = parsed.value_or(JobStatus::failed);
    }
    total += entry.value("throughput", 0.0);
    const double median = entry.value("step_time_ms_median", 0.0);
    slowest = r == 0 ? median : std::max(slowest, median);
    fastest = r == 0 ? median : std::min(fastest, median);
    ranks.push_back(std::move(entry));
  }
  Json dp = {{"world_size", spec.world_size},
             {"backend", spec.backend},
             {"interconnect", spec.interconnect},
             {"devices", spec.devices},
             {"per_rank_batch", record.batch},
             {"global_batch", record.batch * spec.world_size},
             {"scaling", "weak: every rank at the per-rank batch; throughput summed"},
             {"ranks", ranks},
             {"rank_throughput", record.throughput},
             {"step_time_spread_pct", fastest > 0 ? (slowest - fastest) / fastest * 100 : 0.0},
             {"gradient_sync", sync.info()},
             // Known once a one-GPU record of the same job at the same per-rank batch sits
             // beside it (report's scaling table).
             {"single_gpu_throughput", nullptr},
             {"scaling_efficiency", nullptr}};
  record.data_parallel = dp;
  if (!failed.empty()) {
    record.message = record.message.empty() ? failed : record.message;
    record.throughput = 0;
    return;
  }
  record.throughput = total;
  record.data_parallel["throughput_per_gpu"] = total / static_cast<double>(all.size());
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
