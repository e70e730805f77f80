// unsupmt specifics: the parameter breakdown against the spec (§3.4), the auto-encoder's noise on
// hand-made batches, greedy decoding with the key/value cache against decoding without it, and
// one training step that decodes, trains four times and counts words as XLM does.
#include "models/unsupmt.h"

#include "gpubench/config.h"
#include "gpubench/registry.h"
#include "models/xlm_batching.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

namespace gpubench::models {
namespace {

using xlm::kEosIndex;
using xlm::kMaskIndex;
using xlm::kPadIndex;

const ConfigStore& store() {
  static const ConfigStore s = ConfigStore::load_builtin(builtin_registry());
  return s;
}

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

/// Columns of a [slen, B] batch as lists.
torch::Tensor batch_of(const std::vector<std::vector<int64_t>>& columns) {
  const auto n = static_cast<int64_t>(columns.size());
  const auto slen = static_cast<int64_t>(columns[0].size());
  auto x = torch::empty({slen, n}, torch::kLong);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t p = 0; p < slen; ++p) x[p][b] = columns[b][p];
  }
  return x;
}

TEST(UnsupMtTest, ParameterBreakdownMatchesTheSpec) {
  const Params& full = store().model("unsupmt").model;
  const int64_t v = full.i64("vocab_size");
  XlmTransformer encoder(xlm_options(full, false)), decoder(xlm_options(full, true));
  EXPECT_EQ(count(*encoder), 76105728 + 1025 * v);   // 142,422,203
  EXPECT_EQ(count(*decoder), 101308416 + 1025 * v);  // 167,624,891
  EXPECT_EQ(count(*encoder) + count(*decoder), 310047094);
  // Per layer: attention 4 x (1024^2 + 1024), FFN 2 x 1024 x 4096 + 4096 + 1024, two LayerNorms;
  // the decoder adds encoder attention and layer_norm15.
  EXPECT_EQ(count(*encoder->layers[0]), 12596224);
  EXPECT_EQ(count(*decoder->layers[0]), 16796672);
  // Embeddings: words (tied to pred_layer's weight), 512 positions, 2 languages, LayerNorm;
  // pred_layer adds only its bias.
  EXPECT_EQ(count(*encoder->embeddings), 1024 * v);
  EXPECT_EQ(count(*encoder->position_embeddings) + count(*encoder->lang_embeddings) +
                count(*encoder->layer_norm_emb),
            528384);
  EXPECT_EQ(encoder->pred_bias.numel(), v);
  EXPECT_EQ(decoder->parameters().size(), decoder->named_parameters().size());
}

TEST(UnsupMtTest, OutputLayerSharesTheWordEmbeddings) {
  torch::manual_seed(0);
  XlmTransformer model(XlmTransformerOptions(50, false).dim(8).layers(1).heads(2).ffn_dim(16));
  const auto h = torch::randn({3, 8});
  const auto expected = torch::matmul(h, model->embeddings->weight.t()) + model->pred_bias;
  EXPECT_TRUE(torch::allclose(model->scores(h), expected, 1e-5, 1e-6));
  // The padding row of the (shared) table starts at zero, as XLM's Embedding(padding_idx).
  EXPECT_TRUE(model->embeddings->weight[kPadIndex].eq(0).all().item<bool>());
}

// Two sentences: </s> 20 21 22 23 </s> (length 6) and </s> 30 31 </s> (length 4, padded).
torch::Tensor hand_made() { return batch_of({{1, 20, 21, 22, 23, 1}, {1, 30, 31, 1, 2, 2}}); }
torch::Tensor hand_made_lengths() { return torch::tensor({6, 4}, torch::kLong); }

