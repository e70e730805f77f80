// gradfix_conv2d: torch::conv2d's value and gradients to second order, computed from
// convolutions (StyleGAN's R1 penalty needs the second order).
#include "models/conv_gradfix.h"

#include "gpubench/base/compat.h"

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

/// Weights and biases of r1_weight_gradients' stack (3 -> 4 channels 3x3, 4 -> 5 fused 4x4
/// down), drawn from the current seed, requiring gradients.
std::vector<torch::Tensor> r1_stack_weights(const torch::TensorOptions& opts) {
  std::vector<torch::Tensor> weights = {
      torch::randn({4, 3, 3, 3}, opts), torch::randn({4}, opts),
      torch::randn({5, 4, 4, 4}, opts), torch::randn({5}, opts)};
  for (auto& w : weights) w.requires_grad_(true);
  return weights;
}

TEST(ConvGradfixTest, TheR1DoubleBackwardMatchesTorchConv) {
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto reals = torch::randn({3, 3, 10, 10}, opts);
  const auto weights = r1_stack_weights(opts);
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

/// Lowers gradfix_conv2d's split limit for one scope.
class SplitLimit {
 public:
  explicit SplitLimit(int64_t elements) : saved_(gradfix_split_elements()) {
    set_gradfix_split_elements(elements);
  }
  ~SplitLimit() { set_gradfix_split_elements(saved_); }
  SplitLimit(const SplitLimit&) = delete;
  SplitLimit& operator=(const SplitLimit&) = delete;

 private:
  int64_t saved_;
};

TEST(ConvGradfixTest, ABatchPastTheLimitIsSplitIntoBalancedPiecesOfAnEighthOfIt) {
  EXPECT_EQ(gradfix_split_elements(), int64_t{2147483647});  // 2^31 - 1 unless overridden
  // stylegan at batch 132: 16 x 1024 x 1024 elements per image, 2.2e9 in all.
  const int64_t image = 16 * 1024 * 1024;
  EXPECT_EQ(gradfix_images_per_call(127, image), 127);  // 2.13e9: one call
  EXPECT_EQ(gradfix_images_per_call(132, image), 15);   // 9 pieces of at most 15 (2^28 / image)
  EXPECT_LE(gradfix_images_per_call(132, image) * image, int64_t{2147483647} / 8);
  {
    const SplitLimit limit(100);
    EXPECT_EQ(gradfix_images_per_call(8, 10), 8);   // 80 elements: under the limit
    EXPECT_EQ(gradfix_images_per_call(11, 10), 1);  // an eighth is 12: one image a call
    EXPECT_EQ(gradfix_images_per_call(5, 500), 1);  // an image past the limit still runs alone
  }
  {
    const SplitLimit limit(800);
    EXPECT_EQ(gradfix_images_per_call(90, 10), 10);  // pieces of at most 10: 9 of 10
    EXPECT_EQ(gradfix_images_per_call(81, 10), 9);  // 9 pieces of 9 rather than 8 of 10 and 1
  }
  {
    const SplitLimit off(0);
    EXPECT_EQ(gradfix_images_per_call(132, image), 132);
  }
}

TEST(ConvGradfixTest, SplittingTheBatchChangesNoValueOrGradientToSecondOrder) {
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  // Five images: pieces of uneven count at the lowered limit.
  const auto reals = torch::randn({5, 3, 10, 10}, opts);
  const auto weights = r1_stack_weights(opts);
  auto conv = [](const auto& x, const auto& w, const auto& b, int64_t s, int64_t p) {
    return gradfix_conv2d(x, w, b, s, p);
  };
  const auto whole = r1_weight_gradients(reals, weights, conv);
  std::vector<torch::Tensor> split;
  torch::Tensor y_whole, y_split, t_whole, t_split;
  const auto up = torch::randn({3, 4, 4, 4}, opts);  // transposed: [in, out, k, k]
  y_whole = gradfix_conv2d(reals, weights[0], weights[1], 1, 1);
  t_whole = gradfix_conv2d(reals, up, torch::Tensor(), 2, 1, /*transposed=*/true);
  {
    // 400 elements per image at most (4 x 10 x 10): an eighth of 1000 is 125, one image a call.
    const SplitLimit limit(1000);
    ASSERT_EQ(gradfix_images_per_call(5, 400), 1);
    split = r1_weight_gradients(reals, weights, conv);
    y_split = gradfix_conv2d(reals, weights[0], weights[1], 1, 1);
    t_split = gradfix_conv2d(reals, up, torch::Tensor(), 2, 1, /*transposed=*/true);
  }
  EXPECT_EQ(y_split.sizes(), y_whole.sizes());
  EXPECT_LT(max_relative_error(y_split, y_whole), 1e-12);
  EXPECT_EQ(t_split.sizes(), t_whole.sizes());
  EXPECT_LT(max_relative_error(t_split, t_whole), 1e-12);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    ASSERT_TRUE(split[i].defined()) << i;
    EXPECT_GT(whole[i].abs().max().item<double>(), 0) << i;
    EXPECT_LT(max_relative_error(split[i], whole[i]), 1e-10) << "weight " << i;
  }
}

}  // namespace
}  // namespace gpubench::models
