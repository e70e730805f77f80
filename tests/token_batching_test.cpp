// Token-budget batching as fairseq counts it: batch_by_size on hand-made cases with known
// answers, the budget and the multiple of 8 on realistic corpora, the length distribution's
// means and bounds, determinism, fairseq's collate layout, and the Python twin's batch plan.
#include "models/token_batching.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gpubench::models {
namespace {

using Pairs = std::vector<SentencePair>;

LengthProfile wmt16() { return LengthProfile{}; }

LengthProfile wmt14() {
  LengthProfile p;
  p.max_len = 251;
  p.max_ratio = 1.5;
  return p;
}

std::vector<int64_t> sizes(const std::vector<BatchShape>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.push_back(b.sentences());
  return out;
}

TEST(TokenBatchingTest, SplitMix64MatchesTheReferenceSequence) {
  SplitMix64 rng(0);  // Vigna's splitmix64.c from state 0
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ULL);
}

TEST(TokenBatchingTest, BatchBySizeCutsToMultiplesOfEightAndCarriesTheRest) {
  // 20 sentences of 10 tokens, budget 100: 10 fit, the 11th does not -> emit 8, carry 2;
  // the carried 2 grow to 10 again -> emit 8, carry 2; the last batch holds what is left.
  const Pairs pairs(20, {10, 10});
  EXPECT_EQ(sizes(batch_by_size(pairs, 100, 8)), (std::vector<int64_t>{8, 8, 4}));
  // Below the multiple a batch keeps everything that fit: 30 tokens per sentence, 3 fit.
  EXPECT_EQ(sizes(batch_by_size(Pairs(7, {30, 30}), 100, 8)), (std::vector<int64_t>{3, 3, 1}));
}

TEST(TokenBatchingTest, BudgetCountsTheLongerSideWithPadding) {
  // Sorted by source, but the first target is long: 2 x 10 = 20 fits 24, a third does not.
  const Pairs pairs{{2, 10}, {3, 3}, {3, 4}};
  const auto batches = batch_by_size(pairs, 24, 1);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].pairs, (Pairs{{2, 10}, {3, 3}}));
  EXPECT_EQ(batches[0].padded_tokens(), 20);  // 2 sentences x 10, not 2 + 10 + 3 + 3
  // ntokens (wps, loss normalizer) are target tokens without padding.
  EXPECT_EQ(batches[0].target_tokens(), 13);
  EXPECT_EQ(batches[0].source_tokens(), 5);
  EXPECT_EQ(batches[1].pairs, (Pairs{{3, 4}}));
  EXPECT_THROW(batch_by_size(Pairs{{30, 5}}, 24, 1), std::exception);  // fairseq asserts
}

TEST(TokenBatchingTest, RealisticBudgetsAreRespectedInMultiplesOfEight) {
  for (const auto& profile : {wmt16(), wmt14()}) {
    const LengthSampler sampler(profile);
    const auto corpus = sample_sorted_corpus(sampler, 20000, 3);
    for (int64_t budget : {2048, 3584, 16000}) {
      const auto batches = batch_by_size(corpus, budget, 8);
      int64_t sentences = 0;
      double src_fill = 0;
      for (std::size_t i = 0; i < batches.size(); ++i) {
        const auto& b = batches[i];
        sentences += b.sentences();
        EXPECT_LE(b.padded_tokens(), budget);
        if (i + 1 < batches.size()) {
          EXPECT_EQ(b.sentences() % 8, 0) << "batch " << i;
        }
        src_fill += static_cast<double>(b.source_tokens()) /
                    static_cast<double>(b.sentences() * b.src_max());
      }
      // Sorted by source length: batches are nearly homogeneous, little source padding.
      EXPECT_GT(src_fill / static_cast<double>(batches.size()), 0.9) << budget;
      EXPECT_EQ(sentences, 20000);
    }
  }
}

TEST(TokenBatchingTest, LengthsFollowTheProfileMeansAndBounds) {
  for (const auto& profile : {wmt16(), wmt14()}) {
    const LengthSampler sampler(profile);
    EXPECT_NEAR(sampler.src_mean(), profile.src_mean, 1e-6);
    EXPECT_NEAR(sampler.tgt_mean(), profile.tgt_mean, 1e-6);
    SplitMix64 rng(11);
    double src = 0, tgt = 0;
    int64_t longest = 0;
    constexpr int kDraws = 200000;
    for (int i = 0; i < kDraws; ++i) {
      const auto p = sampler.sample(rng);
      ASSERT_GE(p.src, 2);  // a word and EOS
      ASSERT_GE(p.tgt, 2);
      ASSERT_LE(p.num_tokens(), profile.max_len);
      if (profile.max_ratio > 0) {  // clean-corpus-n counts words, without EOS
        ASSERT_LE(p.tgt - 1, profile.max_ratio * static_cast<double>(p.src - 1));
        ASSERT_LE(p.src - 1, profile.max_ratio * static_cast<double>(p.tgt - 1));
      }
      src += static_cast<double>(p.src);
      tgt += static_cast<double>(p.tgt);
      longest = std::max(longest, p.num_tokens());
    }
    EXPECT_NEAR(src / kDraws, profile.src_mean, 0.15);
    EXPECT_NEAR(tgt / kDraws, profile.tgt_mean, 0.15);
    EXPECT_GT(longest, 100);  // a long tail
  }
}

