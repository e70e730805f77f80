#include "models/fconv.h"

#include "gpubench/base/errors.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/optimizers.h"
#include "gpubench/train/update.h"
#include "models/token_batching.h"
#include "models/translation_step.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace gpubench::models {

namespace {
const double kSqrtHalf = std::sqrt(0.5);
}  // namespace

FConvOptions::FConvOptions(int64_t src_vocab, int64_t tgt_vocab)
    : src_vocab_(src_vocab), tgt_vocab_(tgt_vocab), convolutions_(fconv_wmt_en_de_convolutions()) {}

std::vector<ConvSpec> fconv_wmt_en_de_convolutions() {
  std::vector<ConvSpec> specs(9, {512, 3});
  specs.insert(specs.end(), 4, {1024, 3});
  specs.insert(specs.end(), 2, {2048, 1});
  return specs;
}

// ---- Building blocks ----

namespace {

class GradMultiply : public torch::autograd::Function<GradMultiply> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               double scale) {
    ctx->saved_data["scale"] = scale;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {grads[0] * ctx->saved_data["scale"].toDouble(), torch::Tensor()};
  }
};

/// fconv's Embedding() and PositionalEmbedding(): N(0, 0.1), the pad row zero (and, through
/// padding_idx, never updated by the lookup).
torch::nn::Embedding fconv_embedding(int64_t rows, int64_t dim) {
  torch::nn::Embedding embedding(torch::nn::EmbeddingOptions(rows, dim).padding_idx(kFairseqPad));
  torch::NoGradGuard no_grad;
  embedding->weight.normal_(0, 0.1);
  embedding->weight.select(0, kFairseqPad).zero_();
  return embedding;
}

/// Token embedding plus learned position embedding (make_positions: pad-aware, from pad + 1).
torch::Tensor embed(torch::nn::Embedding& tokens, torch::nn::Embedding& positions,
                    const torch::Tensor& ids) {
  return tokens(ids) + positions(make_positions(ids, kFairseqPad));
}

/// The projections of the residual path: a weight-normed Linear where the width changes.
std::vector<WeightNormLinear> residual_projections(torch::nn::Module& owner,
                                                   const std::vector<ConvSpec>& convs) {
  std::vector<WeightNormLinear> projections;
  int64_t in = convs.front().channels;
  for (std::size_t i = 0; i < convs.size(); ++i) {
    WeightNormLinear projection{nullptr};
    if (in != convs[i].channels) {
      projection = owner.register_module("projection" + std::to_string(i),
                                         WeightNormLinear(in, convs[i].channels));
    }
    projections.push_back(projection);
    in = convs[i].channels;
  }
  return projections;
}

/// What the encoder and the decoder (`Impl`) register first, alike and in this order: the
/// token embeddings of `vocab` words, the position embeddings, fc1, the residual projections
/// and the convolution list, still empty.
template <typename Impl>
void register_fconv_input(Impl& self, const FConvOptions& o, int64_t vocab) {
  const auto& convs = o.convolutions();
  TORCH_CHECK(!convs.empty(), "fconv needs at least one convolution");
  self.embed_tokens = self.register_module("embed_tokens", fconv_embedding(vocab, o.embed_dim()));
  self.embed_positions =
      self.register_module("embed_positions", fconv_embedding(o.max_positions(), o.embed_dim()));
  self.fc1 = self.register_module(
      "fc1", WeightNormLinear(o.embed_dim(), convs.front().channels, o.dropout()));
  self.projections = residual_projections(self, convs);
  self.convolutions = self.register_module("convolutions", torch::nn::ModuleList());
}

}  // namespace

torch::Tensor grad_multiply(const torch::Tensor& x, double scale) {
  return GradMultiply::apply(x, scale);
}

