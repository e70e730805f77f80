// conv-seq2seq specifics: the parameter count against the spec's formula (layer by layer),
// weight normalization, the encoder's gradient scaling, causality of the decoder and the
// source-padding masks.
#include "models/fconv.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
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
}

TEST(FConvTest, ShippedConfigsCountFollowsTheFormulaAtItsVocabularies) {
  // The formula above at the shipped config's own vocabulary sizes must give the count the
  // config records (which the workload test checks against the built model): a vocabulary or
  // a recorded count that drifted from the other fails here.
  const auto store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& config = store.model("conv-seq2seq");
  const int64_t v_src = config.model.i64("src_vocab"), v_tgt = config.model.i64("tgt_vocab");
  EXPECT_EQ(v_src, 40000);
  EXPECT_EQ(v_tgt, 40000);
  EXPECT_EQ(config.trainable_params.at("total"), 127569920 + 768 * v_src + 1282 * v_tgt);
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
  // fairseq scales the gradient of the encoder's conv output by 1 / (2 x attention layers)
  // (fconv_wmt_en_de: 15 layers -> 1 / 30), leaving the forward and the embedding's direct path
  // into the values untouched. Two encoders with identical weights, built for 1 and 15
  // attention layers, must give the same outputs, and on a loss of the keys alone every
  // gradient of the 15-layer one must be the 1-layer one's times (1/30) / (1/2) = 1/15, and
  // the one reaching fc2's bias a hand-computed value.
  const auto options = FConvOptions(40, 40).embed_dim(8).convolutions({{8, 3}, {8, 2}});
  torch::manual_seed(0);
  FConvEncoder one(options, 1);
  FConvEncoder fifteen(options, 15);
  {
    torch::NoGradGuard no_grad;
    const auto src = one->parameters(), dst = fifteen->parameters();
    ASSERT_EQ(src.size(), dst.size());
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  one->eval();
  fifteen->eval();
  const auto tokens = torch::randint(kFairseqFirstWord, 40, {3, 7}, torch::kLong);
  const auto weights = torch::randn({3, 7, 8});
  const auto a = one->forward(tokens, false), b = fifteen->forward(tokens, false);
  EXPECT_TRUE(torch::equal(a.keys, b.keys));
  EXPECT_TRUE(torch::equal(a.values, b.values));
  (a.keys * weights).sum().backward();
  (b.keys * weights).sum().backward();
  int checked = 0;
  const auto ga = one->parameters(), gb = fifteen->parameters();
  for (std::size_t i = 0; i < ga.size(); ++i) {
    if (!ga[i].grad().defined() || ga[i].grad().abs().max().item<double>() == 0) continue;
    EXPECT_TRUE(torch::allclose(gb[i].grad(), ga[i].grad() / 15, 1e-5, 1e-7)) << "parameter " << i;
    ++checked;
  }
  EXPECT_GT(checked, 5);
  // Absolute: keys = scale x fc2(...) in the backward, so fc2's bias gets scale x the sum of
  // the loss weights over batch and positions: 1/2 of it with one layer, 1/30 with 15.
  const auto summed = weights.sum(std::vector<int64_t>{0, 1});
  EXPECT_TRUE(torch::allclose(one->fc2->bias.grad(), summed / 2, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(fifteen->fc2->bias.grad(), summed / 30, 1e-5, 1e-6));
}

}  // namespace
}  // namespace gpubench::models
