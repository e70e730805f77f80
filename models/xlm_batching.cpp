#include "models/xlm_batching.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace gpubench::models::xlm {

std::vector<int64_t> sample_sentence_lengths(int64_t count, const LengthModel& model,
                                             uint64_t seed) {
  TORCH_CHECK(count >= 0 && model.mean > 0 && model.log_sigma >= 0 && model.max_words >= 1,
              "bad length model");
  std::mt19937_64 engine(seed);
  // (0, 1]: 53 random bits, never 0 so the logarithm is finite.
  auto uniform = [&engine] { return (static_cast<double>(engine() >> 11) + 1.0) * 0x1.0p-53; };
  const double mu = std::log(model.mean) - 0.5 * model.log_sigma * model.log_sigma;
  constexpr double kTwoPi = 6.283185307179586;
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<std::size_t>(count));
  auto keep = [&](double z) {
    const double words = std::floor(std::exp(mu + model.log_sigma * z) + 0.5);
    if (words >= 1 && words <= static_cast<double>(model.max_words) &&
        static_cast<int64_t>(lengths.size()) < count) {
      lengths.push_back(static_cast<int64_t>(words));
    }
  };
  while (static_cast<int64_t>(lengths.size()) < count) {
    // Box-Muller: two independent standard normals per pair of uniforms.
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = kTwoPi * uniform();
    keep(radius * std::cos(angle));
    keep(radius * std::sin(angle));
  }
  return lengths;
}

std::vector<int64_t> sort_lengths(const std::vector<int64_t>& lengths, int64_t max_words) {
  std::vector<int64_t> histogram(static_cast<std::size_t>(max_words) + 1, 0);
  for (const int64_t words : lengths) {
    TORCH_CHECK(words >= 0 && words <= max_words, "sentence length ", words, " outside [0, ",
                max_words, "]");
    ++histogram[static_cast<std::size_t>(words)];
  }
  std::vector<int64_t> sorted;
  sorted.reserve(lengths.size());
  for (int64_t words = 0; words <= max_words; ++words) {
    sorted.insert(sorted.end(), static_cast<std::size_t>(histogram[words]), words);
  }
  return sorted;
}

std::vector<BatchBounds> token_batches(const std::vector<int64_t>& words,
                                       int64_t tokens_per_batch) {
  TORCH_CHECK(tokens_per_batch >= 1, "tokens_per_batch must be positive");
  std::vector<BatchBounds> batches;
  int64_t cumulative = 0, label = -1, begin = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(words.size()); ++i) {
    cumulative += words[i] + kDelimitersPerSentence;
    const int64_t this_label = cumulative / tokens_per_batch;
    if (this_label != label) {
      if (i > begin) batches.emplace_back(begin, i);
      begin = i;
      label = this_label;
    }
  }
  if (static_cast<int64_t>(words.size()) > begin) {
    batches.emplace_back(begin, static_cast<int64_t>(words.size()));
  }
  return batches;
}

int64_t budget_tokens(const std::vector<int64_t>& words, const BatchBounds& batch) {
  int64_t tokens = 0;
  for (int64_t i = batch.first; i < batch.second; ++i) tokens += words[i] + kDelimitersPerSentence;
  return tokens;
}

std::vector<int64_t> batches_at_quantiles(int64_t n_batches, const std::vector<double>& quantiles) {
  TORCH_CHECK(n_batches >= 1, "no batches to pick from");
  std::vector<int64_t> picked;
  for (const double q : quantiles) {
    TORCH_CHECK(q >= 0 && q < 1, "quantile ", q, " outside [0, 1)");
    picked.push_back(std::min(
        n_batches - 1, static_cast<int64_t>(std::floor(q * static_cast<double>(n_batches)))));
  }
  return picked;
}

SentenceBatch make_sentence_batch(const std::vector<int64_t>& words, int64_t n_words) {
  TORCH_CHECK(!words.empty(), "a batch needs at least one sentence");
  TORCH_CHECK(n_words > kFirstWordIndex, "the vocabulary must hold words past the special ones");
  SentenceBatch batch;
  for (const int64_t w : words) batch.host_lengths.push_back(w + kDelimitersPerSentence);
  const int64_t n = static_cast<int64_t>(words.size());
  const int64_t slen = *std::max_element(batch.host_lengths.begin(), batch.host_lengths.end());
  const auto long_options = torch::TensorOptions().dtype(torch::kLong);
  batch.lengths = torch::tensor(batch.host_lengths, long_options);
  auto position = torch::arange(slen, long_options).unsqueeze(1);  // [slen, 1]
  auto last = (batch.lengths - 1).unsqueeze(0);                    // [1, n]
  auto ids = torch::randint(kFirstWordIndex, n_words, {slen, n}, long_options);
  ids = ids.masked_fill(position == 0, kEosIndex)
            .masked_fill(position == last, kEosIndex)
            .masked_fill(position > last, kPadIndex);
  batch.x = ids;
  return batch;
}

}  // namespace gpubench::models::xlm
