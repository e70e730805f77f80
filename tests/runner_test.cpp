// The runner: phases in this process on the CPU, the parent's search/confirm/step-down logic
// against a fake launcher, and worker processes that crash, hang or fail.
#include "gpubench/run/job.h"
#include "gpubench/run/job_spec.h"
#include "gpubench/run/launcher.h"
#include "gpubench/run/process.h"
#include "gpubench/run/worker.h"

#include "gpubench/base/errors.h"
#include "gpubench/measure/search_stop.h"
#include "gpubench/train/registry.h"
#include "gpubench/measure/timing.h"
#include "gpubench/report/reporter.h"
#include "tests/testing.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <thread>

namespace gpubench {
namespace {

using testing::TempDir;

std::vector<ConfigOverlay> smoke_overlays(const std::string& model) {
  return {{"smoke.json", Json::parse(testing::smoke_config_json(model))}};
}

TEST(RunnerTest, TimePhaseOnTheCpuProducesACompleteRecord) {
  JobSpec spec;
  spec.model = "bert-base";
  spec.phase = WorkerPhase::time;
  spec.batch = 2;
  spec.overlays = smoke_overlays("bert-base");
  const ConfigStore store = resolve_store(spec.overlays);
  const JobRecord r = run_phase(spec, store);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.device.type, "cpu");
  EXPECT_EQ(r.timing.steps, 2);
  EXPECT_EQ(r.step_time_ms.size(), 2u);
  EXPECT_GT(r.throughput, 0);
  EXPECT_DOUBLE_EQ(r.units_per_step, 2);  // examples per step
  EXPECT_NEAR(r.throughput, 2.0 * r.timing.steps / r.timing.window_seconds, 1e-6 * r.throughput);
  ASSERT_TRUE(r.warmup.has_value());
  EXPECT_EQ(r.warmup->steps, 1);
  EXPECT_TRUE(r.losses.contains("mlm"));
  EXPECT_TRUE(std::isfinite(r.losses["loss"].get<double>()));
  EXPECT_GT(r.trainable_params.at("model"), 0);
  EXPECT_EQ(r.batch_info["sequences"], 2);
  EXPECT_EQ(r.runtime["launch"], "eager");  // how the step ran: train::Runtime::info()
  EXPECT_EQ(r.runtime["updaters"][0]["optimizer"]["bias_correction"], false);  // BERT's Adam
  EXPECT_EQ(JobRecord::from_json(r.to_json()).runtime, r.runtime);
  EXPECT_TRUE(r.config["modified"].get<bool>());
  EXPECT_EQ(r.environment["software"]["built_with_cuda"], built_with_cuda());
}

TEST(RunnerTest, TheWorkloadsCudnnSettingIsAppliedAndRecorded) {
  for (const bool workload : {true, false}) {
    for (const bool run : {true, false}) {
      JobSpec spec;
      spec.model = "bert-base";
      spec.phase = WorkerPhase::time;
      spec.batch = 1;
      spec.overlays = smoke_overlays("bert-base");
      spec.overlays.push_back(
          {"cudnn.json",
           Json{{"run", {{"cudnn_benchmark", run}}},
                {"models", {{"bert-base", {{"runtime", {{"cudnn_benchmark", workload}}}}}}}}});
      const JobRecord r = run_phase(spec, resolve_store(spec.overlays));
      ASSERT_EQ(r.status, JobStatus::ok) << r.message;
      // On only when both the run and the workload want it; what the worker set before it built
      // the model is what the record's runtime and cuDNN sections say.
      EXPECT_EQ(r.runtime["cudnn_benchmark"], workload && run) << workload << run;
      ASSERT_TRUE(r.memory.cudnn.has_value());
      EXPECT_EQ((*r.memory.cudnn)["benchmark"], workload && run) << workload << run;
      EXPECT_EQ(r.config["runtime"]["cudnn_benchmark"], workload);
    }
  }
}

TEST(RunnerTest, AWorkloadsCudnnAlgorithmLimitReplacesTheRunsAndIsRecorded) {
  for (const int workload : {-1, 0, 10}) {
    JobSpec spec;
    spec.model = "bert-base";
    spec.phase = WorkerPhase::time;
    spec.batch = 1;
    spec.overlays = smoke_overlays("bert-base");
    spec.overlays.push_back(
        {"limit.json",
         Json{{"run", {{"cudnn_benchmark_limit", 5}}},
              {"models", {{"bert-base", {{"runtime", {{"cudnn_benchmark_limit", workload}}}}}}}}});
    const JobRecord r = run_phase(spec, resolve_store(spec.overlays));
    ASSERT_EQ(r.status, JobStatus::ok) << r.message;
    // -1 leaves the run's number; any other is the workload's own (0: every algorithm). The
    // worker set it before the model was built, and the record's cuDNN section read it back.
    const int expected = workload >= 0 ? workload : 5;
    ASSERT_TRUE(r.memory.cudnn.has_value());
    EXPECT_EQ((*r.memory.cudnn)["benchmark_limit"], expected) << workload;
    EXPECT_EQ(r.runtime["cudnn_benchmark_limit"], expected) << workload;
    EXPECT_EQ(r.config["runtime"]["cudnn_benchmark_limit"], workload);
  }
}

/// A step with one parameter whose loss is finite for its first `finite_runs` runs and NaN (or
/// +inf) after, and a degeneracy verdict of its own.
class DivergingStep : public TrainStep {
 public:
  DivergingStep(int finite_runs, double bad_value, std::string degenerate)
      : finite_runs_(finite_runs), bad_value_(bad_value), degenerate_(std::move(degenerate)) {}
  double run() override {
    ++runs_;
    return 3;
  }
  std::map<std::string, torch::Tensor> losses() const override {
    const double value = runs_ <= finite_runs_ ? 1.5 : bad_value_;
    return {{"aux", torch::tensor(0.25)}, {"box", torch::tensor(value)}};
  }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", {weight_}}};
  }
  std::string degeneracy() const override { return degenerate_; }
  int runs() const { return runs_; }

 private:
  int finite_runs_;
  double bad_value_;
  std::string degenerate_;
  int runs_ = 0;
  torch::Tensor weight_ = torch::zeros({4}).requires_grad_(true);
};

Architecture diverging_architecture(int finite_runs, double bad_value,
                                    const std::string& degenerate = "") {
  Architecture a;
  a.name = "diverging";
  a.prepare = [=](const StepContext&) -> std::unique_ptr<TrainStep> {
    return std::make_unique<DivergingStep>(finite_runs, bad_value, degenerate);
  };
  return a;
}

/// Runs the timed phase of `arch` on the CPU: one warm-up step, then a window of 4 steps (and,
/// with a `max_seconds`, on while its noise is above `noise_target`).
JobRecord time_on_cpu(const Architecture& arch, double max_seconds = 0.0,
                      double noise_target = 0.005) {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  RunSettings run;
  run.cpu_timing = TimingSettings{1, 1, 60, 0.5, 4, 0.0, max_seconds, noise_target};
  const ModelConfig& config = store.model("bert-base");
  StepContext ctx;
  ctx.config = &config;
  ctx.batch = 3;
  JobRecord record;
  record.model = "diverging";
  time_phase(record, arch, ctx, run);
  return record;
}

/// A DivergingStep (finite losses) whose mix repeats every `cycle` steps.
class CyclingStep : public DivergingStep {
 public:
  explicit CyclingStep(int64_t cycle) : DivergingStep(1000000, 1.0, ""), cycle_(cycle) {}
  int64_t representative_steps() const override { return cycle_; }

 private:
  int64_t cycle_;
};

Architecture cycling_architecture(int64_t cycle) {
  Architecture a;
  a.name = "cycling";
  a.prepare = [=](const StepContext&) -> std::unique_ptr<TrainStep> {
    return std::make_unique<CyclingStep>(cycle);
  };
  return a;
}

