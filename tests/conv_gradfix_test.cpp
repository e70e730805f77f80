// gradfix_conv2d: torch::conv2d's value and gradients to second order, computed from
// convolutions (StyleGAN's R1 penalty needs the second order).
#include "models/conv_gradfix.h"

#include "gpubench/compat.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace gpubench::models {
namespace {

torch::Tensor reference_conv(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                             int64_t stride, int64_t padding, bool transposed,
                             int64_t output_padding) {
  if (transposed) return torch::conv_transpose2d(x, w, b, stride, padding, output_padding);
  return torch::conv2d(x, w, b, stride, padding);
}

double max_relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

struct Case {
  const char* name;
  int64_t side, in, out, kernel, stride, padding;
  bool transposed;
  int64_t output_padding;
};

// StyleGAN's shapes: 3x3 stride 1, the fused 4x4 stride-2 downscale (on an odd side too, where
// the input gradient must be padded back to size), 1x1 from-RGB, and the 4x4 transposed upscale.
const Case kCases[] = {
    {"3x3", 8, 3, 5, 3, 1, 1, false, 0},   {"4x4 down", 8, 3, 4, 4, 2, 1, false, 0},
    {"4x4 down odd", 9, 2, 3, 4, 2, 1, false, 0}, {"1x1", 6, 3, 4, 1, 1, 0, false, 0},
    {"4x4 up", 5, 4, 3, 4, 2, 1, true, 0},
};

TEST(ConvGradfixTest, ValueAndFirstOrderGradientsMatchTorchConv) {
  torch::manual_seed(1);
  for (const Case& c : kCases) {
    const auto opts = torch::TensorOptions().dtype(torch::kDouble);
    const auto x = torch::randn({2, c.in, c.side, c.side}, opts).requires_grad_(true);
    const auto w_shape = c.transposed ? std::vector<int64_t>{c.in, c.out, c.kernel, c.kernel}
                                      : std::vector<int64_t>{c.out, c.in, c.kernel, c.kernel};
    const auto w = torch::randn(w_shape, opts).requires_grad_(true);
    const auto b = torch::randn({c.out}, opts).requires_grad_(true);
    const auto y = gradfix_conv2d(x, w, b, c.stride, c.padding, c.transposed, c.output_padding);
    const auto y_ref = reference_conv(x, w, b, c.stride, c.padding, c.transposed, c.output_padding);
    ASSERT_EQ(y.sizes(), y_ref.sizes()) << c.name;
    EXPECT_LT(max_relative_error(y, y_ref), 1e-12) << c.name;
    const auto probe = torch::randn_like(y);
    const auto g = torch::autograd::grad({(y * probe).sum()}, {x, w, b});
    const auto g_ref = torch::autograd::grad({(y_ref * probe).sum()}, {x, w, b});
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(g[i].sizes(), g_ref[i].sizes()) << c.name << " gradient " << i;
      EXPECT_LT(max_relative_error(g[i], g_ref[i]), 1e-12) << c.name << " gradient " << i;
    }
  }
}

/// An R1 penalty through a small discriminator-like stack, built from `conv`.
template <typename Conv>
std::vector<torch::Tensor> r1_weight_gradients(const torch::Tensor& reals,
                                               const std::vector<torch::Tensor>& weights,
                                               Conv conv) {
  const auto x = reals.detach().requires_grad_(true);
  auto h = torch::leaky_relu(conv(x, weights[0], weights[1], 1, 1), 0.2);  // 3x3
  h = torch::leaky_relu(conv(h, weights[2], weights[3], 2, 1), 0.2);       // fused 4x4 down
  const auto scores = (h * h).sum({1, 2, 3});  // a nonlinear head, so second order matters
  const auto grad = torch::autograd::grad({scores.sum()}, {x}, {}, /*retain_graph=*/true,
                                          /*create_graph=*/true)[0];
  const auto penalty = grad.square().sum() + scores.sum();
  return torch::autograd::grad({penalty}, weights);
}

TEST(ConvGradfixTest, TheR1DoubleBackwardMatchesTorchConv) {
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto reals = torch::randn({3, 3, 10, 10}, opts);
  std::vector<torch::Tensor> weights = {
      torch::randn({4, 3, 3, 3}, opts), torch::randn({4}, opts),
      torch::randn({5, 4, 4, 4}, opts), torch::randn({5}, opts)};
  for (auto& w : weights) w.requires_grad_(true);
  const auto fixed = r1_weight_gradients(
      reals, weights, [](const auto& x, const auto& w, const auto& b, int64_t s, int64_t p) {
        return gradfix_conv2d(x, w, b, s, p);
      });
  const auto reference = r1_weight_gradients(
      reals, weights, [](const auto& x, const auto& w, const auto& b, int64_t s, int64_t p) {
        return torch::conv2d(x, w, b, s, p);
      });
  for (std::size_t i = 0; i < weights.size(); ++i) {
    ASSERT_TRUE(fixed[i].defined()) << i;
    EXPECT_GT(reference[i].abs().max().item<double>(), 0) << i;
    EXPECT_LT(max_relative_error(fixed[i], reference[i]), 1e-10) << "weight " << i;
  }
}

TEST(ConvGradfixTest, UnderAutocastItComputesInTheAutocastDtypeAndReachesTheFp32Weights) {
  const auto x = torch::randn({2, 3, 6, 6});
  const auto w = torch::randn({4, 3, 3, 3}).requires_grad_(true);
  const auto b = torch::zeros({4}).requires_grad_(true);
  torch::Tensor y;
  {
    const bool was = compat::autocast_enabled(torch::kCPU);
    const auto previous = compat::autocast_dtype(torch::kCPU);
    compat::set_autocast(torch::kCPU, true, torch::kBFloat16);
    y = gradfix_conv2d(x, w, b, 1, 1);
    compat::set_autocast(torch::kCPU, was, previous);
  }
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.to(torch::kFloat).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::isfinite(w.grad()).all().item<bool>());
  EXPECT_GT(w.grad().abs().sum().item<double>(), 0);
}

}  // namespace
}  // namespace gpubench::models
