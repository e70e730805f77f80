// Transformer Big as fairseq v0.9.0 (df2f84ce) builds transformer_vaswani_wmt_en_de_big with
// --share-all-embeddings: 6+6 post-norm layers, 1024 wide, FFN 4096, 16 heads, one 32768 x 1024
// table for both embeddings and the output projection, sinusoidal positions. Input: token-budget
// batches of WMT16-like sentence pairs (models/token_batching.h). Loss: label-smoothed
// cross-entropy 0.1 summed over target tokens, / ntokens. Optimizer: Adam (0.9, 0.98) with the
// inverse-square-root warm-up. Spec: shared/specs/language-workloads.md §1.
#pragma once

#include "gpubench/train/workload.h"
#include "models/fast_paths.h"
#include "models/linear.h"
#include "models/token_batching.h"

#include <torch/nn.h>

#include <optional>
#include <string>
#include <utility>

namespace gpubench::models {

/// Shape and regularization of fairseq's encoder-decoder Transformer (encoder and decoder alike).
///
/// Example:
/// ```
/// FairseqTransformer big(FairseqTransformerOptions(32768));  // transformer_vaswani_wmt_en_de_big
/// ```
struct FairseqTransformerOptions {
  explicit FairseqTransformerOptions(int64_t vocab_size) : vocab_size_(vocab_size) {}
  /// Joined source/target dictionary size, special tokens included.
  TORCH_ARG(int64_t, vocab_size);
  /// Width of embeddings and every hidden state. Default: 1024
  TORCH_ARG(int64_t, embed_dim) = 1024;
  /// Width of the feed-forward layer. Default: 4096
  TORCH_ARG(int64_t, ffn_dim) = 4096;
  /// Attention heads. Default: 16
  TORCH_ARG(int64_t, heads) = 16;
  /// Encoder layers. Default: 6
  TORCH_ARG(int64_t, encoder_layers) = 6;
  /// Decoder layers. Default: 6
  TORCH_ARG(int64_t, decoder_layers) = 6;
  /// Dropout on embeddings and sub-layer outputs. Default: 0.3
  TORCH_ARG(double, dropout) = 0.3;
  /// Dropout on attention probabilities. Default: 0
  TORCH_ARG(double, attention_dropout) = 0.0;
  /// Dropout after the feed-forward ReLU. Default: 0
  TORCH_ARG(double, activation_dropout) = 0.0;
  /// Longest sentence the position table covers [tokens]. Default: 1024
  TORCH_ARG(int64_t, max_positions) = 1024;
  /// "stored" (explicit softmax, probabilities kept for the backward, as fairseq's
  /// MultiheadAttention) or "fused" (scaled_dot_product_attention); models/attention.h.
  /// Default: "stored"
  TORCH_ARG(std::string, attention) = "stored";
};

/// fairseq's SinusoidalPositionalEmbedding.get_embedding: `rows` x `dim`, sines of all
/// frequencies then cosines (not interleaved), frequency step log(10000) / (dim / 2 - 1), row
/// `pad` zero.
torch::Tensor sinusoidal_table(int64_t rows, int64_t dim, int64_t pad);

/// fairseq's MultiheadAttention with its projections packed for speed: self-attention projects
/// q, k, v with one [3d, d] Linear, encoder attention q with one and k, v with another (the same
/// parameters as fairseq's four d x d layers). Softmax(q k^T / sqrt(head_dim)) v, stored or fused
/// (`kind`, models/attention.h).
/// Its fast path (models/fast_paths.h): the projections' q, k, v through split_heads, stored
/// attention's fast form with this module's causal masks.
class FairseqAttentionImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  FairseqAttentionImpl(int64_t embed_dim, int64_t heads, double dropout, bool self_attention,
                       std::string kind = "stored");
  /// query [B, Tq, d]; memory [B, Tk, d] (ignored for self-attention). `mask`: additive
  /// [B, 1, 1, Tk] (0 or -inf) or none; `causal`: each query sees keys up to its own position.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& memory,
                        const std::optional<torch::Tensor>& mask, bool causal);

  int64_t heads;
  double dropout;
  std::string kind;         ///< "stored" or "fused"
  Linear in_proj{nullptr};  ///< self: q, k, v. encoder attention: q only
  Linear kv_proj{nullptr};  ///< encoder attention: k, v; null for self-attention
  Linear out_proj{nullptr};
  CausalMasks causal_masks;  ///< the fast path's, one per shape
};
TORCH_MODULE(FairseqAttention);

