// StyleGAN specifics: the parameter breakdown against the spec, equalized learning rate, the
// fused resampling convolutions, the blur, the minibatch-stddev layer on a hand-made batch,
// style mixing, the R1 penalty and its double backward against finite differences, the
// synthetic reals, one training iteration's bookkeeping, and the amp-fp16 recipe's settings
// (fp16_resolutions, conv_clamp) with the activation trace that shows where each layer ran.
#include "models/stylegan.h"

#include "gpubench/config/config.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/precision.h"
#include "gpubench/train/registry.h"
#include "tests/builtin_store.h"
#include "tests/testing.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <tuple>

namespace gpubench::models {
namespace {

using testing::builtin_store;

const double kSqrt2 = std::sqrt(2.0);

/// Trainable parameters whose name starts with `prefix`.
int64_t count_named(const torch::nn::Module& m, const std::string& prefix) {
  int64_t total = 0;
  for (const auto& item : m.named_parameters()) {
    if (item.key().rfind(prefix, 0) == 0) total += item.value().numel();
  }
  return total;
}

TEST(StyleGanTest, ParameterBreakdownMatchesTheSpec) {
  // spec image §5: G = mapping 2,101,248 + synthesis 24,110,720 + ToRGB of all 9 lods 7,659;
  // D = blocks 23,077,073 + FromRGB of all 9 lods 10,176.
  const StyleGanOptions o = stylegan_options(builtin_store().model("stylegan").model);
  EXPECT_EQ(o.num_layers(), 18);
  EXPECT_EQ(o.nf(1), 512);
  EXPECT_EQ(o.nf(6), 128);
  EXPECT_EQ(o.nf(9), 16);
  StyleGanGenerator g(o);
  EXPECT_EQ(count_named(*g, "mapping."), 2101248);
  EXPECT_EQ(count_named(*g, "synthesis.") - count_named(*g, "synthesis.to_rgb."), 24110720);
  EXPECT_EQ(count_named(*g, "synthesis.to_rgb."), 7659);
  EXPECT_EQ(count_named(*g, "synthesis.to_rgb.0."), 16 * 3 + 3);  // the one lod 0 uses
  // One epilogue per layer: noise strengths C + style dense 512 x 2C + 2C.
  EXPECT_EQ(count_named(*g, "synthesis.epilogues.0."), 512 + 512 * 1024 + 1024);
  EXPECT_EQ(count_named(*g, "synthesis.epilogues.17."), 16 + 512 * 32 + 32);
  // The 8x8 upscaling conv is plain, the 128x128 one fused: both own a 3x3 kernel and a bias.
  EXPECT_EQ(count_named(*g, "synthesis.up_convs.0."), 9 * 512 * 512 + 512);
  EXPECT_EQ(count_named(*g, "synthesis.up_convs.4."), 9 * 256 * 128 + 128);
  EXPECT_EQ(count_trainable(g->parameters()), 26219627);
  // dlatent_avg is a buffer, as the reference's non-trainable variable.
  EXPECT_EQ(g->named_buffers().find("dlatent_avg")->numel(), 512);

  StyleGanDiscriminator d(o);
  EXPECT_EQ(count_named(*d, "from_rgb."), 10176);
  EXPECT_EQ(count_named(*d, "from_rgb.0."), 3 * 16 + 16);
  EXPECT_EQ(count_trainable(d->parameters()) - count_named(*d, "from_rgb."), 23077073);
  EXPECT_EQ(count_named(*d, "conv4."), 9 * 513 * 512 + 512);  // + the stddev map
  EXPECT_EQ(count_named(*d, "dense0."), 8192 * 512 + 512);
  EXPECT_EQ(count_named(*d, "dense1."), 512 + 1);
  EXPECT_EQ(count_trainable(d->parameters()), 23087249);
}

TEST(StyleGanTest, FullResolutionGeneratorMakes1024ImagesAndDiscriminatorOneScoreEach) {
  // The shipped networks at lod 0, one latent (no gradient: only the shapes matter). spec image
  // §5: z is 512-d; the synthesis doubles 4x4 eight times (log2(1024) - 1 = 9 resolutions, 18
  // layers) and ends in ToRGB 16 -> 3 at 1024x1024; D_basic halves 1024 down to 4x4 and ends in
  // dense 512 -> 1: one score per image.
  const StyleGanOptions o = stylegan_options(builtin_store().model("stylegan").model);
  ASSERT_EQ(o.resolution(), 1024);
  ASSERT_EQ(o.latent_size(), 512);
  torch::manual_seed(0);
  StyleGanGenerator g(o);
  StyleGanDiscriminator d(o);
  torch::NoGradGuard no_grad;
  const auto images = g->forward(torch::randn({1, 512}));
  EXPECT_EQ(images.sizes(), (std::vector<int64_t>{1, 3, 1024, 1024}));
  EXPECT_TRUE(images.isfinite().all().item<bool>());
  const auto scores = d->forward(images);
  EXPECT_EQ(scores.sizes(), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(scores.isfinite().all().item<bool>());
}

TEST(StyleGanTest, EqualizedLearningRateStoresUnitWeightsAndScalesThemAtRunTime) {
  torch::manual_seed(0);
  EqualizedConv2d conv(64, 32, 3, kSqrt2);
  EXPECT_NEAR(conv->weight.std().item<double>(), 1.0, 0.02);
  EXPECT_DOUBLE_EQ(conv->weight_scale, kSqrt2 / std::sqrt(64.0 * 9.0));
  {
    torch::NoGradGuard no_grad;
    conv->bias.uniform_();
  }
  const auto x = torch::randn({2, 64, 5, 5});
  const auto expected = torch::conv2d(x, conv->weight * (kSqrt2 / 24.0), conv->bias, 1, 1);
  EXPECT_TRUE(torch::allclose(conv(x), expected, 1e-5, 1e-5));

  // The mapping layers: weights stored with std 1/lrmul = 100, multiplied by
  // sqrt(2/512) * 0.01, so the effective weights have He's std sqrt(2/512); the bias by 0.01.
  EqualizedLinear dense(512, 256, kSqrt2, 0.01);
  EXPECT_NEAR(dense->weight.std().item<double>(), 100.0, 2.0);
  EXPECT_NEAR((dense->weight * dense->weight_scale).std().item<double>(), std::sqrt(2.0 / 512),
              0.002);
  {
    torch::NoGradGuard no_grad;
    dense->bias.fill_(1.0);
  }
  const auto z = torch::randn({3, 512});
  const auto y = dense(z);
  const double scale = kSqrt2 / std::sqrt(512.0) * 0.01;
  EXPECT_TRUE(torch::allclose(y, z.mm((dense->weight * scale).t()) + 0.01, 1e-4, 1e-5));
  // What Adam sees: the stored weight's gradient is the effective weight's times the scale.
  y.sum().backward();
  const auto effective_grad = torch::ones({256, 1}) * z.sum(0).unsqueeze(0);
  EXPECT_TRUE(torch::allclose(dense->weight.grad(), effective_grad * scale, 1e-5, 1e-8));
  EXPECT_TRUE(torch::allclose(dense->bias.grad(), torch::full({256}, 3 * 0.01), 1e-6, 1e-8));
}

TEST(StyleGanTest, FusedDownscaleConvEqualsConvThenAverage) {
  torch::manual_seed(1);
  EqualizedConv2d conv(3, 4, 3, kSqrt2);
  {
    torch::NoGradGuard no_grad;
    conv->bias.uniform_();
  }
  const auto x = torch::randn({2, 3, 8, 8});
  const auto fused = conv->forward_down(x, /*fused=*/true);
  ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{2, 4, 4, 4}));
  EXPECT_TRUE(torch::allclose(fused, conv->forward_down(x, /*fused=*/false), 1e-5, 1e-5));
}

TEST(StyleGanTest, FusedUpscaleConvEqualsUpscaleThenConvWithTheFlippedKernel) {
  // conv2d_transpose with the shift-summed kernel is the reference's fused form; it equals
  // nearest upscaling then the 3x3 convolution by the spatially flipped kernel, borders
  // included.
  torch::manual_seed(2);
  EqualizedConv2d conv(3, 4, 3, kSqrt2);
  const auto x = torch::randn({2, 3, 5, 5});
  const auto fused = conv->forward_up(x, /*fused=*/true);
  ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{2, 4, 10, 10}));
  const auto flipped = (conv->weight * conv->weight_scale).flip({2, 3});
  const auto expected = torch::conv2d(upscale2d(x), flipped, conv->bias, 1, 1);
  EXPECT_TRUE(torch::allclose(fused, expected, 1e-5, 1e-5));
  // The unfused path is nearest upscaling then the kernel as stored.
  const auto plain =
      torch::conv2d(upscale2d(x), conv->weight * conv->weight_scale, conv->bias, 1, 1);
  EXPECT_TRUE(torch::allclose(conv->forward_up(x, /*fused=*/false), plain, 1e-5, 1e-5));
}

