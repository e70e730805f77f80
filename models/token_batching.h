// Token-budget batches as fairseq v0.9.0 builds them for translation (--max-tokens N,
// --required-batch-size-multiple 8): synthetic sentence-pair lengths from a seeded length
// distribution, sorted by source then target length and cut by batch_by_size, so that
// (sentences) x (longest side of the batch, padding included) <= N. Spec: shared/specs/
// language-workloads.md §1.5-1.7 and §2.5. Shared by transformer-big and conv-seq2seq.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/base/params.h"

#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpubench::models {

/// fairseq's special token ids (fairseq/data/dictionary.py): every dictionary starts with them.
constexpr int64_t kFairseqBos = 0;
constexpr int64_t kFairseqPad = 1;
constexpr int64_t kFairseqEos = 2;
constexpr int64_t kFairseqUnk = 3;
/// Ids below this are special tokens; words start here.
constexpr int64_t kFairseqFirstWord = 4;

/// SplitMix64 (Steele et al. 2014): a tiny generator whose output is fully specified, so the
/// Python reference (tools/twins/transformer_big_reference.py) draws the same lengths.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();

 private:
  uint64_t state_;
};

/// The length distribution of a parallel corpus after BPE. Lengths count the EOS every fairseq
/// sentence ends with.
struct LengthProfile {
  double src_mean = 29.5;    ///< mean source length [tokens incl. EOS]. Default: 29.5 (WMT16 en)
  double tgt_mean = 30.6;    ///< mean target length [tokens incl. EOS]. Default: 30.6 (WMT16 de)
  int64_t max_len = 130;     ///< longest sentence on either side [tokens incl. EOS]. Default: 130
  double max_ratio = 0;      ///< if > 0, 1/r <= tgt/src <= r (words, as clean-corpus-n). Default: 0
  double sigma = 0.55;       ///< log-normal shape of the source length. Default: 0.55
  double ratio_sigma = 0.2;  ///< log-normal shape of target/source. Default: 0.2
};

/// One sentence pair's lengths, EOS included.
struct SentencePair {
  int64_t src = 0;
  int64_t tgt = 0;
  /// fairseq's LanguagePairDataset.num_tokens: the longer side.
  int64_t num_tokens() const { return std::max(src, tgt); }
  bool operator==(const SentencePair& o) const { return src == o.src && tgt == o.tgt; }
};

/// Draws sentence pairs from a LengthProfile:
/// - source words s in [1, max_len - 1]: a log-normal rounded to integers and truncated, its
///   location solved so that the mean of s + 1 is src_mean;
/// - target words t given s: s times a log-normal ratio, rounded, truncated to [1, max_len - 1]
///   (and to the ratio bound), its location solved so that the mean of t + 1 is tgt_mean.
/// Sampling is inverse-CDF on tables built once, one uniform per side.
class LengthSampler {
 public:
  explicit LengthSampler(const LengthProfile& profile);
  SentencePair sample(SplitMix64& rng) const;
  /// The exact means (EOS included) of the tables: src_mean and tgt_mean up to bisection error.
  double src_mean() const;
  double tgt_mean() const;

 private:
  /// Smallest and largest target word count allowed for `s` source words.
  std::pair<int64_t, int64_t> target_range(int64_t s) const;
  /// The mean target length (EOS included) of target tables `rows` under the source table.
  double tgt_mean_of(const std::vector<std::vector<double>>& rows) const;

  LengthProfile profile_;
  std::vector<double> src_pmf_, src_cdf_;               // index s - 1
  std::vector<int64_t> tgt_first_;                      // index s - 1: fewest target words
  std::vector<std::vector<double>> tgt_pmf_, tgt_cdf_;  // [s - 1][t - tgt_first_[s - 1]]
};

/// The lengths of one batch, in the order fairseq's sort put them.
struct BatchShape {
  std::vector<SentencePair> pairs;

  int64_t sentences() const { return static_cast<int64_t>(pairs.size()); }
  int64_t src_max() const;
  int64_t tgt_max() const;
  /// What --max-tokens bounds: sentences x longest side, padding included.
  int64_t padded_tokens() const { return sentences() * std::max(src_max(), tgt_max()); }
  /// fairseq's ntokens (the wps unit and the loss normalizer): target tokens incl. EOS, no pads.
  int64_t target_tokens() const;
  int64_t source_tokens() const;
};

/// fairseq's batch_by_size (data_utils_fast.pyx) over pairs already in order: add sentences
/// while (count + 1) x longest <= max_tokens; when the next would not fit, emit the largest
/// multiple of `multiple` (or all, below it) and carry the rest into the next batch. The last
/// batch is emitted as it is. Throws if a sentence is longer than max_tokens (fairseq asserts).
std::vector<BatchShape> batch_by_size(const std::vector<SentencePair>& pairs, int64_t max_tokens,
                                      int64_t multiple);

/// `count` pairs, sorted as fairseq's LanguagePairDataset.ordered_indices sorts them (by source
/// length, then target length).
std::vector<SentencePair> sample_sorted_corpus(const LengthSampler& sampler, int64_t count,
                                               uint64_t seed);

