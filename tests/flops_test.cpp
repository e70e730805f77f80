// The FLOP counter (tests/flop_counter.h) and, as a dev tool, the FLOPs per unit of one
// training step of any workload, to check the analytic flops_per_unit of configs/models/*.yaml
// (docs/workloads/*.md). Tool usage (skipped unless GPUBENCH_FLOPS_WORKLOAD is set):
//
//   GPUBENCH_FLOPS_WORKLOAD=deeplabv3 GPUBENCH_FLOPS_MODEL='{"image_size": 129}'
//   GPUBENCH_FLOPS_BATCH=2 GPUBENCH_FLOPS_STEPS=1 GPUBENCH_FLOPS_WARMUP=0
//     ./build/gpubench_tests --gtest_filter='FlopCount.*'
//
// GPUBENCH_FLOPS_MODEL is a JSON merge patch over the workload's full-size `model:` (or "smoke"
// for the smoke model); the batch defaults to cpu_batch; STEPS counted steps (default 1) after
// WARMUP uncounted ones (default 0); STEPS=0 prints the step's batch_info without running it.
// scripts/dev/count_flops.sh wraps it.
#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "flop_counter.h"

namespace gpubench {
namespace {

using testing::FlopCounter;

TEST(FlopCounter, CountsALinearLayerForwardAndBothGradients) {
  torch::manual_seed(0);
  torch::nn::Linear linear(8, 4);
  auto x = torch::randn({5, 8}, torch::requires_grad());
  FlopCounter counter;
  auto y = linear(x);
  EXPECT_EQ(counter.forward_macs(), 5 * 8 * 4);
  EXPECT_EQ(counter.backward_macs(), 0);
  y.sum().backward();
  // Input gradient 5x4 @ 4x8 and weight gradient 4x5 @ 5x8.
  EXPECT_EQ(counter.backward_macs(), 2 * 5 * 8 * 4);
  EXPECT_DOUBLE_EQ(counter.flops(), 2.0 * 3 * 5 * 8 * 4);
}

TEST(FlopCounter, CountsABatchedMatmulOnceThoughItIsBuiltFromOtherOps) {
  auto a = torch::randn({3, 7, 5});
  auto b = torch::randn({3, 5, 2});
  FlopCounter counter;
  torch::matmul(a, b);
  torch::nn::functional::linear(a, torch::randn({6, 5}));  // 21 x 5 x 6 through matmul/mm
  EXPECT_EQ(counter.macs(), 3 * 7 * 5 * 2 + 21 * 5 * 6);
}

TEST(FlopCounter, CountsConvolutionsStridedTransposedAndGroupedWithTheirGradients) {
  torch::manual_seed(0);
  // 3 -> 6, 3x3, stride 2, padding 1 on 2 x 3 x 10 x 9: a 5 x 5 output.
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 6, 3).stride(2).padding(1));
  auto x = torch::randn({2, 3, 10, 9});
  FlopCounter counter;
  auto y = conv(x);
  const int64_t forward = 2 * 6 * 5 * 5 * 3 * 9;
  EXPECT_EQ(counter.macs(), forward);
  y.sum().backward();  // the input needs no gradient: the weight's only
  EXPECT_EQ(counter.backward_macs(), forward);

  counter.reset();
  // Transposed 4 -> 2, 4x4, stride 2 on 1 x 4 x 3 x 3, input requiring a gradient.
  torch::nn::ConvTranspose2d up(torch::nn::ConvTranspose2dOptions(4, 2, 4).stride(2).padding(1));
  auto z = torch::randn({1, 4, 3, 3}, torch::requires_grad());
  up(z).sum().backward();
  const int64_t up_forward = 4 * 3 * 3 * 2 * 16;
  EXPECT_EQ(counter.forward_macs(), up_forward);
  EXPECT_EQ(counter.backward_macs(), 2 * up_forward);

  counter.reset();
  // Depthwise 8 channels, 3x3, dilation 2, padding 2 on 1 x 8 x 6 x 6.
  torch::nn::Conv2d dw(torch::nn::Conv2dOptions(8, 8, 3).groups(8).dilation(2).padding(2));
  dw(torch::randn({1, 8, 6, 6}));
  EXPECT_EQ(counter.macs(), 8 * 6 * 6 * 9);
}