TEST(RunnerTest, TheWindowStopsAtItsMinimumWhenQuietOrHopelessAndGoesOnOtherwise) {
  // A target no noise exceeds: the window ends at its minimum of 4 steps and says why.
  JobRecord r = time_on_cpu(diverging_architecture(1000000, 1.0), 10.0, 1e9);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_EQ(r.timing.steps, 4);
  EXPECT_EQ(r.timing.stop, WindowStop::noise);
  ASSERT_TRUE(r.timing.noise.has_value());
  // No host-timed step is known to a billionth: four cycles project the target far past the
  // 10 s limit, so the window ends at its minimum instead of running to the limit.
  r = time_on_cpu(diverging_architecture(1000000, 1.0), 10.0, 1e-9);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_EQ(r.timing.stop, WindowStop::noise_unreachable);
  EXPECT_EQ(r.timing.steps, 4);
  EXPECT_TRUE(r.timing.noise.has_value());
  // Cycles of 8 steps: the minimum is one cycle (no noise yet), two are too few to project
  // from; the window goes on and stops at three (the looks come a cycle apart here).
  r = time_on_cpu(cycling_architecture(8), 10.0, 1e-9);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_EQ(r.timing.stop, WindowStop::noise_unreachable);
  EXPECT_EQ(r.timing.steps, 24);
  // ... unless its time limit comes first: there the window stops at the limit.
  r = time_on_cpu(cycling_architecture(8), 1e-9, 1e-9);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_EQ(r.timing.stop, WindowStop::time_limit);
  EXPECT_EQ(r.timing.steps, 8);
  EXPECT_FALSE(r.timing.noise.has_value());
  // No limit above the minimum: the window ends at its minimum, as before the noise stop.
  r = time_on_cpu(diverging_architecture(1000000, 1.0));
  EXPECT_EQ(r.timing.steps, 4);
  EXPECT_EQ(r.timing.stop, WindowStop::minimum);
}

TEST(RunnerTest, ALossThatTurnsNaNInTheWindowMakesTheJobDivergedWithoutAThroughput) {
  const JobRecord r = time_on_cpu(diverging_architecture(/*finite_runs=*/3, std::nan("")));
  EXPECT_EQ(r.status, JobStatus::diverged);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("loss 'box' is NaN at the end of the timed window"), std::string::npos)
      << r.message;
  EXPECT_EQ(r.throughput, 0);
  EXPECT_GT(r.diverged_throughput, 0);  // what was timed is kept, marked as no result
  EXPECT_EQ(r.timing.steps, 4);
  EXPECT_DOUBLE_EQ(r.losses_start["box"].get<double>(), 1.5);
  EXPECT_TRUE(r.losses["box"].is_null());
  EXPECT_DOUBLE_EQ(r.losses["aux"].get<double>(), 0.25);
  // The record says so when read back.
  const JobRecord back = JobRecord::from_json(r.to_json());
  EXPECT_EQ(back.status, JobStatus::diverged);
  EXPECT_TRUE(back.losses["box"].is_null());
  EXPECT_DOUBLE_EQ(back.losses_start["box"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(back.diverged_throughput, r.diverged_throughput);
}

TEST(RunnerTest, ALossAlreadyInfiniteAfterWarmUpStopsTheJobBeforeTheWindow) {
  const JobRecord r = time_on_cpu(diverging_architecture(/*finite_runs=*/0, INFINITY));
  EXPECT_EQ(r.status, JobStatus::diverged);
  EXPECT_NE(r.message.find("loss 'box' is +inf at the start of the timed window"),
            std::string::npos)
      << r.message;
  EXPECT_EQ(r.timing.steps, 0);  // nothing timed
  EXPECT_TRUE(r.losses_start["box"].is_null());
}

TEST(RunnerTest, FiniteLossesKeepTheJobOkAndRecordBothEnds) {
  const JobRecord r = time_on_cpu(diverging_architecture(/*finite_runs=*/1000, std::nan("")));
  EXPECT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_GT(r.throughput, 0);
  EXPECT_DOUBLE_EQ(r.losses_start["box"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r.losses["box"].get<double>(), 1.5);
  EXPECT_EQ(r.to_json().count("diverged_throughput"), 0u);
}

TEST(RunnerTest, AWorkloadsOwnDegeneracyCheckMakesTheJobDiverged) {
  const JobRecord r =
      time_on_cpu(diverging_architecture(1000, 0, "D's scores no longer depend on its input"));
  EXPECT_EQ(r.status, JobStatus::diverged);
  EXPECT_NE(r.message.find("degenerate: D's scores no longer depend on its input"),
            std::string::npos)
      << r.message;
  EXPECT_EQ(r.throughput, 0);
}

/// A step that is unsettled (an fp16 loss scale backing off, say) for its first `runs` runs.
class SettlingStep : public TrainStep {
 public:
  /// `nan_after`: from that run on its loss is NaN (a scale that never settles broke the model).
  explicit SettlingStep(int unsettled_runs, int* window_runs, int nan_after = 1 << 30)
      : unsettled_runs_(unsettled_runs), nan_after_(nan_after), window_runs_(window_runs) {}
  double run() override {
    ++runs_;
    if (in_window_) ++*window_runs_;
    return 3;
  }
  std::map<std::string, torch::Tensor> losses() const override {
    return {{"loss", torch::tensor(runs_ >= nan_after_ ? std::nan("") : 1.0)}};
  }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", {weight_}}};
  }
  void begin_window() override {
    in_window_ = true;
    runs_at_window_ = runs_;
  }
  std::string unsettled() const override {
    return runs_ < unsettled_runs_ ? "the scale is still backing off" : "";
  }
  std::string degeneracy() const override {
    // The window starts only once the step settled.
    return runs_at_window_ < unsettled_runs_ ? "timed before it settled" : "";
  }

 private:
  int unsettled_runs_;
  int nan_after_;
  int* window_runs_;
  int runs_ = 0, runs_at_window_ = 0;
  bool in_window_ = false;
  torch::Tensor weight_ = torch::zeros({4}).requires_grad_(true);
};

Architecture settling_architecture(int unsettled_runs, int* window_runs, int nan_after = 1 << 30) {
  Architecture a;
  a.name = "settling";
  a.prepare = [=](const StepContext&) -> std::unique_ptr<TrainStep> {
    return std::make_unique<SettlingStep>(unsettled_runs, window_runs, nan_after);
  };
  return a;
}

TEST(RunnerTest, TheWarmUpGoesOnUntilTheStepSettledAndSaysSo) {
  int window_runs = 0;
  const JobRecord r = time_on_cpu(settling_architecture(/*unsettled_runs=*/7, &window_runs));
  EXPECT_EQ(r.status, JobStatus::ok) << r.message;
  ASSERT_TRUE(r.warmup.has_value());
  EXPECT_EQ(r.warmup->steps, 7);  // one warm-up step by the rules, six more to settle
  const std::string detail = r.warmup->detail.value_or("");
  EXPECT_NE(detail.find("then 6 more steps while the scale is still backing off"),
            std::string::npos)
      << detail;
  EXPECT_EQ(window_runs, 4);
}

TEST(RunnerTest, AStepThatNeverSettlesIsTimedAfterABoundedWarmUpAndSaysSo) {
  int window_runs = 0;
  const JobRecord r = time_on_cpu(settling_architecture(/*unsettled_runs=*/1000, &window_runs));
  ASSERT_TRUE(r.warmup.has_value());
  EXPECT_EQ(r.warmup->steps, 1 + 64);
  const std::string detail = r.warmup->detail.value_or("");
  EXPECT_NE(detail.find("(still so)"), std::string::npos) << detail;
  // Its own verdict on the window then decides the job.
  EXPECT_EQ(r.status, JobStatus::diverged);
  EXPECT_NE(r.message.find("timed before it settled"), std::string::npos) << r.message;
}

TEST(RunnerTest, AWarmUpStopsSettlingOnceALossIsNoLongerFinite) {
  int window_runs = 0;
  // Unsettled for good, NaN from its 12th run: the losses are read every 8 settling steps, so
  // the warm-up stops after 1 + 16 steps instead of 1 + 64, and the window says diverged.
  const JobRecord r =
      time_on_cpu(settling_architecture(/*unsettled_runs=*/1000, &window_runs, /*nan_after=*/12));
  ASSERT_TRUE(r.warmup.has_value());
  EXPECT_EQ(r.warmup->steps, 1 + 16);
  const std::string detail = r.warmup->detail.value_or("");
  EXPECT_NE(detail.find("a loss is no longer finite"), std::string::npos) << detail;
  EXPECT_EQ(r.status, JobStatus::diverged);
  EXPECT_NE(r.message.find("loss 'loss' is NaN"), std::string::npos) << r.message;
}

/// A step whose run() keeps the host busy for 2 ms (a host-bound step, as the CPU's clock sees
/// every step) and that takes CUDA graphs when asked, or refuses them with `refusal`: after
/// enable_graphs(), each of its `shapes` batch shapes runs once eagerly, is captured on its next
/// run, and replays after.
class HostBoundStep : public TrainStep {
 public:
  HostBoundStep(int64_t shapes, std::string refusal)
      : shapes_(shapes), refusal_(std::move(refusal)) {}
  double run() override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < until) {
    }
    ++runs_;
    if (enabled_at_ >= 0) {
      const int64_t since = runs_ - enabled_at_;  // 1, 2, ... after enable_graphs()
      replays_ = since > 2 * shapes_ ? replays_ + 1 : 0;
    }
    return 3;
  }
  std::map<std::string, torch::Tensor> losses() const override {
    return {{"loss", torch::tensor(1.0)}};
  }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", {weight_}}};
  }
  bool uniform_steps() const override { return shapes_ == 1; }
  int64_t representative_steps() const override { return shapes_; }
  std::string enable_graphs() override {
    if (!refusal_.empty()) return refusal_;
    enabled_at_ = runs_;
    return {};
  }
  int64_t replays_in_a_row() const override { return replays_; }
  Json runtime_info() const override {
    return {{"launch", enabled_at_ >= 0 ? "cuda-graphs" : "eager"}};
  }

 private:
  int64_t shapes_;
  std::string refusal_;
  int64_t runs_ = 0;
  int64_t enabled_at_ = -1;
  int64_t replays_ = 0;
  torch::Tensor weight_ = torch::zeros({4}).requires_grad_(true);
};

