// XLM's token-budget batches (cumsum(words + 2) // tokens_per_batch) on hand-made lengths with
// known cuts, the budget on a synthetic corpus, and the synthetic NewsCrawl lengths.
#include "models/xlm_batching.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace gpubench::models::xlm {
namespace {

std::vector<int64_t> sizes(const std::vector<BatchBounds>& batches) {
  std::vector<int64_t> out;
  for (const auto& [begin, end] : batches) out.push_back(end - begin);
  return out;
}

TEST(XlmBatchingTest, CutsWhereTheCumulativeBudgetLabelChanges) {
  // Tokens (words + 2): 3 3 3 4 5 7; cumulative 3 6 9 13 18 25; // 8 -> labels 0 0 1 1 2 3.
  const std::vector<int64_t> words = {1, 1, 1, 2, 3, 5};
  const auto batches = token_batches(words, 8);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0], BatchBounds(0, 2));
  EXPECT_EQ(batches[1], BatchBounds(2, 4));
  EXPECT_EQ(batches[2], BatchBounds(4, 5));
  EXPECT_EQ(batches[3], BatchBounds(5, 6));
  EXPECT_EQ(budget_tokens(words, batches[1]), 7);
}

TEST(XlmBatchingTest, CountsTwoDelimitersPerSentence) {
  // One-word sentences count 3 tokens each: the first batch ends before the cumulative count
  // reaches 30 (nine sentences), later ones hold ten, and the remainder is a batch of its own.
  const std::vector<int64_t> words(100, 1);
  const auto batches = token_batches(words, 30);
  std::vector<int64_t> expected = {9};
  expected.insert(expected.end(), 9, 10);
  expected.push_back(1);
  EXPECT_EQ(sizes(batches), expected);
  EXPECT_EQ(budget_tokens(words, batches[1]), 30);
}

TEST(XlmBatchingTest, SentenceLongerThanTheBudgetGetsItsOwnBatch) {
  // Cumulative 52, 104, 107 // 10 -> labels 5, 10, 10: a long sentence alone, and a short one
  // joins the batch of the long sentence before it (its label does not change).
  EXPECT_EQ(sizes(token_batches({50, 50}, 10)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes(token_batches({50, 50, 1}, 10)), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(token_batches({}, 10).empty());
}

TEST(XlmBatchingTest, BatchesHoldAboutTheBudgetInUnpaddedTokens) {
  const auto sorted = sort_lengths(sample_sentence_lengths(100000, LengthModel{}, 7), 100);
  ASSERT_TRUE(std::is_sorted(sorted.begin(), sorted.end()));
  for (const int64_t budget : {500, 2000, 8000}) {
    const auto batches = token_batches(sorted, budget);
    int64_t total = 0;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const auto& [begin, end] = batches[i];
      const int64_t tokens = budget_tokens(sorted, batches[i]);
      total += tokens;
      // Below the budget plus the first sentence's tokens ...
      EXPECT_LT(tokens, budget + sorted[begin] + kDelimitersPerSentence) << budget << " " << i;
      // ... and, but for the remainder, at least the budget minus the next sentence's.
      if (i + 1 < batches.size()) {
        EXPECT_GE(tokens, budget - sorted[end] - kDelimitersPerSentence) << budget << " " << i;
      }
    }
    int64_t expected = 0;
    for (const int64_t w : sorted) expected += w + kDelimitersPerSentence;
    EXPECT_EQ(total, expected);  // every sentence in exactly one batch
  }
}

TEST(XlmBatchingTest, SyntheticLengthsLookLikeNewsCrawlAndAreReproducible) {
  const auto a = sample_sentence_lengths(200000, LengthModel{}, 1);
  const auto b = sample_sentence_lengths(200000, LengthModel{}, 1);
  const auto c = sample_sentence_lengths(200000, LengthModel{}, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const double mean = static_cast<double>(std::accumulate(a.begin(), a.end(), int64_t{0})) /
                      static_cast<double>(a.size());
  EXPECT_NEAR(mean, 26.6, 0.3);  // 27 before the cap at 100 words
  EXPECT_GE(*std::min_element(a.begin(), a.end()), 1);
  EXPECT_LE(*std::max_element(a.begin(), a.end()), 100);
  EXPECT_GT(*std::max_element(a.begin(), a.end()), 90);  // the tail reaches the cap
  // Sorting keeps the lengths, only reorders them.
  auto sorted = sort_lengths(a, 100);
  auto copy = a;
  std::sort(copy.begin(), copy.end());
  EXPECT_EQ(sorted, copy);
}

TEST(XlmBatchingTest, QuantilesPickBatchesByIndex) {
  EXPECT_EQ(batches_at_quantiles(8, {0.125, 0.875, 0.375, 0.625}),
            (std::vector<int64_t>{1, 7, 3, 5}));
  EXPECT_EQ(batches_at_quantiles(1, {0.0, 0.99}), (std::vector<int64_t>{0, 0}));
}

TEST(XlmBatchingTest, SentenceBatchHasXlmsLayout) {
  torch::manual_seed(0);
  const auto batch = make_sentence_batch({3, 1, 5}, 100);
  ASSERT_EQ(batch.x.sizes(), (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(batch.host_lengths, (std::vector<int64_t>{5, 3, 7}));
  EXPECT_TRUE(torch::equal(batch.lengths, torch::tensor({5, 3, 7}, torch::kLong)));
  const auto x = batch.x.accessor<int64_t, 2>();
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t length = batch.host_lengths[b];
    EXPECT_EQ(x[0][b], kEosIndex);
    EXPECT_EQ(x[length - 1][b], kEosIndex);
    for (int64_t p = 1; p + 1 < length; ++p) {
      EXPECT_GE(x[p][b], kFirstWordIndex);
      EXPECT_LT(x[p][b], 100);
    }
    for (int64_t p = length; p < 7; ++p) EXPECT_EQ(x[p][b], kPadIndex);
  }
}

}  // namespace
}  // namespace gpubench::models::xlm
