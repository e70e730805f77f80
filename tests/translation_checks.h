// Checks every fairseq translation model passes, whatever its layers: any model with
// forward(src_tokens, prev_output_tokens, src_padded) -> logits [B, T, vocab], in eval mode.
#pragma once

#include "models/token_batching.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gpubench::testing {

/// Token ids as a [rows, values / rows] int64 tensor.
inline torch::Tensor token_ids(const std::vector<int64_t>& values, int64_t rows = 1) {
  return torch::tensor(values, torch::kLong).view({rows, -1});
}

/// Changing decoder inputs from position 3 on leaves the logits before it unchanged, and
/// changes the logits at it.
template <typename Model>
void expect_causal_decoder(Model& model) {
  constexpr int64_t kEos = models::kFairseqEos;
  const auto src = token_ids({5, 6, 7, kEos});
  const auto a = token_ids({kEos, 8, 9, 10, 11});
  const auto b = token_ids({kEos, 8, 9, 30, 31});
  torch::NoGradGuard no_grad;
  const auto la = model->forward(src, a, false), lb = model->forward(src, b, false);
  EXPECT_TRUE(torch::allclose(la.slice(1, 0, 3), lb.slice(1, 0, 3), 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(la.select(1, 3), lb.select(1, 3), 1e-5, 1e-5));
}

/// A sentence gives the same logits alone and left-padded beside a longer one (positions and
/// masks ignore padding), and the unmasked path (src_padded false) equals the masked one when
/// nothing is padded.
template <typename Model>
void expect_left_padding_changes_nothing(Model& model) {
  constexpr int64_t kPad = models::kFairseqPad, kEos = models::kFairseqEos;
  const auto alone = token_ids({5, 6, kEos});
  const auto padded = token_ids({kPad, kPad, 5, 6, kEos, 9, 10, 11, 12, kEos}, 2);
  const auto prev = token_ids({kEos, 8, 9, kEos, 8, 9}, 2);
  torch::NoGradGuard no_grad;
  const auto one = model->forward(alone, prev.slice(0, 0, 1), /*src_padded=*/false);
  const auto two = model->forward(padded, prev, /*src_padded=*/true);
  EXPECT_TRUE(torch::allclose(one[0], two[0], 1e-4, 1e-4));
  const auto masked = model->forward(alone, prev.slice(0, 0, 1), /*src_padded=*/true);
  EXPECT_TRUE(torch::allclose(one, masked, 1e-5, 1e-5));
}

}  // namespace gpubench::testing