TEST(UnsupMtTest, WordShuffleSortsPositionsPlusNoise) {
  // Scores arange(len - 1) + noise, the start symbol pinned at -1:
  // sentence 0: -1, 1 + 2.5, 2 + 0, 3 + 0, 4 + 0 -> order 0 2 3 1 4;
  // sentence 1: -1, 1 + 1.6, 2 + 0.1 -> order 0 2 1; rows from the final </s> on stay.
  const auto noise =
      torch::tensor({{0.0, 0.0}, {2.5, 1.6}, {0.0, 0.1}, {0.0, 2.9}, {0.0, 0.0}}, torch::kDouble);
  const auto out = word_shuffle(hand_made(), hand_made_lengths(), noise);
  EXPECT_TRUE(torch::equal(out, batch_of({{1, 21, 22, 20, 23, 1}, {1, 31, 30, 1, 2, 2}})));
}

TEST(UnsupMtTest, WordShuffleMovesNoWordFurtherThanK) {
  torch::manual_seed(3);
  const auto batch = xlm::make_sentence_batch(std::vector<int64_t>(64, 30), 1000);
  // Distinct words, so positions can be traced.
  auto x = batch.x.clone();
  x.narrow(0, 1, 30).copy_(torch::arange(100, 130, torch::kLong).unsqueeze(1).expand({30, 64}));
  const auto noise = torch::rand({x.size(0) - 1, 64}, torch::kDouble) * 3.0;
  const auto out = word_shuffle(x, batch.lengths, noise);
  const auto moved = (out.narrow(0, 1, 30) - 100) - torch::arange(0, 30).unsqueeze(1);
  EXPECT_LE(moved.abs().max().item<int64_t>(), 3);
  EXPECT_FALSE(torch::equal(out, x));
  EXPECT_TRUE(torch::equal(out[0], x[0]));
  EXPECT_TRUE(torch::equal(out[31], x[31]));
}