TEST(StyleGanTest, UpscaleRepeatsPixelsAndBlurIsTheBinomialFilter) {
  const auto x = torch::arange(4, torch::kFloat).view({1, 1, 2, 2});
  const auto up = upscale2d(x);
  const auto expected = torch::tensor({0.f, 0.f, 1.f, 1.f, 0.f, 0.f, 1.f, 1.f, 2.f, 2.f, 3.f, 3.f,
                                       2.f, 2.f, 3.f, 3.f})
                            .view({1, 1, 4, 4});
  EXPECT_TRUE(torch::equal(up, expected));

  Blur2d blur(2);
  auto impulse = torch::zeros({1, 2, 5, 5});
  impulse.index_put_({0, 1, 2, 2}, 16.0);
  const auto out = blur(impulse);
  const auto filter = torch::tensor({1.f, 2.f, 1.f, 2.f, 4.f, 2.f, 1.f, 2.f, 1.f}).view({3, 3});
  EXPECT_TRUE(torch::allclose(out[0][1].slice(0, 1, 4).slice(1, 1, 4), filter));
  EXPECT_EQ(out[0][1].sum().item<float>(), 16.0f);
  EXPECT_EQ(out[0][0].abs().sum().item<float>(), 0.0f);  // depthwise: channels stay apart
  const auto with_bias = blur->forward(impulse, torch::tensor({0.5f, -1.0f}));
  EXPECT_TRUE(torch::allclose(with_bias[0][0], torch::full({5, 5}, 0.5)));
}

