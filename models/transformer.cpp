#include "models/transformer.h"

#include "gpubench/base/compat.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/optimizers.h"
#include "gpubench/train/residual_norm.h"
#include "gpubench/train/update.h"
#include "models/attention.h"
#include "models/token_batching.h"
#include "models/translation_step.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace gpubench::models {

// ---- Modules ----

torch::Tensor sinusoidal_table(int64_t rows, int64_t dim, int64_t pad) {
  const int64_t half = dim / 2;
  const double step = std::log(10000.0) / static_cast<double>(half - 1);
  const auto frequencies = torch::exp(torch::arange(half, torch::kFloat) * -step);
  const auto angles = torch::arange(rows, torch::kFloat).unsqueeze(1) * frequencies.unsqueeze(0);
  auto table = torch::cat({torch::sin(angles), torch::cos(angles)}, 1);
  if (dim % 2 == 1) table = torch::cat({table, torch::zeros({rows, 1})}, 1);
  table.select(0, pad).zero_();
  return table;
}

namespace {

/// fairseq's transformer Linear(): Xavier-uniform weight, zero bias.
Linear xavier_linear(int64_t in, int64_t out) {
  Linear linear(in, out);
  torch::NoGradGuard no_grad;
  torch::nn::init::xavier_uniform_(linear->weight);
  linear->bias.zero_();
  return linear;
}

torch::nn::LayerNorm layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}));  // eps 1e-5, as fairseq's
}

/// norm(residual + dropout(sub)): ATen's ops, or one fused function (runtime.fused_norm).
torch::Tensor end_sublayer(const torch::Tensor& sub, const torch::Tensor& residual,
                           torch::nn::LayerNorm& norm, const FairseqTransformerOptions& o,
                           bool train, bool fused) {
  return train::residual_layer_norm(sub, residual, o.dropout(), train,
                                    {norm->weight, norm->bias, norm->options.eps()}, fused);
}

}  // namespace

FairseqAttentionImpl::FairseqAttentionImpl(int64_t embed_dim, int64_t heads_, double dropout_,
                                           bool self_attention, std::string kind_)
    : heads(heads_), dropout(dropout_), kind(std::move(kind_)) {
  TORCH_CHECK(embed_dim % heads == 0, "embed_dim must be a multiple of heads");
  in_proj = register_module("in_proj", Linear(embed_dim, (self_attention ? 3 : 1) * embed_dim));
  if (!self_attention) {
    kv_proj = register_module("kv_proj", Linear(embed_dim, 2 * embed_dim));
  }
  out_proj = register_module("out_proj", Linear(embed_dim, embed_dim));
  // MultiheadAttention.reset_parameters: each of q, k, v Xavier-uniform with gain 1/sqrt(2) as
  // its own d x d matrix (biases keep nn.Linear's init); the output projection plain Xavier with
  // a zero bias.
  torch::NoGradGuard no_grad;
  for (auto* projection : {&in_proj, &kv_proj}) {
    if (!*projection) continue;
    for (auto block : (*projection)->weight.split(embed_dim, 0)) {
      torch::nn::init::xavier_uniform_(block, 1.0 / std::sqrt(2.0));
    }
  }
  torch::nn::init::xavier_uniform_(out_proj->weight);
  out_proj->bias.zero_();
}

torch::Tensor FairseqAttentionImpl::forward(const torch::Tensor& query, const torch::Tensor& memory,
                                            const std::optional<torch::Tensor>& mask, bool causal) {
  const int64_t batch = query.size(0), length = query.size(1), dim = query.size(2);
  const int64_t head_dim = dim / heads;
  torch::Tensor q, k, v;
  if (!kv_proj) {
    // [B, T, 3d] -> 3 x [B, heads, T, head_dim]; unbind (one stack in backward), as Python's
    // `q, k, v = ...` does, not three selects (each a zeroed full-size gradient, then summed).
    // On the fast path split_heads: the same views, with one write of the three gradients.
    const auto qkv = fast_paths ? split_heads(in_proj(query), 3, heads)
                                : in_proj(query)
                                      .view({batch, length, 3, heads, head_dim})
                                      .permute({2, 0, 3, 1, 4})
                                      .unbind(0);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    const int64_t memory_length = memory.size(1);
    q = in_proj(query).view({batch, length, heads, head_dim}).transpose(1, 2);
    const auto kv = fast_paths ? split_heads(kv_proj(memory), 2, heads)
                               : kv_proj(memory)
                                     .view({batch, memory_length, 2, heads, head_dim})
                                     .permute({2, 0, 3, 1, 4})
                                     .unbind(0);
    k = kv[0];
    v = kv[1];
  }
  std::optional<torch::Tensor> additive;
  if (mask) additive = mask->to(q.dtype());
  // fairseq scales q by head_dim^-0.5 before q k^T; the same scale up to rounding.
  const auto context = models::attention(kind, q, k, v, additive, is_training() ? dropout : 0.0,
                                         causal, fast_paths, &causal_masks, fused.softmax);
  return out_proj(context.transpose(1, 2).reshape({batch, length, dim}));
}

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const FairseqTransformerOptions& o)
    : options(o) {
  const int64_t d = o.embed_dim();
  self_attn = register_module(
      "self_attn", FairseqAttention(d, o.heads(), o.attention_dropout(), true, o.attention()));
  self_attn_norm = register_module("self_attn_norm", layer_norm(d));
  fc1 = register_module("fc1", xavier_linear(d, o.ffn_dim()));
  fc2 = register_module("fc2", xavier_linear(o.ffn_dim(), d));
  final_norm = register_module("final_norm", layer_norm(d));
}

