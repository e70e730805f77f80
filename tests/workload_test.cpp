// Every shipped workload: CPU smoke training at reduced size (20 steps with finite losses,
// gradients and parameters; after the first, every parameter that got a gradient changed) and
// the exact trainable-parameter count of the full-size model.
#include "gpubench/base/compat.h"
#include "gpubench/config/config.h"
#include "gpubench/device/device.h"
#include "gpubench/train/registry.h"
#include "gpubench/train/model_reuse.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace gpubench {
namespace {

using testing::builtin_store;

std::vector<std::string> workload_names() { return builtin_store().model_names(); }

StepContext smoke_context(const ModelConfig& config, Precision precision,
                          const torch::Device& device) {
  StepContext ctx = testing::smoke_context(config, config.smoke_batch);
  ctx.precision = precision;
  ctx.device = device;
  return ctx;
}

double max_abs(const torch::Tensor& t) {
  return t.detach().abs().max().to(torch::kCPU).to(torch::kDouble).item<double>();
}

bool all_finite(const torch::Tensor& t) {
  return t.detach().isfinite().all().to(torch::kCPU).item<bool>();
}

/// Steps of smoke training: enough for a model that diverges at its shipped rate to show it
/// (mask-rcnn's identity FrozenBatchNorm went NaN at step 7, its scaled-up rate at 13).
constexpr int kSmokeSteps = 20;

/// Steps under CPU bf16 autocast: the CPU has no bf16 convolution kernels worth the name (20
/// steps of deeplabv3 took 47 minutes on a loaded 2-core machine), so the bf16 smoke run checks
/// that autocast trains a few steps; full-size bf16 and fp16 health is measured on the GPU
/// (scripts/dev/gpu/health_check.sh) and checked by the runner in every record.
constexpr int kBf16SmokeSteps = 3;

/// Architectures that use layer_norm, which libtorch 1.13's CPU autocast rejects in bf16.
const std::set<std::string> kLayerNormArchitectures = {
    "bert-pretraining", "bert-squad", "mt-dnn", "fairseq-transformer", "xlm-unsupmt"};

class WorkloadTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { torch::manual_seed(0); }
  const ModelConfig& config() const { return builtin_store().model(GetParam()); }
  const Architecture& arch() const { return builtin_registry().get(config().architecture); }

  void smoke(Precision precision, const torch::Device& device, int steps = kSmokeSteps) {
    auto step = arch().prepare(smoke_context(config(), precision, device));
    std::map<std::string, std::vector<torch::Tensor>> before;
    for (const auto& [network, params] : step->parameters()) {
      ASSERT_FALSE(params.empty()) << network;
      for (const auto& p : params) before[network].push_back(p.detach().clone());
    }
    for (int s = 1; s <= steps; ++s) {
      const double units = step->run();
      EXPECT_GT(units, 0);
      // The losses of this step, and the gradients it left (the next run() clears them): a
      // gradient can be NaN while the forward values are still finite.
      const auto losses = step->losses();
      ASSERT_FALSE(losses.empty());
      for (const auto& [name, loss] : losses) {
        const double value = loss.to(torch::kCPU).to(torch::kDouble).item<double>();
        ASSERT_TRUE(std::isfinite(value)) << name << " = " << value << " at step " << s;
      }
      for (const auto& [network, params] : step->parameters()) {
        for (std::size_t i = 0; i < params.size(); ++i) {
          ASSERT_TRUE(!params[i].grad().defined() || all_finite(params[i].grad()))
              << network << " parameter " << i << ": non-finite gradient at step " << s;
          ASSERT_TRUE(all_finite(params[i]))
              << network << " parameter " << i << ": non-finite after step " << s;
        }
      }
      if (s == 1) expect_every_parameter_moved(*step, before);
    }
  }

  /// Every parameter that got a non-negligible gradient differs from `before`.
  void expect_every_parameter_moved(
      const TrainStep& step, const std::map<std::string, std::vector<torch::Tensor>>& before) {
    for (const auto& [network, params] : step.parameters()) {
      // A gradient 10^4 times below the network's largest is numerically zero: a BatchNorm gain
      // whose scale a later BatchNorm removes (through ReLU and a depthwise conv, as in
      // DeepLab's heads) gets only what the epsilon leaks, too little to move an fp32 weight.
      double largest = 0;
      for (const auto& p : params) {
        if (p.grad().defined()) largest = std::max(largest, max_abs(p.grad()));
      }
      int changed = 0;
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (!params[i].grad().defined() || max_abs(params[i].grad()) < 1e-4 * largest) continue;
        const bool moved = !torch::equal(params[i].detach().cpu(), before.at(network)[i].cpu());
        EXPECT_TRUE(moved) << network << " parameter " << i << " got a gradient but did not change";
        changed += moved;
      }
      EXPECT_GT(changed, 0) << network << ": no parameter changed";
    }
  }
};