// The blur runs as one single-channel gradfix convolution over the planes: the same values,
// gradients and R1-style double gradients as the depthwise convolution it replaces.
TEST(StyleGanTest, BlurMatchesTheDepthwiseConvolutionToSecondOrder) {
  torch::manual_seed(0);
  Blur2d blur(3);
  blur->to(torch::kDouble);
  const auto depthwise = [&](const torch::Tensor& x) {
    return torch::conv2d(x, blur->kernel, {}, 1, 1, 1, 3);
  };
  const auto x0 = torch::randn({2, 3, 7, 6}, torch::kDouble);
  const auto upstream = torch::randn({2, 3, 7, 6}, torch::kDouble);
  // An R1-like chain: a trainable per-channel scale, the blur, the input gradient of a score,
  // its squared norm, and that differentiated with respect to the scale.
  auto second_order = [&](const std::function<torch::Tensor(const torch::Tensor&)>& f) {
    auto scale = torch::rand({1, 3, 1, 1}, torch::kDouble).add_(0.5).requires_grad_(true);
    auto x = x0.clone().requires_grad_(true);
    const auto y = f(x * scale);
    const auto score = (y * upstream).sum() + (y * y).sum();
    const auto gx = torch::autograd::grad({score}, {x}, {}, /*retain_graph=*/true,
                                          /*create_graph=*/true)[0];
    const auto penalty = gx.pow(2).sum();
    const auto gscale = torch::autograd::grad({penalty}, {scale})[0];
    return std::make_tuple(y.detach(), gx.detach(), gscale);
  };
  torch::manual_seed(1);
  const auto [y, gx, gs] = second_order([&](const torch::Tensor& t) { return blur(t); });
  torch::manual_seed(1);
  const auto [y_ref, gx_ref, gs_ref] = second_order(depthwise);
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(gx, gx_ref, 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(gs, gs_ref, 1e-10, 1e-12)) << gs << gs_ref;
}

TEST(StyleGanTest, MinibatchStddevOnAHandMadeBatch) {
  // 8 images, 2 channels, 1x1: groups of 4, image i in group i mod 2.
  // Group 0 (images 0, 2, 4, 6): channel 0 = 1, 3, 1, 3 (std 1), channel 1 = 0 (std 0).
  // Group 1 (images 1, 3, 5, 7): channel 0 = 0, 2, 4, 6 (std sqrt 5), channel 1 = 2 (std 0).
  const auto x = torch::tensor({1.f, 0.f, 0.f, 2.f, 3.f, 0.f, 2.f, 2.f,  //
                                1.f, 0.f, 4.f, 2.f, 3.f, 0.f, 6.f, 2.f})
                     .view({8, 2, 1, 1});
  const auto y = minibatch_stddev(x, 4, 1);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{8, 3, 1, 1}));
  EXPECT_TRUE(torch::equal(y.slice(1, 0, 2), x));
  const double eps_std = std::sqrt(1e-8);
  const double group0 = (std::sqrt(1 + 1e-8) + eps_std) / 2;
  const double group1 = (std::sqrt(5 + 1e-8) + eps_std) / 2;
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(y[i][2][0][0].item<double>(), i % 2 == 0 ? group0 : group1, 1e-6) << i;
  }
  // The new map is constant over the pixels; the group is min(4, N).
  const auto wide = minibatch_stddev(torch::randn({2, 4, 3, 3}), 4, 1);
  ASSERT_EQ(wide.sizes(), (std::vector<int64_t>{2, 5, 3, 3}));
  EXPECT_TRUE(torch::allclose(wide.select(1, 4), wide.select(1, 4)[0][0][0].expand({2, 3, 3})));
  const auto single = minibatch_stddev(torch::randn({1, 4, 2, 2}), 4, 1);
  EXPECT_NEAR(single[0][4][0][0].item<double>(), eps_std, 1e-9);  // one image: std 0
  EXPECT_THROW(minibatch_stddev(torch::randn({6, 4, 2, 2}), 4, 1), c10::Error);
  EXPECT_TRUE(stylegan_batch_ok(1, 4));
  EXPECT_TRUE(stylegan_batch_ok(3, 4));
  EXPECT_TRUE(stylegan_batch_ok(12, 4));
  EXPECT_FALSE(stylegan_batch_ok(6, 4));
  EXPECT_TRUE(stylegan_batch_ok(6, 0));
}

