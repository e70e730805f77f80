// Optimizers and update utilities against libtorch's own implementations or the reference
// formulas, on the CPU.
#include "gpubench/train/optimizers.h"

#include "gpubench/train/update.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>

namespace gpubench::train {
namespace {

class OptimizersTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }

  /// Two parameters with fixed gradients, cloned for each optimizer under test.
  static std::vector<torch::Tensor> params() {
    torch::manual_seed(1);
    return {torch::randn({4, 3}).requires_grad_(), torch::randn({5}).requires_grad_()};
  }
  static void set_grads(std::vector<torch::Tensor>& ps, int step) {
    torch::manual_seed(100 + step);
    for (auto& p : ps) p.mutable_grad() = torch::randn_like(p);
  }
  /// Steps ours and libtorch's optimizer on the same gradients and expects the same parameters.
  template <typename Ours, typename Theirs>
  static void expect_same_path(Ours& ours_opt, Theirs& theirs_opt, std::vector<torch::Tensor>& ours,
                               std::vector<torch::Tensor>& theirs, int steps) {
    for (int step = 0; step < steps; ++step) {
      set_grads(ours, step);
      set_grads(theirs, step);
      ours_opt.step();
      theirs_opt.step();
    }
    for (std::size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 1e-5, 1e-6)) << i;
    }
  }
};

TEST_F(OptimizersTest, AdamMatchesTorchAdam) {
  auto ours = params();
  auto theirs = params();
  Adam adam({{ours, 0.01}}, AdamOptions{1e-2, 0.9, 0.999, 1e-8, true, WeightDecayMode::kL2});
  torch::optim::Adam reference(theirs, torch::optim::AdamOptions(1e-2).weight_decay(0.01));
  expect_same_path(adam, reference, ours, theirs, 5);
}

TEST_F(OptimizersTest, DecoupledDecayMatchesTorchAdamW) {
  auto ours = params();
  auto theirs = params();
  Adam adam({{ours, 0.1}}, AdamOptions{1e-2, 0.9, 0.98, 1e-8, true, WeightDecayMode::kDecoupled});
  torch::optim::AdamW reference(
      theirs, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.98}).weight_decay(0.1));
  expect_same_path(adam, reference, ours, theirs, 5);
}

TEST_F(OptimizersTest, BertAdamHasNoBiasCorrection) {
  // google-research/bert AdamWeightDecayOptimizer, one step from zero moments:
  // m = (1-b1) g, v = (1-b2) g^2, p -= lr * (m / (sqrt(v) + eps) + wd * p).
  auto ps = params();
  const auto before = ps[0].detach().clone();
  Adam adam({{{ps[0]}, 0.01}},
            AdamOptions{1e-3, 0.9, 0.999, 1e-6, false, WeightDecayMode::kDecoupled});
  set_grads(ps, 0);
  const auto g = ps[0].grad().clone();
  adam.step();
  const auto m = 0.1 * g;
  const auto v = 0.001 * g * g;
  const auto expected = before - 1e-3 * (m / (v.sqrt() + 1e-6) + 0.01 * before);
  EXPECT_TRUE(torch::allclose(ps[0], expected, 1e-6, 1e-7));
}

TEST_F(OptimizersTest, AdamaxFollowsMtDnnsFormula) {
  auto ps = params();
  Adamax adamax({{ps, 0.01}}, AdamaxOptions{2e-3, 0.9, 0.999, 1e-6});
  auto p = ps[1].detach().clone();
  auto m = torch::zeros_like(p), u = torch::zeros_like(p);
  for (int step = 0; step < 3; ++step) {
    set_grads(ps, step);
    const auto g = ps[1].grad().clone();
    m = 0.9 * m + 0.1 * g;
    u = torch::max(0.999 * u, g.abs() + 1e-6);
    p = p - 2e-3 * (m / (u + 1e-6) + 0.01 * p);
    adamax.step();
  }
  EXPECT_TRUE(torch::allclose(ps[1], p, 1e-6, 1e-7));
}

TEST_F(OptimizersTest, SgdMatchesTorchSgdWithNesterovMomentum) {
  auto ours = params();
  auto theirs = params();
  Sgd sgd({{ours, 1e-4}}, SgdOptions{0.5, 0.99, true});
  torch::optim::SGD reference(
      theirs, torch::optim::SGDOptions(0.5).momentum(0.99).nesterov(true).weight_decay(1e-4));
  expect_same_path(sgd, reference, ours, theirs, 4);
}

