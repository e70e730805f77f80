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

/// softmax(q k^T / sqrt(head_dim) + mask) v with dropout `dropout_p` on the probabilities; q, k,
/// v are [batch, heads, length, head_dim]. `mask` is additive (0 or a large negative),
/// broadcastable to [batch, heads, q_len, k_len]; `is_causal` lets query i see keys <= i.
/// `kind`: "stored" or "fused" (attention_param()).
inline torch::Tensor attention(const std::string& kind, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const std::optional<torch::Tensor>& mask, double dropout_p,
                               bool is_causal = false) {
  if (kind == "fused") {
    return compat::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal);
  }
  TORCH_CHECK(kind == "stored", "attention must be stored or fused, not ", kind);
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

}  // namespace gpubench::models
