// XLM's transformer (models/unsupmt.h): the attention with its decoding cache, the layer, and the
// encoder or decoder with its greedy generation. The noise, the batches and the training step are
// in unsupmt.cpp.
#include "models/unsupmt.h"

#include "gpubench/train/residual_norm.h"
#include "models/attention.h"
#include "models/xlm_batching.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace gpubench::models {

namespace {

/// Additive key mask [B, 1, 1, L] from keep [B, L]: 0 where attended, -inf where padded (XLM
/// fills masked scores with -inf).
torch::Tensor additive_key_mask(const torch::Tensor& keep) {
  const auto sizes = std::vector<int64_t>{keep.size(0), 1, 1, keep.size(1)};
  return torch::zeros(sizes, torch::TensorOptions().device(keep.device()))
      .masked_fill(keep.view(sizes).logical_not(), -std::numeric_limits<float>::infinity());
}

/// keep [B, L]: position < length.
torch::Tensor non_pad_mask(const torch::Tensor& lengths, int64_t length) {
  return torch::arange(length, lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
}

}  // namespace

// ---- Attention ----

XlmAttentionImpl::XlmAttentionImpl(int64_t dim_, int64_t heads_, double dropout_, bool cross,
                                   std::string kind_)
    : dim(dim_), heads(heads_), dropout(dropout_), kind(std::move(kind_)) {
  TORCH_CHECK(dim % heads == 0, "dim must be a multiple of heads");
  if (cross) {
    q = register_module("q", Linear(dim, dim));
    kv = register_module("kv", Linear(dim, 2 * dim));
  } else {
    qkv = register_module("qkv", Linear(dim, 3 * dim));
  }
  out = register_module("out", Linear(dim, dim));
}

torch::Tensor XlmAttentionImpl::split_heads(const torch::Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads, dim / heads}).transpose(1, 2);
}

torch::Tensor XlmAttentionImpl::merge_heads(const torch::Tensor& x) const {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), dim});
}

torch::Tensor XlmAttentionImpl::self_attention(const torch::Tensor& x,
                                               const std::optional<torch::Tensor>& mask,
                                               bool causal) {
  const int64_t batch = x.size(0), length = x.size(1);
  // [B, L, 3D] -> 3 x [B, heads, L, D/heads]; unbind, whose backward is one stack (three
  // selects would each write a zeroed full-size gradient, then be summed); on the fast path
  // split_heads, whose backward writes the three gradients once.
  const auto qkv_heads =
      fast_paths
          ? models::split_heads(qkv(x), 3, heads)
          : qkv(x).view({batch, length, 3, heads, dim / heads}).permute({2, 0, 3, 1, 4}).unbind(0);
  std::optional<torch::Tensor> typed_mask;
  if (mask) typed_mask = mask->to(qkv_heads[0].scalar_type());
  auto context =
      models::attention(kind, qkv_heads[0], qkv_heads[1], qkv_heads[2], typed_mask,
                        is_training() ? dropout : 0.0, causal, fast_paths, &causal_masks,
                        fused.softmax);
  return out(merge_heads(context));
}

torch::Tensor XlmAttentionImpl::self_attention_step(const torch::Tensor& x,
                                                    torch::Tensor& key_cache,
                                                    torch::Tensor& value_cache, int64_t t,
                                                    int64_t max_len) {
  const int64_t batch = x.size(0);
  auto qkv_heads = qkv(x).view({batch, 1, 3, heads, dim / heads}).permute({2, 0, 3, 1, 4});
  if (!key_cache.defined()) {
    // Allocated at the first step, in the dtype the projection produces (autocast or not).
    const auto sizes = std::vector<int64_t>{batch, heads, max_len, dim / heads};
    key_cache = torch::empty(sizes, qkv_heads.options());
    value_cache = torch::empty(sizes, qkv_heads.options());
  }
  // The caches are written in place, one position per step: XLM concatenates instead, which
  // copies the whole prefix every step; the attended values are the same.
  key_cache.narrow(2, t, 1).copy_(qkv_heads[1]);
  value_cache.narrow(2, t, 1).copy_(qkv_heads[2]);
  auto context = models::attention(kind, qkv_heads[0], key_cache.narrow(2, 0, t + 1),
                                   value_cache.narrow(2, 0, t + 1), std::nullopt,
                                   is_training() ? dropout : 0.0, /*is_causal=*/false, fast_paths);
  return out(merge_heads(context));
}

std::pair<torch::Tensor, torch::Tensor> XlmAttentionImpl::source_keys_values(
    const torch::Tensor& source) {
  const int64_t batch = source.size(0), length = source.size(1);
  const auto kv_heads = fast_paths ? models::split_heads(kv(source), 2, heads)
                                   : kv(source)
                                         .view({batch, length, 2, heads, dim / heads})
                                         .permute({2, 0, 3, 1, 4})
                                         .unbind(0);
  return {kv_heads[0], kv_heads[1]};
}