TEST_F(OptimizersTest, SkipsParametersWithoutGradients) {
  auto ps = params();
  const auto before = ps[1].detach().clone();
  Adam adam({{ps, 0}}, AdamOptions{});
  set_grads(ps, 0);
  ps[1].mutable_grad().reset();
  adam.step();
  EXPECT_TRUE(torch::equal(ps[1], before));
  adam.zero_grad();
  EXPECT_FALSE(ps[0].grad().defined());
}

TEST_F(OptimizersTest, ClipGradNormMatchesTorchWithoutReadingTheNorm) {
  auto ours = params();
  auto theirs = params();
  set_grads(ours, 0);
  set_grads(theirs, 0);
  const auto norm = clip_grad_norm(ours, 0.5);
  const double reference_norm = torch::nn::utils::clip_grad_norm_(theirs, 0.5);
  EXPECT_NEAR(norm.item<double>(), reference_norm, 1e-5);
  for (std::size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ours[i].grad(), theirs[i].grad(), 1e-5, 1e-6));
  }
  // Under the limit nothing changes.
  auto small = params();
  set_grads(small, 0);
  const auto g = small[0].grad().clone();
  clip_grad_norm(small, 1e6);
  EXPECT_TRUE(torch::allclose(small[0].grad(), g));
}

TEST_F(OptimizersTest, GradScalerSkipsOverflowingStepsAndBacksOff) {
  GradScaler scaler(true, torch::kCPU, 1024.0, 2.0, 0.5, 2);
  auto ps = params();
  set_grads(ps, 0);
  for (auto& p : ps) p.mutable_grad().mul_(1024.0);
  const auto expected = ps[0].grad() / 1024.0;
  scaler.unscale(ps);
  EXPECT_TRUE(torch::allclose(ps[0].grad(), expected));
  EXPECT_TRUE(scaler.should_step());
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 1024.0);
  scaler.unscale(ps);
  scaler.update();  // second clean step: grows
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 2048.0);
  ps[1].mutable_grad()[0] = std::numeric_limits<float>::infinity();
  scaler.unscale(ps);
  EXPECT_FALSE(scaler.should_step());
  scaler.update();
  EXPECT_DOUBLE_EQ(scaler.current_scale(), 1024.0);
  GradScaler off(false, torch::kCPU);
  EXPECT_TRUE(off.should_step());
  EXPECT_DOUBLE_EQ(off.current_scale(), 1.0);
}

TEST_F(OptimizersTest, SchedulesFollowTheReferenceFormulas) {
  const auto bert = warmup_linear_decay(1e-4, 10, 100);
  EXPECT_DOUBLE_EQ(bert(5), 0.5e-4);
  EXPECT_DOUBLE_EQ(bert(50), 0.5e-4);
  EXPECT_DOUBLE_EQ(bert(200), 0.0);
  const auto isqrt = inverse_sqrt(5e-4, 4000, 1e-7);
  EXPECT_NEAR(isqrt(2000), 1e-7 + (5e-4 - 1e-7) * 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(isqrt(16000), 5e-4 * 0.5);
  EXPECT_DOUBLE_EQ(constant(0.5)(123), 0.5);
  // Poly counts from 0 (TF polynomial_decay, torch PolynomialLR): update k uses step k - 1.
  const auto deeplab = poly(0.007, 100, 0.9);
  EXPECT_DOUBLE_EQ(deeplab(1), 0.007);
  EXPECT_DOUBLE_EQ(deeplab(51), 0.007 * std::pow(0.5, 0.9));
  EXPECT_DOUBLE_EQ(deeplab(101), 0.0);
  EXPECT_DOUBLE_EQ(deeplab(500), 0.0);
}

TEST_F(OptimizersTest, DecayGroupsExcludeNormsAndBiases) {
  struct Net : torch::nn::Module {
    Net() {
      register_module("proj", torch::nn::Linear(3, 4));
      register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
    }
  } net;
  const auto groups = decay_groups(net, 0.01, {"bias", "norm"});
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 1u);  // proj.weight
  EXPECT_EQ(groups[0].params[0].sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(groups[1].params.size(), 3u);  // proj.bias, norm.weight, norm.bias
  EXPECT_DOUBLE_EQ(groups[0].weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(groups[1].weight_decay, 0.0);
}

}  // namespace
}  // namespace gpubench::train