WeightNormLinearImpl::WeightNormLinearImpl(int64_t in, int64_t out, double dropout) {
  torch::NoGradGuard no_grad;
  auto v = torch::empty({out, in}).normal_(0, std::sqrt((1 - dropout) / static_cast<double>(in)));
  weight_g = register_parameter("weight_g", torch::norm_except_dim(v, 2, 0));
  weight_v = register_parameter("weight_v", v);
  bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor WeightNormLinearImpl::weight() const {
  return torch::_weight_norm(weight_v, weight_g, 0);
}

torch::Tensor WeightNormLinearImpl::forward(const torch::Tensor& x) {
  return torch::linear(x, weight(), bias);
}

WeightNormConvTbcImpl::WeightNormConvTbcImpl(int64_t in, int64_t out, int64_t kernel,
                                             int64_t padding_, double dropout, bool causal_trim_)
    : padding(padding_), causal_trim(causal_trim_) {
  torch::NoGradGuard no_grad;
  const double std = std::sqrt(4 * (1 - dropout) / static_cast<double>(kernel * in));
  auto v = torch::empty({kernel, in, out}).normal_(0, std);
  weight_g = register_parameter("weight_g", torch::norm_except_dim(v, 2, 2));
  weight_v = register_parameter("weight_v", v);
  bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor WeightNormConvTbcImpl::forward(const torch::Tensor& x) {
  const auto weight = torch::_weight_norm(weight_v, weight_g, 2);
  // Under autocast the input arrives in the autocast dtype; the weights follow it, as autocast
  // does for conv_tbc on CUDA (and a no-op in fp32).
  auto out = torch::conv_tbc(x.contiguous(), weight.to(x.scalar_type()), bias.to(x.scalar_type()),
                             padding);
  // LinearizedConvolution (training): padding k - 1 on both ends, drop the future steps.
  if (causal_trim && padding > 0) out = out.slice(0, 0, out.size(0) - padding);
  return out;
}

// ---- Encoder ----

FConvEncoderImpl::FConvEncoderImpl(const FConvOptions& o, int64_t attention_layers)
    : options(o), grad_scale(1.0 / (2.0 * static_cast<double>(attention_layers))) {
  register_fconv_input(*this, o, o.src_vocab());
  const auto& convs = o.convolutions();
  int64_t in = convs.front().channels;
  for (const auto& c : convs) {
    // Odd kernels pad inside conv_tbc; even ones are padded explicitly in forward().
    const int64_t padding = c.kernel % 2 == 1 ? c.kernel / 2 : 0;
    convolutions->push_back(
        WeightNormConvTbc(in, 2 * c.channels, c.kernel, padding, o.dropout(), false));
    in = c.channels;
  }
  fc2 = register_module("fc2", WeightNormLinear(in, o.embed_dim()));
}

FConvEncoderOut FConvEncoderImpl::forward(const torch::Tensor& src_tokens, bool src_padded) {
  const bool train = is_training();
  const double p = options.dropout();
  auto x = torch::dropout(embed(embed_tokens, embed_positions, src_tokens), p, train);
  const auto input_embedding = x;
  x = fc1(x).transpose(0, 1);  // B x T x C -> T x B x C

  FConvEncoderOut out;
  torch::Tensor time_major_mask;  // [T, B, 1]
  if (src_padded) {
    out.padding_mask = src_tokens.eq(kFairseqPad);
    time_major_mask = out.padding_mask->t().unsqueeze(-1);
  }
  const auto& convs = options.convolutions();
  for (std::size_t i = 0; i < convs.size(); ++i) {
    const auto residual = projections[i] ? projections[i](x) : x;
    if (src_padded) x = x.masked_fill(time_major_mask, 0);
    x = torch::dropout(x, p, train);
    const int64_t k = convs[i].kernel;
    if (k % 2 == 0) x = torch::constant_pad_nd(x, {0, 0, 0, 0, (k - 1) / 2, k / 2});
    x = torch::glu(convolutions[i]->as<WeightNormConvTbc>()->forward(x), 2);
    x = (x + residual) * kSqrtHalf;
  }
  x = fc2(x.transpose(1, 0));
  if (src_padded) x = x.masked_fill(out.padding_mask->unsqueeze(-1), 0);
  // Scale the gradient reaching the encoder through the decoder's many attention layers.
  out.keys = grad_multiply(x, grad_scale);
  out.values = (out.keys + input_embedding) * kSqrtHalf;
  return out;
}

// ---- Attention ----

FConvAttentionImpl::FConvAttentionImpl(int64_t conv_channels, int64_t embed_dim) {
  in_projection = register_module("in_projection", WeightNormLinear(conv_channels, embed_dim));
  out_projection = register_module("out_projection", WeightNormLinear(embed_dim, conv_channels));
}

torch::Tensor FConvAttentionImpl::forward(const torch::Tensor& x,
                                          const torch::Tensor& target_embedding,
                                          const torch::Tensor& keys_t, const torch::Tensor& values,
                                          const std::optional<torch::Tensor>& padding_mask,
                                          const torch::Tensor& length_scale) {
  auto scores = torch::bmm((in_projection(x) + target_embedding) * kSqrtHalf, keys_t);
  if (padding_mask) {
    scores =
        scores.masked_fill(padding_mask->unsqueeze(1), -std::numeric_limits<float>::infinity());
  }
  auto context = torch::bmm(torch::softmax(scores, -1), values) * length_scale;
  return (out_projection(context) + x) * kSqrtHalf;
}

// ---- Decoder ----

FConvDecoderImpl::FConvDecoderImpl(const FConvOptions& o) : options(o) {
  register_fconv_input(*this, o, o.tgt_vocab());
  const auto& convs = o.convolutions();
  attention = register_module("attention", torch::nn::ModuleList());
  int64_t in = convs.front().channels;
  for (const auto& c : convs) {
    convolutions->push_back(
        WeightNormConvTbc(in, 2 * c.channels, c.kernel, c.kernel - 1, o.dropout(), true));
    attention->push_back(FConvAttention(c.channels, o.embed_dim()));
    in = c.channels;
  }
  fc2 = register_module("fc2", WeightNormLinear(in, o.out_embed_dim()));
  fc3 = register_module("fc3", WeightNormLinear(o.out_embed_dim(), o.tgt_vocab(), o.dropout()));
}

torch::Tensor FConvDecoderImpl::forward(const torch::Tensor& prev_output_tokens,
                                        const FConvEncoderOut& encoder) {
  const bool train = is_training();
  const double p = options.dropout();
  const auto keys_t = encoder.keys.transpose(1, 2).contiguous();  // [B, E, S]
  // s * sqrt(1 / s) for s real source tokens per sentence.
  torch::Tensor length_scale;
  if (encoder.padding_mask) {
    const auto s = (encoder.padding_mask->size(1) -
                    encoder.padding_mask->to(torch::kFloat).sum(1, /*keepdim=*/true))
                       .unsqueeze(-1);
    length_scale = s * s.rsqrt();
  } else {
    const auto s = static_cast<double>(encoder.keys.size(1));
    length_scale =
        torch::full({1, 1, 1}, s * std::sqrt(1.0 / s), encoder.keys.options().dtype(torch::kFloat));
  }

  auto x = torch::dropout(embed(embed_tokens, embed_positions, prev_output_tokens), p, train);
  const auto target_embedding = x;
  x = fc1(x).transpose(0, 1);  // T x B x C
  const auto& convs = options.convolutions();
  for (std::size_t i = 0; i < convs.size(); ++i) {
    const auto residual = projections[i] ? projections[i](x) : x;
    x = torch::dropout(x, p, train);
    x = torch::glu(convolutions[i]->as<WeightNormConvTbc>()->forward(x), 2);
    x = attention[i]
            ->as<FConvAttention>()
            ->forward(x.transpose(1, 0), target_embedding, keys_t, encoder.values,
                      encoder.padding_mask, length_scale)
            .transpose(1, 0);
    x = (x + residual) * kSqrtHalf;
  }
  x = torch::dropout(fc2(x.transpose(1, 0)), p, train);
  return fc3(x);
}

FConvModelImpl::FConvModelImpl(const FConvOptions& o) {
  encoder =
      register_module("encoder", FConvEncoder(o, static_cast<int64_t>(o.convolutions().size())));
  decoder = register_module("decoder", FConvDecoder(o));
}

torch::Tensor FConvModelImpl::forward(const torch::Tensor& src_tokens,
                                      const torch::Tensor& prev_output_tokens, bool src_padded) {
  return decoder(prev_output_tokens, encoder(src_tokens, src_padded));
}

double fconv_pair_macs(const FConvOptions& o, int64_t src, int64_t tgt) {
  const auto s = static_cast<double>(src);
  const auto t = static_cast<double>(tgt);
  const auto e = static_cast<double>(o.embed_dim());
  const auto& convs = o.convolutions();
  double per_source = 0, per_target = 0, per_sentence = 0;
  auto in = static_cast<double>(convs.front().channels);
  per_source += e * in;  // fc1
  per_target += e * in;
  for (const ConvSpec& c : convs) {
    const auto channels = static_cast<double>(c.channels);
    const auto kernel = static_cast<double>(c.kernel);
    const double projection = in != channels ? in * channels : 0.0;
    const double conv = kernel * in * 2 * channels;  // per output step
    per_source += projection + conv;
    per_target += projection + 2 * channels * e + 2 * s * e;  // attention
    per_sentence += (t + kernel - 1) * conv;  // the causal conv's output before the trim
    in = channels;
  }
  per_source += in * e;  // encoder fc2
  const auto out = static_cast<double>(o.out_embed_dim());
  per_target += in * out + out * static_cast<double>(o.tgt_vocab());  // decoder fc2, fc3
  return s * per_source + t * per_target + per_sentence;
}

// ---- The workload ----

namespace {

ParamSchema fconv_model_schema() {
  std::vector<int64_t> channels, kernels;
  for (const auto& c : fconv_wmt_en_de_convolutions()) {
    channels.push_back(c.channels);
    kernels.push_back(c.kernel);
  }
  LengthProfile wmt14;
  wmt14.max_len = 251;  // clean-corpus-n 1-250 words, plus EOS
  wmt14.max_ratio = 1.5;
  std::vector<ParamSpec> specs = {
      {"src_vocab",
       ParamKind::kInt,
       40000,
       "source (en) dictionary, special tokens included",
       {},
       5},
      {"tgt_vocab",
       ParamKind::kInt,
       40000,
       "target (de) dictionary, special tokens included",
       {},
       5},
      {"embed_dim", ParamKind::kInt, 768, "token and position embedding width", {}, 1},
      {"out_embed_dim", ParamKind::kInt, 512, "decoder fc2 output width (into fc3)", {}, 1},
      {"max_positions", ParamKind::kInt, 1024, "rows of each learned position table", {}, 3},
      {"conv_channels", ParamKind::kIntList, Json(channels),
       "output channels per conv layer (GLU input is 2x)"},
      {"conv_kernels", ParamKind::kIntList, Json(kernels), "kernel width per conv layer"},
      {"dropout",
       ParamKind::kNumber,
       0.2,
       "dropout on embeddings, conv inputs, decoder fc2",
       {},
       0},
      {"label_smoothing", ParamKind::kNumber, 0.1, "label-smoothed cross-entropy epsilon", {}, 0},
  };
  const ParamSchema batching = token_batching_schema(wmt14);
  specs.insert(specs.end(), batching.specs().begin(), batching.specs().end());
  return ParamSchema(std::move(specs));
}

ParamSchema fconv_optimizer_schema() {
  return {
      {"name", ParamKind::kString, "nag", "fairseq's NAG: SGD with Nesterov momentum", {"nag"}},
      {"lr", ParamKind::kNumber, 0.5, "learning rate (fixed schedule)", {}, 0},
      {"momentum", ParamKind::kNumber, 0.99, "Nesterov momentum", {}, 0},
      {"clip_norm", ParamKind::kNumber, 0.1, "global gradient-norm clip; 0 = off", {}, 0},
  };
}

FConvOptions fconv_options(const Params& m) {
  const auto channels = m.i64s("conv_channels");
  const auto kernels = m.i64s("conv_kernels");
  GPUBENCH_CHECK(!channels.empty() && channels.size() == kernels.size(), ConfigError,
                 "model.conv_channels and model.conv_kernels: expected two lists of the same "
                 "non-zero length, got {} and {}",
                 channels.size(), kernels.size());
  std::vector<ConvSpec> convs;
  for (std::size_t i = 0; i < channels.size(); ++i) convs.push_back({channels[i], kernels[i]});
  return FConvOptions(m.i64("src_vocab"), m.i64("tgt_vocab"))
      .embed_dim(m.i64("embed_dim"))
      .out_embed_dim(m.i64("out_embed_dim"))
      .max_positions(m.i64("max_positions"))
      .convolutions(convs)
      .dropout(m.f64("dropout"));
}

/// The fconv training step: NAG at a constant rate over token-budget batches.
std::unique_ptr<TrainStep> prepare_fconv_step(const StepContext& ctx) {
  const auto shapes = plan_token_batches(length_profile(ctx.model),
                                         token_batch_options(ctx.model, ctx.batch), ctx.seed);
  for (const auto& shape : shapes) {
    // Learned positions run up to length + pad, inside the table.
    TORCH_CHECK(
        std::max(shape.src_max(), shape.tgt_max()) + kFairseqPad < ctx.model.i64("max_positions"),
        "a sentence is longer than the position table");
  }
  auto model = train::build_model<FConvModel>(
      train::reuse_key("fairseq-fconv", ctx.model.json().dump(), ctx.seed), ctx.device, ctx.seed,
      [&] { return FConvModel(fconv_options(ctx.model)); });
  TokenBatches batches(shapes, ctx.model.i64("src_vocab"), ctx.model.i64("tgt_vocab"), ctx.device,
                       ctx.seed + 1);
  train::SgdOptions nag;
  nag.lr = ctx.optimizer.f64("lr");
  nag.momentum = ctx.optimizer.f64("momentum");
  nag.nesterov = true;
  std::vector<train::ParamGroup> groups{{model->parameters(), 0.0}};
  train::Updater updater(std::make_unique<train::Sgd>(std::move(groups), nag), ctx.precision,
                         ctx.device, ctx.optimizer.f64("clip_norm"), train::constant(nag.lr));
  return std::make_unique<TranslationStep<FConvModel>>(
      std::move(model), std::move(batches), std::move(updater), ctx,
      ctx.model.f64("label_smoothing"),
      [options = fconv_options(ctx.model)](int64_t src, int64_t tgt) {
        return fconv_pair_macs(options, src, tgt);
      });
}

}  // namespace

Architecture fairseq_fconv_architecture() {
  return make_architecture(
      "fairseq-fconv", "fairseq convolutional seq2seq (fconv), weight-normed GLU convolutions, NAG",
      fconv_model_schema(), fconv_optimizer_schema(), &prepare_fconv_step,
      [](const Params& model) { return total_parameters(FConvModel(fconv_options(model))); });
}

}  // namespace gpubench::models