JobRecord time_host_bound(int64_t shapes, const std::string& refusal, bool if_host_bound) {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  Architecture arch;
  arch.name = "host-bound";
  arch.prepare = [=](const StepContext&) -> std::unique_ptr<TrainStep> {
    return std::make_unique<HostBoundStep>(shapes, refusal);
  };
  RunSettings run;
  run.cpu_timing = TimingSettings{1, 1, 60, 0.5, 4, 0.0, 0.0};
  StepContext ctx;
  ctx.config = &store.model("bert-base");
  ctx.batch = 3;
  ctx.runtime.cuda_graphs_if_host_bound = if_host_bound;
  JobRecord record;
  record.model = "host-bound";
  time_phase(record, arch, ctx, run);
  return record;
}

TEST(RunnerTest, AHostBoundWarmUpTurnsGraphsOnAndWarmsUpUntilACycleReplays) {
  // Three shapes a cycle: the warm-up's one step says host-bound, 6 more run and capture the
  // shapes, 3 more replay a whole cycle; then the window.
  const JobRecord r = time_host_bound(3, "", true);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  ASSERT_TRUE(r.warmup.has_value());
  ASSERT_TRUE(r.warmup->host_bound.has_value());
  const Json& h = *r.warmup->host_bound;
  EXPECT_TRUE(h["host_bound"].get<bool>()) << h;
  EXPECT_GE(h["share"].get<double>(), kHostBoundShare) << h;
  EXPECT_DOUBLE_EQ(h["threshold"].get<double>(), kHostBoundShare);
  EXPECT_EQ(h["steps"], 1);
  EXPECT_EQ(h["graphs"], "on");
  EXPECT_EQ(h["capture_steps"], 6 + 3);
  EXPECT_EQ(r.warmup->steps, 1 + 6 + 3);
  EXPECT_EQ(r.warmup->step_time_ms.size(), 10u);
  EXPECT_EQ(r.runtime["launch"], "cuda-graphs");  // read after the captures
  EXPECT_EQ(r.timing.steps % 3, 0);               // whole cycles, all replays
  // One shape: two replays in a row are enough.
  const JobRecord one = time_host_bound(1, "", true);
  ASSERT_TRUE(one.warmup.has_value());
  ASSERT_TRUE(one.warmup->host_bound.has_value());
  EXPECT_EQ((*one.warmup->host_bound)["capture_steps"], 2 + 2);
}

TEST(RunnerTest, AHostBoundStepThatCannotTakeGraphsStaysEagerAndSaysWhy) {
  const JobRecord r = time_host_bound(2, "amp-fp16 reads a flag on the host", true);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  ASSERT_TRUE(r.warmup.has_value());
  ASSERT_TRUE(r.warmup->host_bound.has_value());
  const Json& h = *r.warmup->host_bound;
  EXPECT_TRUE(h["host_bound"].get<bool>()) << h;
  EXPECT_EQ(h["graphs"], "off");
  EXPECT_EQ(h["why_not"], "amp-fp16 reads a flag on the host");
  EXPECT_FALSE(h.contains("capture_steps"));
  EXPECT_EQ(r.runtime["launch"], "eager");
  // Without the setting the warm-up neither measures nor asks.
  const JobRecord off = time_host_bound(2, "", false);
  ASSERT_TRUE(off.warmup.has_value());
  EXPECT_FALSE(off.warmup->host_bound.has_value()) << off.warmup->to_json();
  EXPECT_FALSE(off.to_json()["warmup"].contains("host_bound"));
  EXPECT_EQ(off.runtime["launch"], "eager");
}

/// A step that logs what the runner asks of it, in order: "state" for
/// allocate_optimizer_state(), "run" for run().
class LoggingStep : public TrainStep {
 public:
  explicit LoggingStep(std::vector<std::string>* log) : log_(log) {}
  double run() override {
    log_->push_back("run");
    return 3;
  }
  void allocate_optimizer_state() override { log_->push_back("state"); }
  std::map<std::string, torch::Tensor> losses() const override {
    return {{"loss", torch::tensor(1.0)}};
  }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", {weight_}}};
  }

 private:
  std::vector<std::string>* log_;
  torch::Tensor weight_ = torch::zeros({4}).requires_grad_(true);
};

Architecture logging_architecture(std::vector<std::string>* log) {
  Architecture a;
  a.name = "logging";
  a.prepare = [=](const StepContext&) -> std::unique_ptr<TrainStep> {
    log->push_back("build");
    return std::make_unique<LoggingStep>(log);
  };
  return a;
}

// The timed run lays memory out as the search's probe did: the optimizer state first, once,
// before the first warm-up step (a first update would put it among freed activations).
TEST(RunnerTest, TheTimedPhaseAllocatesTheOptimizerStateBeforeTheFirstStep) {
  std::vector<std::string> log;
  const JobRecord r = time_on_cpu(logging_architecture(&log));
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  ASSERT_GE(log.size(), 3u);
  EXPECT_EQ(log[0], "build");
  EXPECT_EQ(log[1], "state");
  EXPECT_EQ(std::count(log.begin(), log.end(), "state"), 1);
  EXPECT_EQ(std::count(log.begin() + 2, log.end(), "run"), static_cast<long>(log.size()) - 2);
  EXPECT_EQ(std::count(log.begin(), log.end(), "run"),
            r.warmup.value_or(WarmupRecord{}).steps + r.timing.steps);
}

TEST(RunnerTest, ATiersConfirmAllocatesTheOptimizerStateBeforeItsFirstStep) {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  StepContext ctx;
  ctx.config = &store.model("bert-base");
  ctx.batch = 3;
  JobRecord record;
  record.model = "logging";
  std::vector<std::string> log;
  confirm_phase(record, logging_architecture(&log), ctx);
  EXPECT_EQ(record.status, JobStatus::ok);
  // On the CPU the confirm trains one step (no autotuning to sit out).
  EXPECT_EQ(log, (std::vector<std::string>{"build", "state", "run"}));
  EXPECT_EQ(record.memory.confirm_steps, std::optional<int64_t>(1));
}

// A tier's confirm reads the losses: a batch whose model no longer trains soundly is no answer.
TEST(RunnerTest, ATiersConfirmReadsTheLossesAndADivergedTierIsMarked) {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  StepContext ctx;
  ctx.config = &store.model("bert-base");
  ctx.batch = 3;
  JobRecord sound;
  confirm_phase(sound, diverging_architecture(5, std::nan("")), ctx);
  EXPECT_EQ(sound.status, JobStatus::ok);
  EXPECT_DOUBLE_EQ(sound.losses["box"].get<double>(), 1.5);
  JobRecord nan;
  confirm_phase(nan, diverging_architecture(0, std::nan("")), ctx);
  EXPECT_EQ(nan.status, JobStatus::diverged);
  EXPECT_TRUE(nan.losses["box"].is_null());
  EXPECT_NE(nan.message.find("loss 'box' is NaN after 1 step at batch 3"), std::string::npos)
      << nan.message;

}

TEST(RunnerTest, ADivergedJobIsNotNormalized) {
  JobRecord r = time_on_cpu(diverging_architecture(2, std::nan("")));
  ASSERT_EQ(r.status, JobStatus::diverged);
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  normalize(r, store.model("bert-base"), store.reference());
  EXPECT_FALSE(r.normalized.has_value());
}