TEST_P(WorkloadTest, SmokeStepTrainsOnTheCpu) { smoke(Precision::kFp32, torch::kCPU); }

TEST_P(WorkloadTest, SmokeStepTrainsUnderBf16AutocastOnTheCpu) {
  if (!compat::kCpuAutocastLayerNorm && kLayerNormArchitectures.count(config().architecture)) {
    GTEST_SKIP() << "libtorch " << TORCH_VERSION << "'s CPU autocast rejects bf16 layer_norm "
                 << "inputs; the _CUDA twin and libtorch >= 2.1 run this";
  }
  smoke(Precision::kAmpBf16, torch::kCPU, kBf16SmokeSteps);
}

/// Architectures whose steps build their models through train::build_model (the search's probes
/// reuse them).
const std::set<std::string> kReusingArchitectures = {
    "bert-pretraining", "bert-squad",   "mt-dnn",   "fairseq-transformer",
    "fairseq-fconv",    "xlm-unsupmt",  "pix2pixhd"};

// A probe after the first trains the kept model: the same losses and the same parameters after
// two steps as a step built afresh.
TEST_P(WorkloadTest, AStepOnAReusedModelTrainsExactlyAsOnAFreshOne) {
  const auto ctx = smoke_context(config(), Precision::kFp32, torch::kCPU);
  auto two_steps = [&](std::map<std::string, double>& losses,
                       std::vector<torch::Tensor>& params) {
    auto step = arch().prepare(ctx);
    step->run();
    step->run();
    for (const auto& [name, loss] : step->losses()) {
      losses[name] = loss.to(torch::kDouble).item<double>();
    }
    for (const auto& [network, ps] : step->parameters()) {
      for (const auto& p : ps) params.push_back(p.detach().clone());
    }
  };
  std::map<std::string, double> fresh_losses, first_losses, reused_losses;
  std::vector<torch::Tensor> fresh, first, reused;
  two_steps(fresh_losses, fresh);
  {
    const train::ModelReuse reuse;
    two_steps(first_losses, first);
    train::ModelReuse::park();
    two_steps(reused_losses, reused);
    EXPECT_EQ(train::ModelReuse::reused() > 0, kReusingArchitectures.count(config().architecture) > 0)
        << config().architecture;
  }
  EXPECT_EQ(first_losses, fresh_losses);
  EXPECT_EQ(reused_losses, fresh_losses);
  ASSERT_EQ(reused.size(), fresh.size());
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    EXPECT_TRUE(torch::equal(reused[i], fresh[i])) << "parameter " << i;
  }
}

/// Architectures whose one-step probe seeks to their heaviest batch instead of the first.
const std::set<std::string> kSeekingArchitectures = {"fairseq-transformer", "fairseq-fconv"};
/// Architectures whose probe trains only the sub-steps of an iteration where it peaks; their
/// own tests check which (tests/unsupmt_test.cpp).
const std::set<std::string> kSubStepProbeArchitectures = {"xlm-unsupmt"};

/// The optimizer state each updater holds, from the record's runtime field.
std::map<std::string, int64_t> state_bytes(const TrainStep& step) {
  std::map<std::string, int64_t> out;
  for (const auto& u : step.runtime_info().at("updaters")) {
    out[u.at("name").get<std::string>()] = u.at("optimizer_state_bytes").get<int64_t>();
  }
  return out;
}

