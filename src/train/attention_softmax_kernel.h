// The CUDA kernels of stored attention's fused mask + softmax + dropout
// (src/train/attention_softmax_kernel.cu, issue 44 item 3), behind a plain interface like
// vocab_loss_kernel.h: raw pointers and the stream as void*, so that the .cu file compiles with
// nvcc alone. src/train/attention_softmax.cpp is the one caller.
#pragma once

#include <cstdint>

#include "src/train/kernel_types.h"

namespace gpubench::train::kernels {

/// Rows of attention scores [batch, heads, q_len, k_len] (contiguous; rows = batch * heads *
/// q_len, each k_len wide), `score_type`; the probabilities in `probs_type` (fp32 or the scores'
/// type), the output (the probabilities after dropout, which the product with v reads) in the
/// scores' type.
struct SoftmaxRows {
  ElementType score_type = ElementType::kFloat32;
  ElementType probs_type = ElementType::kFloat32;
  int64_t rows = 0;
  int64_t k_len = 0;
  int64_t q_len = 0;
  int64_t heads = 0;
  /// Key j of query i is masked (-inf) where j > i.
  bool causal = false;
  /// The additive mask (fp32) element of (b, h, i, j) at mask[b * s[0] + h * s[1] + i * s[2] +
  /// j * s[3]] (broadcast dimensions have stride 0), or null.
  const float* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  /// Whether score + mask is rounded to the scores' type (ATen adds them in the scores' type
  /// when the mask has it).
  bool round_sum = false;
  /// The dropout's keep-mask [rows, k_len] (1 keeps) or null; a kept probability is scaled by
  /// `keep_scale`.
  const uint8_t* keep = nullptr;
  float keep_scale = 1.0f;
};

/// The widest row the kernels take (one warp a row, 32 elements a lane).
inline constexpr int64_t kMaxSoftmaxWidth = 1024;

/// Forward, one warp a row: s = score (-inf where causal masks it) + mask, rounded as
/// `round_sum` says; probs = exp(s - max) / sum (written in probs_type); out = probs * keep *
/// keep_scale in the scores' type, or nothing where `out` is null (no dropout and the
/// probabilities already in the scores' type: they are the output).
/// Throws std::runtime_error when the launch fails.
void attention_softmax_forward(const SoftmaxRows& rows, const void* scores, void* probs, void* out,
                               void* stream);

/// Backward from grad_out (the scores' type; the output's gradient): dp = grad_out * keep *
/// keep_scale, grad_scores = probs * (dp - sum(dp * probs)) in the scores' type.
void attention_softmax_backward(const SoftmaxRows& rows, const void* grad_out, const void* probs,
                                void* grad_scores, void* stream);

}  // namespace gpubench::train::kernels