torch::Tensor TransformerEncoderLayerImpl::forward(const torch::Tensor& x,
                                                   const std::optional<torch::Tensor>& mask) {
  const bool train = is_training();
  auto h = end_sublayer(self_attn(x, x, mask, false), x, self_attn_norm, options, train,
                        fused.norm);
  auto ff = fc2(torch::dropout(torch::relu(fc1(h)), options.activation_dropout(), train));
  return end_sublayer(ff, h, final_norm, options, train, fused.norm);
}

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const FairseqTransformerOptions& o)
    : options(o) {
  const int64_t d = o.embed_dim();
  self_attn = register_module(
      "self_attn", FairseqAttention(d, o.heads(), o.attention_dropout(), true, o.attention()));
  self_attn_norm = register_module("self_attn_norm", layer_norm(d));
  encoder_attn = register_module(
      "encoder_attn", FairseqAttention(d, o.heads(), o.attention_dropout(), false, o.attention()));
  encoder_attn_norm = register_module("encoder_attn_norm", layer_norm(d));
  fc1 = register_module("fc1", xavier_linear(d, o.ffn_dim()));
  fc2 = register_module("fc2", xavier_linear(o.ffn_dim(), d));
  final_norm = register_module("final_norm", layer_norm(d));
}

torch::Tensor TransformerDecoderLayerImpl::forward(
    const torch::Tensor& x, const torch::Tensor& encoder_out,
    const std::optional<torch::Tensor>& encoder_mask) {
  const bool train = is_training();
  // Causal only: target padding follows every real token, so no real query can see a pad.
  auto h = end_sublayer(self_attn(x, x, std::nullopt, true), x, self_attn_norm, options, train,
                        fused.norm);
  h = end_sublayer(encoder_attn(h, encoder_out, encoder_mask, false), h, encoder_attn_norm,
                   options, train, fused.norm);
  auto ff = fc2(torch::dropout(torch::relu(fc1(h)), options.activation_dropout(), train));
  return end_sublayer(ff, h, final_norm, options, train, fused.norm);
}

FairseqTransformerImpl::FairseqTransformerImpl(const FairseqTransformerOptions& o) : options(o) {
  const int64_t d = o.embed_dim();
  embed_tokens = register_module(
      "embed_tokens", torch::nn::Embedding(
                          torch::nn::EmbeddingOptions(o.vocab_size(), d).padding_idx(kFairseqPad)));
  // fairseq sizes the table max_positions + pad + 1, since positions start at pad + 1.
  positions = register_buffer(
      "positions", sinusoidal_table(o.max_positions() + kFairseqPad + 1, d, kFairseqPad));
  encoder_layers = register_module("encoder_layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.encoder_layers(); ++i) {
    encoder_layers->push_back(TransformerEncoderLayer(o));
  }
  decoder_layers = register_module("decoder_layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.decoder_layers(); ++i) {
    decoder_layers->push_back(TransformerDecoderLayer(o));
  }
  torch::NoGradGuard no_grad;
  embed_tokens->weight.normal_(0, std::pow(static_cast<double>(d), -0.5));
  embed_tokens->weight.select(0, kFairseqPad).zero_();
}

torch::Tensor FairseqTransformerImpl::embed(const torch::Tensor& tokens) {
  const auto scale = std::sqrt(static_cast<double>(options.embed_dim()));
  const auto index = make_positions(tokens, kFairseqPad);
  const auto x =
      embed_tokens(tokens) * scale +
      positions.index_select(0, index.reshape({-1})).view({tokens.size(0), tokens.size(1), -1});
  return torch::dropout(x, options.dropout(), is_training());
}