TEST(StyleGanTest, StyleMixingSwitchesOnceAtARandomLayerWithProbabilityPoint9) {
  torch::manual_seed(3);
  const auto w1 = torch::zeros({3, 4}), w2 = torch::ones({3, 4});
  std::set<int64_t> cutoffs;
  int unmixed = 0;
  constexpr int kTrials = 2000;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto d = mix_styles(w1, w2, 18, 0.9);
    ASSERT_EQ(d.sizes(), (std::vector<int64_t>{3, 18, 4}));
    // Every image and feature of a layer takes the same source: one decision per minibatch.
    const auto per_layer = d.select(2, 0).select(0, 0);
    ASSERT_TRUE(torch::equal(d, per_layer.view({1, 18, 1}).expand({3, 18, 4})));
    const auto cutoff = static_cast<int64_t>(18 - per_layer.sum().item<float>());
    // w1 up to the cutoff, w2 from it on.
    ASSERT_TRUE(torch::equal(per_layer, (torch::arange(18) >= cutoff).to(torch::kFloat)));
    if (cutoff == 18) {
      ++unmixed;
    } else {
      ASSERT_GE(cutoff, 1);  // layer 0 always takes w1
      cutoffs.insert(cutoff);
    }
  }
  EXPECT_EQ(cutoffs.size(), 17u);  // every cutoff in [1, 18) occurs
  EXPECT_NEAR(static_cast<double>(unmixed) / kTrials, 0.1, 0.025);
  EXPECT_TRUE(torch::equal(mix_styles(w1, w2, 18, 0.0), torch::zeros({3, 18, 4})));
}

/// A tiny D in double precision: 16x16 grey images, 4 maps; the 16x16 block downscales fused,
/// the 8x8 one by conv + average. Minibatch-stddev groups of 2 couple the two images of a pair.
StyleGanDiscriminator tiny_discriminator() {
  torch::manual_seed(4);
  StyleGanDiscriminator d(StyleGanOptions()
                              .resolution(16)
                              .num_channels(1)
                              .fmap_base(16)
                              .fmap_max(4)
                              .fused_scale_min_res(16)
                              .mbstd_group_size(2));
  d->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (auto& p : d->parameters()) {
    if (p.dim() == 1) p.uniform_(-0.5, 0.5);  // biases away from zero: kinks off the grid
  }
  return d;
}

TEST(StyleGanTest, R1PenaltyMatchesFiniteDifferences) {
  auto d = tiny_discriminator();
  torch::manual_seed(5);
  const auto images = torch::rand({2, 1, 16, 16}, torch::kDouble) * 2 - 1;
  const auto reals = images.clone().requires_grad_(true);
  const auto penalty = r1_penalty(d(reals), reals);
  ASSERT_EQ(penalty.sizes(), (std::vector<int64_t>{2}));
  // Under amp-fp16 the gradient is taken of the loss-scaled sum and unscaled: the same penalty.
  const train::GradScaler scaler(/*enabled=*/true, torch::kCPU);
  const auto scaled_reals = images.clone().requires_grad_(true);
  EXPECT_TRUE(torch::allclose(r1_penalty(d(scaled_reals), scaled_reals, &scaler), penalty));

  // Central differences of sum(D(x)) in every pixel of both images, all in one forward: pair j
  // of K = 2 x pixels copies of the two images has pixel j / 2 moved by +-step. The batch holds
  // the first images of all pairs, then the second ones, so that the stddev groups (image m
  // with image K + m) are exactly the pairs.
  torch::NoGradGuard no_grad;
  constexpr double kStep = 1e-6;
  const int64_t pixels = images.numel();
  const int64_t pairs = 2 * pixels;
  auto perturbed = images.reshape({1, pixels}).repeat({pairs, 1});
  const auto rows = torch::arange(pairs);
  const auto signs = 1.0 - 2.0 * (rows % 2).to(torch::kDouble);  // +, -, +, -, ...
  perturbed.index_put_({rows, torch::div(rows, 2, "floor")},
                       perturbed.index({rows, torch::div(rows, 2, "floor")}) + signs * kStep);
  const auto batch =
      perturbed.view({pairs, 2, 1, 16, 16}).transpose(0, 1).reshape({2 * pairs, 1, 16, 16});
  const auto sums = d(batch).view({2, pairs}).sum(0).view({pixels, 2});
  const auto gradient = ((sums.select(1, 0) - sums.select(1, 1)) / (2 * kStep)).view({2, -1});
  const auto expected = gradient.square().sum(1);
  EXPECT_TRUE(torch::allclose(penalty.detach(), expected, 1e-6, 1e-9)) << penalty << "\n"
                                                                       << expected;
  EXPECT_GT(expected.min().item<double>(), 0);
}