TEST(UnsupMtTest, WordDropoutDropsWordsAndKeepsOneWhenAllAreDropped) {
  // Sentence 0 keeps rows 0 2 4: </s> 21 23 </s>. Sentence 1 drops both words, so it keeps the
  // fallback (position 2): </s> 31 </s>. Keep flags at and after the final </s> do not matter.
  const auto keep = torch::tensor({{1, 1}, {0, 0}, {1, 0}, {0, 1}, {1, 1}}, torch::kBool);
  const auto fallback = torch::tensor({1, 2}, torch::kLong);
  const auto [out, lengths] = word_dropout(hand_made(), hand_made_lengths(), keep, fallback);
  EXPECT_TRUE(torch::equal(lengths, torch::tensor({4, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(out, batch_of({{1, 21, 23, 1}, {1, 31, 1, 2}})));
}

TEST(UnsupMtTest, WordBlankReplacesWordsByTheMaskWord) {
  // The start symbol (row 0) and the final </s> never blank.
  const auto keep = torch::tensor({{0, 1}, {1, 0}, {0, 1}, {1, 0}, {0, 0}}, torch::kBool);
  const auto out = word_blank(hand_made(), hand_made_lengths(), keep);
  EXPECT_TRUE(torch::equal(
      out, batch_of({{1, 20, kMaskIndex, 22, kMaskIndex, 1}, {1, kMaskIndex, 31, 1, 2, 2}})));
}

TEST(UnsupMtTest, AddNoiseKeepsDelimitersAndShortensByAboutTheDropRate) {
  torch::manual_seed(4);
  const auto batch = xlm::make_sentence_batch(std::vector<int64_t>(200, 20), 1000);
  const auto [out, lengths] = add_noise(batch.x, batch.lengths, NoiseOptions{});
  EXPECT_TRUE(out[0].eq(kEosIndex).all().item<bool>());
  EXPECT_TRUE(out.gather(0, (lengths - 1).unsqueeze(0)).eq(kEosIndex).all().item<bool>());
  EXPECT_EQ(out.eq(kEosIndex).sum().item<int64_t>(), 2 * 200);
  EXPECT_EQ(out.size(0), lengths.max().item<int64_t>());
  EXPECT_TRUE(lengths.ge(3).all().item<bool>());
  // 10% of 20 words dropped, then 10% of the rest blanked.
  EXPECT_NEAR((lengths - 2).to(torch::kDouble).mean().item<double>(), 18.0, 0.5);
  const double blanked =
      out.eq(kMaskIndex).sum().item<double>() / (lengths - 2).sum().item<double>();
  EXPECT_NEAR(blanked, 0.1, 0.02);
  EXPECT_EQ(out.eq(kPadIndex).sum().item<int64_t>(),
            out.size(0) * 200 - lengths.sum().item<int64_t>());
}

TEST(UnsupMtTest, GreedyDecodingWithTheCacheEqualsDecodingWithout) {
  torch::manual_seed(5);
  XlmTransformer decoder(
      XlmTransformerOptions(40, true).dim(16).layers(2).heads(4).ffn_dim(32).max_positions(32));
  decoder->to(torch::kDouble);
  decoder->eval();
  torch::NoGradGuard no_grad;
  const int64_t batch = 6, source_len = 7, max_len = 12;
  const auto source = torch::randn({batch, source_len, 16}, torch::kDouble);
  const auto source_lengths = torch::tensor({7, 5, 3, 6, 2, 7}, torch::kLong);
  // A random model repeats one word, so nothing would end mid-sentence. Pushing position 4
  // towards </s> by growing amounts makes some sentences end there (length 6) while others run
  // to max_len and get the forced final </s>: every path of the masking is exercised.
  decoder->pred_bias[kEosIndex].fill_(0.8);
  const auto position4 = decoder->position_embeddings->weight[4].clone();
  bool mixed = false;
  for (double push = 0.0; push < 6.0; push += 0.5) {
    decoder->position_embeddings->weight[4].copy_(position4 +
                                                  push * decoder->embeddings->weight[kEosIndex]);
    const auto cached = decoder->generate(source, source_lengths, 1, max_len, /*use_cache=*/true);
    const auto full = decoder->generate(source, source_lengths, 1, max_len, /*use_cache=*/false);
    ASSERT_EQ(cached.tokens.sizes(), (std::vector<int64_t>{max_len, batch}));
    EXPECT_TRUE(torch::equal(cached.tokens, full.tokens)) << push;
    EXPECT_TRUE(torch::equal(cached.lengths, full.lengths)) << push;
    // XLM's sanity check: every sentence starts and ends with </s> and has no other.
    EXPECT_EQ(cached.tokens.eq(kEosIndex).sum().item<int64_t>(), 2 * batch);
    EXPECT_TRUE(cached.tokens.gather(0, (cached.lengths - 1).unsqueeze(0))
                    .eq(kEosIndex)
                    .all()
                    .item<bool>());
    mixed = (cached.lengths.gt(2) & cached.lengths.lt(max_len)).any().item<bool>() &&
            cached.lengths.eq(max_len).any().item<bool>();
    if (mixed) break;
  }
  EXPECT_TRUE(mixed) << "no push made sentences both end early and run to max_len";
}

TEST(UnsupMtTest, OneStepDecodesTrainsFourTimesAndCountsWordsAsXlm) {
  const ModelConfig& config = store().model("unsupmt");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = config.optimizer;
  ctx.batch = config.smoke_batch;
  UnsupMtStep step(ctx);
  EXPECT_DOUBLE_EQ(step.learning_rate(), 1e-7);  // XLM's first update runs at warmup_init_lr
  const auto bias_before = step.encoder()->pred_bias.detach().clone();
  const double words = step.run();

  // Words: XLM's (len - 1) summed over the four training targets, decoded tokens not counted.
  // Counted here from the target tensors the decoder trains on ([slen, B]: </s> w1 .. wk </s>
  // then padding): per sentence its non-pad tokens less one, and no label is padding.
  int64_t expected = 0;
  for (const auto* targets : {&step.auto_encoding_targets(), &step.back_translation_batches()}) {
    ASSERT_EQ(targets->size(), 2u);
    for (const auto& t : *targets) {
      const auto x = t.x.cpu();
      expected += x.ne(xlm::kPadIndex).sum().item<int64_t>() - x.size(1);
      EXPECT_EQ(t.labels.numel(), x.ne(xlm::kPadIndex).sum().item<int64_t>() - x.size(1));
      EXPECT_FALSE(t.labels.eq(xlm::kPadIndex).any().item<bool>());
    }
  }
  EXPECT_GT(expected, 0);
  EXPECT_EQ(words, static_cast<double>(expected));

  // Both back-translations were decoded for int(1.3 * max(len) + 5) positions.
  ASSERT_EQ(step.back_translations().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& batch = step.back_translation_batches()[i];
    const auto& bt = step.back_translations()[i];
    const int64_t n = batch.x.size(1);
    EXPECT_EQ(step.decode_lengths()[i],
              static_cast<int64_t>(1.3 * static_cast<double>(batch.x.size(0)) + 5));
    ASSERT_EQ(bt.tokens.sizes(), (std::vector<int64_t>{step.decode_lengths()[i], n}));
    EXPECT_EQ(bt.tokens.eq(kEosIndex).sum().item<int64_t>(), 2 * n);
    EXPECT_TRUE(bt.lengths.ge(2).all().item<bool>());
  }
  // Four losses, one per update; the step leaves the models in training mode.
  const auto losses = step.losses();
  EXPECT_EQ(losses.size(), 4u);
  for (const char* name : {"ae_en", "ae_fr", "bt_en_fr_en", "bt_fr_en_fr"}) {
    ASSERT_TRUE(losses.count(name)) << name;
    EXPECT_TRUE(std::isfinite(losses.at(name).item<double>())) << name;
  }
  EXPECT_TRUE(step.encoder()->is_training());
  EXPECT_TRUE(step.decoder()->is_training());
  // The encoder's pred_layer bias is built and trainable but no MT step reaches it.
  EXPECT_FALSE(step.encoder()->pred_bias.grad().defined());
  EXPECT_TRUE(torch::equal(step.encoder()->pred_bias.detach(), bias_before));
  // Four updates into the warm-up: the fifth runs at 1e-7 + 4 (1e-4 - 1e-7) / 4000.
  EXPECT_NEAR(step.learning_rate(), 1e-7 + 4 * (1e-4 - 1e-7) / 4000, 1e-15);
}

TEST(UnsupMtTest, FullSizeBatchesHoldAbout275SentencesAt8000Tokens) {
  // The smoke model, with the full-size length model and 1M sentences per language.
  const ModelConfig& config = store().model("unsupmt");
  Json model = config.smoke_model.json();
  model["max_len"] = 100;
  model["length_mean"] = 27;
  model["max_positions"] = 512;
  model["corpus_sentences"] = 1000000;
  StepContext ctx;
  ctx.config = &config;
  ctx.model = Params(unsupmt_model_schema(), model, Where{"test", ""});
  ctx.optimizer = config.optimizer;
  ctx.batch = 8000;
  const UnsupMtStep step(ctx);
  const Json info = step.batch_info();
  EXPECT_EQ(info["tokens_per_batch"].get<int64_t>(), 8000);
  const double sentences = info["sentences_per_batch"].get<double>();
  EXPECT_GT(sentences, 200);
  EXPECT_LT(sentences, 350);
  for (const auto& batch : info["batches"]) {
    const int64_t tokens = batch["budget_tokens"].get<int64_t>();
    EXPECT_NEAR(tokens, 8000, 102) << batch.dump();
    // Sorted by length and cut from a large corpus, a batch is nearly length-homogeneous.
    EXPECT_LT(batch["padded_tokens"].get<double>() / static_cast<double>(tokens), 1.05);
  }
}

}  // namespace
}  // namespace gpubench::models
