// transformer-big specifics: the parameter breakdown against the spec, the shared embedding,
// fairseq's sinusoidal table, causality of the decoder and the source-padding mask.
#include "models/transformer.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "models/token_batching.h"
#include "tests/cpu_allocation.h"
#include "tests/translation_checks.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace gpubench::models {
namespace {

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

/// A small model in eval mode (no dropout), for exact comparisons.
FairseqTransformer small_model() {
  torch::manual_seed(0);
  FairseqTransformer model(FairseqTransformerOptions(64)
                               .embed_dim(16)
                               .ffn_dim(32)
                               .heads(4)
                               .encoder_layers(2)
                               .decoder_layers(2));
  model->eval();
  return model;
}

TEST(TransformerTest, ParameterBreakdownMatchesTheSpec) {
  // spec language §1.3: shared embedding 33,554,432; encoder 6 x 12,596,224; decoder
  // 6 x 16,796,672; total 209,911,808.
  FairseqTransformer big(FairseqTransformerOptions(32768));
  EXPECT_EQ(count(*big->embed_tokens), 33554432);
  EXPECT_EQ(count(*big->encoder_layers[0]), 12596224);
  EXPECT_EQ(count(*big->decoder_layers[0]), 16796672);
  EXPECT_EQ(count(*big), 33554432 + 6 * 12596224 + 6 * 16796672);
  EXPECT_EQ(count(*big), 209911808);
  // One table serves encoder input, decoder input and output projection: the only
  // vocabulary-sized parameter, and the sinusoidal table is a buffer, not a parameter.
  int vocabulary_sized = 0;
  for (const auto& p : big->parameters()) vocabulary_sized += p.size(0) == 32768;
  EXPECT_EQ(vocabulary_sized, 1);
  EXPECT_EQ(big->buffers().size(), 1u);
}

TEST(TransformerTest, OutputProjectionIsTheEmbeddingTable) {
  auto model = small_model();
  const auto src = torch::tensor({5, 6, 7, 2}, torch::kLong).view({1, 4});
  const auto prev = torch::tensor({2, 8, 9}, torch::kLong).view({1, 3});
  auto logits = model->forward(src, prev);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{1, 3, 64}));
  logits.sum().backward();
  // Rows never looked up get a gradient: the output projection is the table itself.
  const auto grad = model->embed_tokens->weight.grad();
  EXPECT_GT(grad[40].abs().sum().item<double>(), 0);
}