/// Post-norm encoder layer: self-attention, dropout, residual, LayerNorm; ReLU FFN, dropout,
/// residual, LayerNorm (each ending train::residual_layer_norm, fused where runtime.fused_norm
/// says).
class TransformerEncoderLayerImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  explicit TransformerEncoderLayerImpl(const FairseqTransformerOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const std::optional<torch::Tensor>& mask);

  FairseqTransformerOptions options;
  FairseqAttention self_attn{nullptr};
  torch::nn::LayerNorm self_attn_norm{nullptr}, final_norm{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

/// Post-norm decoder layer: causal self-attention, encoder attention, FFN, each followed by
/// dropout, residual and LayerNorm.
class TransformerDecoderLayerImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  explicit TransformerDecoderLayerImpl(const FairseqTransformerOptions& options);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& encoder_out,
                        const std::optional<torch::Tensor>& encoder_mask);

  FairseqTransformerOptions options;
  FairseqAttention self_attn{nullptr}, encoder_attn{nullptr};
  torch::nn::LayerNorm self_attn_norm{nullptr}, encoder_attn_norm{nullptr}, final_norm{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TransformerDecoderLayer);

/// The encoder-decoder with all embeddings shared (--share-all-embeddings).
class FairseqTransformerImpl : public torch::nn::Module {
 public:
  explicit FairseqTransformerImpl(const FairseqTransformerOptions& options);
  /// src_tokens [B, S] (left-padded), prev_output_tokens [B, T] -> logits [B, T, vocab].
  /// `src_padded` false promises no source padding, so attention runs unmasked as fairseq's
  /// does then (it drops an all-false padding mask).
  torch::Tensor forward(const torch::Tensor& src_tokens, const torch::Tensor& prev_output_tokens,
                        bool src_padded = true);
  /// Embeddings scaled by sqrt(d) plus sinusoidal positions, then dropout.
  torch::Tensor embed(const torch::Tensor& tokens);

  FairseqTransformerOptions options;
  torch::nn::Embedding embed_tokens{nullptr};  ///< encoder in, decoder in, output projection
  torch::Tensor positions;                     ///< buffer: the sinusoidal table
  torch::nn::ModuleList encoder_layers{nullptr}, decoder_layers{nullptr};
};
TORCH_MODULE(FairseqTransformer);

/// The registry entry: workload transformer-big.
/// The model's activation memory per batch shape (models/token_batching.h), the estimate by
/// which a one-step search probe picks the batch that peaks highest: per position, the saved
/// activations of each layer (about 9d + 2 ffn for an encoder layer, 13d + 2 ffn for a decoder
/// layer, 2d per source position for each decoder layer's encoder keys and values) and the
/// logits (3 vocab: the logits, their log-probabilities and the gradient); with `stored`
/// attention also, per pair of positions, head and layer, what the backward keeps: under
/// autocast the fp32 probabilities softmax keeps (two units of the bf16/fp16 activations) and
/// their half-precision copy for the product with v; in fp32 the probabilities alone; one more
/// copy where attention dropout is on. On the H200 (amp-bf16, 161536 tokens) the batch of the
/// longest sentences peaked 3.5-4% above the linear estimate's heaviest, which these terms
/// reproduce (4.2%). They are rough, so the model says so (uncertainty 5%): a search probe
/// trains every batch within that of the heaviest estimate. With `fused` attention, the linear
/// default (measured right on the H200).
ActivationModel transformer_activation_model(const FairseqTransformerOptions& options,
                                             Precision precision);

/// Forward multiply-adds of one sentence pair of `src` and `tgt` tokens: per encoder layer and
/// source token Q, K, V, output (4 d^2) and the feed-forward (2 d ffn), the scores and context
/// (2 src^2 d); per decoder layer and target token the self-attention's four projections, the
/// encoder attention's query and output (2 d^2), the feed-forward, and the scores and context
/// of both attentions (2 tgt^2 d + 2 tgt src d), and per source token its keys and values
/// (2 d^2); the tied output projection (d V per target token). docs/workloads/transformer-big.md
double transformer_pair_macs(const FairseqTransformerOptions& options, int64_t src, int64_t tgt);

Architecture fairseq_transformer_architecture();

}  // namespace gpubench::models