TEST(StyleGanTest, R1PenaltyDoubleBackwardMatchesFiniteDifferencesInTheWeights) {
  // The D loss's backward runs through the R1 gradient graph (create_graph): check
  // d(sum penalty)/d(weights) against central differences of the penalty in the weights.
  auto d = tiny_discriminator();
  torch::manual_seed(6);
  const auto images = torch::rand({2, 1, 16, 16}, torch::kDouble) * 2 - 1;
  auto penalty_sum = [&] {
    const auto reals = images.clone().requires_grad_(true);
    return r1_penalty(d(reals), reals).sum();
  };
  {
    const auto reals = images.clone().requires_grad_(true);
    const auto total = r1_penalty(d(reals), reals).sum();
    // As the training step: once the R1 gradient exists the reals stop requiring grad, and the
    // backward fills D's gradients only.
    reals.requires_grad_(false);
    total.backward();
    EXPECT_FALSE(reals.grad().defined());
  }
  const std::vector<std::pair<std::string, torch::Tensor>> checked = {
      {"from_rgb.0.weight", d->from_rgb[0]->as<EqualizedConv2d>()->weight},
      {"conv1_down.0.weight (fused)", d->conv1_down[0]->as<EqualizedConv2d>()->weight},
      {"conv1_down.1.weight", d->conv1_down[1]->as<EqualizedConv2d>()->weight},
      {"conv4.weight", d->conv4->weight},
      {"dense0.bias", d->dense0->bias},
  };
  constexpr double kStep = 1e-6;
  for (const auto& [name, param] : checked) {
    const auto analytic = param.grad().reshape(-1).clone();
    auto values = param.detach().view(-1);
    for (int64_t i = 0; i < std::min<int64_t>(values.numel(), 2); ++i) {
      const double original = values[i].item<double>();
      {
        torch::NoGradGuard no_grad;
        values[i] = original + kStep;
      }
      const double up = penalty_sum().item<double>();
      {
        torch::NoGradGuard no_grad;
        values[i] = original - kStep;
      }
      const double down = penalty_sum().item<double>();
      {
        torch::NoGradGuard no_grad;
        values[i] = original;
      }
      const double numeric = (up - down) / (2 * kStep);
      EXPECT_NEAR(analytic[i].item<double>(), numeric, 1e-5 * std::max(1.0, std::abs(numeric)))
          << name << "[" << i << "]";
    }
  }
}

TEST(StyleGanTest, SyntheticRealsAreEightBitImagesInMinusOneToOneWithMirroring) {
  const SyntheticReals reals(16, 3, 8, /*mirror=*/true, torch::kCPU, 7);
  ASSERT_EQ(reals.stored().scalar_type(), torch::kByte);
  ASSERT_EQ(reals.stored().sizes(), (std::vector<int64_t>{16, 3, 8, 8}));
  const auto levels = reals.stored().to(torch::kFloat) * (2.0 / 255.0) - 1;
  const auto x = reals.next();
  EXPECT_EQ(x.scalar_type(), torch::kFloat);
  EXPECT_GE(x.min().item<float>(), -1.0f);
  EXPECT_LE(x.max().item<float>(), 1.0f);
  int mirrored = 0;
  for (int64_t i = 0; i < 16; ++i) {
    const bool same = torch::allclose(x[i], levels[i]);
    const bool flipped = torch::allclose(x[i], levels[i].flip({2}));
    EXPECT_TRUE(same || flipped) << i;
    mirrored += flipped && !same;
  }
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, 16);
  // Deterministic from the seed; without mirroring the reals are the stored levels.
  const SyntheticReals again(16, 3, 8, /*mirror=*/false, torch::kCPU, 7);
  EXPECT_TRUE(torch::equal(again.stored(), reals.stored()));
  EXPECT_TRUE(torch::allclose(again.next(), levels));
}

StepContext smoke_context(int64_t batch) {
  return testing::smoke_context(builtin_store().model("stylegan"), batch,
                                testing::SmokeOptimizer::kFull);
}

TEST(StyleGanTest, OneIterationTrainsBothNetworksAndKeepsDTrainable) {
  const auto& arch = builtin_registry().get("stylegan");
  auto step = arch.prepare(smoke_context(4));
  EXPECT_EQ(step->run(), 4.0);
  const auto losses = step->losses();
  EXPECT_GT(losses.at("r1").item<float>(), 0.0f);
  const auto params = step->parameters();
  // The G step freezes D only while it runs.
  for (const auto& p : params.at("discriminator")) EXPECT_TRUE(p.requires_grad());
  // Only the full-resolution ToRGB gets gradients; the coarser levels exist, unused.
  int64_t without_grad = 0;
  for (const auto& p : params.at("generator")) without_grad += !p.grad().defined();
  EXPECT_EQ(without_grad, 2 * 3);  // ToRGB lod 1..3 at 32x32: weight + bias each
  EXPECT_EQ(step->batch_info().at("mbstd_group").get<int64_t>(), 4);
}