TEST(TokenBatchingTest, PlanIsDeterministicFromTheSeed) {
  TokenBatchOptions options;
  const auto a = plan_token_batches(wmt16(), options, 5);
  const auto b = plan_token_batches(wmt16(), options, 5);
  const auto c = plan_token_batches(wmt16(), options, 6);
  ASSERT_EQ(a.size(), 8u);
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pairs, b[i].pairs);
    differs |= !(a[i].pairs == c[i].pairs);
  }
  EXPECT_TRUE(differs);
}

TEST(TokenBatchingTest, PlanSpansTheEpochAndPutsTheHeaviestBatchSecond) {
  TokenBatchOptions options;
  options.max_tokens = 16000;
  const auto plan = plan_token_batches(wmt16(), options, 0);
  auto weight = [](const BatchShape& b) { return b.sentences() * (b.src_max() + 2 * b.tgt_max()); };
  int64_t shortest = 1000, longest = 0;
  for (const auto& b : plan) {
    EXPECT_LE(b.padded_tokens(), 16000);
    EXPECT_EQ(b.sentences() % 8, 0);
    EXPECT_LE(weight(b), weight(plan[1]));
    shortest = std::min(shortest, b.src_max());
    longest = std::max(longest, b.src_max());
  }
  EXPECT_LT(shortest, 20);
  EXPECT_GT(longest, 60);
}

// Which batches a search probe trains: the heaviest under the model first, then every other
// within the model's uncertainty of it (the band's edge included), in the plan's order; with no
// uncertainty the heaviest alone, the first of equals.
TEST(TokenBatchingTest, AProbeTrainsTheBatchesWithinTheEstimatesUncertaintyOfTheHeaviest) {
  // Linear weights (source + 2 x target positions, per sentence): 4 x 30 = 120, 2 x 50 = 100,
  // 3 x 38 = 114, 6 x 20 = 120, 3 x 30 = 90.
  const std::vector<BatchShape> shapes{
      BatchShape{{{10, 10}, {10, 10}, {10, 10}, {10, 10}}},
      BatchShape{{{20, 15}, {20, 15}}},
      BatchShape{{{12, 13}, {12, 13}, {12, 13}}},
      BatchShape{{{4, 8}, {4, 8}, {4, 8}, {4, 8}, {4, 8}, {4, 8}}},
      BatchShape{{{10, 10}, {10, 10}, {10, 10}}},
  };
  ASSERT_EQ(activation_weight(shapes[0]), 120);
  ASSERT_EQ(activation_weight(shapes[1]), 100);
  ASSERT_EQ(activation_weight(shapes[2]), 114);
  ASSERT_EQ(activation_weight(shapes[3]), 120);
  ASSERT_EQ(activation_weight(shapes[4]), 90);
  auto probed = [&](const ActivationModel& model) {
    return TokenBatches(shapes, 50, 50, torch::kCPU, 0, model).probe_batches();
  };
  ActivationModel exact;  // no uncertainty: the first of the two heaviest alone
  EXPECT_EQ(probed(exact), (std::vector<int64_t>{0}));
  ActivationModel band = exact;
  band.uncertainty = 0.05;  // down to 114: the tie and the edge
  EXPECT_EQ(probed(band), (std::vector<int64_t>{0, 2, 3}));
  band.uncertainty = 0.049;  // 114.12: the edge falls out
  EXPECT_EQ(probed(band), (std::vector<int64_t>{0, 3}));
  // A squared term moves the heaviest to the longest targets: 3 x (38 + 2 x 13 x 13) = 1128
  // against 1000, 920, 888 and 690.
  ActivationModel attention = exact;
  attention.per_tgt_tgt = 2;
  EXPECT_EQ(activation_weight(shapes[2], attention), 1128);
  EXPECT_EQ(probed(attention), (std::vector<int64_t>{2}));
  EXPECT_EQ(TokenBatches(shapes, 50, 50, torch::kCPU, 0, attention).heaviest(), 2);
}

TEST(TokenBatchingTest, PlanMatchesThePythonTwin) {
  // tools/twins/transformer_big_reference.py --tokens 16000 --plan-only (seed 0) printed
  // these; the twin must train on the same batches.
  TokenBatchOptions options;
  options.max_tokens = 16000;
  const auto plan = plan_token_batches(wmt16(), options, 0);
  std::vector<int64_t> target, src_max, tgt_max;
  for (const auto& b : plan) {
    target.push_back(b.target_tokens());
    src_max.push_back(b.src_max());
    tgt_max.push_back(b.tgt_max());
  }
  EXPECT_EQ(sizes(plan), (std::vector<int64_t>{976, 608, 224, 176, 808, 264, 256, 120}));
  EXPECT_EQ(target, (std::vector<int64_t>{14029, 14969, 10983, 10259, 14546, 13347, 11475, 10414}));
  EXPECT_EQ(src_max, (std::vector<int64_t>{14, 24, 37, 58, 19, 50, 35, 84}));
  EXPECT_EQ(tgt_max, (std::vector<int64_t>{16, 26, 60, 90, 19, 59, 62, 127}));
  // And the sampler itself, draw for draw.
  const LengthSampler sampler(wmt16());
  SplitMix64 rng(7);
  const Pairs expected{{22, 15}, {51, 54}, {24, 22}, {25, 23}, {14, 14}, {13, 18}};
  for (const auto& e : expected) EXPECT_EQ(sampler.sample(rng), e);
}

