// Token-budget batches as facebookresearch/XLM (9e6f681) builds them for its monolingual data
// (src/data/dataset.py, Dataset.get_iterator with group_by_size and --tokens_per_batch), and the
// synthetic NewsCrawl sentence lengths they are cut from. Spec: shared/specs/
// language-workloads.md §3.6. Layout follows XLM: a batch is (max_len, n_sentences), time-major.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace gpubench::models::xlm {

/// XLM's dictionary layout (src/data/dictionary.py): <s>, </s>, <pad>, <unk>, then ten
/// <special*> words, the second of which is the mask word; real words follow.
constexpr int64_t kEosIndex = 1;
constexpr int64_t kPadIndex = 2;
constexpr int64_t kMaskIndex = 5;
constexpr int64_t kFirstWordIndex = 14;

/// Delimiters XLM adds around every sentence (batch_sentences puts </s> at both ends), which its
/// token budget counts.
constexpr int64_t kDelimitersPerSentence = 2;

/// The synthetic length distribution: words per sentence after BPE (delimiters excluded).
struct LengthModel {
  /// Mean of the untruncated log-normal, in words. Default: 27 (NewsCrawl after 60k BPE codes)
  double mean = 27;
  /// Standard deviation of log(length). Default: 0.55 (std of about 15 words)
  double log_sigma = 0.55;
  /// Longer sentences are removed, as XLM's --max_len removes them. Default: 100
  int64_t max_words = 100;
};

/// `count` sentence lengths in [1, max_words], drawn from a discretized log-normal (rounded to
/// the nearest integer; draws outside the range are redrawn, as XLM drops empty and overlong
/// sentences). Reproducible across platforms: std::mt19937_64 and a hand-written Box-Muller, no
/// library distribution.
std::vector<int64_t> sample_sentence_lengths(int64_t count, const LengthModel& model,
                                             uint64_t seed);

/// `lengths` sorted ascending (XLM's group_by_size: a stable argsort by length; sentences of
/// equal length are interchangeable here, so a counting sort gives the same lengths).
std::vector<int64_t> sort_lengths(const std::vector<int64_t>& lengths, int64_t max_words);

/// A batch as a half-open range [begin, end) of the sorted sentences.
using BatchBounds = std::pair<int64_t, int64_t>;

/// XLM's token batches over sentences in the given order: cumsum(words + 2) // tokens_per_batch
/// labels every sentence and a batch is a run of equal labels. A batch therefore holds about
/// tokens_per_batch unpadded tokens (delimiters counted, padding not): fewer than
/// tokens_per_batch plus its first sentence's tokens. A sentence longer than the budget gets a
/// batch of its own.
std::vector<BatchBounds> token_batches(const std::vector<int64_t>& words, int64_t tokens_per_batch);

/// Tokens of sentences [begin, end) as XLM's budget counts them: sum(words + 2).
int64_t budget_tokens(const std::vector<int64_t>& words, const BatchBounds& batch);

/// The batch at each quantile q in [0, 1) of `n_batches` batches: index floor(q * n_batches).
std::vector<int64_t> batches_at_quantiles(int64_t n_batches, const std::vector<double>& quantiles);

/// One batch of sentences as XLM's Dataset.batch_sentences lays it out, on the CPU.
struct SentenceBatch {
  torch::Tensor x;                    ///< [max(lengths), n] int64: </s> w1 .. wk </s> <pad> ...
  torch::Tensor lengths;              ///< [n] int64: words + 2
  std::vector<int64_t> host_lengths;  ///< the same lengths, known on the host
};

/// A batch of sentences with the given word counts and random word ids in
/// [kFirstWordIndex, n_words), drawn from libtorch's default CPU generator (seed it first).
SentenceBatch make_sentence_batch(const std::vector<int64_t>& words, int64_t n_words);

}  // namespace gpubench::models::xlm