torch::Tensor XlmAttentionImpl::cross_attention(const torch::Tensor& x, const torch::Tensor& keys,
                                                const torch::Tensor& values,
                                                const torch::Tensor& mask) {
  auto query = split_heads(q(x));
  auto context = models::attention(kind, query, keys, values, mask.to(query.scalar_type()),
                                   is_training() ? dropout : 0.0, /*is_causal=*/false, fast_paths,
                                   nullptr, fused.softmax);
  return out(merge_heads(context));
}

// ---- Layer ----

XlmLayerImpl::XlmLayerImpl(const XlmTransformerOptions& o) : options(o) {
  const int64_t d = o.dim();
  auto norm = [&] {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.layer_norm_eps()));
  };
  attention = register_module(
      "attention", XlmAttention(d, o.heads(), o.attention_dropout(), false, o.attention()));
  layer_norm1 = register_module("layer_norm1", norm());
  if (o.is_decoder()) {
    encoder_attn = register_module(
        "encoder_attn", XlmAttention(d, o.heads(), o.attention_dropout(), true, o.attention()));
    layer_norm15 = register_module("layer_norm15", norm());
  }
  lin1 = register_module("lin1", Linear(d, o.ffn_dim()));
  lin2 = register_module("lin2", Linear(o.ffn_dim(), d));
  layer_norm2 = register_module("layer_norm2", norm());
}

torch::Tensor XlmLayerImpl::feed_forward(const torch::Tensor& x) {
  // XLM's TransformerFFN: lin1, GELU (erf form), lin2, dropout; no dropout inside.
  return torch::dropout(lin2(torch::gelu(lin1(x))), options.dropout(), is_training());
}

torch::Tensor XlmLayerImpl::end_sublayer(const torch::Tensor& sub, const torch::Tensor& residual,
                                         torch::nn::LayerNorm& norm) {
  return train::residual_layer_norm(sub, residual, options.dropout(), is_training(),
                                    {norm->weight, norm->bias, options.layer_norm_eps()},
                                    fused.norm);
}

torch::Tensor XlmLayerImpl::forward(const torch::Tensor& x,
                                    const std::optional<torch::Tensor>& self_mask, bool causal,
                                    const Source* source) {
  auto h = end_sublayer(attention->self_attention(x, self_mask, causal), x, layer_norm1);
  if (source != nullptr) {
    auto a = encoder_attn->cross_attention(h, source->keys, source->values, source->mask);
    h = end_sublayer(a, h, layer_norm15);
  }
  // feed_forward() with its dropout in the sub-layer's ending.
  return end_sublayer(lin2(torch::gelu(lin1(h))), h, layer_norm2);
}

torch::Tensor XlmLayerImpl::forward_step(const torch::Tensor& x, torch::Tensor& key_cache,
                                         torch::Tensor& value_cache, int64_t t, int64_t max_len,
                                         const Source& source) {
  const double p = options.dropout();
  auto h = attention->self_attention_step(x, key_cache, value_cache, t, max_len);
  h = layer_norm1(x + torch::dropout(h, p, is_training()));
  auto a = encoder_attn->cross_attention(h, source.keys, source.values, source.mask);
  h = layer_norm15(h + torch::dropout(a, p, is_training()));
  return layer_norm2(h + feed_forward(h));
}

// ---- Transformer ----

XlmTransformerImpl::XlmTransformerImpl(const XlmTransformerOptions& o) : options(o) {
  const int64_t d = o.dim();
  position_embeddings =
      register_module("position_embeddings", torch::nn::Embedding(o.max_positions(), d));
  lang_embeddings = register_module("lang_embeddings", torch::nn::Embedding(o.n_langs(), d));
  embeddings = register_module(
      "embeddings", torch::nn::Embedding(
                        torch::nn::EmbeddingOptions(o.n_words(), d).padding_idx(xlm::kPadIndex)));
  layer_norm_emb = register_module(
      "layer_norm_emb",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(o.layer_norm_eps())));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.layers(); ++i) layers->push_back(XlmLayer(o));
  // pred_layer.proj: its weight is the word-embedding table (share_inout_emb), its bias its own.
  pred_bias = register_parameter("pred_bias", torch::empty({o.n_words()}));

  // XLM's initialization: embeddings N(0, dim^-1/2) with the padding row zeroed; Linear and
  // LayerNorm keep PyTorch's defaults (which libtorch's match), pred_layer's bias included.
  torch::NoGradGuard no_grad;
  const double std = 1.0 / std::sqrt(static_cast<double>(d));
  for (auto* table : {&embeddings, &position_embeddings, &lang_embeddings}) {
    (*table)->weight.normal_(0, std);
  }
  embeddings->weight[xlm::kPadIndex].zero_();
  pred_bias.uniform_(-std, std);
}

torch::Tensor XlmTransformerImpl::embed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                        int64_t lang) {
  // Every position of a batch is in one language, so the language embedding is one row.
  auto h = embeddings(tokens) + position_embeddings(positions).unsqueeze(0) +
           lang_embeddings->weight.select(0, lang);
  return torch::dropout(layer_norm_emb(h), options.dropout(), is_training());
}