TEST(RunnerTest, JobSpecRoundTripsThroughJson) {
  JobSpec spec;
  spec.model = "bert-base";
  spec.phase = WorkerPhase::search;
  spec.batch = 7;
  spec.device = "cuda:1";
  spec.overlays = smoke_overlays("bert-base");
  spec.search_hint = SearchHint{1e9, 2e8, 3, 4, 5, 6};
  ProbeRecord probe;
  probe.batch = 16;
  probe.sticky = true;
  probe.error = "CUDA error";
  spec.search_probes = {probe};
  spec.search_worker = 1;
  spec.search_only = true;
  spec.matmul_peak = MatmulPeak{"cuda:1", "bf16", 812.5, "nasnet-large"};
  const JobSpec back = JobSpec::from_json(spec.to_json());
  EXPECT_EQ(back.to_json(), spec.to_json());
  EXPECT_TRUE(back.search_only);
  ASSERT_TRUE(back.matmul_peak.has_value());
  EXPECT_EQ(back.matmul_peak->measured_by, "nasnet-large");
  // A spec without a peak (and one written before peaks were passed) reads back without one.
  spec.matmul_peak.reset();
  Json old = spec.to_json();
  EXPECT_FALSE(JobSpec::from_json(old).matmul_peak.has_value());
  old.erase("matmul_peak");
  EXPECT_FALSE(JobSpec::from_json(old).matmul_peak.has_value());
}

// The matmul peak: measured once per suite and device at each kind, reused by the jobs after.
TEST(RunnerTest, AGivenMatmulPeakIsReusedOnlyForItsDeviceAndKind) {
  int measured = 0;
  auto measure = [&]() -> std::optional<double> {
    ++measured;
    return 51.3;
  };
  const MatmulPeak given{"cuda:0", "fp32", 50.0, "bert-base"};
  PeakChoice c = choose_matmul_peak(given, "cuda:0", "fp32", measure);
  EXPECT_EQ(measured, 0);
  EXPECT_EQ(c.tflops, 50.0);
  EXPECT_EQ(c.source, "reused");
  EXPECT_EQ(c.measured_by, "bert-base");
  // Another device, another kind, or none given: measured here.
  for (const auto& [device, kind] :
       std::vector<std::pair<std::string, std::string>>{{"cuda:1", "fp32"}, {"cuda:0", "bf16"}}) {
    c = choose_matmul_peak(given, device, kind, measure);
    EXPECT_EQ(c.tflops, 51.3) << device << " " << kind;
    EXPECT_EQ(c.source, "measured");
    EXPECT_TRUE(c.measured_by.empty());
  }
  c = choose_matmul_peak(std::nullopt, "cuda:0", "fp32", measure);
  EXPECT_EQ(c.source, "measured");
  EXPECT_EQ(measured, 3);
  // No kind for the precision: nothing to reuse; a measurement that cannot say (the CPU): none.
  c = choose_matmul_peak(given, "cuda:0", "", [] { return std::optional<double>(); });
  EXPECT_FALSE(c.tflops.has_value());
  EXPECT_EQ(c.source, "");
}

TEST(RunnerTest, TheComputeRecordSaysWhereItsPeakCameFrom) {
  const ComputeRecord reused =
      compute_with_peak(100, 3e9, "fp32", {50.0, "reused", "bert-base"});
  EXPECT_DOUBLE_EQ(reused.peak_tflops.value_or(0), 50.0);
  EXPECT_DOUBLE_EQ(reused.peak_share.value_or(0), 0.3 / 50.0);
  EXPECT_EQ(reused.peak_source, std::optional<std::string>("reused"));
  EXPECT_EQ(reused.peak_measured_by, std::optional<std::string>("bert-base"));
  const ComputeRecord measured = compute_with_peak(100, 3e9, "fp32", {51.3, "measured", ""});
  EXPECT_EQ(measured.peak_source, std::optional<std::string>("measured"));
  EXPECT_FALSE(measured.peak_measured_by.has_value());
  const ComputeRecord none = compute_with_peak(100, 3e9, "fp32", {});
  EXPECT_FALSE(none.peak_source.has_value());
  EXPECT_DOUBLE_EQ(none.tflops.value_or(0), 0.3);
  // What a suite passes on: a peak the record measured, not one it reused.
  JobRecord r;
  r.model = "bert-base";
  r.compute = measured;
  const auto passed = measured_matmul_peak(r, "cuda:0");
  ASSERT_TRUE(passed.has_value());
  EXPECT_EQ(passed->to_json(), (MatmulPeak{"cuda:0", "fp32", 51.3, "bert-base"}.to_json()));
  r.compute = reused;
  EXPECT_FALSE(measured_matmul_peak(r, "cuda:0").has_value());
  r.compute = none;
  EXPECT_FALSE(measured_matmul_peak(r, "cuda:0").has_value());
}

/// A launcher that answers from a script: the search finds `found`; a timed run fits at or
/// below `fits_up_to`. `interruptions` search workers in a row report a probe that left them
/// unusable before the search completes.
class FakeLauncher : public PhaseLauncher {
 public:
  FakeLauncher(int64_t found, int64_t fits_up_to, int interruptions = 0)
      : found_(found), fits_up_to_(fits_up_to), interruptions_(interruptions) {}
  JobRecord launch(const JobSpec& spec, double) override {
    calls.push_back(to_string(spec.phase) + (":" + std::to_string(spec.batch)));
    JobRecord r;
    r.model = spec.model;
    r.device.type = "cuda";
    if (spec.phase == WorkerPhase::search) {
      search_specs.push_back(spec);
      SearchRecord s;
      s.probes = spec.search_probes;
      ProbeRecord p;
      p.batch = 16 + spec.search_worker;
      p.worker = spec.search_worker;
      if (spec.search_worker < interruptions_) {
        p.sticky = true;
        p.error = "CUDA error: an illegal memory access was encountered";
        s.probes.push_back(p);
        s.interrupted = true;
        s.stop = SearchStopReason::probe_unusable(p.batch, p.error);
        r.search = s;
        r.status = JobStatus::failed;
        r.message = "search: " + s.stop.text;
        return r;
      }
      p.fits = true;
      s.probes.push_back(p);
      s.max_batch = found_;
      s.converged = converges;
      r.search = s;
      r.batch = found_;
      r.status = found_ > 0 ? JobStatus::ok : JobStatus::no_fit;
      if (!converges) {
        // What run_phase writes for a search that spent its probe budget.
        r.search->stop = SearchStopReason::probe_budget(10);
        r.message = "warning: the search did not converge (probe budget spent "
                    "(search.max_probes=10)); batch " + std::to_string(found_) +
                    " fits but may be below the largest that does";
      }
      return r;
    }
    r.batch = spec.batch;
    if (spec.batch > fits_up_to_) {
      r.status = JobStatus::oom;
      r.message = "CUDA out of memory";
      return r;
    }
    if (spec.phase == WorkerPhase::confirm && diverge_confirm) {
      r.status = JobStatus::diverged;
      r.message = "loss 'loss' is NaN after 2 steps at batch " + std::to_string(spec.batch);
      return r;
    }
    r.throughput = 94.0 * 2;
    return r;
  }
  std::vector<std::string> calls;
  std::vector<JobSpec> search_specs;
  bool converges = true;  ///< false: the search spends its probe budget
  bool diverge_confirm = false;  ///< a memory tier's confirm finds a NaN loss

 private:
  int64_t found_, fits_up_to_;
  int interruptions_;
};

const ConfigStore& builtin() {
  static const ConfigStore s = ConfigStore::load_builtin(builtin_registry());
  return s;
}

void quiet(const std::string&) {}

TEST(RunnerTest, NasnetAndDeeplabProbeInNchwUnlessNoTimedRunConfirmsTheBatch) {
  // In bf16 channels-last cuDNN builds a kernel for every depthwise convolution at every new
  // shape (a probe of 15-42 s on the H200, 2-8 s in NCHW, with the same max batch): their
  // probes build in NCHW, every other key as the timed run's. A memory tier has no timed run to
  // confirm its answer, so it probes the layout it reports.
  for (const std::string name : {"nasnet-large", "deeplabv3"}) {
    SCOPED_TRACE(name);
    const ModelConfig& config = builtin().model(name);
    const Architecture& arch = builtin_registry().get(config.architecture);
    const Params probe = probe_model_params(arch, config.model, /*search_only=*/false);
    EXPECT_EQ(probe.str("memory_format"), "contiguous");
    EXPECT_NE(config.model.str("memory_format"), "contiguous");
    Json others = probe.json(), expected = config.model.json();
    others.erase("memory_format");
    expected.erase("memory_format");
    EXPECT_EQ(others, expected);
    EXPECT_EQ(probe_model_params(arch, config.model, /*search_only=*/true).json(),
              config.model.json());
  }
  for (const std::string name : {"deeplabv3-resnet101", "bert-base", "yolov3", "stylegan"}) {
    const ModelConfig& config = builtin().model(name);
    const Architecture& arch = builtin_registry().get(config.architecture);
    EXPECT_EQ(probe_model_params(arch, config.model, false).json(), config.model.json()) << name;
  }
}