TEST(StyleGanTest, TheR1PassRunsInFp32UnderAmpFp16Alone) {
  EXPECT_TRUE(r1_pass_in_fp32("auto", Precision::kAmpFp16));
  EXPECT_FALSE(r1_pass_in_fp32("auto", Precision::kAmpBf16));
  EXPECT_FALSE(r1_pass_in_fp32("auto", Precision::kFp32));
  EXPECT_TRUE(r1_pass_in_fp32("fp32", Precision::kAmpBf16));
  EXPECT_FALSE(r1_pass_in_fp32("autocast", Precision::kAmpFp16));
  // The record says which pass ran.
  const auto& arch = builtin_registry().get("stylegan");
  auto ctx = smoke_context(4);
  EXPECT_EQ(arch.prepare(ctx)->batch_info().at("r1_pass").get<std::string>(), "autocast");
  Json values = ctx.model.json();
  values["r1_pass"] = "fp32";
  ctx.model = Params(arch.model_schema, values, Where{"test", ""});
  auto step = arch.prepare(ctx);
  EXPECT_EQ(step->batch_info().at("r1_pass").get<std::string>(), "fp32");
  // An fp32 reals pass trains as the autocast one does at fp32: the same finite R1.
  EXPECT_EQ(step->run(), 4.0);
  EXPECT_GT(step->losses().at("r1").item<float>(), 0.0f);
  EXPECT_TRUE(std::isfinite(step->losses().at("d").item<float>()));
}

TEST(StyleGanTest, BatchesThatDoNotSplitIntoStddevGroupsAreRejected) {
  const auto& arch = builtin_registry().get("stylegan");
  EXPECT_THROWS_WITH(arch.prepare(smoke_context(6)), ConfigError, "multiple of it");
  EXPECT_NO_THROW(arch.prepare(smoke_context(3)));
}

/// The smoke model section with `changes` applied (validated against the schema).
Params smoke_model_with(const Json& changes) {
  const auto& arch = builtin_registry().get("stylegan");
  Json values = builtin_store().model("stylegan").smoke_model.json();
  merge_into(values, changes);
  return Params(arch.model_schema, values, Where{"test", "model"});
}

TEST(StyleGanTest, TheFp16RecipeSettingsParseAndApplyUnderAmpFp16Alone) {
  // Shipped: StyleGAN2-ADA's recipe under amp-fp16 at 1024: fp16 from 128x128 up
  // (max(2^(10 + 1 - 4), 8)), clamp 256 (v1 under plain autocast did not keep its loss scale
  // on the H200: docs/workloads/stylegan.md).
  const Params shipped = builtin_store().model("stylegan").model;
  const auto o = stylegan_options(shipped, Precision::kAmpFp16);
  EXPECT_FALSE(o.fp16_everywhere());
  EXPECT_EQ(o.fp16_resolutions(), 4);
  EXPECT_EQ(o.conv_clamp(), 256.0);
  for (int64_t res = 2; res <= 10; ++res) EXPECT_EQ(o.fp16_at(res), res >= 7) << res;
  // Other precisions keep the reference's math (every layer under the run's autocast, no clamp)
  // whatever the settings say.
  for (const auto precision : {Precision::kFp32, Precision::kAmpBf16}) {
    const auto other = stylegan_options(shipped, precision);
    EXPECT_TRUE(other.fp16_everywhere());
    EXPECT_EQ(other.conv_clamp(), 0.0);
    EXPECT_TRUE(other.fp16_at(2) && other.fp16_at(10));
  }
  // v1 under plain autocast is one setting away.
  Json values = shipped.json();
  values["fp16_resolutions"] = "all";
  values["conv_clamp"] = 0;
  const Params plain(builtin_registry().get("stylegan").model_schema, values, Where{"t", "m"});
  EXPECT_TRUE(stylegan_options(plain, Precision::kAmpFp16).fp16_everywhere());
  EXPECT_EQ(stylegan_options(plain, Precision::kAmpFp16).conv_clamp(), 0.0);
  // 0: nothing in fp16; 9 (every resolution): all blocks from 8x8 up, 4x4 still fp32, as ADA's
  // floor of 8.
  const auto none =
      stylegan_options(smoke_model_with({{"fp16_resolutions", "0"}}), Precision::kAmpFp16);
  for (int64_t res = 2; res <= 5; ++res) EXPECT_FALSE(none.fp16_at(res)) << res;
  values["fp16_resolutions"] = "9";
  const auto most = stylegan_options(
      Params(builtin_registry().get("stylegan").model_schema, values, Where{"t", "m"}),
      Precision::kAmpFp16);
  EXPECT_FALSE(most.fp16_at(2));
  EXPECT_TRUE(most.fp16_at(3));
}

