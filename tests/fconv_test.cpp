// conv-seq2seq specifics: the parameter count against the spec's formula (layer by layer),
// weight normalization, the encoder's gradient scaling, causality of the decoder and the
// source-padding masks.
#include "models/fconv.h"

#include "tests/translation_checks.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace gpubench::models {
namespace {

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

TEST(FConvTest, ParameterCountFollowsTheSpecFormula) {
  // spec language §2.3: 127,569,920 + 768 V_src + 1282 V_tgt (encoder 54,192,640 + decoder
  // 73,377,280 without the vocabularies). Small vocabularies check the coefficients.
  const int64_t v_src = 1000, v_tgt = 3000;
  FConvModel model(FConvOptions(v_src, v_tgt));
  auto& enc = *model->encoder;
  auto& dec = *model->decoder;
  // Encoder: tokens V x 768, positions 1024 x 768, fc1 768 -> 512 (v, g, bias).
  EXPECT_EQ(count(*enc.embed_tokens), 768 * v_src);
  EXPECT_EQ(count(*enc.embed_positions), 786432);
  EXPECT_EQ(count(*enc.fc1), 768 * 512 + 512 + 512);
  // A conv of width 3 from 512 to 2 x 512 channels: v [3, 512, 1024], g and bias of 1024.
  EXPECT_EQ(count(*enc.convolutions[0]), 3 * 512 * 1024 + 1024 + 1024);
  EXPECT_EQ(count(*enc.convolutions[9]), 3 * 512 * 2048 + 2048 + 2048);  // 512 -> 1024
  EXPECT_EQ(count(*enc.convolutions[13]), 1024 * 4096 + 4096 + 4096);    // width 1, -> 2048
  EXPECT_EQ(count(*enc.projections[9]), 512 * 1024 + 1024 + 1024);       // residual 512 -> 1024
  EXPECT_EQ(count(*enc.projections[13]), 1024 * 2048 + 2048 + 2048);     // residual -> 2048
  EXPECT_FALSE(enc.projections[0]);
  EXPECT_EQ(count(*enc.fc2), 2048 * 768 + 768 + 768);
  // Decoder: the same stack plus attention (in 512|1024|2048 -> 768, out 768 -> back) in each
  // layer, fc2 2048 -> 512 and fc3 512 -> V (weight, g and bias: 512 + 2 per word).
  EXPECT_EQ(count(*dec.attention[0]), (512 * 768 + 768 + 768) + (768 * 512 + 512 + 512));
  EXPECT_EQ(count(*dec.fc2), 2048 * 512 + 512 + 512);
  EXPECT_EQ(count(*dec.fc3), 512 * v_tgt + v_tgt + v_tgt);
  EXPECT_EQ(count(enc), 54192640 + 768 * v_src);
  EXPECT_EQ(count(dec), 73377280 + 1282 * v_tgt);
  EXPECT_EQ(count(*model), 127569920 + 768 * v_src + 1282 * v_tgt);
  // With 40,000 words per side (the shipped config): 127,569,920 + 30,720,000 + 51,280,000.
  EXPECT_EQ(127569920 + 768 * 40000 + 1282 * 40000, 209569920);
}

TEST(FConvTest, WeightNormalizationRecomputesTheWeight) {
  torch::manual_seed(0);
  WeightNormLinear linear(6, 4, 0.2);
  // weight_norm starts with g = ||v||, so the weight is v itself.
  EXPECT_TRUE(torch::allclose(linear->weight(), linear->weight_v, 1e-6, 1e-6));
  {
    torch::NoGradGuard no_grad;
    linear->weight_g.mul_(3);
  }
  const auto expected =
      linear->weight_g * linear->weight_v / linear->weight_v.norm(2, {1}, /*keepdim=*/true);
  EXPECT_TRUE(torch::allclose(linear->weight(), expected, 1e-6, 1e-6));
  WeightNormConvTbc conv(5, 8, 3, 1, 0.2, false);
  EXPECT_EQ(conv->weight_v.sizes(), (std::vector<int64_t>{3, 5, 8}));
  EXPECT_EQ(conv->weight_g.sizes(), (std::vector<int64_t>{1, 1, 8}));
  EXPECT_EQ(conv->forward(torch::randn({7, 2, 5})).sizes(), (std::vector<int64_t>{7, 2, 8}));
}

TEST(FConvTest, GradMultiplyScalesOnlyTheGradient) {
  auto x = torch::randn({3, 4}, torch::requires_grad());
  const auto y = grad_multiply(x, 1.0 / 30);
  EXPECT_TRUE(torch::equal(y, x.detach()));
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::full({3, 4}, 1.0 / 30)));
}

FConvModel small_model() {
  torch::manual_seed(0);
  FConvModel model(FConvOptions(50, 60).embed_dim(16).out_embed_dim(12).convolutions(
      {{8, 3}, {16, 3}, {16, 2}, {24, 1}}));
  model->eval();
  return model;
}

TEST(FConvTest, DecoderIsCausal) {
  auto model = small_model();
  testing::expect_causal_decoder(model);
}

TEST(FConvTest, LeftPaddingOfTheSourceChangesNothing) {
  auto model = small_model();
  testing::expect_left_padding_changes_nothing(model);
}

TEST(FConvTest, EncoderGradientIsScaledByTheAttentionLayerCount) {
  // fconv_wmt_en_de: 15 attention layers -> 1 / 30.
  FConvEncoder encoder(FConvOptions(40, 40).embed_dim(8).convolutions({{8, 3}}), 15);
  EXPECT_DOUBLE_EQ(encoder->grad_scale, 1.0 / 30);
}

}  // namespace
}  // namespace gpubench::models
