// Conv. Seq2Seq as fairseq v0.9.0 (df2f84ce) builds fconv_wmt_en_de (Gehring et al. 2017):
// embeddings 768 with learned positions, 15 + 15 GLU convolutions [(512,3)]*9 + [(1024,3)]*4 +
// [(2048,1)]*2, attention in every decoder layer, weight normalization everywhere, separate
// en/de dictionaries. Input: token-budget batches of WMT14-like sentence pairs
// (models/token_batching.h). Loss: label-smoothed cross-entropy 0.1 summed over target tokens,
// / ntokens. Optimizer: NAG (SGD with Nesterov momentum 0.99) at lr 0.5, clip-norm 0.1.
// Spec: shared/specs/language-workloads.md §2.
#pragma once

#include "gpubench/train/workload.h"

#include <torch/nn.h>

#include <optional>
#include <utility>
#include <vector>

namespace gpubench::models {

/// One convolution layer of the stack: output channels (before GLU halves 2x this) and width.
struct ConvSpec {
  int64_t channels;
  int64_t kernel;
};

/// Shape and regularization of fconv (encoder and decoder share the conv stack).
///
/// Example:
/// ```
/// FConvModel model(FConvOptions(40000, 40000));  // fconv_wmt_en_de
/// ```
struct FConvOptions {
  FConvOptions(int64_t src_vocab, int64_t tgt_vocab);
  /// Source (en) dictionary size, special tokens included.
  TORCH_ARG(int64_t, src_vocab);
  /// Target (de) dictionary size, special tokens included.
  TORCH_ARG(int64_t, tgt_vocab);
  /// Token and position embedding width, encoder and decoder. Default: 768
  TORCH_ARG(int64_t, embed_dim) = 768;
  /// Width of the decoder's fc2 output, fed to fc3 (decoder_out_embed_dim). Default: 512
  TORCH_ARG(int64_t, out_embed_dim) = 512;
  /// Rows of each learned position table. Default: 1024
  TORCH_ARG(int64_t, max_positions) = 1024;
  /// Conv layers, encoder and decoder alike. Default: fconv_wmt_en_de's 15
  TORCH_ARG(std::vector<ConvSpec>, convolutions);
  /// Dropout on embeddings, before every convolution, after the decoder's fc2. Default: 0.2
  TORCH_ARG(double, dropout) = 0.2;
};

/// fconv_wmt_en_de's stack: [(512, 3)] * 9 + [(1024, 3)] * 4 + [(2048, 1)] * 2.
std::vector<ConvSpec> fconv_wmt_en_de_convolutions();

/// x in the forward pass, gradient times `scale` in the backward pass (fairseq's GradMultiply).
torch::Tensor grad_multiply(const torch::Tensor& x, double scale);

/// A Linear under nn.utils.weight_norm (dim 0): weight = g * v / ||v|| per output row.
/// Initialized as fconv's Linear(): v ~ N(0, sqrt((1 - dropout) / in)), bias 0, g = ||v||.
class WeightNormLinearImpl : public torch::nn::Module {
 public:
  WeightNormLinearImpl(int64_t in, int64_t out, double dropout = 0);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight() const;

  torch::Tensor weight_v, weight_g, bias;
};
TORCH_MODULE(WeightNormLinear);

/// fairseq's ConvTBC (time x batch x channel, torch.conv_tbc) under weight_norm(dim=2):
/// v [kernel, in, out], g [1, 1, out]. `causal_trim` drops the last padding steps of the
/// output, as LinearizedConvolution does in training. Initialized as fconv's ConvTBC():
/// v ~ N(0, sqrt(4 (1 - dropout) / (kernel * in))), bias 0, g = ||v||.
class WeightNormConvTbcImpl : public torch::nn::Module {
 public:
  WeightNormConvTbcImpl(int64_t in, int64_t out, int64_t kernel, int64_t padding, double dropout,
                        bool causal_trim);
  /// x [T, B, in] -> [T, B, out] (encoder, odd kernel) or the causal equivalent (decoder).
  torch::Tensor forward(const torch::Tensor& x);