TEST(RunnerTest, AMemoryTierTellsItsSearchWorkerThatNoTimedRunFollows) {
  FakeLauncher tier(1312, 1312), job(1312, 1312);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  run_job(plan, builtin(), job, quiet);
  plan.search_only = true;
  run_job(plan, builtin(), tier, quiet);
  ASSERT_EQ(job.search_specs.size(), 1u);
  ASSERT_EQ(tier.search_specs.size(), 1u);
  EXPECT_FALSE(job.search_specs[0].search_only);
  EXPECT_TRUE(tier.search_specs[0].search_only);
  EXPECT_EQ(tier.calls, (std::vector<std::string>{"search:0", "confirm:1312"}));
}

TEST(RunnerTest, AMemoryTierConfirmsItsBatchInAFreshProcessAndStepsDownWhenItDoesNotTrain) {
  // The search found 1312 under the cap; a fresh process fits only up to 1290.
  FakeLauncher tier(1312, 1290);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  plan.search_only = true;
  const JobRecord r = run_job(plan, builtin(), tier, quiet);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(r.search_only);
  ASSERT_GE(tier.calls.size(), 3u);
  EXPECT_EQ(tier.calls[0], "search:0");
  EXPECT_EQ(tier.calls[1], "confirm:1312");
  // The answer is a batch that trained in a fresh process, the search's record kept.
  EXPECT_LE(r.batch, 1290);
  EXPECT_GT(r.batch, 1200);
  ASSERT_TRUE(r.search.has_value());
  EXPECT_EQ(r.search->max_batch, 1312);
  ASSERT_FALSE(r.confirm.empty());
  EXPECT_EQ(r.confirm[0].status, JobStatus::oom);
  EXPECT_EQ(r.confirm.back().status, JobStatus::ok);
  EXPECT_NE(r.message.find("did not train in a fresh process under the cap; confirmed"),
            std::string::npos)
      << r.message;
  for (const auto& call : tier.calls) EXPECT_EQ(call.rfind("time:", 0), std::string::npos) << call;
}

// A tier whose confirm finds the model no longer training soundly is marked diverged, not failed
// and not an answer.
TEST(RunnerTest, AMemoryTierWhoseConfirmDivergesIsMarkedDiverged) {
  FakeLauncher tier(1312, 2000);
  tier.diverge_confirm = true;
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  plan.search_only = true;
  const JobRecord r = run_job(plan, builtin(), tier, quiet);
  EXPECT_EQ(r.status, JobStatus::diverged);
  EXPECT_NE(r.message.find("did not train soundly in its confirm"), std::string::npos)
      << r.message;
}

TEST(RunnerTest, AMemoryTierWhoseBatchNeverTrainsInAFreshProcessFails) {
  FakeLauncher tier(1312, 0);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  plan.search_only = true;
  const JobRecord r = run_job(plan, builtin(), tier, quiet);
  EXPECT_EQ(r.status, JobStatus::failed);
  EXPECT_NE(r.message.find("did not train in a fresh process under the cap"), std::string::npos)
      << r.message;
  EXPECT_LE(static_cast<int>(r.confirm.size()), kMaxTimedAttempts);
}

TEST(RunnerTest, SearchThenTimeAtTheFoundBatchAndNormalize) {
  FakeLauncher launcher(1312, 1312);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"search:0", "time:1312"}));
  EXPECT_EQ(r.status, JobStatus::ok);
  EXPECT_EQ(r.batch, 1312);
  EXPECT_EQ(r.batch_source, "search");
  ASSERT_TRUE(r.search.has_value());
  ASSERT_TRUE(r.normalized.has_value());
  EXPECT_DOUBLE_EQ(r.normalized->score, 2.0);
  EXPECT_EQ(r.confirm.size(), 1u);
}

TEST(RunnerTest, StepsDownWhenTheFreshProcessDoesNotFitTheFoundBatch) {
  // 1000 and 990 run out of memory with autotuning in a fresh process; 970 (a step twice the
  // first) trains; 980, halfway up, does not: the job keeps 970, every attempt recorded.
  FakeLauncher launcher(1000, 975);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"search:0", "time:1000", "time:990",
                                                      "time:970", "time:980"}));
  EXPECT_EQ(r.status, JobStatus::ok);
  EXPECT_EQ(r.batch, 970);
  ASSERT_EQ(r.confirm.size(), 4u);
  EXPECT_EQ(r.confirm[0].status, JobStatus::oom);
  EXPECT_EQ(r.confirm[0].phase, AttemptPhase::confirm);
  EXPECT_EQ(r.confirm[1].phase, AttemptPhase::step_down);
  EXPECT_EQ(r.confirm[2].status, JobStatus::ok);
  EXPECT_EQ(r.confirm[3].phase, AttemptPhase::bisect);
  EXPECT_EQ(r.confirm[3].status, JobStatus::oom);
  EXPECT_TRUE(r.confirm[3].seconds.has_value());
  // Written as before: each attempt's five keys, in their order.
  const Json written = r.to_json()["confirm"][3];
  std::vector<std::string> keys;
  for (const auto& item : written.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"batch", "status", "message", "seconds", "phase"}));
  EXPECT_EQ(written["status"], "oom");
  EXPECT_EQ(written["phase"], "bisect");
  EXPECT_NE(r.message.find("the search's batch 1000 did not fit"), std::string::npos) << r.message;
}

/// Timed runs that answer in turn from a script: (ok, throughput) or a failing status.
class RepeatLauncher : public PhaseLauncher {
 public:
  explicit RepeatLauncher(std::vector<std::pair<JobStatus, double>> script)
      : script_(std::move(script)) {}
  JobRecord launch(const JobSpec& spec, double) override {
    calls.push_back(to_string(spec.phase) + (":" + std::to_string(spec.batch)));
    const auto& [status, throughput] = script_.at(next_++);
    JobRecord r;
    r.model = spec.model;
    r.device.type = "cuda";
    r.batch =
        status == JobStatus::crashed ? 0 : spec.batch;  // a dead worker says nothing of its batch
    r.status = status;
    r.throughput = status == JobStatus::ok ? throughput : 0;
    r.timing.steps = 3;
    r.timing.median_ms = 1000 / std::max(throughput, 1.0);
    // NVML over the window: power and energy that follow the throughput; 14 ran throttled.
    r.clocks.power_w = PowerRange{300 + throughput, 0};
    r.clocks.sm_clock_mhz = ClockRange{0, static_cast<int64_t>(std::llround(1900 - throughput)), 0};
    r.clocks.throttled = throughput == 14;
    r.clocks.energy = WindowEnergy{0, 0, throughput / 100, std::nullopt, std::nullopt};
    if (status == JobStatus::diverged)
      r.message = "loss 'loss' is NaN at the end of the timed window";
    if (status == JobStatus::oom) r.message = "CUDA out of memory";
    return r;
  }
  std::vector<std::string> calls;

 private:
  std::vector<std::pair<JobStatus, double>> script_;
  std::size_t next_ = 0;
};

ConfigStore with_repeat(int repeat) {
  ConfigStore store = builtin();
  store.apply_document(Json{{"run", {{"repeat", repeat}}}}, "test");
  return store;
}

// run.repeat 3: the timed run three times at the job's batch (each would be a fresh process),
// every one kept, the throughput their median, with the mean's 95% interval.
TEST(RunnerTest, RepeatedTimedRunsGiveTheMedianAndAnInterval) {
  RepeatLauncher launcher({{JobStatus::ok, 10}, {JobStatus::ok, 14}, {JobStatus::ok, 12}});
  const JobPlan plan{"bert-base", "cuda:0", int64_t{64}, {}};
  const JobRecord r = run_job(plan, with_repeat(3), launcher, quiet);
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"time:64", "time:64", "time:64"}));
  EXPECT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_EQ(r.throughput, 12);
  ASSERT_TRUE(r.throughput_stats.has_value());
  EXPECT_EQ(r.throughput_stats->n, 3);
  EXPECT_EQ(r.throughput_stats->min, 10);
  EXPECT_EQ(r.throughput_stats->max, 14);
  const double half = 4.302652729749464 * 2.0 / std::sqrt(3.0);  // t(0.975, 2) x sd / sqrt(n)
  EXPECT_NEAR(r.throughput_stats->ci95_low, 12 - half, 1e-9);
  EXPECT_NEAR(r.throughput_stats->ci95_high, 12 + half, 1e-9);
  ASSERT_EQ(r.repeats.size(), 3u);
  EXPECT_EQ(r.repeats[1].throughput, 14);
  EXPECT_EQ(r.repeats[2].status, JobStatus::ok);
  ASSERT_TRUE(r.normalized.has_value());  // scored on the median
  EXPECT_DOUBLE_EQ(r.normalized->score, 12 / r.normalized->baseline_throughput);
  const JobRecord back = JobRecord::from_json(r.to_json());
  EXPECT_EQ(dump_json(back.to_json()["repeats"]), dump_json(r.to_json()["repeats"]));
  EXPECT_EQ(back.throughput_stats->to_json(), r.throughput_stats->to_json());

  // One timed run: no repeats, no interval; the record reads and writes as before.
  RepeatLauncher once({{JobStatus::ok, 10}});
  const JobRecord single = run_job(plan, builtin(), once, quiet);
  EXPECT_EQ(once.calls.size(), 1u);
  EXPECT_TRUE(single.repeats.empty());
  EXPECT_FALSE(single.throughput_stats.has_value());
  EXPECT_FALSE(single.repeat_summary.has_value());
  EXPECT_FALSE(single.to_json().contains("repeat_summary"));
  EXPECT_FALSE(single.to_json().contains("repeats"));
}

