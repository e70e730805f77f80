// bert-finetune: the span head and the synthetic SQuAD features.
#include "models/bert_squad.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace gpubench::models {
namespace {

using testing::builtin_store;

TEST(BertSquadTest, SpanHeadOnAnEncoderWithoutPooler) {
  BertForQuestionAnswering model(bert_options(builtin_store().model("bert-finetune").model));
  EXPECT_FALSE(model->bert->pooler);  // no gradient reaches it in the reference: not trained
  EXPECT_EQ(count_trainable(model->bert->parameters()), 108891648);
  EXPECT_EQ(count_trainable(model->qa_outputs->parameters()), 1538);
}

TEST(BertSquadTest, FeaturesLookLikeRunSquadFeatures) {
  SquadBatch::Lengths lengths;  // the config's defaults: 384 tokens, questions 6-24
  const SquadBatch b(64, lengths, 30522, torch::kCPU, 3);
  ASSERT_EQ(b.input_ids.sizes(), (std::vector<int64_t>{64, 384}));
  for (int64_t i = 0; i < 64; ++i) {
    const auto ids = b.input_ids[i];
    const auto real = b.attention_mask[i];
    const int64_t n = real.sum().item<int64_t>();
    EXPECT_TRUE(real.slice(0, 0, n).all().item<bool>());  // real tokens first, then padding
    EXPECT_TRUE(ids.slice(0, n).eq(0).all().item<bool>());
    EXPECT_EQ(ids[0].item<int64_t>(), 101);
    EXPECT_EQ(ids[n - 1].item<int64_t>(), 102);
    EXPECT_EQ(ids.slice(0, 0, n).eq(102).sum().item<int64_t>(), 2);
    // Segment 0 is [CLS] question [SEP] (7..26 tokens); segment 1 the context and its [SEP].
    const auto types = b.token_type_ids[i];
    const int64_t question_part = n - types.sum().item<int64_t>();
    EXPECT_GE(question_part, 6 + 2);
    EXPECT_LE(question_part, 24 + 2);
    EXPECT_TRUE(types.slice(0, n).eq(0).all().item<bool>());
    // The answer lies inside the context, start <= end, at most 8 tokens.
    const int64_t start = b.start_positions[i].item<int64_t>();
    const int64_t end = b.end_positions[i].item<int64_t>();
    EXPECT_GE(start, question_part);
    EXPECT_LE(start, end);
    EXPECT_LT(end, n - 1);
    EXPECT_LE(end - start + 1, 8);
  }
  EXPECT_GT(b.real_tokens, 0);
  EXPECT_LT(b.real_tokens, 64 * 384);  // most features are padded
}

StepContext smoke_context(int64_t batch) {
  return testing::smoke_context(builtin_store().model("bert-finetune"), batch,
                                testing::SmokeOptimizer::kSmoke, 5);
}

TEST(BertSquadTest, BatchInfoReportsThePaddingOfTheFeaturesItTrainsOn) {
  const StepContext ctx = smoke_context(8);
  auto step = builtin_registry().get("bert-squad").prepare(ctx);
  const Json info = step->batch_info();
  // The features the step draws (its seed, the config's lengths), counted from their mask.
  const Params& m = ctx.model;
  SquadBatch::Lengths lengths;
  lengths.seq_length = m.i64("seq_length");
  lengths.question_min = std::min(m.i64s("question_tokens")[0], m.i64("max_query_length"));
  lengths.question_max = std::min(m.i64s("question_tokens")[1], m.i64("max_query_length"));
  lengths.context_mean = m.f64("context_tokens_mean");
  lengths.context_std = m.f64("context_tokens_std");
  lengths.context_min = m.i64("context_tokens_min");
  lengths.answer_max = m.i64("answer_tokens_max");
  const SquadBatch b(8, lengths, m.i64("vocab_size"), torch::kCPU, ctx.seed);
  const auto real = b.attention_mask.sum().item<int64_t>();
  const auto padding = b.input_ids.eq(0).sum().item<int64_t>();  // [PAD] is id 0
  EXPECT_EQ(real + padding, 8 * lengths.seq_length);
  EXPECT_EQ(info["sequences"], 8);
  EXPECT_EQ(info["seq_length"], lengths.seq_length);
  EXPECT_NEAR(info["padding_fraction"].get<double>(),
              static_cast<double>(padding) / static_cast<double>(8 * lengths.seq_length), 1e-12);
}

TEST(BertSquadTest, SpanLossIsTheMeanOfStartAndEndCrossEntropiesOverAllPositions) {
  // With the span head zeroed every position scores 0 whatever the encoder says, so each
  // cross-entropy is ln(L) over all L positions, padding included, as run_squad.py computes it:
  // the loss is ln(L), not 2 ln(L) (start + end not halved), B ln(L) (summed over the batch)
  // or the mean of ln(real tokens) (padding masked).
  const StepContext ctx = smoke_context(4);
  auto step = builtin_registry().get("bert-squad").prepare(ctx);
  auto params = step->parameters().at("model");
  const int64_t hidden = ctx.model.i64("hidden_size");
  ASSERT_GE(params.size(), 2u);
  const auto& weight = params[params.size() - 2];
  const auto& bias = params.back();
  ASSERT_EQ(weight.sizes(), (std::vector<int64_t>{2, hidden}));  // qa_outputs, the last module
  ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{2}));
  {
    torch::NoGradGuard no_grad;
    weight.zero_();
    bias.fill_(0.7);  // a constant shift of every position changes nothing either
  }
  step->run();
  const double loss = step->losses().at("loss").item<double>();
  EXPECT_NEAR(loss, std::log(static_cast<double>(ctx.model.i64("seq_length"))), 1e-5);
}

}  // namespace
}  // namespace gpubench::models