// The search's one-step probe: before its step, the optimizer holds what it holds once every
// batch the step cycles through has trained (the steady state); the step then trains exactly as
// a fresh first step does, on the first batch or, for token-budget steps, on the heaviest.
TEST_P(WorkloadTest, AOneStepProbeStartsFromTheSteadyStateAndTrainsAsAFirstStep) {
  const auto ctx = smoke_context(config(), Precision::kFp32, torch::kCPU);
  auto fresh = arch().prepare(ctx);
  std::vector<double> units;
  const int64_t cycle = std::max<int64_t>(fresh->warmup_steps(), fresh->representative_steps());
  for (int64_t i = 0; i < cycle; ++i) units.push_back(fresh->run());
  const auto steady = state_bytes(*fresh);

  auto primed = arch().prepare(ctx);
  for (const auto& [name, bytes] : state_bytes(*primed)) EXPECT_EQ(bytes, 0) << name;
  ASSERT_TRUE(primed->prepare_probe()) << "eager steps on the CPU can be readied for one step";
  EXPECT_EQ(state_bytes(*primed), steady);
  for (const auto& [name, bytes] : steady) EXPECT_GT(bytes, 0) << name;
  const double primed_units = primed->run();
  if (kSubStepProbeArchitectures.count(config().architecture)) {
    EXPECT_GT(primed_units, 0);
    return;
  }

  if (kSeekingArchitectures.count(config().architecture)) {
    // The heaviest by the workload's estimate (models/token_batching.h: activation_weight):
    // the first of the largest weights the record lists, and the batch it names; the probe
    // trains it first and every batch within the estimate's uncertainty of it, once each.
    const Json info = primed->batch_info();
    const auto& weights = info.at("activation_weight_per_batch");
    std::size_t heaviest = 0;
    for (std::size_t i = 1; i < weights.size(); ++i) {
      if (weights[i].get<double>() > weights[heaviest].get<double>()) heaviest = i;
    }
    EXPECT_EQ(info.at("heaviest_batch").get<std::size_t>(), heaviest);
    const auto probed = info.at("probe_batches").get<std::vector<std::size_t>>();
    ASSERT_FALSE(probed.empty());
    EXPECT_EQ(probed.front(), heaviest);
    double expected = 0;
    for (const std::size_t i : probed) {
      ASSERT_LT(i, units.size());
      EXPECT_EQ(units[i], info.at("target_tokens_per_batch")[i].get<double>());
      expected += units[i];
    }
    EXPECT_EQ(primed_units, expected);
    return;
  }
  auto first = arch().prepare(ctx);
  EXPECT_EQ(first->run(), primed_units);
  for (const auto& [name, loss] : first->losses()) {
    EXPECT_EQ(loss.to(torch::kDouble).item<double>(),
              primed->losses().at(name).to(torch::kDouble).item<double>())
        << name;
  }
  const auto a = first->parameters(), b = primed->parameters();
  for (const auto& [network, ps] : a) {
    for (std::size_t i = 0; i < ps.size(); ++i) {
      EXPECT_TRUE(torch::equal(ps[i], b.at(network)[i])) << network << " parameter " << i;
    }
  }
}

// The timed run and a tier's confirm allocate the optimizer state right after the build
// (TrainStep::allocate_optimizer_state), so that it lies where the search's probe put it. That
// is all it does: the steady state's state, the batches in their order, and steps that train
// bit for bit as those of a step that allocated nothing beforehand.
TEST_P(WorkloadTest, OptimizerStateAllocatedBeforeTheFirstStepChangesNoStep) {
  const auto ctx = smoke_context(config(), Precision::kFp32, torch::kCPU);
  // Each step's runs right after its build: dropout draws from the generator the build seeds.
  struct Trained {
    std::vector<double> units;
    std::vector<std::map<std::string, double>> losses;
  };
  auto two_steps = [](TrainStep& step) {
    Trained out;
    for (int i = 0; i < 2; ++i) {
      out.units.push_back(step.run());
      out.losses.emplace_back();
      for (const auto& [name, loss] : step.losses()) {
        out.losses.back()[name] = loss.to(torch::kDouble).item<double>();
      }
    }
    return out;
  };
  auto fresh = arch().prepare(ctx);
  const Trained fresh_trained = two_steps(*fresh);
  auto primed = arch().prepare(ctx);
  primed->allocate_optimizer_state();
  const auto allocated = state_bytes(*primed);
  for (const auto& [name, bytes] : allocated) EXPECT_GT(bytes, 0) << name;
  const Trained primed_trained = two_steps(*primed);
  EXPECT_EQ(primed_trained.units, fresh_trained.units);
  EXPECT_EQ(primed_trained.losses, fresh_trained.losses);
  EXPECT_EQ(state_bytes(*primed), allocated) << "the first updates found it all in place";
  const auto a = fresh->parameters(), b = primed->parameters();
  for (const auto& [network, ps] : a) {
    for (std::size_t i = 0; i < ps.size(); ++i) {
      EXPECT_TRUE(torch::equal(ps[i], b.at(network)[i])) << network << " parameter " << i;
    }
  }
}

TEST_P(WorkloadTest, FullSizeHasTheExactTrainableParameterCount) {
  const auto counted = arch().count_parameters(config().model);
  EXPECT_EQ(counted, config().trainable_params);
}

TEST_P(WorkloadTest, SmokeStepTrainsAndReleasesMemory_CUDA) {
  const torch::Device device(torch::kCUDA, 0);
  // The first step leaves library workspaces (cuBLAS, cuDNN) that live as long as the process;
  // the second must give back everything it allocated.
  smoke(Precision::kAmpBf16, device);
  release_cached_memory(device);
  const int64_t baseline = memory_stats(device).allocated_current;
  smoke(Precision::kAmpBf16, device);
  release_cached_memory(device);
  const auto after = memory_stats(device);
  EXPECT_EQ(after.allocated_current, baseline);
  // With the cache released the allocator holds only segments that some live block uses: at
  // least what is allocated, and nothing at all when nothing is.
  EXPECT_GE(after.reserved_current, after.allocated_current);
  if (after.allocated_current == 0) {
    EXPECT_EQ(after.reserved_current, 0);
  }
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (auto& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllWorkloads, WorkloadTest, ::testing::ValuesIn(workload_names()),
                         test_name);

}  // namespace
}  // namespace gpubench