TEST(TransformerTest, SinusoidalTableIsFairseqs) {
  const auto table = sinusoidal_table(6, 8, 1);
  ASSERT_EQ(table.sizes(), (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(table[1].abs().sum().item<float>(), 0.0f);  // the pad row
  const double step = std::log(10000.0) / 3;
  for (int j = 0; j < 4; ++j) {
    const double angle = 4 * std::exp(-j * step);
    EXPECT_NEAR(table[4][j].item<float>(), std::sin(angle), 1e-5);      // sines first
    EXPECT_NEAR(table[4][4 + j].item<float>(), std::cos(angle), 1e-5);  // then cosines
  }
}

TEST(TransformerTest, DecoderIsCausal) {
  auto model = small_model();
  testing::expect_causal_decoder(model);
}

TEST(TransformerTest, LeftPaddingOfTheSourceChangesNothing) {
  auto model = small_model();
  testing::expect_left_padding_changes_nothing(model);
}

TEST(TransformerTest, StepReturnsNtokensAndRecordsSentences) {
  const auto store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& config = store.model("transformer-big");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = config.optimizer;
  ctx.batch = config.smoke_batch;
  auto step = builtin_registry().get(config.architecture).prepare(ctx);
  const auto info = step->batch_info();
  ASSERT_EQ(info["batches"], 2);
  // Each run() returns fairseq's ntokens of the batch it trained on, in turn: the target
  // tokens that are not padding (EOS included), counted here from the target tensors of the
  // planned batches (the count depends on the lengths only, not on the word ids' seed).
  const auto shapes = plan_token_batches(length_profile(ctx.model),
                                         token_batch_options(ctx.model, ctx.batch), ctx.seed);
  ASSERT_EQ(shapes.size(), 2u);
  std::vector<double> expected;
  for (const auto& shape : shapes) {
    const int64_t v = ctx.model.i64("vocab_size");
    const auto target = make_token_batch(shape, v, v, torch::kCPU, 0).target;
    expected.push_back(static_cast<double>(target.ne(kFairseqPad).sum().item<int64_t>()));
  }
  ASSERT_NE(expected[0], expected[1]) << "equal counts would not show the order";
  for (int cycle = 0; cycle < 2; ++cycle) {
    EXPECT_EQ(step->run(), expected[0]);
    EXPECT_EQ(step->run(), expected[1]);
  }
  EXPECT_EQ(info["target_tokens_per_batch"][0].get<double>(), expected[0]);
  EXPECT_EQ(info["target_tokens_per_batch"][1].get<double>(), expected[1]);
  EXPECT_EQ(info["max_tokens"], config.smoke_batch);
  for (const auto& padded : info["padded_tokens_per_batch"]) {
    EXPECT_LE(padded.get<int64_t>(), config.smoke_batch);
  }
}

// With its attention stored, a batch's activations grow with the square of its longest
// sentence, so of the batches of one token budget the one of the longest sentences can peak
// highest, though the linear estimate (padded source plus twice padded target positions) ranks
// another first. On the H200 (2026-12-03, amp-bf16, 161536 tokens) the timed run peaked 3.5%
// above the probe of the linear estimate's batch, and three fresh processes ran out of memory.
// Measured here on the CPU's allocations, with transformer-big's lengths and a narrow model at
// 8192 tokens: the linear estimate's batch peaks more than 1% under the highest (so this case
// tells the two apart), and a search probe (prepare_probe(), one run()) peaks at least as high
// as a whole cycle of steps and hardly higher.
TEST(TransformerTest, AProbePeaksAsHighAsTheBatchThatPeaksHighest) {
  const auto store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& config = store.model("transformer-big");
  const Architecture& arch = builtin_registry().get(config.architecture);
  Json model = config.model.json();
  model["vocab_size"] = 1000;
  model["embed_dim"] = 64;
  model["ffn_dim"] = 128;
  model["heads"] = 4;
  model["encoder_layers"] = 2;
  model["decoder_layers"] = 2;
  model["dropout"] = 0.0;
  ASSERT_EQ(model["attention"], "stored");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = Params(arch.model_schema, model, Where{"test", ""});
  ctx.optimizer = config.optimizer;
  ctx.batch = 8192;
  std::vector<int64_t> peaks;  // per batch, above what was allocated before its step
  int64_t cycle_peak = 0, probe_peak = 0;
  Json info;
  testing::with_allocation_peak([&](testing::CpuAllocationPeak& memory) {
    auto step = arch.prepare(ctx);
    info = step->batch_info();
    step->allocate_optimizer_state();
    const auto batches = info.at("batches").get<int64_t>();
    for (int64_t i = 0; i < batches; ++i) step->run();  // gradients and caches in place
    cycle_peak = memory.peak();
    for (int64_t i = 0; i < batches; ++i) {  // batch i, in the plan's order
      memory.reset_peak();
      const int64_t before = memory.current();
      step->run();
      peaks.push_back(memory.peak() - before);
      cycle_peak = std::max(cycle_peak, memory.peak());
    }
  });
  testing::with_allocation_peak([&](testing::CpuAllocationPeak& memory) {
    auto step = arch.prepare(ctx);
    ASSERT_TRUE(step->prepare_probe());
    step->run();
    probe_peak = memory.peak();
  });
  ASSERT_EQ(peaks.size(), 8u);
  std::size_t linear = 0;
  auto weight = [&](std::size_t j) {
    return info.at("sentences_per_batch")[j].get<int64_t>() *
           (info.at("src_max_len_per_batch")[j].get<int64_t>() +
            2 * info.at("tgt_max_len_per_batch")[j].get<int64_t>());
  };
  for (std::size_t i = 0; i < peaks.size(); ++i) {
    RecordProperty("batch_" + std::to_string(i) + "_peak", std::to_string(peaks[i]));
    if (weight(i) > weight(linear)) linear = i;
  }
  RecordProperty("cycle_peak", std::to_string(cycle_peak));
  RecordProperty("probe_peak", std::to_string(probe_peak));
  const auto top = static_cast<int64_t>(std::max_element(peaks.begin(), peaks.end()) -
                                        peaks.begin());
  const int64_t highest = peaks[static_cast<std::size_t>(top)];
  EXPECT_LT(peaks[linear], highest - highest / 100) << "the linear estimate's batch " << linear;
  // The probe trains the batch that peaks highest among a few, not the whole cycle.
  const auto probed = info.at("probe_batches").get<std::vector<int64_t>>();
  EXPECT_NE(std::find(probed.begin(), probed.end(), top), probed.end()) << "batch " << top;
  EXPECT_LT(probed.size(), peaks.size());
  EXPECT_GE(probe_peak, cycle_peak);
  EXPECT_LE(probe_peak, cycle_peak + cycle_peak / 50);
}

// The estimate against the H200 (2026-12-03, amp-bf16, 161536 tokens, seed 0): the batch of the
// longest sentences (1240 of up to 82 and 130 tokens) peaked 3.5-4% above the one the linear
// estimate ranks first (8496 of up to 19), the gap the timed run's window showed over the line
// through the probes. Under autocast the model puts it first by about that much, so the probe
// trains it. (Strict fp32 keeps the probabilities alone, in the activations' own width; the
// fp32 ranking is what AProbePeaksAsHighAsTheBatchThatPeaksHighest measures on the CPU.)
TEST(TransformerTest, UnderAutocastTheActivationModelRanksTheLongestSentencesHeaviest) {
  const auto store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& config = store.model("transformer-big");
  const auto shapes = plan_token_batches(length_profile(config.model),
                                         token_batch_options(config.model, 161536), 0);
  ASSERT_EQ(shapes.size(), 8u);
  ASSERT_EQ(shapes[1].sentences(), 8496);  // the linear estimate's heaviest, second in the plan
  ASSERT_EQ(shapes[7].sentences(), 1240);
  ASSERT_EQ(shapes[7].tgt_max(), 130);
  EXPECT_EQ(TokenBatches(shapes, 64, 64, torch::kCPU, 0).heaviest(), 1);
  const auto options = FairseqTransformerOptions(config.model.i64("vocab_size"));
  const ActivationModel amp = transformer_activation_model(options, Precision::kAmpBf16);
  const double ratio = activation_weight(shapes[7], amp) / activation_weight(shapes[1], amp);
  RecordProperty("amp_ratio", std::to_string(ratio));
  EXPECT_GT(ratio, 1.03);
  EXPECT_LT(ratio, 1.06);
  const TokenBatches amp_batches(shapes, 64, 64, torch::kCPU, 0, amp);
  EXPECT_EQ(amp_batches.heaviest(), 7);
  // Fused attention keeps the linear estimate, which the H200 confirmed for it.
  const ActivationModel fused =
      transformer_activation_model(FairseqTransformerOptions(options).attention("fused"),
                                   Precision::kAmpBf16);
  EXPECT_EQ(fused.per_tgt_tgt, 0);
  EXPECT_EQ(TokenBatches(shapes, 64, 64, torch::kCPU, 0, fused).heaviest(), 1);
}

}  // namespace
}  // namespace gpubench::models