TEST(TokenBatchingTest, TensorsFollowFairseqCollate) {
  const BatchShape shape{{{3, 4}, {5, 2}, {4, 6}}};
  const auto b = make_token_batch(shape, 50, 60, torch::kCPU, 1);
  ASSERT_EQ(b.src_tokens.sizes(), (std::vector<int64_t>{3, 5}));
  ASSERT_EQ(b.target.sizes(), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(b.sentences, 3);
  EXPECT_EQ(b.target_tokens, 12);
  EXPECT_TRUE(b.src_padded);
  const auto src = b.src_tokens, tgt = b.target, prev = b.prev_output_tokens;
  // Source: left padding, words, EOS last.
  EXPECT_TRUE(torch::equal(src.select(1, 4), torch::full({3}, kFairseqEos, torch::kLong)));
  EXPECT_EQ(src[0][0].item<int64_t>(), kFairseqPad);
  EXPECT_EQ(src[0][1].item<int64_t>(), kFairseqPad);
  EXPECT_GE(src[0][2].item<int64_t>(), kFairseqFirstWord);
  EXPECT_EQ(src[2][0].item<int64_t>(), kFairseqPad);
  EXPECT_TRUE(src.select(0, 1).slice(0, 0, 4).ge(kFairseqFirstWord).all().item<bool>());
  EXPECT_TRUE(src.lt(50).all().item<bool>());
  // Target: words, EOS, right padding; the counted tokens are the non-pad ones.
  EXPECT_GE(tgt[1][0].item<int64_t>(), kFairseqFirstWord);
  EXPECT_EQ(tgt[1][1].item<int64_t>(), kFairseqEos);
  EXPECT_EQ(tgt[1][2].item<int64_t>(), kFairseqPad);
  EXPECT_EQ(tgt[2][5].item<int64_t>(), kFairseqEos);
  EXPECT_EQ(tgt.ne(kFairseqPad).sum().item<int64_t>(), b.target_tokens);
  EXPECT_TRUE(tgt.lt(60).all().item<bool>());
  // Decoder input: EOS first, then the target shifted right, padded where the target is.
  EXPECT_TRUE(torch::equal(prev.select(1, 0), torch::full({3}, kFairseqEos, torch::kLong)));
  EXPECT_TRUE(torch::equal(prev[2].slice(0, 1, 6), tgt[2].slice(0, 0, 5)));
  EXPECT_TRUE(torch::equal(prev[0].slice(0, 1, 4), tgt[0].slice(0, 0, 3)));
  EXPECT_TRUE(torch::equal(prev.eq(kFairseqPad), tgt.eq(kFairseqPad)));
  // No source padding when every source has the longest length.
  EXPECT_FALSE(make_token_batch(BatchShape{{{4, 2}, {4, 3}}}, 50, 60, torch::kCPU, 1).src_padded);
}

TEST(TokenBatchingTest, PositionsArePadAwareFromPadPlusOne) {
  const auto left = torch::tensor({1, 1, 7, 8, 2}, torch::kLong).view({1, 5});
  EXPECT_TRUE(torch::equal(make_positions(left, kFairseqPad),
                           torch::tensor({1, 1, 2, 3, 4}, torch::kLong).view({1, 5})));
  const auto right = torch::tensor({2, 7, 1}, torch::kLong).view({1, 3});
  EXPECT_TRUE(torch::equal(make_positions(right, kFairseqPad),
                           torch::tensor({2, 3, 1}, torch::kLong).view({1, 3})));
}

TEST(TokenBatchingTest, BatchesAreUsedInTurnAndReported) {
  const std::vector<BatchShape> shapes{BatchShape{{{3, 4}, {3, 2}}}, BatchShape{{{5, 5}}}};
  TokenBatches batches(shapes, 50, 50, torch::kCPU, 0);
  EXPECT_EQ(batches.next().sentences, 2);
  EXPECT_EQ(batches.next().sentences, 1);
  EXPECT_EQ(batches.next().sentences, 2);
  const auto info = batches.info(10);
  EXPECT_EQ(info["batches"], 2);
  EXPECT_DOUBLE_EQ(info["sentences"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(info["target_tokens"].get<double>(), 5.5);
  EXPECT_DOUBLE_EQ(info["budget_fill"].get<double>(), (8 + 5) / 2.0 / 10.0);
  EXPECT_EQ(info["sentences_per_batch"], Json::array({2, 1}));
}

}  // namespace
}  // namespace gpubench::models
