// BERT specifics: the parameter breakdown against the spec, the synthetic pretraining batch, the
// attention kernel and the two masked-LM loss layouts.
#include "models/bert.h"

#include "gpubench/base/compat.h"
#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace gpubench::models {
namespace {

using testing::builtin_store;

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

// models/linear.h: torch::nn::Linear's parameters and initialization, ATen's linear as forward
// (one addmm for a [batch, length, features] input instead of a matmul and a bias add).
TEST(LinearTest, IsTorchLinearWithAtensForward) {
  torch::manual_seed(3);
  torch::nn::Linear plain(8, 5);
  torch::manual_seed(3);
  Linear ours(8, 5);
  ASSERT_TRUE(torch::equal(ours->weight, plain->weight));
  ASSERT_TRUE(torch::equal(ours->bias, plain->bias));
  std::vector<std::string> names;
  for (const auto& p : ours->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  EXPECT_NE(ours->as<torch::nn::Linear>(), nullptr);  // weight initializers still find it
  for (const auto& x :
       {torch::randn({3, 8}), torch::randn({2, 7, 8}), torch::randn({2, 3, 4, 8})}) {
    const auto y = ours->forward(x);
    EXPECT_TRUE(torch::allclose(y, plain->forward(x), 1e-5, 1e-6)) << x.sizes();
    EXPECT_TRUE(torch::allclose(y, torch::linear(x, plain->weight, plain->bias), 0, 0))
        << x.sizes();
  }
  // Through a ModuleHolder, as the models call it.
  const auto x = torch::randn({2, 7, 8});
  EXPECT_TRUE(torch::equal(ours(x), torch::linear(x, ours->weight, ours->bias)));
}

TEST(BertTest, ParameterBreakdownMatchesTheSpec) {
  // spec language §4.3: embeddings 23,837,184; 12 x 7,087,872; pooler 590,592.
  const BertOptions base = bert_options(builtin_store().model("bert-base").model);
  BertModel bert(base);
  EXPECT_EQ(count(*bert->embeddings), 23837184);
  EXPECT_EQ(count(*bert->layers[0]), 7087872);
  EXPECT_EQ(count(*bert->pooler), 590592);
  EXPECT_EQ(count(*bert), 109482240);
  BertForPretraining pretraining(base, /*next_sentence=*/true);
  EXPECT_EQ(count(*pretraining) - count(*pretraining->bert), 624188);  // heads
  // The masked-LM output layer shares the word embeddings rather than owning a copy.
  EXPECT_TRUE(
      pretraining->bert->word_embeddings().is_same(pretraining->bert->embeddings->word->weight));
}

TEST(BertTest, SyntheticBatchLooksLikeCreatePretrainingData) {
  const PretrainingBatch b(8, 128, 20, 30522, torch::kCPU, 0);
  ASSERT_EQ(b.input_ids.sizes(), (std::vector<int64_t>{8, 128}));
  EXPECT_TRUE((b.input_ids.select(1, 0) == 101).all().item<bool>());    // [CLS]
  EXPECT_TRUE((b.input_ids.select(1, 127) == 102).all().item<bool>());  // final [SEP]
  EXPECT_TRUE((b.input_ids.lt(30522) & b.input_ids.ge(0)).all().item<bool>());
  EXPECT_EQ(b.masked_positions.sizes(), (std::vector<int64_t>{8, 20}));
  for (int64_t i = 0; i < 8; ++i) {
    const auto positions = b.masked_positions[i];
    EXPECT_EQ(std::get<0>(at::_unique(positions)).numel(), 20);  // distinct
    // Never [CLS] or a [SEP]: the original ids there are words.
    EXPECT_TRUE(b.masked_ids[i].ge(1000).all().item<bool>());
    // Exactly two [SEP]s in the original sequence; segments switch after the first.
    const auto types = b.token_type_ids[i];
    EXPECT_EQ(types[0].item<int64_t>(), 0);
    EXPECT_EQ(types[127].item<int64_t>(), 1);
  }
  EXPECT_TRUE((b.lm_labels.ne(-100).sum(1) == 20).all().item<bool>());
  const auto mask_share =
      b.input_ids.gather(1, b.masked_positions).eq(103).to(torch::kFloat).mean();
  EXPECT_NEAR(mask_share.item<float>(), 0.8, 0.1);
}

TEST(BertTest, AttentionKernelMatchesTheSoftmaxFormula) {
  torch::manual_seed(0);
  auto q = torch::randn({2, 3, 5, 4}), k = torch::randn({2, 3, 5, 4}),
       v = torch::randn({2, 3, 5, 4});
  auto mask = torch::zeros({2, 1, 1, 5});
  mask.index_put_({1, 0, 0, 4}, -10000.0);
  const auto out = compat::scaled_dot_product_attention(q, k, v, mask, 0.0);
  const auto probs = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / 2.0 + mask, -1);
  EXPECT_TRUE(torch::allclose(out, torch::matmul(probs, v), 1e-5, 1e-5));
}

TEST(BertTest, BothMaskedLmLayoutsComputeTheSameLoss) {
  // google-research/bert gathers the masked positions; Hugging Face labels every position and
  // ignores the unmasked ones. On the same weights and batch the losses agree.
  const Params small = builtin_store().model("bert-base").smoke_model;
  BertOptions options = bert_options(small).hidden_dropout(0).attention_dropout(0);
  BertForPretraining model(options, true);
  model->eval();
  const PretrainingBatch b(3, small.i64("seq_length"), 5, small.i64("vocab_size"), torch::kCPU, 1);
  auto [sequence, pooled] = model->bert->forward(b.input_ids, b.token_type_ids);
  const auto gathered = masked_lm_loss(*model, sequence, b, false);
  const auto everywhere = masked_lm_loss(*model, sequence, b, true);
  EXPECT_NEAR(gathered.item<double>(), everywhere.item<double>(), 1e-4);
}

TEST(BertTest, PaddingMaskKeepsPaddedTokensOutOfAttention) {
  const Params small = builtin_store().model("bert-base").smoke_model;
  BertOptions options = bert_options(small).hidden_dropout(0).attention_dropout(0);
  BertModel bert(options);
  bert->eval();
  torch::manual_seed(2);
  auto ids = torch::randint(1000, 2000, {1, 10});
  auto types = torch::zeros({1, 10}, torch::kLong);
  auto keep = torch::ones({1, 10}, torch::kBool);
  keep.index_put_({0, torch::indexing::Slice(6, 10)}, false);
  auto other = ids.clone();
  other.index_put_({0, torch::indexing::Slice(6, 10)}, 1500);  // change only padded tokens
  const auto a = bert->forward(ids, types, keep).first;
  const auto b = bert->forward(other, types, keep).first;
  EXPECT_TRUE(torch::allclose(a.slice(1, 0, 6), b.slice(1, 0, 6), 1e-5, 1e-5));
}

}  // namespace
}  // namespace gpubench::models