// The GPU's power, clock and energy, and the step time, over every timed run (their median and
// range), not the first run's alone; the first run's process time is kept like the others'.
TEST(RunnerTest, RepeatedTimedRunsSummarizePowerClocksAndEnergyOverEveryRun) {
  RepeatLauncher launcher(
      {{JobStatus::ok, 10}, {JobStatus::ok, 14}, {JobStatus::oom, 0}, {JobStatus::ok, 12}});
  const JobPlan plan{"bert-base", "cuda:0", int64_t{64}, {}};
  const JobRecord r = run_job(plan, with_repeat(4), launcher, quiet);
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  ASSERT_EQ(r.repeats.size(), 4u);
  EXPECT_GT(r.repeats[0].seconds, 0.0);
  EXPECT_DOUBLE_EQ(r.repeats[1].power_w_mean.value_or(0), 314.0);
  EXPECT_EQ(r.repeats[1].sm_clock_mhz_median, std::optional<int64_t>(1886));
  ASSERT_TRUE(r.repeat_summary.has_value());
  const RepeatSummary& s = *r.repeat_summary;
  EXPECT_EQ(s.runs, 3);  // the one out of memory is not counted
  EXPECT_EQ(s.throttled_runs, 1);
  ASSERT_TRUE(s.power_w_mean && s.sm_clock_mhz_median && s.units_per_joule &&
              s.step_time_ms_median);
  EXPECT_DOUBLE_EQ(s.power_w_mean->median, 312.0);
  EXPECT_DOUBLE_EQ(s.power_w_mean->min, 310.0);
  EXPECT_DOUBLE_EQ(s.power_w_mean->max, 314.0);
  EXPECT_DOUBLE_EQ(s.sm_clock_mhz_median->median, 1888.0);
  EXPECT_DOUBLE_EQ(s.units_per_joule->median, 0.12);
  EXPECT_DOUBLE_EQ(s.step_time_ms_median->max, 100.0);
  const std::optional<RepeatSummary> back = JobRecord::from_json(r.to_json()).repeat_summary;
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(dump_json(back->to_json()), dump_json(s.to_json()));
  // The tables read the medians, as they read the throughputs' median.
  std::ostringstream csv;
  make_reporter("csv", csv)->report({r}, builtin().reference());
  EXPECT_NE(csv.str().find(",312,"), std::string::npos) << csv.str();
}

// A timed run whose worker died keeps the batch it was given, not 0.
TEST(RunnerTest, ACrashedTimedRunKeepsItsBatch) {
  RepeatLauncher launcher({{JobStatus::crashed, 0}});
  const JobPlan plan{"bert-base", "cuda:0", int64_t{64}, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(r.status, JobStatus::crashed);
  EXPECT_EQ(r.batch, 64);
}

/// Timed runs that measure the matmul peak unless their spec brings one (as run_phase does).
class PeakLauncher : public PhaseLauncher {
 public:
  JobRecord launch(const JobSpec& spec, double) override {
    specs.push_back(spec);
    JobRecord r;
    r.model = spec.model;
    r.device.type = "cuda";
    r.batch = spec.batch;
    r.status = JobStatus::ok;
    r.throughput = 10.0 + static_cast<double>(specs.size());
    const PeakChoice peak = choose_matmul_peak(spec.matmul_peak, spec.device, "fp32",
                                               [] { return std::optional<double>(51.3); });
    r.compute = compute_with_peak(r.throughput, 1e12, "fp32", peak);
    return r;
  }
  std::vector<JobSpec> specs;
};

TEST(RunnerTest, RepeatedTimedRunsReuseThePeakTheFirstOneMeasured) {
  PeakLauncher launcher;
  const JobPlan plan{"bert-base", "cuda:0", int64_t{64}, {}};
  const JobRecord r = run_job(plan, with_repeat(3), launcher, quiet);
  ASSERT_EQ(launcher.specs.size(), 3u);
  EXPECT_FALSE(launcher.specs[0].matmul_peak.has_value());
  for (std::size_t i = 1; i < 3; ++i) {
    ASSERT_TRUE(launcher.specs[i].matmul_peak.has_value()) << i;
    EXPECT_EQ(launcher.specs[i].matmul_peak->to_json(),
              (MatmulPeak{"cuda:0", "fp32", 51.3, "bert-base"}.to_json()));
  }
  // The record's compute is the median's, its peak the first run's own measurement.
  EXPECT_EQ(r.throughput, 12);
  EXPECT_DOUBLE_EQ(r.compute.tflops.value_or(0), 12.0);
  EXPECT_EQ(r.compute.peak_source, std::optional<std::string>("measured"));
  // A peak the suite passes in: every timed run reuses it, and the record says whose it is.
  PeakLauncher given;
  JobPlan with_peak = plan;
  with_peak.matmul_peak = MatmulPeak{"cuda:0", "fp32", 50.0, "nasnet-large"};
  const JobRecord g = run_job(with_peak, with_repeat(2), given, quiet);
  ASSERT_EQ(given.specs.size(), 2u);
  for (const auto& spec : given.specs) ASSERT_TRUE(spec.matmul_peak.has_value());
  EXPECT_EQ(g.compute.peak_source, std::optional<std::string>("reused"));
  EXPECT_EQ(g.compute.peak_measured_by, std::optional<std::string>("nasnet-large"));
  EXPECT_DOUBLE_EQ(g.compute.peak_tflops.value_or(0), 50.0);
}

// A repeat that diverges: no timed run of the job is a result. One that runs out of memory is
// said, and the statistics are over the others.
TEST(RunnerTest, ARepeatThatDivergesFailsTheJobAndOneOutOfMemoryIsSaid) {
  const JobPlan plan{"bert-base", "cuda:0", int64_t{64}, {}};
  RepeatLauncher diverging({{JobStatus::ok, 10}, {JobStatus::diverged, 0}, {JobStatus::ok, 12}});
  const JobRecord d = run_job(plan, with_repeat(3), diverging, quiet);
  EXPECT_EQ(d.status, JobStatus::diverged);
  EXPECT_EQ(d.throughput, 0);
  EXPECT_FALSE(d.normalized.has_value());
  EXPECT_NE(d.message.find("timed run 2 of 3: loss 'loss' is NaN"), std::string::npos) << d.message;
  EXPECT_EQ(diverging.calls.size(), 2u);  // no third run after a diverged one

  RepeatLauncher edge({{JobStatus::ok, 10}, {JobStatus::oom, 0}, {JobStatus::ok, 12}});
  const JobRecord e = run_job(plan, with_repeat(3), edge, quiet);
  EXPECT_EQ(e.status, JobStatus::ok);
  EXPECT_EQ(e.throughput, 11);  // the median of 10 and 12
  EXPECT_EQ(e.throughput_stats->n, 2);
  EXPECT_EQ(e.repeats.size(), 3u);
  EXPECT_EQ(e.repeats[1].status, JobStatus::oom);
  EXPECT_NE(e.message.find("1 of 3 timed runs did not finish, the statistics are over the other "
                           "2: timed run 2 of 3: oom (CUDA out of memory)"),
            std::string::npos)
      << e.message;
}

TEST(RunnerTest, TheStepDownBisectsBetweenTheLargestFitAndTheSmallestFailure) {
  SearchSettings s;
  s.min_batch = 1;
  s.granularity = 1;
  using A = std::vector<std::pair<int64_t, bool>>;
  EXPECT_EQ(next_timed_batch(A{{1000, true}}, s), 0);  // the search's batch trained
  EXPECT_EQ(next_timed_batch(A{{1000, false}}, s), 990);
  EXPECT_EQ(next_timed_batch(A{{1000, false}, {990, false}}, s), 970);
  EXPECT_EQ(next_timed_batch(A{{1000, false}, {990, false}, {970, false}}, s), 930);
  EXPECT_EQ(next_timed_batch(A{{1000, false}, {990, false}, {970, true}}, s), 980);
  EXPECT_EQ(next_timed_batch(A{{1000, false}, {990, true}}, s), 0);  // as close as one step
  // Granularity: steps of whole granules, never below min_batch.
  s.granularity = 128;
  s.min_batch = 256;
  EXPECT_EQ(next_timed_batch(A{{16000, false}}, s), 15744);  // 1% is 160, two granules
  EXPECT_EQ(next_timed_batch(A{{384, false}, {256, false}}, s), 0);
  // Bounded: kMaxTimedAttempts timed runs at most.
  A many;
  for (int i = 0; i < kMaxTimedAttempts; ++i) many.emplace_back(1000 - i, false);
  EXPECT_EQ(next_timed_batch(many, s), 0);
}

TEST(RunnerTest, GivesUpAfterItsTimedRunsAndFails) {
  FakeLauncher launcher(100, 10);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  // 100, then 99, 97, 93, 85, 69: steps of 1, 2, 4, 8, 16.
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"search:0", "time:100", "time:99",
                                                      "time:97", "time:93", "time:85",
                                                      "time:69"}));
  EXPECT_EQ(r.status, JobStatus::failed);
  EXPECT_NE(r.message.find("out of memory at batch 69"), std::string::npos) << r.message;
  EXPECT_EQ(r.confirm.size(), static_cast<std::size_t>(kMaxTimedAttempts));
  EXPECT_FALSE(r.normalized.has_value());
}