torch::Tensor FairseqTransformerImpl::forward(const torch::Tensor& src_tokens,
                                              const torch::Tensor& prev_output_tokens,
                                              bool src_padded) {
  std::optional<torch::Tensor> mask;
  if (src_padded) {
    const int64_t batch = src_tokens.size(0), length = src_tokens.size(1);
    mask = torch::zeros({batch, 1, 1, length}, positions.options())
               .masked_fill(src_tokens.eq(kFairseqPad).view({batch, 1, 1, length}),
                            -std::numeric_limits<float>::infinity());
  }
  auto x = embed(src_tokens);
  for (const auto& layer : *encoder_layers) {
    x = layer->as<TransformerEncoderLayer>()->forward(x, mask);
  }
  auto y = embed(prev_output_tokens);
  for (const auto& layer : *decoder_layers) {
    y = layer->as<TransformerDecoderLayer>()->forward(y, x, mask);
  }
  // --share-all-embeddings: the output projection is the embedding table, without a bias.
  return torch::linear(y, embed_tokens->weight);
}

// ---- The workload ----

namespace {

ParamSchema transformer_model_schema() {
  std::vector<ParamSpec> specs = {
      {"vocab_size", ParamKind::kInt, 32768, "joined dictionary (special tokens included)", {}, 5},
      {"embed_dim", ParamKind::kInt, 1024, "embedding and hidden width", {}, 2},
      {"ffn_dim", ParamKind::kInt, 4096, "feed-forward width", {}, 1},
      {"heads", ParamKind::kInt, 16, "attention heads (divide embed_dim)", {}, 1},
      {"encoder_layers", ParamKind::kInt, 6, "encoder layers", {}, 1},
      {"decoder_layers", ParamKind::kInt, 6, "decoder layers", {}, 1},
      {"dropout", ParamKind::kNumber, 0.3, "dropout on embeddings and sub-layer outputs", {}, 0},
      {"attention_dropout", ParamKind::kNumber, 0.0, "dropout on attention probabilities", {}, 0},
      {"activation_dropout", ParamKind::kNumber, 0.0, "dropout after the FFN ReLU", {}, 0},
      {"max_positions", ParamKind::kInt, 1024, "rows of the sinusoidal table (+ pad + 1)", {}, 1},
      {"label_smoothing", ParamKind::kNumber, 0.1, "label-smoothed cross-entropy epsilon", {}, 0},
      attention_param(),
  };
  const ParamSchema batching = token_batching_schema(LengthProfile{});
  specs.insert(specs.end(), batching.specs().begin(), batching.specs().end());
  return ParamSchema(std::move(specs));
}

ParamSchema transformer_optimizer_schema() {
  return {
      {"name", ParamKind::kString, "adam", "fairseq's Adam (bias-corrected)", {"adam"}},
      {"lr", ParamKind::kNumber, 5e-4, "peak learning rate", {}, 0},
      {"beta1", ParamKind::kNumber, 0.9, "first-moment decay", {}, 0},
      {"beta2", ParamKind::kNumber, 0.98, "second-moment decay", {}, 0},
      {"eps", ParamKind::kNumber, 1e-8, "added to the denominator", {}, 0},
      {"weight_decay", ParamKind::kNumber, 0.0, "decoupled weight decay", {}, 0},
      {"clip_norm", ParamKind::kNumber, 0.0, "global gradient-norm clip; 0 = off", {}, 0},
      {"warmup_updates", ParamKind::kInt, 4000, "inverse_sqrt: linear warm-up updates", {}, 1},
      {"warmup_init_lr", ParamKind::kNumber, 1e-7, "inverse_sqrt: rate at update 0", {}, 0},
  };
}

FairseqTransformerOptions transformer_options(const Params& m) {
  return FairseqTransformerOptions(m.i64("vocab_size"))
      .embed_dim(m.i64("embed_dim"))
      .ffn_dim(m.i64("ffn_dim"))
      .heads(m.i64("heads"))
      .encoder_layers(m.i64("encoder_layers"))
      .decoder_layers(m.i64("decoder_layers"))
      .dropout(m.f64("dropout"))
      .attention_dropout(m.f64("attention_dropout"))
      .activation_dropout(m.f64("activation_dropout"))
      .max_positions(m.i64("max_positions"))
      .attention(m.str("attention"));
}

train::Updater transformer_updater(const torch::nn::Module& model, const Params& o,
                                   Precision precision, const torch::Device& device) {
  std::vector<train::ParamGroup> groups{{model.parameters(), o.f64("weight_decay")}};
  return train::Updater(
      train::make_adam(std::move(groups), o, train::WeightDecayMode::kDecoupled),  // fairseq's
      precision, device, o.f64("clip_norm"),
      train::inverse_sqrt(o.f64("lr"), o.i64("warmup_updates"), o.f64("warmup_init_lr")));
}

}  // namespace