/// A batch's activation memory per sentence, in activation elements: a part per padded source
/// and per padded target position (the layers' activations, the logits), and the parts that
/// attention keeps per pair of positions when it stores its probabilities ([heads, Lq, Lk] per
/// layer, docs/attention.md). Those grow with the square of the length, so among batches of one
/// token budget the one of the longest sentences can peak highest. The default is the linear
/// estimate: source positions plus twice the target positions.
struct ActivationModel {
  double per_src = 1;      ///< per padded source position
  double per_tgt = 2;      ///< per padded target position
  double per_src_src = 0;  ///< per S x S: encoder self-attention, kept
  double per_tgt_tgt = 0;  ///< per T x T: decoder self-attention, kept
  double per_tgt_src = 0;  ///< per T x S: encoder-decoder attention, kept
  /// How far off the estimate may be, relative: a search probe runs every batch whose weight is
  /// within this of the heaviest's (TokenBatches::probe_batches()). 0: the heaviest alone (the
  /// first of equals).
  double uncertainty = 0;
};

/// The batch's activation memory under `model`: sentences x (per_src S + per_tgt T +
/// per_src_src S^2 + per_tgt_tgt T^2 + per_tgt_src T S) for its longest source S and target T.
double activation_weight(const BatchShape& shape, const ActivationModel& model = {});

/// How a workload's batches are planned.
struct TokenBatchOptions {
  int64_t max_tokens = 16000;  ///< fairseq --max-tokens. Default: 16000 (Lambda's RTX 8000)
  int64_t multiple = 8;        ///< --required-batch-size-multiple. Default: 8
  int64_t batches = 8;         ///< batches pre-generated and cycled. Default: 8
  /// The corpus holds about this many batches per pre-generated one. Default: 16
  int64_t corpus_batches_per_batch = 16;
};

/// Samples a corpus large enough for about batches x corpus_batches_per_batch batches, cuts
/// it with batch_by_size and takes one batch from each of `batches` equal strata of the sorted
/// batch list (at a seeded position inside the stratum), so the set spans short to long
/// sentences as an epoch does. The strata are used in bit-reversed order (0, 4, 2, 6, 1, 5, 3,
/// 7 for 8), so consecutive steps mix short and long sentences, except that the heaviest batch
/// by the linear estimate (activation_weight() with the default model) is swapped into second
/// place: a two-step search probe (with CUDA graphs) measures the second, the first having
/// allocated the optimizer state. A one-step probe seeks to the heaviest under the workload's
/// own model instead (TokenBatches::heaviest()), which counts stored attention. The order stays
/// the linear one, which tools/twins/transformer_big_reference.py reproduces.
std::vector<BatchShape> plan_token_batches(const LengthProfile& profile,
                                           const TokenBatchOptions& options, uint64_t seed);

/// One batch on the device in fairseq's collate layout.
struct TokenBatch {
  torch::Tensor src_tokens;          ///< [B, S] int64, left-padded, each row ends in EOS
  torch::Tensor prev_output_tokens;  ///< [B, T] int64: EOS, then the target without its EOS
  torch::Tensor target;              ///< [B, T] int64, right-padded, each row ends in EOS
  int64_t sentences = 0;
  int64_t target_tokens = 0;  ///< fairseq ntokens: target tokens incl. EOS, without padding
  bool src_padded = false;    ///< some source row is padded (fairseq masks only then)
};

/// Random word ids in [kFairseqFirstWord, vocab) laid out as fairseq's collate does, on `device`.
TokenBatch make_token_batch(const BatchShape& shape, int64_t src_vocab, int64_t tgt_vocab,
                            const torch::Device& device, uint64_t seed);

/// fairseq's utils.make_positions: 1-based positions of the non-pad tokens offset by the pad id
/// (the first real token gets pad + 1), and `pad` at padding; works for left and right padding.
torch::Tensor make_positions(const torch::Tensor& tokens, int64_t pad);

/// The keys of the length distribution and batch plan that translation workloads share.
ParamSchema token_batching_schema(const LengthProfile& defaults);
LengthProfile length_profile(const Params& model);
/// The plan for a budget of `max_tokens` from a `model:` section with token_batching_schema().
TokenBatchOptions token_batch_options(const Params& model, int64_t max_tokens);

/// The pre-generated batches of a step, used in turn.
class TokenBatches {
 public:
  /// `model` estimates each batch's activation memory (heaviest(), and the record's
  /// activation_weight_per_batch).
  TokenBatches(const std::vector<BatchShape>& shapes, int64_t src_vocab, int64_t tgt_vocab,
               const torch::Device& device, uint64_t seed, const ActivationModel& model = {});
  /// The batch for the next step.
  const TokenBatch& next();
  /// For the record: sentences and tokens per batch, and their means.
  Json info(int64_t max_tokens) const;
  /// Batches cycled through.
  int64_t size() const { return static_cast<int64_t>(batches_.size()); }
  /// The index of the batch with the largest activation_weight() under the model given to the
  /// constructor (the first of equals): the batch a one-step search probe runs.
  int64_t heaviest() const;
  /// The batches a one-run search probe trains, heaviest first: every batch whose
  /// activation_weight() is within the model's uncertainty of the heaviest's, so that the probe
  /// peaks as high as the heaviest batch does wherever the estimate ranks close ones wrongly.
  std::vector<int64_t> probe_batches() const;
  /// Makes batch `index` the one the next call of next() returns.
  void seek(int64_t index);
  /// The lengths of batch `index`.
  const BatchShape& shape(int64_t index) const {
    return shapes_.at(static_cast<std::size_t>(index));
  }

 private:
  std::vector<BatchShape> shapes_;
  ActivationModel model_;
  std::vector<TokenBatch> batches_;
  std::size_t cursor_ = 0;
};

}  // namespace gpubench::models