TEST(RunnerTest, ASearchWhoseWorkerBreaksGoesOnInAFreshOne) {
  FakeLauncher launcher(1312, 1312, /*interruptions=*/1);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  std::vector<std::string> lines;
  const JobRecord r =
      run_job(plan, builtin(), launcher, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"search:0", "search:0", "time:1312"}));
  ASSERT_EQ(launcher.search_specs.size(), 2u);
  EXPECT_EQ(launcher.search_specs[1].search_worker, 1);
  ASSERT_EQ(launcher.search_specs[1].search_probes.size(), 1u);  // the first worker's probes
  EXPECT_TRUE(launcher.search_specs[1].search_probes[0].sticky);
  EXPECT_EQ(r.status, JobStatus::ok);
  EXPECT_EQ(r.batch, 1312);
  bool said = false;
  for (const auto& l : lines) said = said || l.find("goes on in a fresh worker") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(RunnerTest, ASearchThatBreaksEveryWorkerFailsTheJobOnly) {
  FakeLauncher launcher(1312, 1312, /*interruptions=*/kMaxSearchWorkers);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(launcher.search_specs.size(), static_cast<std::size_t>(kMaxSearchWorkers));
  EXPECT_EQ(r.status, JobStatus::failed);
  EXPECT_NE(r.message.find("left its worker unusable"), std::string::npos) << r.message;
  ASSERT_TRUE(r.search.has_value());
  EXPECT_EQ(r.search->probes.size(), static_cast<std::size_t>(kMaxSearchWorkers));
}

TEST(RunnerTest, ASearchThatDidNotConvergeSaysSoOnStderrAndInTheRecord) {
  // The job still runs at the largest batch the search saw fit; the warning is logged (stderr)
  // when the search ends and kept in the final record, whose search says it did not converge.
  FakeLauncher launcher(700, 1000);
  launcher.converges = false;
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  std::vector<std::string> lines;
  const JobRecord r =
      run_job(plan, builtin(), launcher, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"search:0", "time:700"}));
  EXPECT_EQ(r.status, JobStatus::ok);
  EXPECT_EQ(r.batch, 700);
  ASSERT_TRUE(r.search.has_value());
  EXPECT_FALSE(r.search->converged);
  EXPECT_NE(r.message.find("did not converge"), std::string::npos) << r.message;
  bool said = false;
  for (const auto& l : lines) {
    said = said || (l.find("bert-base: warning:") != std::string::npos &&
                    l.find("did not converge") != std::string::npos);
  }
  EXPECT_TRUE(said);
  // And through JSON, as the journal and the reports read it.
  const JobRecord back = JobRecord::from_json(r.to_json());
  ASSERT_TRUE(back.search.has_value());
  EXPECT_FALSE(back.search->converged);
  EXPECT_EQ(back.search->stop.kind, SearchStop::probe_budget);
  EXPECT_EQ(back.search->stop.text, "probe budget spent (search.max_probes=10)");
}

TEST(RunnerTest, AFixedBatchIsTimedAsGivenWithoutSearchOrStepDown) {
  FakeLauncher launcher(0, 10);
  JobPlan plan{"bert-base", "cuda:0", 64, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"time:64"}));
  EXPECT_EQ(r.status, JobStatus::failed);
  EXPECT_EQ(r.batch_source, "flag");
}

TEST(RunnerTest, NoFitIsAResultNotACrash) {
  FakeLauncher launcher(0, 0);
  JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(r.status, JobStatus::no_fit);
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"search:0"}));
}

TEST(RunnerTest, CpuJobsUseTheConfigsFixedBatch) {
  FakeLauncher launcher(0, 100);
  JobPlan plan{"bert-base", "cpu", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(launcher.calls, (std::vector<std::string>{"time:2"}));
  EXPECT_EQ(r.batch_source, "cpu");
}

// ---- Worker processes ----

std::string script(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.file(name);
  testing::write_file(path, "#!/bin/sh\n" + body + "\n");
  chmod(path.c_str(), 0755);
  return path;
}

JobSpec cpu_spec() {
  JobSpec spec;
  spec.model = "bert-base";
  spec.batch = 2;
  spec.overlays = smoke_overlays("bert-base");
  return spec;
}

TEST(RunnerTest, WorkerProcessRunsAPhase) {
  WorkerLauncher launcher(testing::gpubench_exe());
  const JobRecord r = launcher.launch(cpu_spec(), 300);
  EXPECT_EQ(r.status, JobStatus::ok) << r.message;
  EXPECT_GT(r.throughput, 0);
}

TEST(RunnerTest, ACrashingWorkerIsRecordedAsCrashed) {
  TempDir dir;
  WorkerLauncher launcher(script(dir, "crash.sh", "kill -SEGV $$"));
  const JobRecord r = launcher.launch(cpu_spec(), 60);
  EXPECT_EQ(r.status, JobStatus::crashed);
  EXPECT_NE(r.message.find("killed by signal 11"), std::string::npos) << r.message;
}

TEST(RunnerTest, AHangingWorkerIsKilledAtTheTimeout) {
  TempDir dir;
  WorkerLauncher launcher(script(dir, "hang.sh", "sleep 60"));
  const JobRecord r = launcher.launch(cpu_spec(), 1);
  EXPECT_EQ(r.status, JobStatus::timeout);
  EXPECT_NE(r.message.find("timed out after"), std::string::npos) << r.message;
}

TEST(RunnerTest, AWorkerThatExitsWithoutARecordFails) {
  TempDir dir;
  WorkerLauncher launcher(script(dir, "fail.sh", "exit 4"));
  const JobRecord r = launcher.launch(cpu_spec(), 60);
  EXPECT_EQ(r.status, JobStatus::failed);
  EXPECT_NE(r.message.find("exited with code 4"), std::string::npos) << r.message;
}

// ---- Pre-started workers ----

/// A stand-in worker that speaks the waiting protocol (run/launcher.h): started with --wait it
/// runs `before_wait`, reads the phase's two paths on its standard input, answers ok and writes
/// a record whose message says it was pre-started, with its pid; started with --spec and --out
/// it writes one that says "fresh".
std::string protocol_worker(const TempDir& dir, const std::string& before_wait = "") {
  return script(dir, "protocol.sh",
                "if [ \"$2\" = --wait ]; then\n" + before_wait +
                    "  read spec || exit 0\n"
                    "  read out || exit 0\n"
                    "  echo ok >&0\n"
                    "  printf '{\"model\":\"bert-base\",\"status\":\"ok\",\"message\":\"prestarted "
                    "%s\"}' $$ > \"$out\"\n"
                    "  exit 0\n"
                    "fi\n"
                    "printf '{\"model\":\"bert-base\",\"status\":\"ok\",\"message\":\"fresh\"}' > "
                    "\"$5\"\n");
}

/// Whether `pid`, a child of this process, is still there unreaped (running or a zombie).
bool unreaped(pid_t pid) {
  errno = 0;
  return kill(pid, 0) == 0 || errno == EPERM;
}

TEST(RunnerTest, TheNextPhaseGoesToTheWorkerStartedWhileTheLastOneRan) {
  TempDir dir;
  WorkerLauncher launcher(protocol_worker(dir), /*prestart=*/true);
  EXPECT_EQ(launcher.waiting_pid(), -1);  // none before the first phase
  const JobRecord first = launcher.launch(cpu_spec(), 60);
  EXPECT_EQ(first.message, "fresh");
  const pid_t waiting = launcher.waiting_pid();
  ASSERT_GT(waiting, 0);
  const JobRecord second = launcher.launch(cpu_spec(), 60);
  EXPECT_EQ(second.status, JobStatus::ok);
  EXPECT_EQ(second.message, fmt::format("prestarted {}", waiting));
  EXPECT_GT(launcher.waiting_pid(), 0);
  EXPECT_NE(launcher.waiting_pid(), waiting);
  const std::optional<WorkerCounts> counts = launcher.worker_counts();
  ASSERT_TRUE(counts.has_value());
  EXPECT_TRUE(counts->prestart);
  EXPECT_EQ(counts->processes, 2);
  EXPECT_EQ(counts->prestarted, 1);
}

TEST(RunnerTest, WithoutPrestartEachPhaseStartsAFreshWorkerAsBefore) {
  TempDir dir;
  WorkerLauncher launcher(protocol_worker(dir), /*prestart=*/false);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(launcher.launch(cpu_spec(), 60).message, "fresh");
    EXPECT_EQ(launcher.waiting_pid(), -1);
  }
  const std::optional<WorkerCounts> counts = launcher.worker_counts();
  ASSERT_TRUE(counts.has_value());
  EXPECT_FALSE(counts->prestart);
  EXPECT_EQ(counts->processes, 2);
  EXPECT_EQ(counts->prestarted, 0);
}

