// bert-finetune: the span head and the synthetic SQuAD features.
#include "models/bert_squad.h"

#include "gpubench/config.h"
#include "gpubench/registry.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace gpubench::models {
namespace {

const ConfigStore& store() {
  static const ConfigStore s = ConfigStore::load_builtin(builtin_registry());
  return s;
}

TEST(BertSquadTest, SpanHeadOnAnEncoderWithoutPooler) {
  BertForQuestionAnswering model(bert_options(store().model("bert-finetune").model));
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

TEST(BertSquadTest, BatchInfoReportsPadding) {
  const ModelConfig& config = store().model("bert-finetune");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = config.smoke_optimizer;
  ctx.batch = 2;
  auto step = builtin_registry().get("bert-squad").prepare(ctx);
  const Json info = step->batch_info();
  EXPECT_EQ(info["seq_length"], config.smoke_model.i64("seq_length"));
  EXPECT_GT(info["padding_fraction"].get<double>(), 0.0);
  EXPECT_LT(info["padding_fraction"].get<double>(), 1.0);
}

}  // namespace
}  // namespace gpubench::models