std::vector<XlmLayerImpl::Source> XlmTransformerImpl::sources(const torch::Tensor& source,
                                                              const torch::Tensor& source_lengths) {
  const auto mask = additive_key_mask(non_pad_mask(source_lengths, source.size(1)));
  std::vector<XlmLayerImpl::Source> out;
  for (const auto& layer : *layers) {
    auto [keys, values] = layer->as<XlmLayer>()->encoder_attn->source_keys_values(source);
    out.push_back({keys, values, mask});
  }
  return out;
}

torch::Tensor XlmTransformerImpl::forward(const torch::Tensor& x, const torch::Tensor& lengths,
                                          int64_t lang, bool causal, const torch::Tensor& source,
                                          const torch::Tensor& source_lengths) {
  TORCH_CHECK(source.defined() == options.is_decoder(),
              "a decoder takes an encoder output, an encoder does not");
  const int64_t length = x.size(0);
  const auto keep = non_pad_mask(lengths, length);  // [B, L]
  auto h = embed(x.t(), torch::arange(length, x.options()), lang);
  const auto keep_hidden = keep.unsqueeze(-1);
  h = h * keep_hidden.to(h.scalar_type());
  // A causal decoder masks nothing else: padding sits after every real position, so no real
  // position attends to it (XLM's causal mask ignores lengths too).
  std::optional<torch::Tensor> self_mask;
  if (!causal) self_mask = additive_key_mask(keep);
  std::vector<XlmLayerImpl::Source> from;
  if (source.defined()) from = sources(source, source_lengths);
  for (std::size_t i = 0; i < layers->size(); ++i) {
    h = layers[i]->as<XlmLayer>()->forward(h, self_mask, causal, from.empty() ? nullptr : &from[i]);
    h = h * keep_hidden.to(h.scalar_type());
  }
  return h;
}

torch::Tensor XlmTransformerImpl::scores(const torch::Tensor& hidden) {
  return torch::linear(hidden, embeddings->weight, pred_bias);
}

torch::Tensor XlmTransformerImpl::training_scores(const torch::Tensor& hidden) {
  if (fast_paths) return aligned_vocab_linear(hidden, embeddings->weight, pred_bias);
  return scores(hidden);
}

void XlmTransformerImpl::pad_vocab_projection() {
  models::pad_vocab_projection(embeddings->weight, pred_bias);
}

GreedyOutput XlmTransformerImpl::generate(const torch::Tensor& source,
                                          const torch::Tensor& source_lengths, int64_t lang,
                                          int64_t max_len, bool use_cache) {
  TORCH_CHECK(options.is_decoder(), "only a decoder generates");
  TORCH_CHECK(max_len >= 2 && max_len <= options.max_positions(), "max_len ", max_len,
              " outside [2, ", options.max_positions(), "]");
  const int64_t batch = source.size(0);
  const auto long_options = source_lengths.options().dtype(torch::kLong);
  auto tokens = torch::full({max_len, batch}, xlm::kPadIndex, long_options);
  tokens[0].fill_(xlm::kEosIndex);  // </s> starts every sentence
  auto lengths = torch::ones({batch}, long_options);
  auto unfinished = torch::ones({batch}, long_options);
  std::vector<XlmLayerImpl::Source> from;
  if (use_cache) from = sources(source, source_lengths);  // once, as XLM caches them
  std::vector<torch::Tensor> key_caches(layers->size()), value_caches(layers->size());

  for (int64_t t = 0; t + 1 < max_len; ++t) {
    torch::Tensor last;  // [B, D]: the hidden state at position t
    if (use_cache) {
      auto h = embed(tokens[t].unsqueeze(1), torch::full({1}, t, long_options), lang);
      // A finished sentence's new position is padding: XLM's non-pad mask zeroes it.
      const auto keep = lengths.gt(t).view({batch, 1, 1});
      h = h * keep.to(h.scalar_type());
      for (std::size_t i = 0; i < layers->size(); ++i) {
        h = layers[i]->as<XlmLayer>()->forward_step(h, key_caches[i], value_caches[i], t, max_len,
                                                    from[i]);
        h = h * keep.to(h.scalar_type());
      }
      last = h.select(1, 0);
    } else {
      auto h = forward(tokens.narrow(0, 0, t + 1), lengths, lang, /*causal=*/true, source,
                       source_lengths);
      last = h.select(1, t);
    }
    const auto next = scores(last).argmax(-1);
    // Finished sentences get padding; the others their next word. All on the device.
    tokens[t + 1].copy_(next * unfinished + xlm::kPadIndex * (1 - unfinished));
    lengths.add_(unfinished);
    unfinished.mul_(next.ne(xlm::kEosIndex).to(torch::kLong));
  }
  tokens[max_len - 1].masked_fill_(unfinished.to(torch::kBool), xlm::kEosIndex);
  return {tokens, lengths};
}

}  // namespace gpubench::models