TEST(RunnerTest, AWaitingWorkerThatDiedIsReplacedByAFreshOneAndNoPhaseIsLost) {
  TempDir dir;
  WorkerLauncher launcher(protocol_worker(dir), /*prestart=*/true);
  ASSERT_EQ(launcher.launch(cpu_spec(), 60).message, "fresh");
  const pid_t waiting = launcher.waiting_pid();
  ASSERT_GT(waiting, 0);
  kill(waiting, SIGKILL);  // dies while it waits
  const JobRecord r = launcher.launch(cpu_spec(), 60);
  EXPECT_EQ(r.status, JobStatus::ok);
  EXPECT_EQ(r.message, "fresh");
  EXPECT_FALSE(unreaped(waiting));  // the launcher reaped it: no zombie
  // The one started beside the fresh worker takes the next phase.
  const pid_t next = launcher.waiting_pid();
  ASSERT_GT(next, 0);
  EXPECT_EQ(launcher.launch(cpu_spec(), 60).message, fmt::format("prestarted {}", next));
}

TEST(RunnerTest, AfterTwoWaitingWorkersInARowDiedTheLauncherStopsPrestarting) {
  TempDir dir;
  // Every waiting worker dies before it reads its phase (a worker binary that cannot wait).
  WorkerLauncher launcher(protocol_worker(dir, "  exit 3\n"), /*prestart=*/true);
  for (int i = 0; i < 3; ++i) {
    const JobRecord r = launcher.launch(cpu_spec(), 60);
    EXPECT_EQ(r.status, JobStatus::ok) << i;
    EXPECT_EQ(r.message, "fresh") << i;
  }
  EXPECT_EQ(launcher.waiting_pid(), -1);
  EXPECT_EQ(launcher.worker_counts()->processes, 3);
  EXPECT_EQ(launcher.worker_counts()->prestarted, 0);
}

TEST(RunnerTest, AnUnusedWaitingWorkerIsKilledAndReapedWhenTheLauncherGoes) {
  TempDir dir;
  pid_t waiting = -1;
  {
    WorkerLauncher launcher(protocol_worker(dir), /*prestart=*/true);
    launcher.launch(cpu_spec(), 60);
    waiting = launcher.waiting_pid();
    ASSERT_GT(waiting, 0);
    ASSERT_TRUE(unreaped(waiting));
  }
  EXPECT_FALSE(unreaped(waiting));
  EXPECT_EQ(waitpid(waiting, nullptr, WNOHANG), -1);  // no zombie left to reap
}

TEST(RunnerTest, AWaitingWorkerDiesWithTheThreadThatStartedIt) {
  // PR_SET_PDEATHSIG: the signal comes when the thread that forked ends, as it does when the
  // parent process dies; the process stays this test's child, so its end can be seen here.
  TempDir dir;
  WorkerLauncher launcher(protocol_worker(dir), /*prestart=*/true);
  pid_t waiting = -1;
  std::thread([&] {
    launcher.launch(cpu_spec(), 60);
    waiting = launcher.waiting_pid();
  }).join();
  ASSERT_GT(waiting, 0);
  // Seen ended without reaping it (WNOWAIT): the launcher still owns it.
  siginfo_t info{};
  for (int i = 0; i < 500 && info.si_pid == 0; ++i) {
    ASSERT_EQ(waitid(P_PID, static_cast<id_t>(waiting), &info, WEXITED | WNOHANG | WNOWAIT), 0);
    if (info.si_pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(info.si_pid, waiting) << "the waiting worker outlived the thread that started it";
  EXPECT_EQ(info.si_code, CLD_KILLED);
  EXPECT_EQ(info.si_status, SIGKILL);
  // A phase now goes to a fresh worker, nothing is lost, and the dead one is reaped.
  EXPECT_EQ(launcher.launch(cpu_spec(), 60).message, "fresh");
  EXPECT_FALSE(unreaped(waiting));
}

TEST(RunnerTest, TheRealWorkerWaitsAtALowerPriorityAndRunsTheNextPhase) {
  WorkerLauncher launcher(testing::gpubench_exe(), /*prestart=*/true);
  const JobRecord first = launcher.launch(cpu_spec(), 300);
  EXPECT_EQ(first.status, JobStatus::ok) << first.message;
  const pid_t waiting = launcher.waiting_pid();
  ASSERT_GT(waiting, 0);
  // It waits niced (where its threads can step back) and under SCHED_BATCH.
  const Priority here = current_priority();
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(waiting));
  ASSERT_EQ(errno, 0);
  EXPECT_EQ(nice, nice_is_reversible(WorkerLauncher::kWaitingNice)
                      ? std::min(here.nice + WorkerLauncher::kWaitingNice, 19)
                      : here.nice);
  if (here.sched_other) {
    EXPECT_EQ(sched_getscheduler(waiting), SCHED_BATCH);
  }
  const JobRecord second = launcher.launch(cpu_spec(), 300);
  EXPECT_EQ(second.status, JobStatus::ok) << second.message;
  EXPECT_GT(second.throughput, 0);
  EXPECT_EQ(launcher.worker_counts()->prestarted, 1);
}

TEST(RunnerTest, AWaitingWorkerThatReadsEndOfFileEndsQuietly) {
  const auto r = testing::run_gpubench("worker --wait < /dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  // And the worker takes one way or the other.
  const auto neither = testing::run_gpubench("worker");
  EXPECT_EQ(neither.exit_code, kExitBadInput);
  EXPECT_NE(neither.err.find("--spec and --out, or --wait"), std::string::npos) << neither.err;
  // A parent started with a negative nice value passes it in one word.
  const auto negative = testing::run_gpubench("worker --wait --nice=-5 --sched-other < /dev/null");
  EXPECT_EQ(negative.exit_code, 0) << negative.err;
}

TEST(RunnerTest, EachJobRecordSaysHowManyOfItsWorkersWerePrestarted) {
  TempDir dir;
  WorkerLauncher launcher(protocol_worker(dir), /*prestart=*/true);
  JobPlan plan{"bert-base", "cpu", std::nullopt, {}};
  const JobRecord first = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(first.runtime["workers"],
            Json({{"prestart", true}, {"processes", 1}, {"prestarted", 0}}));
  const JobRecord second = run_job(plan, builtin(), launcher, quiet);
  EXPECT_EQ(second.runtime["workers"],
            Json({{"prestart", true}, {"processes", 1}, {"prestarted", 1}}));
  // A launcher that starts no worker process adds nothing.
  FakeLauncher fake(0, 100);
  EXPECT_FALSE(run_job(plan, builtin(), fake, quiet).runtime.contains("workers"));
}

}  // namespace
}  // namespace gpubench
