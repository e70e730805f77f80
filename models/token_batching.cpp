#include "models/token_batching.h"

#include "gpubench/base/errors.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

namespace gpubench::models {

// ---- Random numbers ----

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

// ---- Length distribution ----
//
// Every floating-point step below is repeated operation for operation in the Python reference
// (tools/twins/transformer_big_reference.py), so both draw the same corpus.

namespace {

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

/// Probabilities of the integers first..last under a log-normal (location mu, shape sigma) of
/// `scale` times the value, rounded to the nearest integer and truncated to [first, last]. The
/// bin of 1 reaches down to 0. Uniform if every bin underflows.
std::vector<double> rounded_lognormal(int64_t first, int64_t last, double scale, double mu,
                                      double sigma) {
  std::vector<double> weights;
  double total = 0;
  for (int64_t k = first; k <= last; ++k) {
    const double kd = static_cast<double>(k);
    const double upper = normal_cdf((std::log((kd + 0.5) / scale) - mu) / sigma);
    const double lower = k == 1 ? 0.0 : normal_cdf((std::log((kd - 0.5) / scale) - mu) / sigma);
    weights.push_back(upper - lower);
    total += upper - lower;
  }
  for (auto& w : weights) w = total > 0 ? w / total : 1.0 / static_cast<double>(weights.size());
  return weights;
}

std::vector<double> cumulative(const std::vector<double>& pmf) {
  std::vector<double> cdf;
  double sum = 0;
  for (double p : pmf) {
    sum += p;
    cdf.push_back(sum);
  }
  return cdf;
}

/// Mean of values first, first + 1, ... with probabilities `pmf`.
double mean_of(const std::vector<double>& pmf, int64_t first) {
  double sum = 0;
  for (std::size_t i = 0; i < pmf.size(); ++i) {
    sum += static_cast<double>(first + static_cast<int64_t>(i)) * pmf[i];
  }
  return sum;
}

/// The x in [lo, hi] where the increasing `f` reaches `target`, by a fixed number of halvings
/// (deterministic, and the same in the Python reference).
double bisect(const std::function<double(double)>& f, double target, double lo, double hi) {
  for (int i = 0; i < 64; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (f(mid) < target) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

/// Index of the first cdf entry above u (the last one if rounding left cdf.back() below u).
std::size_t draw(const std::vector<double>& cdf, double u) {
  const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
  return std::min(static_cast<std::size_t>(it - cdf.begin()), cdf.size() - 1);
}

}  // namespace

LengthSampler::LengthSampler(const LengthProfile& profile) : profile_(profile) {
  const int64_t words = profile.max_len - 1;  // longest sentence without its EOS
  GPUBENCH_CHECK(words >= 1, ConfigError, "model.max_len: expected at least 2, got {}",
                 profile.max_len);
  GPUBENCH_CHECK(profile.src_mean > 2 && profile.src_mean < static_cast<double>(profile.max_len),
                 ConfigError, "model.src_mean: expected between 2 and max_len ({}), got {}",
                 profile.max_len, profile.src_mean);
  GPUBENCH_CHECK(profile.tgt_mean > 2 && profile.tgt_mean < static_cast<double>(profile.max_len),
                 ConfigError, "model.tgt_mean: expected between 2 and max_len ({}), got {}",
                 profile.max_len, profile.tgt_mean);
  GPUBENCH_CHECK(profile.max_ratio == 0 || profile.max_ratio >= 1, ConfigError,
                 "model.max_ratio: expected 0 (no bound) or at least 1, got {}", profile.max_ratio);

  // Source words: solve the log-normal's location for the mean (EOS included).
  auto src_table = [&](double mu) { return rounded_lognormal(1, words, 1.0, mu, profile.sigma); };
  const double mu =
      bisect([&](double m) { return mean_of(src_table(m), 1) + 1; }, profile.src_mean, -10.0, 10.0);
  src_pmf_ = src_table(mu);
  src_cdf_ = cumulative(src_pmf_);

  // Target words given the source: the ratio's location solved for the target mean.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t s = 1; s <= words; ++s) {
    ranges.push_back(target_range(s));
    tgt_first_.push_back(ranges.back().first);
  }
  auto tgt_tables = [&](double ratio_mu) {
    std::vector<std::vector<double>> rows;
    for (int64_t s = 1; s <= words; ++s) {
      const auto [first, last] = ranges[static_cast<std::size_t>(s - 1)];
      rows.push_back(
          rounded_lognormal(first, last, static_cast<double>(s), ratio_mu, profile.ratio_sigma));
    }
    return rows;
  };
  const double ratio_mu =
      bisect([&](double m) { return tgt_mean_of(tgt_tables(m)); }, profile.tgt_mean, -5.0, 5.0);
  tgt_pmf_ = tgt_tables(ratio_mu);
  for (const auto& row : tgt_pmf_) tgt_cdf_.push_back(cumulative(row));
}

std::pair<int64_t, int64_t> LengthSampler::target_range(int64_t s) const {
  const int64_t words = profile_.max_len - 1;
  if (profile_.max_ratio == 0) return {1, words};
  // clean-corpus-n.perl drops a pair when either side is more than max_ratio times the other.
  const double r = profile_.max_ratio, sd = static_cast<double>(s);
  int64_t first = 1;
  while (first < words && static_cast<double>(first) * r < sd) ++first;
  int64_t last = first;
  while (last < words && static_cast<double>(last + 1) <= sd * r) ++last;
  return {first, last};
}

SentencePair LengthSampler::sample(SplitMix64& rng) const {
  const std::size_t s = draw(src_cdf_, rng.uniform());
  const std::size_t t = draw(tgt_cdf_[s], rng.uniform());
  const int64_t src_words = static_cast<int64_t>(s) + 1;
  const int64_t tgt_words = tgt_first_[s] + static_cast<int64_t>(t);
  return {src_words + 1, tgt_words + 1};
}

double LengthSampler::src_mean() const { return mean_of(src_pmf_, 1) + 1; }

double LengthSampler::tgt_mean() const { return tgt_mean_of(tgt_pmf_); }

double LengthSampler::tgt_mean_of(const std::vector<std::vector<double>>& rows) const {
  double sum = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    sum += src_pmf_[i] * mean_of(rows[i], tgt_first_[i]);
  }
  return sum + 1;
}

// ---- Batches ----

int64_t BatchShape::src_max() const {
  int64_t m = 0;
  for (const auto& p : pairs) m = std::max(m, p.src);
  return m;
}

int64_t BatchShape::tgt_max() const {
  int64_t m = 0;
  for (const auto& p : pairs) m = std::max(m, p.tgt);
  return m;
}

int64_t BatchShape::target_tokens() const {
  int64_t n = 0;
  for (const auto& p : pairs) n += p.tgt;
  return n;
}

int64_t BatchShape::source_tokens() const {
  int64_t n = 0;
  for (const auto& p : pairs) n += p.src;
  return n;
}

std::vector<BatchShape> batch_by_size(const std::vector<SentencePair>& pairs, int64_t max_tokens,
                                      int64_t multiple) {
  GPUBENCH_ASSERT(max_tokens > 0 && multiple > 0);
  std::vector<BatchShape> batches;
  std::vector<SentencePair> batch;
  std::vector<int64_t> sample_lens;  // num_tokens of `batch` plus the sentence being added
  int64_t sample_len = 0;
  for (const auto& pair : pairs) {
    sample_lens.push_back(pair.num_tokens());
    sample_len = std::max(sample_len, pair.num_tokens());
    GPUBENCH_CHECK(sample_len <= max_tokens, ConfigError,
                   "a sentence of {} tokens exceeds the token budget of {} (fairseq asserts the "
                   "same); use a larger batch",
                   sample_len, max_tokens);
    const auto size = static_cast<int64_t>(batch.size());
    if (size > 0 && (size + 1) * sample_len > max_tokens) {
      const int64_t keep = std::max(multiple * (size / multiple), size % multiple);
      batches.push_back({{batch.begin(), batch.begin() + keep}});
      batch.erase(batch.begin(), batch.begin() + keep);
      sample_lens.erase(sample_lens.begin(), sample_lens.begin() + keep);
      sample_len = *std::max_element(sample_lens.begin(), sample_lens.end());
    }
    batch.push_back(pair);
  }
  if (!batch.empty()) batches.push_back({batch});
  return batches;
}

std::vector<SentencePair> sample_sorted_corpus(const LengthSampler& sampler, int64_t count,
                                               uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<SentencePair> pairs;
  pairs.reserve(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) pairs.push_back(sampler.sample(rng));
  // Pairs of equal lengths are interchangeable, so fairseq's random tie order needs no copy.
  std::sort(pairs.begin(), pairs.end(), [](const SentencePair& a, const SentencePair& b) {
    return a.src != b.src ? a.src < b.src : a.tgt < b.tgt;
  });
  return pairs;
}

double activation_weight(const BatchShape& shape, const ActivationModel& model) {
  const auto s = static_cast<double>(shape.src_max());
  const auto t = static_cast<double>(shape.tgt_max());
  return static_cast<double>(shape.sentences()) *
         (model.per_src * s + model.per_tgt * t + model.per_src_src * s * s +
          model.per_tgt_tgt * t * t + model.per_tgt_src * t * s);
}

namespace {
/// The batch with the largest activation_weight() in [first, last) (the first of equals).
template <typename It>
It heaviest_of(It first, It last, const ActivationModel& model = {}) {
  return std::max_element(first, last, [&](const BatchShape& a, const BatchShape& b) {
    return activation_weight(a, model) < activation_weight(b, model);
  });
}
}  // namespace

std::vector<BatchShape> plan_token_batches(const LengthProfile& profile,
                                           const TokenBatchOptions& options, uint64_t seed) {
  GPUBENCH_ASSERT(options.batches >= 1 && options.corpus_batches_per_batch >= 1);
  const LengthSampler sampler(profile);
  constexpr int64_t kMinCorpus = 4096;
  const auto per_batch =
      static_cast<int64_t>(std::ceil(static_cast<double>(options.max_tokens) / profile.src_mean));
  const int64_t corpus =
      std::max(kMinCorpus, options.batches * options.corpus_batches_per_batch * per_batch);
  const auto all = batch_by_size(sample_sorted_corpus(sampler, corpus, seed), options.max_tokens,
                                 options.multiple);

  // One batch per stratum of the sorted list, as a shuffled epoch would serve them.
  SplitMix64 pick(seed + 1);
  const auto m = static_cast<uint64_t>(all.size());
  const auto k = static_cast<uint64_t>(options.batches);
  std::vector<BatchShape> chosen;
  for (uint64_t j = 0; j < k; ++j) {
    const uint64_t lo = j * m / k;
    const uint64_t hi = std::max((j + 1) * m / k, lo + 1);
    chosen.push_back(all[lo + pick.next() % (hi - lo)]);
  }

  // Bit-reversed stratum order (0, 4, 2, 6, 1, ... for 8): any run of consecutive steps mixes
  // short and long sentences, so a timed window that ends mid-cycle stays representative.
  int bits = 0;
  while ((uint64_t{1} << bits) < k) ++bits;
  auto reversed = [bits](uint64_t j) {
    uint64_t r = 0;
    for (int b = 0; b < bits; ++b) {
      if ((j >> b) & 1) r |= uint64_t{1} << (bits - 1 - b);
    }
    return r;
  };
  std::vector<uint64_t> order(k);
  for (uint64_t j = 0; j < k; ++j) order[j] = j;
  std::sort(order.begin(), order.end(),
            [&](uint64_t a, uint64_t b) { return reversed(a) < reversed(b); });
  std::vector<BatchShape> ordered;
  for (uint64_t j : order) ordered.push_back(std::move(chosen[j]));

  const auto heaviest = heaviest_of(ordered.begin(), ordered.end());
  if (ordered.size() >= 2) std::iter_swap(heaviest, ordered.begin() + 1);
  return ordered;
}

// ---- Tensors ----

TokenBatch make_token_batch(const BatchShape& shape, int64_t src_vocab, int64_t tgt_vocab,
                            const torch::Device& device, uint64_t seed) {
  GPUBENCH_ASSERT(shape.sentences() > 0);
  GPUBENCH_CHECK(src_vocab > kFairseqFirstWord && tgt_vocab > kFairseqFirstWord, ConfigError,
                 "vocabulary sizes must exceed the {} special tokens", kFairseqFirstWord);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto n = shape.sentences(), s = shape.src_max(), t = shape.tgt_max();
  std::vector<int64_t> src_lengths, tgt_lengths;
  for (const auto& p : shape.pairs) {
    src_lengths.push_back(p.src);
    tgt_lengths.push_back(p.tgt);
  }
  const auto src_len = torch::tensor(src_lengths, torch::kLong).view({n, 1});
  const auto tgt_len = torch::tensor(tgt_lengths, torch::kLong).view({n, 1});
  const auto src_pos = torch::arange(s, torch::kLong).view({1, s});
  const auto tgt_pos = torch::arange(t, torch::kLong).view({1, t});

  TokenBatch b;
  // Source: left-padded, words then EOS.
  b.src_tokens = torch::randint(kFairseqFirstWord, src_vocab, {n, s}, gen, torch::kLong)
                     .masked_fill(src_pos == s - 1, kFairseqEos)
                     .masked_fill(src_pos < s - src_len, kFairseqPad);
  // Target: right-padded, words then EOS; the decoder input moves that EOS to the front.
  const auto tgt_pad = tgt_pos >= tgt_len;
  b.target = torch::randint(kFairseqFirstWord, tgt_vocab, {n, t}, gen, torch::kLong)
                 .masked_fill(tgt_pos == tgt_len - 1, kFairseqEos)
                 .masked_fill(tgt_pad, kFairseqPad);
  b.prev_output_tokens =
      torch::cat({torch::full({n, 1}, kFairseqEos, torch::kLong), b.target.slice(1, 0, t - 1)}, 1)
          .masked_fill(tgt_pad, kFairseqPad);
  b.src_tokens = b.src_tokens.to(device);
  b.target = b.target.to(device);
  b.prev_output_tokens = b.prev_output_tokens.to(device);
  b.sentences = n;
  b.target_tokens = shape.target_tokens();
  b.src_padded = std::any_of(shape.pairs.begin(), shape.pairs.end(),
                             [&](const SentencePair& p) { return p.src < s; });
  return b;
}

torch::Tensor make_positions(const torch::Tensor& tokens, int64_t pad) {
  const auto mask = tokens.ne(pad).to(torch::kLong);
  return torch::cumsum(mask, 1) * mask + pad;
}

// ---- Config ----

ParamSchema token_batching_schema(const LengthProfile& d) {
  return {
      {"src_mean", ParamKind::kNumber, d.src_mean, "mean source length [tokens incl. EOS]", {}, 2},
      {"tgt_mean", ParamKind::kNumber, d.tgt_mean, "mean target length [tokens incl. EOS]", {}, 2},
      {"max_len", ParamKind::kInt, d.max_len, "longest sentence [tokens incl. EOS]", {}, 2},
      {"max_ratio",
       ParamKind::kNumber,
       d.max_ratio,
       "length-ratio bound of the corpus cleaning (words); 0 = none",
       {},
       0},
      {"length_sigma", ParamKind::kNumber, d.sigma, "log-normal shape of source lengths", {}, 0.01},
      {"ratio_sigma",
       ParamKind::kNumber,
       d.ratio_sigma,
       "log-normal shape of target/source length",
       {},
       0.01},
      {"batch_multiple",
       ParamKind::kInt,
       8,
       "sentences per batch are a multiple of this (--required-batch-size-multiple)",
       {},
       1},
      {"batches", ParamKind::kInt, 8, "batches pre-generated and used in turn", {}, 1},
  };
}

LengthProfile length_profile(const Params& m) {
  LengthProfile p;
  p.src_mean = m.f64("src_mean");
  p.tgt_mean = m.f64("tgt_mean");
  p.max_len = m.i64("max_len");
  p.max_ratio = m.f64("max_ratio");
  p.sigma = m.f64("length_sigma");
  p.ratio_sigma = m.f64("ratio_sigma");
  return p;
}

TokenBatchOptions token_batch_options(const Params& m, int64_t max_tokens) {
  TokenBatchOptions o;
  o.max_tokens = max_tokens;
  o.multiple = m.i64("batch_multiple");
  o.batches = m.i64("batches");
  return o;
}

TokenBatches::TokenBatches(const std::vector<BatchShape>& shapes, int64_t src_vocab,
                           int64_t tgt_vocab, const torch::Device& device, uint64_t seed,
                           const ActivationModel& model)
    : shapes_(shapes), model_(model) {
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    batches_.push_back(make_token_batch(shapes[i], src_vocab, tgt_vocab, device, seed + i));
  }
}