ActivationModel transformer_activation_model(const FairseqTransformerOptions& o,
                                             Precision precision) {
  const auto d = static_cast<double>(o.embed_dim());
  const auto f = static_cast<double>(o.ffn_dim());
  const auto encoders = static_cast<double>(o.encoder_layers());
  const auto decoders = static_cast<double>(o.decoder_layers());
  ActivationModel m;
  // With fused attention the linear default ranks the batches as the H200 measured them
  // (2026-12-02: each probe's peak matched its timed run's to 0.01 GiB); kept as it is.
  if (o.attention() != "stored") return m;
  m.per_src = encoders * (9 * d + 2 * f) + decoders * 2 * d + 2 * d;
  m.per_tgt = decoders * (13 * d + 2 * f) + 2 * d + 3 * static_cast<double>(o.vocab_size());
  const bool half = precision == Precision::kAmpBf16 || precision == Precision::kAmpFp16;
  const double kept = static_cast<double>(o.heads()) *
                      ((half ? 3.0 : 1.0) + (o.attention_dropout() > 0 ? 1.0 : 0.0));
  m.per_src_src = encoders * kept;
  m.per_tgt_tgt = decoders * kept;
  m.per_tgt_src = decoders * kept;
  // The terms are rough (bytes per element differ by tensor and precision): a probe trains
  // every batch within 5% of the heaviest estimate.
  m.uncertainty = 0.05;
  return m;
}

double transformer_pair_macs(const FairseqTransformerOptions& o, int64_t src, int64_t tgt) {
  const auto d = static_cast<double>(o.embed_dim());
  const auto f = static_cast<double>(o.ffn_dim());
  const auto s = static_cast<double>(src);
  const auto t = static_cast<double>(tgt);
  const double encoder = encoder_layer_macs(s, d, f);
  const double decoder =
      t * (6 * d * d + 2 * d * f) + 2 * t * t * d + 2 * t * s * d + s * 2 * d * d;
  return static_cast<double>(o.encoder_layers()) * encoder +
         static_cast<double>(o.decoder_layers()) * decoder +
         t * d * static_cast<double>(o.vocab_size());
}

namespace {

/// The transformer training step: Adam with the inverse square root schedule over token-budget
/// batches.
std::unique_ptr<TrainStep> prepare_transformer_step(const StepContext& ctx) {
  const int64_t vocab = ctx.model.i64("vocab_size");
  const auto shapes = plan_token_batches(length_profile(ctx.model),
                                         token_batch_options(ctx.model, ctx.batch), ctx.seed);
  for (const auto& shape : shapes) {
    TORCH_CHECK(std::max(shape.src_max(), shape.tgt_max()) <= ctx.model.i64("max_positions"),
                "a sentence is longer than max_positions");
  }
  const auto options = transformer_options(ctx.model);
  auto model = train::build_model<FairseqTransformer>(
      train::reuse_key("fairseq-transformer", ctx.model.json().dump(), ctx.seed), ctx.device,
      ctx.seed, [&] { return FairseqTransformer(options); });
  TokenBatches batches(shapes, vocab, vocab, ctx.device, ctx.seed + 1,
                       transformer_activation_model(options, ctx.precision));
  auto updater = transformer_updater(*model, ctx.optimizer, ctx.precision, ctx.device);
  return std::make_unique<TranslationStep<FairseqTransformer>>(std::move(model), std::move(batches),
                                                               std::move(updater), ctx,
                                                               ctx.model.f64("label_smoothing"),
                                                               [options](int64_t src, int64_t tgt) {
                                                                 return transformer_pair_macs(
                                                                     options, src, tgt);
                                                               });
}

}  // namespace

Architecture fairseq_transformer_architecture() {
  return make_architecture(
      "fairseq-transformer",
      "fairseq encoder-decoder Transformer, all embeddings shared, token-budget batches",
      transformer_model_schema(), transformer_optimizer_schema(), &prepare_transformer_step,
      [](const Params& model) {
        return total_parameters(FairseqTransformer(transformer_options(model)));
      });
}

}  // namespace gpubench::models