TEST(StyleGanTest, BadFp16RecipeValuesAreRefusedWithTheKeyAndWhatIsAccepted) {
  // Smoke size: 32x32 has 4 resolutions (4, 8, 16, 32).
  for (const char* bad : {"x", "-1", "5", "4.5", "", "all4"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROWS_WITH(
        stylegan_options(smoke_model_with({{"fp16_resolutions", bad}}), Precision::kAmpFp16),
        ConfigError, "fp16_resolutions");
    // Refused whatever the precision: a bad config is bad before it meets amp-fp16.
    EXPECT_THROWS_WITH(stylegan_options(smoke_model_with({{"fp16_resolutions", bad}})), ConfigError,
                       "'all'");
  }
  EXPECT_NO_THROW(stylegan_options(smoke_model_with({{"fp16_resolutions", "4"}})));
  // The schema: a count must be quoted, the clamp not negative.
  EXPECT_THROW(smoke_model_with({{"fp16_resolutions", 4}}), ConfigError);
  EXPECT_THROWS_WITH(smoke_model_with({{"conv_clamp", -1}}), ConfigError, "conv_clamp");
}

/// Collects the activation trace while it lives.
struct CollectTrace {
  explicit CollectTrace(int64_t iterations = 1000) {
    set_activation_trace_sink([this](const ActivationTraceRecord& r) { records.push_back(r); },
                              iterations);
  }
  ~CollectTrace() { set_activation_trace_sink({}, 0); }
  const ActivationTraceRecord& at(const std::string& layer) const {
    for (const auto& r : records) {
      if (r.layer == layer) return r;
    }
    ADD_FAILURE() << "no trace of " << layer;
    static const ActivationTraceRecord none;
    return none;
  }
  std::vector<ActivationTraceRecord> records;
};

StyleGanOptions smoke_options() { return stylegan_options(builtin_store().model("stylegan").smoke_model); }

TEST(StyleGanTest, TheRecipeWithoutClampComputesThePlainForwardInFp32) {
  // Outside autocast the recipe only moves autocast boundaries: G and D compute exactly the
  // reference's math (the same parameters from the same seed, the same noise and mixing).
  const auto plain = smoke_options();
  auto recipe = plain;
  recipe.fp16_resolutions(1);
  ASSERT_FALSE(recipe.fp16_everywhere());
  torch::manual_seed(3);
  StyleGanGenerator g1(plain);
  StyleGanDiscriminator d1(plain);
  torch::manual_seed(3);
  StyleGanGenerator g2(recipe);
  StyleGanDiscriminator d2(recipe);
  const auto z = torch::randn({4, plain.latent_size()});
  torch::manual_seed(5);
  const auto images1 = g1->forward(z);
  const auto scores1 = d1->forward(images1);
  torch::manual_seed(5);
  const auto images2 = g2->forward(z);
  const auto scores2 = d2->forward(images2);
  EXPECT_TRUE(torch::equal(images1, images2));
  EXPECT_TRUE(torch::equal(scores1, scores2));
  // A clamp no activation reaches changes nothing either.
  recipe.conv_clamp(1e30);
  torch::manual_seed(3);
  StyleGanGenerator g3(recipe);
  StyleGanDiscriminator d3(recipe);
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(d3->forward(g3->forward(z)), scores1));
}

/// G and D built from seed 0 and four latents drawn after them: the same networks and inputs
/// for the same options.
struct SeededNetworks {
  StyleGanGenerator g;
  StyleGanDiscriminator d;
  torch::Tensor z;
};

SeededNetworks seeded_networks(const StyleGanOptions& o) {
  torch::manual_seed(0);
  StyleGanGenerator g(o);
  StyleGanDiscriminator d(o);
  auto z = torch::randn({4, o.latent_size()});
  return {g, d, z};
}