const TokenBatch& TokenBatches::next() {
  const TokenBatch& b = batches_[cursor_];
  cursor_ = (cursor_ + 1) % batches_.size();
  return b;
}

int64_t TokenBatches::heaviest() const {
  return static_cast<int64_t>(heaviest_of(shapes_.begin(), shapes_.end(), model_) -
                              shapes_.begin());
}

std::vector<int64_t> TokenBatches::probe_batches() const {
  GPUBENCH_ASSERT(!shapes_.empty());
  const int64_t top = heaviest();
  if (!(model_.uncertainty > 0)) return {top};
  const double floor =
      activation_weight(shapes_[static_cast<std::size_t>(top)], model_) * (1 - model_.uncertainty);
  std::vector<int64_t> out{top};
  for (int64_t i = 0; i < size(); ++i) {
    if (i != top && activation_weight(shapes_[static_cast<std::size_t>(i)], model_) >= floor) {
      out.push_back(i);
    }
  }
  return out;
}

void TokenBatches::seek(int64_t index) {
  GPUBENCH_ASSERT(index >= 0 && index < size());
  cursor_ = static_cast<std::size_t>(index);
}

Json TokenBatches::info(int64_t max_tokens) const {
  Json sentences = Json::array(), target = Json::array(), padded = Json::array(),
       src_len = Json::array(), tgt_len = Json::array(), weight = Json::array();
  double sentence_sum = 0, target_sum = 0, padded_sum = 0;
  for (const auto& s : shapes_) {
    weight.push_back(activation_weight(s, model_));
    sentences.push_back(s.sentences());
    target.push_back(s.target_tokens());
    padded.push_back(s.padded_tokens());
    src_len.push_back(s.src_max());
    tgt_len.push_back(s.tgt_max());
    sentence_sum += static_cast<double>(s.sentences());
    target_sum += static_cast<double>(s.target_tokens());
    padded_sum += static_cast<double>(s.padded_tokens());
  }
  const auto k = static_cast<double>(shapes_.size());
  return Json{{"max_tokens", max_tokens},
              {"batches", shapes_.size()},
              {"sentences", sentence_sum / k},
              {"target_tokens", target_sum / k},
              {"budget_fill", padded_sum / k / static_cast<double>(max_tokens)},
              {"sentences_per_batch", sentences},
              {"target_tokens_per_batch", target},
              {"padded_tokens_per_batch", padded},
              {"src_max_len_per_batch", src_len},
              {"tgt_max_len_per_batch", tgt_len},
              {"activation_weight_per_batch", weight},
              {"heaviest_batch", heaviest()},
              {"probe_batches", probe_batches()}};
}

}  // namespace gpubench::models
