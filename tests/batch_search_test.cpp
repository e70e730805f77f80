// The max-batch search against fake steps that run out of memory above a known batch.
#include "gpubench/batch_search.h"

#include "gpubench/errors.h"
#include "gpubench/runner.h"
#include "gpubench/workload.h"

#include <c10/util/Exception.h>

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace gpubench {
namespace {

/// Memory as a line in the batch: fixed + per_sample * batch, with optional allocator-like
/// rounding noise; a probe fails once the peak passes the capacity.
struct FakeMemory {
  int64_t fixed = 2'000'000'000;
  int64_t per_sample = 100'000'000;
  int64_t capacity = 0;
  double noise = 0;  // relative, deterministic per batch
  int probes = 0;

  int64_t peak(int64_t batch) const {
    double p = static_cast<double>(fixed + per_sample * batch);
    if (noise > 0) {
      std::mt19937_64 rng(static_cast<uint64_t>(batch));
      p *= 1 + noise * std::uniform_real_distribution<double>(-1, 1)(rng);
    }
    return static_cast<int64_t>(p);
  }
  ProbeOutcome operator()(int64_t batch) {
    ++probes;
    ProbeOutcome o;
    o.peak_bytes = peak(batch);
    o.fits = o.peak_bytes <= capacity;
    o.resident_bytes = fixed;
    if (!o.fits) {
      o.peak_bytes = 0;
      o.error = "out of memory";
    }
    return o;
  }
};

SearchSettings settings(int64_t min, int64_t max, int64_t granularity, int64_t first) {
  SearchSettings s;
  s.min_batch = min;
  s.max_batch = max;
  s.granularity = granularity;
  s.first_probe = first;
  s.max_probes = 30;
  return s;
}

TEST(BatchSearchTest, FindsAnExactLinearLimitInEightProbes) {
  FakeMemory memory;
  memory.capacity = memory.fixed + memory.per_sample * 1312 + 50;  // limit: 1312
  const SearchRecord r =
      find_max_batch(settings(1, 65536, 1, 16), memory.capacity, std::ref(memory));
  EXPECT_EQ(r.max_batch, 1312);
  EXPECT_EQ(r.stop_reason, "bracket closed");
  EXPECT_LE(r.probes.size(), 8u);
  EXPECT_EQ(r.largest_pow2, 1024);
  EXPECT_EQ(r.peak_bytes_at_max, memory.peak(1312));
  EXPECT_NEAR(r.bytes_per_sample, 1e8, 1);
  EXPECT_NEAR(r.fixed_bytes, 2e9, 1e3);
}

TEST(BatchSearchTest, FindsTheExactLimitForManyThresholdsInFewProbes) {
  // Two scouts, the predicted probe, then a bracket of about +-0.3% halved down to one batch:
  // the probe count grows with the log of the limit.
  for (int64_t limit : {1, 2, 3, 7, 16, 100, 555, 1000, 2688, 4097, 30000}) {
    FakeMemory memory;
    memory.capacity = memory.fixed + memory.per_sample * limit + 1;
    const SearchRecord r =
        find_max_batch(settings(1, 65536, 1, 16), memory.capacity, std::ref(memory));
    EXPECT_EQ(r.max_batch, limit) << "limit " << limit;
    const auto bound = static_cast<std::size_t>(
        limit <= 3000 ? 8 : 5 + std::ceil(std::log2(0.006 * static_cast<double>(limit))));
    EXPECT_LE(r.probes.size(), bound) << "limit " << limit;
  }
}

TEST(BatchSearchTest, FindsTheLimitWhenTheLineOvershootsLikeTheRealAllocator) {
  // On an H200 the line through two probes predicted 1673 and 2695 where 1669 and 2688 were the
  // limits (the allocator runs out a little before the bytes do). Model that as memory that
  // costs 0.3% more near the limit than the line says.
  for (int64_t limit : {1669, 2688}) {
    FakeMemory memory;
    memory.capacity = memory.fixed + memory.per_sample * (limit + limit * 3 / 1000);
    auto probe = [&](int64_t batch) {
      ProbeOutcome o = memory(batch);
      o.fits = batch <= limit;
      if (!o.fits) o.peak_bytes = 0;
      return o;
    };
    const SearchRecord r = find_max_batch(settings(1, 65536, 1, 16), memory.capacity, probe);
    EXPECT_EQ(r.max_batch, limit);
    EXPECT_LE(r.probes.size(), 7u) << "limit " << limit;
  }
}

/// Peak memory interpolated from what an H200 measured (GiB against batch); out of memory
/// above `limit`.
struct MeasuredMemory {
  std::vector<std::pair<double, double>> points;
  int64_t limit;
  ProbeOutcome operator()(int64_t batch) const {
    ProbeOutcome o;
    o.fits = batch <= limit;
    if (!o.fits) return o;
    auto upper = std::lower_bound(points.begin(), points.end(), std::make_pair(double(batch), 0.0));
    if (upper == points.begin()) upper = std::next(upper);
    if (upper == points.end()) upper = std::prev(upper);
    const auto lower = std::prev(upper);
    const double t = (static_cast<double>(batch) - lower->first) / (upper->first - lower->first);
    const double gib = lower->second + t * (upper->second - lower->second);
    o.peak_bytes = static_cast<int64_t>(gib * double(int64_t{1} << 30));
    o.resident_bytes = int64_t{1850} << 20;
    return o;
  }
};

TEST(BatchSearchTest, FindsTheH200LimitsOfBertWithinSevenProbes) {
  // 2026-11-30 on one H200 (docs/results): the allocator had 139.3 GiB; bert-base fp32 fitted
  // 1669 and bert-finetune fp32 609, where the line through the scouts predicted 1673 and 603.
  const int64_t capacity = static_cast<int64_t>(139.3 * double(int64_t{1} << 30));
  const MeasuredMemory bert_base{
      {{16, 2.84}, {975, 81.8}, {1668, 138.9}, {1669, 139.0}, {1700, 141.6}}, 1669};
  const MeasuredMemory bert_finetune{
      {{8, 3.5}, {307, 71.6}, {601, 137.1}, {606, 138.1}, {609, 138.8}, {640, 145.0}}, 609};
  const SearchRecord a = find_max_batch(settings(1, 65536, 1, 16), capacity, bert_base);
  EXPECT_EQ(a.max_batch, 1669);
  EXPECT_LE(a.probes.size(), 7u);
  const SearchRecord b = find_max_batch(settings(1, 65536, 1, 8), capacity, bert_finetune);
  EXPECT_EQ(b.max_batch, 609);
  EXPECT_LE(b.probes.size(), 7u);
}

/// The shipped default budget: what a hinted search must live within.
SearchSettings hint_settings() {
  SearchSettings s = settings(1, 65536, 1, 16);
  s.max_probes = SearchSettings{}.max_probes;
  return s;
}

TEST(BatchSearchTest, AHintFromAnotherCapSkipsTheScouts) {
  // Memory tiers of one workload: the line the 24 GiB search learned predicts the 48 GiB
  // limit, so that search starts at it and needs only a few probes.
  for (int64_t limit : {55, 300, 1312, 5000}) {
    FakeMemory memory;
    memory.capacity = memory.fixed + memory.per_sample * limit + 10;
    SearchHint hint;
    hint.fixed_bytes = static_cast<double>(memory.fixed);
    hint.bytes_per_sample = static_cast<double>(memory.per_sample);
    FakeMemory unhinted = memory;
    const SearchRecord cold = find_max_batch(hint_settings(), memory.capacity, std::ref(unhinted));
    const SearchRecord r =
        find_max_batch(hint_settings(), memory.capacity, std::ref(memory), {}, hint);
    EXPECT_EQ(r.max_batch, limit);
    EXPECT_TRUE(r.hinted);
    EXPECT_EQ(r.probes.front().phase, "predict");
    EXPECT_LE(r.probes.size(), 4u) << "limit " << limit;
    EXPECT_LT(r.probes.size(), cold.probes.size()) << "limit " << limit;
  }
}

TEST(BatchSearchTest, AStaleHintCostsProbesButNotTheAnswer) {
  // The hint's line is 2% too cheap, or 2% too dear, or far off: the answer is still exact.
  for (double error : {0.98, 1.02, 0.5, 3.0}) {
    FakeMemory memory;
    memory.capacity = memory.fixed + memory.per_sample * 1312 + 10;
    SearchHint hint;
    hint.fixed_bytes = static_cast<double>(memory.fixed);
    hint.bytes_per_sample = error * static_cast<double>(memory.per_sample);
    const SearchRecord r =
        find_max_batch(hint_settings(), memory.capacity, std::ref(memory), {}, hint);
    EXPECT_EQ(r.max_batch, 1312) << "error " << error;
    EXPECT_LE(r.probes.size(), 12u) << "error " << error;
  }
  // A hint is never trusted over a probe: nothing fits, and the search says so.
  FakeMemory memory;
  memory.capacity = memory.fixed / 2;
  SearchHint hint{1e9, 1e8};
  const SearchRecord r =
      find_max_batch(hint_settings(), memory.capacity, std::ref(memory), {}, hint);
  EXPECT_EQ(r.max_batch, 0);
}

TEST(BatchSearchTest, StaysExactWhenMemoryIsNotQuiteLinear) {
  // +-0.5% per batch, like allocator rounding: the prediction misses by a few samples and the
  // bracket-and-bisect phase must still land on the true boundary.
  for (int64_t limit : {50, 300, 1312, 7000}) {
    FakeMemory memory;
    memory.noise = 0.005;
    memory.capacity = memory.fixed + memory.per_sample * limit;
    SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, memory.capacity, std::ref(memory));
    // With noise the fit set need not be an interval; the search must return a batch that
    // fits and whose successor does not.
    EXPECT_LE(memory.peak(r.max_batch), memory.capacity) << "limit " << limit;
    EXPECT_GT(memory.peak(r.max_batch + 1), memory.capacity) << "limit " << limit;
    // +-0.5% noise leaves about +-35 batches uncertain at 7000: a gallop and a bisection of
    // that width on top of the scouts and the predictions.
    EXPECT_LE(r.probes.size(), 14u) << "limit " << limit;
  }
}

TEST(BatchSearchTest, RespectsGranularityAndMinimum) {
  FakeMemory memory;
  memory.per_sample = 10'000;  // tokens
  memory.capacity = memory.fixed + memory.per_sample * 16'100;
  const SearchRecord r =
      find_max_batch(settings(64, 1 << 20, 64, 1024), memory.capacity, std::ref(memory));
  EXPECT_EQ(r.max_batch, 16'064);  // largest multiple of 64 at or under 16,100
  for (const auto& p : r.probes) EXPECT_EQ(p.batch % 64, 0) << p.batch;
  EXPECT_EQ(r.largest_pow2, 8192);
}

TEST(BatchSearchTest, StopsAtMaxBatchAndSaysSo) {
  FakeMemory memory;
  memory.capacity = memory.fixed + memory.per_sample * 100'000;
  const SearchRecord r = find_max_batch(settings(1, 512, 1, 16), memory.capacity, std::ref(memory));
  EXPECT_EQ(r.max_batch, 512);
  EXPECT_EQ(r.stop_reason, "limited by search.max_batch=512");
}

TEST(BatchSearchTest, ReportsZeroWhenEvenTheMinimumDoesNotFit) {
  FakeMemory memory;
  memory.capacity = memory.fixed / 2;
  const SearchRecord r = find_max_batch(settings(2, 64, 1, 16), memory.capacity, std::ref(memory));
  EXPECT_EQ(r.max_batch, 0);
  EXPECT_EQ(r.largest_pow2, 0);
  EXPECT_EQ(r.stop_reason, "does not fit at search.min_batch=2");
  EXPECT_FALSE(r.probes.back().fits);
  EXPECT_EQ(r.probes.back().batch, 2);
}

TEST(BatchSearchTest, RecoversWhenTheFirstProbeIsAlreadyTooLarge) {
  FakeMemory memory;
  memory.capacity = memory.fixed + memory.per_sample * 5;
  const SearchRecord r =
      find_max_batch(settings(1, 4096, 1, 64), memory.capacity, std::ref(memory));
  EXPECT_EQ(r.max_batch, 5);
  EXPECT_FALSE(r.probes.front().fits);
  EXPECT_LE(r.probes.size(), 8u);
}

TEST(BatchSearchTest, WithoutACapacityItDoublesThenBisects) {
  FakeMemory memory;
  memory.capacity = memory.fixed + memory.per_sample * 777;
  const SearchRecord r =
      find_max_batch(settings(1, 65536, 1, 16), /*capacity_bytes=*/0, std::ref(memory));
  EXPECT_EQ(r.max_batch, 777);
  EXPECT_LE(r.probes.size(), 20u);
}

TEST(BatchSearchTest, StopsWhenTheProbeBudgetIsSpent) {
  FakeMemory memory;
  memory.capacity = memory.fixed + memory.per_sample * 777;
  SearchSettings s = settings(1, 65536, 1, 16);
  s.max_probes = 3;
  const SearchRecord r = find_max_batch(s, 0, std::ref(memory));
  EXPECT_EQ(r.probes.size(), 3u);
  EXPECT_EQ(r.stop_reason, "probe budget spent (search.max_probes=3)");
  EXPECT_GT(r.max_batch, 0);  // the largest batch seen to fit
}

TEST(BatchSearchTest, RecordRoundTripsThroughJson) {
  FakeMemory memory;
  memory.capacity = memory.fixed + memory.per_sample * 300;
  const SearchRecord r =
      find_max_batch(settings(1, 65536, 1, 16), memory.capacity, std::ref(memory));
  const SearchRecord back = SearchRecord::from_json(r.to_json());
  EXPECT_EQ(back.max_batch, r.max_batch);
  EXPECT_EQ(back.probes.size(), r.probes.size());
  EXPECT_EQ(back.probes.back().phase, r.probes.back().phase);
  EXPECT_EQ(back.stop_reason, r.stop_reason);
}

// ---- The probe as the worker runs it: a real TrainStep that throws OutOfMemoryError ----

int g_live_steps = 0;

class FakeOomStep final : public TrainStep {
 public:
  FakeOomStep(int64_t batch, int64_t limit) : batch_(batch), limit_(limit) {
    ++g_live_steps;
    weights_ = torch::zeros({batch_});  // something to release
  }
  ~FakeOomStep() override { --g_live_steps; }
  double run() override {
    TORCH_CHECK_WITH(OutOfMemoryError, batch_ <= limit_, "fake OOM at batch ", batch_);
    return static_cast<double>(batch_);
  }
  std::map<std::string, torch::Tensor> losses() const override { return {}; }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override { return {}; }

 private:
  int64_t batch_, limit_;
  torch::Tensor weights_;
};

TEST(BatchSearchTest, ProbeCatchesOutOfMemoryAndReleasesTheStep) {
  Architecture arch;
  arch.name = "fake";
  arch.prepare = [](const StepContext& ctx) -> std::unique_ptr<TrainStep> {
    return std::make_unique<FakeOomStep>(ctx.batch, 37);
  };
  StepContext ctx;
  ctx.device = torch::kCPU;
  auto probe = [&](int64_t batch) {
    ctx.batch = batch;
    EXPECT_EQ(g_live_steps, 0) << "a previous probe leaked its step";
    return probe_step(arch, ctx);
  };
  const SearchRecord r = find_max_batch(settings(1, 1024, 1, 16), 0, probe);
  EXPECT_EQ(r.max_batch, 37);
  EXPECT_EQ(g_live_steps, 0);
  int failures = 0;
  for (const auto& p : r.probes) {
    if (!p.fits) {
      ++failures;
      EXPECT_NE(p.error.find("out of memory: fake OOM at batch"), std::string::npos) << p.error;
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(BatchSearchTest, ProbeLetsOtherErrorsThrough) {
  Architecture arch;
  arch.name = "broken";
  arch.prepare = [](const StepContext&) -> std::unique_ptr<TrainStep> {
    throw std::runtime_error("shape mismatch");
  };
  StepContext ctx;
  ctx.batch = 4;
  EXPECT_THROW(probe_step(arch, ctx), std::runtime_error);
}

}  // namespace
}  // namespace gpubench