  int64_t padding;
  bool causal_trim;
  torch::Tensor weight_v, weight_g, bias;
};
TORCH_MODULE(WeightNormConvTbc);

/// What the encoder hands the decoder.
struct FConvEncoderOut {
  torch::Tensor keys;    ///< [B, S, E]: fc2 output (attention keys), padding zeroed
  torch::Tensor values;  ///< [B, S, E]: (keys + input embedding) * sqrt(0.5)
  std::optional<torch::Tensor> padding_mask;  ///< [B, S] bool, none when nothing is padded
};

/// The convolutional encoder.
class FConvEncoderImpl : public torch::nn::Module {
 public:
  /// `attention_layers` sets the gradient scale of the output, 1 / (2 * attention_layers).
  FConvEncoderImpl(const FConvOptions& options, int64_t attention_layers);
  FConvEncoderOut forward(const torch::Tensor& src_tokens, bool src_padded);

  FConvOptions options;
  double grad_scale;
  torch::nn::Embedding embed_tokens{nullptr}, embed_positions{nullptr};
  WeightNormLinear fc1{nullptr}, fc2{nullptr};
  torch::nn::ModuleList convolutions{nullptr};
  std::vector<WeightNormLinear> projections;  ///< null where the width does not change
};
TORCH_MODULE(FConvEncoder);

/// fconv's AttentionLayer: dot-product attention of the decoder state (projected to the
/// embedding width, plus the target embedding) over the encoder keys, summing its values,
/// scaled by sqrt(source length), projected back, plus the residual.
class FConvAttentionImpl : public torch::nn::Module {
 public:
  FConvAttentionImpl(int64_t conv_channels, int64_t embed_dim);
  /// x [B, T, C], target_embedding [B, T, E], keys_t [B, E, S], values [B, S, E];
  /// `length_scale` [B, 1, 1] or a scalar: s * sqrt(1 / s) for s non-pad source tokens.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& target_embedding,
                        const torch::Tensor& keys_t, const torch::Tensor& values,
                        const std::optional<torch::Tensor>& padding_mask,
                        const torch::Tensor& length_scale);

  WeightNormLinear in_projection{nullptr}, out_projection{nullptr};
};
TORCH_MODULE(FConvAttention);

/// The convolutional decoder: causal convolutions, attention in every layer, fc2, fc3 (not
/// shared with the embedding).
class FConvDecoderImpl : public torch::nn::Module {
 public:
  explicit FConvDecoderImpl(const FConvOptions& options);
  /// prev_output_tokens [B, T] -> logits [B, T, tgt_vocab].
  torch::Tensor forward(const torch::Tensor& prev_output_tokens, const FConvEncoderOut& encoder);

  FConvOptions options;
  torch::nn::Embedding embed_tokens{nullptr}, embed_positions{nullptr};
  WeightNormLinear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::nn::ModuleList convolutions{nullptr}, attention{nullptr};
  std::vector<WeightNormLinear> projections;
};
TORCH_MODULE(FConvDecoder);

/// Encoder and decoder.
class FConvModelImpl : public torch::nn::Module {
 public:
  explicit FConvModelImpl(const FConvOptions& options);
  /// src_tokens [B, S] (left-padded), prev_output_tokens [B, T] -> logits [B, T, tgt_vocab].
  /// `src_padded` false promises no source padding (fairseq then drops the mask).
  torch::Tensor forward(const torch::Tensor& src_tokens, const torch::Tensor& prev_output_tokens,
                        bool src_padded = true);

  FConvEncoder encoder{nullptr};
  FConvDecoder decoder{nullptr};
};
TORCH_MODULE(FConvModel);

/// Forward multiply-adds of one sentence pair of `src` and `tgt` tokens, as the step computes
/// them: per source token fc1 (embed x C_0), each layer's residual projection where the width
/// changes and its convolution (kernel x in x 2 C), fc2 (C_last x embed); per target token fc1,
/// the projections, each layer's attention (in and out projections, 2 C embed; scores and
/// context over the source, 2 src embed), fc2 (C_last x out_embed) and fc3 (out_embed x V); and
/// per sentence and decoder layer the causal convolution on tgt + kernel - 1 steps (it pads
/// kernel - 1 on both sides and trims the tail after computing it).
/// docs/workloads/conv-seq2seq.md, "FLOPs".
double fconv_pair_macs(const FConvOptions& options, int64_t src, int64_t tgt);

/// The registry entry: workload conv-seq2seq.
Architecture fairseq_fconv_architecture();

}  // namespace gpubench::models
