// Scaled dot-product attention in the two forms an attention workload can train with (its
// `model.attention` setting), shared by the BERT family (bert-base, bert-base-mlm,
// bert-finetune, mt-dnn), transformer-big and unsupmt:
// - "stored": softmax(q k^T / sqrt(d) + mask), dropout on the probabilities, then the product
//   with v, as separate operations. Autograd keeps the probabilities and the dropout mask of
//   every layer for the backward pass, as all four 2020 references did (google-research/bert's
//   attention_layer, fairseq's MultiheadAttention, XLM's MultiHeadAttention, MT-DNN's
//   pytorch-pretrained-bert BertSelfAttention). Their [batch, heads, L, L] tensors are what
//   bounds the 2020 max batches.
// - "fused": libtorch's scaled_dot_product_attention (flash / memory-efficient kernels on CUDA
//   with libtorch 2.x), which recomputes them in the backward and stores neither; today's
//   Hugging Face and fairseq run this.
// Same parameters and the same function either way; docs/attention.md gives the reasons for the
// default and the measured difference.
#pragma once

#include "gpubench/base/compat.h"
#include "gpubench/base/params.h"
#include "gpubench/train/attention_softmax.h"
#include "models/fast_paths.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

namespace gpubench::models {

/// The `attention` key of an attention workload's `model:` section.
inline ParamSpec attention_param() {
  return {"attention",
          ParamKind::kString,
          "stored",
          "stored: explicit softmax and dropout, probabilities and dropout masks kept for the "
          "backward (the 2020 references); fused: libtorch's scaled_dot_product_attention "
          "kernel, which keeps neither",
          {"stored", "fused"}};
}

/// Stored attention on the fast path (runtime.fast_paths, models/fast_paths.h): the same
/// operations as the plain one in attention() but for the scores, which one batched GEMM
/// writes already scaled (alpha = 1/sqrt(head_dim), where the plain path divides in a pass of
/// its own; the same value up to one rounding), on top of the causal mask built once per shape
/// (`masks`; the plain path builds a boolean mask and fills the scores every call), the
/// padding mask then added. q, k, v and the product with v are the plain path's. With
/// `fused_softmax` (runtime.fused_softmax) the masks, softmax and dropout are one fused function
/// where it runs (train::fused_attention_probs), which keeps the same tensors.
inline torch::Tensor stored_attention_fast(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v,
                                           const std::optional<torch::Tensor>& mask,
                                           double dropout_p, bool is_causal, CausalMasks* masks,
                                           bool fused_softmax = false) {
  const int64_t batch = q.size(0), heads = q.size(1), q_len = q.size(2), k_len = k.size(2);
  const int64_t head_dim = q.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  // [B, heads, L, d] -> [B * heads, L, d]: a copy where q, k, v are views of a fused
  // projection, as matmul's own folding of the batch dimensions makes.
  const auto q3 = q.reshape({batch * heads, q_len, head_dim});
  const auto k3 = k.reshape({batch * heads, k_len, head_dim});
  const auto v3 = v.reshape({batch * heads, k_len, v.size(3)});
  // The scale in the GEMM (compat::scaled_bmm). The causal mask is added after it, not given
  // as baddbmm's input with beta 1, which on libtorch 1.13's CPU read uninitialized memory
  // too (NaN losses in transformer-big's fast path, run alone in a process).
  torch::Tensor scores = compat::scaled_bmm(q3, k3.transpose(1, 2), scale);
  if (fused_softmax) {
    const auto scores4 = scores.view({batch, heads, q_len, k_len});
    if (train::fused_attention_softmax_runs(scores4, mask)) {
      const auto probs = train::fused_attention_probs(scores4, mask, is_causal, dropout_p);
      return torch::bmm(probs.view({batch * heads, q_len, k_len}), v3)
          .view({batch, heads, q_len, v.size(3)});
    }
  }
  if (is_causal) {
    torch::Tensor built;
    const torch::Tensor* causal = nullptr;
    if (masks != nullptr) {
      causal = &masks->get(q_len, k_len, q3.options());
    } else {
      built = CausalMasks().get(q_len, k_len, q3.options());
      causal = &built;
    }
    scores = scores + *causal;
  }
  scores = scores.view({batch, heads, q_len, k_len});
  // Out of place: an in-place add on this view would make autograd copy the whole scores in the
  // backward (CopySlices).
  if (mask) scores = scores + *mask;
  auto probs = torch::softmax(scores, -1);
  if (dropout_p > 0) probs = torch::dropout(probs, dropout_p, /*train=*/true);
  return torch::bmm(probs.reshape({batch * heads, q_len, k_len}), v3)
      .view({batch, heads, q_len, v.size(3)});
}

/// softmax(q k^T / sqrt(head_dim) + mask) v with dropout `dropout_p` on the probabilities; q, k,
/// v are [batch, heads, length, head_dim]. `mask` is additive (0 or a large negative),
/// broadcastable to [batch, heads, q_len, k_len]; `is_causal` lets query i see keys <= i.
/// `kind`: "stored" or "fused" (attention_param()). `fast` (runtime.fast_paths) runs stored
/// attention as stored_attention_fast, with the caller's cache of causal masks (`masks`, or
/// none: built per call) and `fused_softmax` (runtime.fused_softmax); fused attention is the
/// same kernel either way.
inline torch::Tensor attention(const std::string& kind, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const std::optional<torch::Tensor>& mask, double dropout_p,
                               bool is_causal = false, bool fast = false,
                               CausalMasks* masks = nullptr, bool fused_softmax = false) {
  if (kind == "fused") {
    return compat::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal);
  }
  TORCH_CHECK(kind == "stored", "attention must be stored or fused, not ", kind);
  if (fast) {
    return stored_attention_fast(q, k, v, mask, dropout_p, is_causal, masks, fused_softmax);
  }
  // BERT's order: scores scaled after the product (fairseq scales q first: the same values up
  // to rounding), the mask added, softmax over the keys.
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (is_causal) {
    auto future = torch::ones({q.size(-2), k.size(-2)}, q.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  }
  if (mask) scores = scores + *mask;
  auto probs = torch::softmax(scores, -1);
  if (dropout_p > 0) probs = torch::dropout(probs, dropout_p, /*train=*/true);
  return torch::matmul(probs, v);
}

/// Multiply-adds of one encoder layer's forward over one sequence of `length` positions of
/// width `width`: the q, k, v and output projections (4 width^2 a position), the feed-forward
/// (2 width ffn), the scores and the weighted values (2 length^2 width). BERT's, XLM's and
/// fairseq's encoder layers all have this shape; their FLOPs formulas (step_flops) share it.
inline double encoder_layer_macs(double length, double width, double ffn) {
  return length * (4 * width * width + 2 * width * ffn) + 2 * length * length * width;
}

}  // namespace gpubench::models