TEST(FlopCounter, CountsFairseqsConvTbcAndItsBackward) {
  // T 6, B 2, 4 -> 5 channels, kernel 3, padding 1: 6 output steps.
  auto x = torch::randn({6, 2, 4}, torch::requires_grad());
  auto w = torch::randn({3, 4, 5}, torch::requires_grad());
  auto b = torch::randn({5}, torch::requires_grad());
  FlopCounter counter;
  auto y = torch::conv_tbc(x, w, b, 1);
  const int64_t forward = 6 * 2 * 3 * 4 * 5;
  EXPECT_EQ(counter.forward_macs(), forward);
  y.sum().backward();
  EXPECT_EQ(counter.backward_macs(), 2 * forward);
}

TEST(FlopCounter, IgnoresElementwiseWorkAndCountsNothingOnceDestroyed) {
  auto a = torch::randn({64, 64});
  {
    FlopCounter counter;
    auto b = (a * a + 1).relu().softmax(1);
    EXPECT_EQ(counter.macs(), 0);
  }
  FlopCounter again;  // a second counter may follow the first
  torch::mm(a, a);
  EXPECT_EQ(again.macs(), 64 * 64 * 64);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// Dev tool: FLOPs per unit of a workload's training step (see the top of this file).
TEST(FlopCount, WorkloadStep) {
  const std::string name = env_or("GPUBENCH_FLOPS_WORKLOAD", "");
  if (name.empty()) GTEST_SKIP() << "set GPUBENCH_FLOPS_WORKLOAD to count a workload's step";
  const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& config = store.model(name);
  const Architecture& arch = builtin_registry().get(config.architecture);
  const std::string patch = env_or("GPUBENCH_FLOPS_MODEL", "{}");
  Json model = patch == "smoke" ? config.smoke_model.json() : config.model.json();
  if (patch != "smoke") model.merge_patch(Json::parse(patch));
  StepContext ctx;
  ctx.config = &config;
  ctx.model = Params(arch.model_schema, model, Where{"GPUBENCH_FLOPS_MODEL", ""});
  ctx.optimizer = config.optimizer;
  ctx.batch = std::stoll(env_or("GPUBENCH_FLOPS_BATCH", std::to_string(config.smoke_batch)));
  ctx.device = torch::kCPU;
  ctx.seed = 0;
  const int steps = std::stoi(env_or("GPUBENCH_FLOPS_STEPS", "1"));
  const int warmup = std::stoi(env_or("GPUBENCH_FLOPS_WARMUP", "0"));
  torch::manual_seed(0);
  auto step = arch.prepare(ctx);
  if (steps == 0) {  // the batches only (the data-dependent shapes of an analytic count)
    std::printf("batch_info %s\n", step->batch_info().dump().c_str());
    return;
  }
  for (int s = 0; s < warmup; ++s) step->run();
  FlopCounter counter;
  double units = 0;
  double forward = 0, backward = 0;
  for (int s = 0; s < steps; ++s) {
    counter.reset();
    const double u = step->run();
    units += u;
    forward += 2.0 * counter.forward_macs();
    backward += 2.0 * counter.backward_macs();
    std::printf("step %d: units %.6g, FLOPs %.6g (forward %.6g, backward %.6g), per unit %.6g\n",
                s + 1, u, counter.flops(), 2.0 * counter.forward_macs(),
                2.0 * counter.backward_macs(), counter.flops() / u);
    for (const auto& [op, macs] : counter.by_op())
      std::printf("    %-28s %.6g FLOPs\n", op.c_str(), 2.0 * macs);
  }
  ASSERT_GT(units, 0);
  std::printf(
      "%s model %s batch %lld, %d steps: %.6g units, FLOPs per unit %.6g "
      "(forward %.6g, backward %.6g)\n",
      name.c_str(), model.dump().c_str(), static_cast<long long>(ctx.batch), steps, units,
      (forward + backward) / units, forward / units, backward / units);
  std::printf("batch_info %s\n", step->batch_info().dump().c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace gpubench