TEST(StyleGanTest, UnderAutocastOnlyTheHighestResolutionsLeaveFp32) {
  // CPU autocast is bf16 (fp16 needs the GPU); the placement is the same. At 32x32 with one
  // fp16 resolution only the 32x32 blocks (G's last with its ToRGB, D's first with its FromRGB)
  // run under autocast; the mapping, G's 4..16 blocks and D's 16..4 ones and its epilogue run
  // in fp32, and the images leave G in fp32.
  auto o = smoke_options();
  o.fp16_resolutions(1);
  auto [g, d, z] = seeded_networks(o);
  CollectTrace trace;
  torch::Tensor images, scores;
  {
    AutocastGuard autocast(Precision::kAmpBf16, torch::kCPU);
    images = g->forward(z);
    scores = d->forward(images);
  }
  EXPECT_EQ(images.scalar_type(), torch::kFloat);
  EXPECT_EQ(scores.scalar_type(), torch::kFloat);
  for (const char* fp32 :
       {"G.mapping", "G.4.const.out", "G.4.conv.conv", "G.16.conv1.out", "G.16.conv0_up.style",
        "G.torgb", "D.16.conv0", "D.8.conv1_down", "D.mbstd", "D.conv4", "D.dense0", "D.dense1"}) {
    EXPECT_EQ(trace.at(fp32).dtype, torch::kFloat) << fp32;
  }
  for (const char* bf16 : {"G.32.conv0_up.conv", "G.32.conv1.conv", "G.32.conv1.style",
                           "D.32.from_rgb", "D.32.conv0", "D.32.conv1_down"}) {
    EXPECT_EQ(trace.at(bf16).dtype, torch::kBFloat16) << bf16;
  }
  // Without the recipe every layer runs under autocast: the mapping and D's epilogue in bf16.
  trace.records.clear();
  StyleGanGenerator g_all(smoke_options());
  StyleGanDiscriminator d_all(smoke_options());
  {
    AutocastGuard autocast(Precision::kAmpBf16, torch::kCPU);
    d_all->forward(g_all->forward(z));
  }
  for (const char* layer : {"G.mapping", "G.8.conv1.conv", "G.torgb", "D.16.conv0", "D.dense1"}) {
    EXPECT_EQ(trace.at(layer).dtype, torch::kBFloat16) << layer;
  }
}

TEST(StyleGanTest, TheClampBoundsEveryConvolutionsActivation) {
  auto o = smoke_options();
  o.fp16_resolutions(1);
  auto [g, d, z] = seeded_networks(o);
  CollectTrace trace;
  torch::manual_seed(1);
  d->forward(g->forward(z));
  // Unclamped, the activations reach past 0.5 (so that the check below can fail).
  double largest = 0;
  for (const auto& r : trace.records) largest = std::max(largest, r.max_abs);
  ASSERT_GT(largest, 1.0);
  constexpr double kClamp = 0.5;
  o.conv_clamp(kClamp);
  auto [gc, dc, zc] = seeded_networks(o);
  ASSERT_TRUE(torch::equal(zc, z));
  trace.records.clear();
  torch::manual_seed(1);
  const auto images = gc->forward(z);
  dc->forward(images);
  EXPECT_LE(images.abs().max().item<double>(), kClamp);
  int clamped = 0;
  for (const auto& r : trace.records) {
    const bool after_conv = r.layer.rfind(".act") == r.layer.size() - 4 ||
                            r.layer.rfind("D.", 0) == 0 || r.layer == "G.torgb";
    if (!after_conv || r.layer == "D.mbstd" || r.layer.rfind("D.dense", 0) == 0) continue;
    EXPECT_LE(r.max_abs, kClamp) << r.layer;
    ++clamped;
  }
  // G: 8 layers' activations and ToRGB; D: FromRGB, 3 x 2 block convs, the 4x4 conv.
  EXPECT_EQ(clamped, 8 + 1 + 1 + 6 + 1);
  // Not past the instance norm: the normalized maps are not clamped.
  EXPECT_GT(trace.at("G.32.conv1.norm").max_abs, kClamp);
}

TEST(StyleGanTest, TheStepRecordsTheRecipeAndTracesItsFirstIterations) {
  const auto& arch = builtin_registry().get("stylegan");
  auto ctx = smoke_context(4);
  ctx.model = smoke_model_with({{"fp16_resolutions", "2"}, {"conv_clamp", 256}});
  ctx.precision = Precision::kAmpBf16;  // the recipe is amp-fp16's: recorded as not applied
  auto info = arch.prepare(ctx)->batch_info();
  EXPECT_EQ(info.at("fp16_resolutions"), "all");
  EXPECT_EQ(info.at("conv_clamp").get<double>(), 0.0);
  ctx.precision = Precision::kAmpFp16;
  info = arch.prepare(ctx)->batch_info();
  EXPECT_EQ(info.at("fp16_resolutions").get<int64_t>(), 2);
  EXPECT_EQ(info.at("conv_clamp").get<double>(), 256.0);

  // The trace of a fp32 step: its first iteration only, every pass named.
  ctx.precision = Precision::kFp32;
  auto step = arch.prepare(ctx);
  CollectTrace trace(/*iterations=*/1);
  step->run();
  step->run();
  ASSERT_FALSE(trace.records.empty());
  std::set<std::string> passes;
  for (const auto& r : trace.records) {
    EXPECT_EQ(r.iteration, 1);
    EXPECT_EQ(r.nonfinite, 0) << r.layer;
    passes.insert(r.pass);
  }
  EXPECT_EQ(passes,
            (std::set<std::string>{"d-step G(z)", "d-step D(reals)", "d-step D(fakes)",
                                   "d-step loss", "g-step G(z)", "g-step D(G(z))", "g-step loss"}));
  EXPECT_EQ(trace.at("loss.g").dtype, torch::kFloat);
}

}  // namespace
}  // namespace gpubench::models
