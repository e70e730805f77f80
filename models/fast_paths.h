// The language models' fast paths (issue 44 items 1-3), switched by the workload's
// `runtime.fast_paths` (RuntimeSettings::fast_paths, default true; false runs the plain paths,
// so that one build can time both). Each computes what its plain path computes:
// - vocab projections on aligned shapes: a vocabulary of V words whose V is not a multiple of
//   64 (BERT's 30522, XLM's 64699) makes [tokens, V] logits whose rows are not 16-byte aligned,
//   and cuBLAS then runs its align-2 kernels (~31% of peak on the H200). The projection instead
//   multiplies by a [aligned_rows(V), H] weight whose first V rows ARE the parameter: the
//   parameter's storage is allocated with the extra rows (pad_vocab_projection), and
//   padded_rows() views the whole of it, in autograd a view whose gradient is the first V rows
//   of the padded one (a narrow: no copy). Nothing is copied per step, the trainable parameters
//   keep their sizes (and a tied embedding table stays one parameter: its lookup reads the
//   parameter, the projection the padded view of it, and autograd sums both gradients into
//   it). The extra weight rows are zero and the extra bias entries -inf, so the extra logits
//   are -inf: log-softmax over the padded row equals log-softmax over the V words (exp(-inf)
//   is 0), their log-probabilities are -inf and their gradients exactly 0, and an argmax never
//   picks them. The losses sum over the first V columns only where they sum over the row.
// - q, k and v as strided views of the fused projection (split_heads) whose backward writes
//   the three gradients into one buffer, or hands on the one the memory-efficient attention
//   kernel already wrote them into, in place of unbind's stack and the reshape after it.
// - stored attention with the scale in the GEMM's alpha and causal masks built once per shape
//   (CausalMasks), in models/attention.h.
#pragma once

#include "gpubench/train/workload.h"

#include <torch/nn/module.h>
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

namespace gpubench::models {

/// The language models' fused functions (issue 44), each the same math as the ATen ops it
/// replaces, switched by its runtime setting.
struct Fusions {
  /// Each post-norm sub-layer's LayerNorm(residual + dropout(x)) as one function
  /// (runtime.fused_norm, train::residual_layer_norm).
  bool norm = false;
  /// Stored attention's mask + softmax + dropout as one function on the fast path
  /// (runtime.fused_softmax, train::fused_attention_probs).
  bool softmax = false;
};

/// The fusions a workload's runtime settings ask for.
inline Fusions fusions(const RuntimeSettings& runtime) {
  return {runtime.fused_norm, runtime.fused_softmax};
}

/// A module whose forward has a fast path; set_fast_paths() turns them on or off.
class FastPathSwitch {
 public:
  virtual ~FastPathSwitch() = default;
  /// Run the fast path (runtime.fast_paths). Default: false, the plain path
  bool fast_paths = false;
  /// The fused functions to run (runtime.fused_norm, runtime.fused_softmax). Default: none
  Fusions fused;
};

/// Sets `on` and `fused` in every FastPathSwitch among `module` and its submodules. A step
/// calls it after building (or reusing) its model, so a kept model follows the step's settings.
inline void set_fast_paths(torch::nn::Module& module, bool on, Fusions fused = {}) {
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (auto* s = dynamic_cast<FastPathSwitch*>(m.get())) {
      s->fast_paths = on;
      s->fused = fused;
    }
  }
}

// ---- Vocab projections on aligned rows ----

/// Rows of a padded vocabulary: 64 keeps every bf16/fp16/fp32 row of the logits 128-byte
/// aligned (8 would give cuBLAS its 16-byte alignment).
inline constexpr int64_t kVocabRowMultiple = 64;

/// `rows` rounded up to a multiple of kVocabRowMultiple.
inline int64_t aligned_rows(int64_t rows) {
  return (rows + kVocabRowMultiple - 1) / kVocabRowMultiple * kVocabRowMultiple;
}

/// Whether `t` (contiguous, rows along dim 0) lies in a storage that holds aligned_rows() of its
/// rows from its offset, as pad_rows() leaves it.
inline bool has_row_padding(const torch::Tensor& t) {
  if (!t.defined() || t.dim() == 0 || t.size(0) == 0 || !t.is_contiguous()) return false;
  const int64_t row = t.numel() / t.size(0);
  const int64_t needed =
      (t.storage_offset() + aligned_rows(t.size(0)) * row) * static_cast<int64_t>(t.element_size());
  return static_cast<int64_t>(t.storage().nbytes()) >= needed;
}

/// Moves `param` (same tensor, same values) into a storage of aligned_rows(param.size(0)) rows,
/// the extra ones filled with `fill`. Does nothing where it already is. Call it once the
/// parameter is on its device and before an optimizer holds it (set_data keeps the tensor the
/// optimizer and the module refer to, but a later module.to() to another device drops the
/// padding).
inline void pad_rows(const torch::Tensor& param, double fill) {
  if (has_row_padding(param)) return;
  torch::NoGradGuard no_grad;
  auto sizes = param.sizes().vec();
  const int64_t rows = sizes[0];
  sizes[0] = aligned_rows(rows);
  auto storage = torch::full(
      sizes, fill, torch::TensorOptions().dtype(param.scalar_type()).device(param.device()));
  storage.narrow(0, 0, rows).copy_(param);
  param.set_data(storage.narrow(0, 0, rows));
}

/// Pads a vocab projection's parameters for aligned_vocab_linear: the weight [V, H] with zero
/// rows, the bias [V] (if defined) with -inf.
inline void pad_vocab_projection(const torch::Tensor& weight, const torch::Tensor& bias) {
  pad_rows(weight, 0.0);
  if (bias.defined()) pad_rows(bias, -std::numeric_limits<double>::infinity());
}

namespace detail {

/// The autograd side of padded_rows: forward views the padded storage, backward narrows the
/// gradient to the parameter's rows (both without copying).
struct PaddedRowsFunction : public torch::autograd::Function<PaddedRowsFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor param) {
    ctx->saved_data["rows"] = param.size(0);
    auto sizes = param.sizes().vec();
    sizes[0] = aligned_rows(sizes[0]);
    return param.as_strided(sizes, param.strides(), param.storage_offset());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {grads[0].narrow(0, 0, ctx->saved_data["rows"].toInt())};
  }
};

}  // namespace detail

/// `param` [V, ...] with its padding rows: [aligned_rows(V), ...] over the same storage,
/// differentiable (the gradient of its first V rows reaches `param`). Needs has_row_padding().
inline torch::Tensor padded_rows(const torch::Tensor& param) {
  TORCH_CHECK(has_row_padding(param), "padded_rows: the parameter of ", param.size(0),
              " rows has no padding (pad_vocab_projection after the model's last move)");
  return detail::PaddedRowsFunction::apply(param);
}

/// x [..., H] projected on a padded vocabulary: linear(x, padded weight, padded bias), logits
/// [..., aligned_rows(V)] of which the last aligned_rows(V) - V are -inf. Without a bias the
/// extra logits would be 0, not -inf, so a bias is required.
inline torch::Tensor aligned_vocab_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                          const torch::Tensor& bias) {
  TORCH_CHECK(bias.defined(), "aligned_vocab_linear needs the -inf padded bias");
  return torch::linear(x, padded_rows(weight), padded_rows(bias));
}

// ---- q, k, v as views ----

namespace detail {

/// The autograd side of split_heads. Inputs: y [B, L, parts * heads * head_dim], parts, heads.
struct SplitHeadsFunction : public torch::autograd::Function<SplitHeadsFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                torch::Tensor y, int64_t parts, int64_t heads) {
    const int64_t batch = y.size(0), length = y.size(1);
    const int64_t head_dim = y.size(2) / (parts * heads);
    ctx->saved_data["batch"] = batch;
    ctx->saved_data["length"] = length;
    ctx->saved_data["parts"] = parts;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["head_dim"] = head_dim;
    return y.view({batch, length, parts, heads, head_dim}).permute({2, 0, 3, 1, 4}).unbind(0);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t batch = ctx->saved_data["batch"].toInt();
    const int64_t length = ctx->saved_data["length"].toInt();
    const int64_t parts = ctx->saved_data["parts"].toInt();
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const int64_t head_dim = ctx->saved_data["head_dim"].toInt();
    const int64_t width = parts * heads * head_dim;
    const std::vector<int64_t> packed_strides = {length * width, head_dim, width, 1};
    // The gradients may already be the parts of one [B, L, parts, heads, head_dim] buffer (the
    // memory-efficient kernel's backward allocates them so when q, k and v are such views):
    // then that buffer is the gradient, as it is.
    bool packed = true;
    for (int64_t i = 0; i < parts && packed; ++i) {
      const auto& g = grads[i];
      packed = g.defined() && g.strides().vec() == packed_strides && g.is_alias_of(grads[0]) &&
               g.storage_offset() == grads[0].storage_offset() + i * heads * head_dim;
    }
    torch::Tensor out;
    if (packed) {
      out = grads[0].as_strided({batch, length, width}, {length * width, width, 1},
                                grads[0].storage_offset());
    } else {
      auto buffer = torch::empty({batch, length, parts, heads, head_dim}, grads[0].options());
      for (int64_t i = 0; i < parts; ++i) {
        auto slot = buffer.select(2, i).permute({0, 2, 1, 3});
        if (grads[i].defined()) {
          slot.copy_(grads[i]);
        } else {
          slot.zero_();
        }
      }
      out = buffer.view({batch, length, width});
    }
    return {out, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace detail

/// The `parts` projections in y [B, L, parts * H] (q, k, v: 3; k, v: 2) as [B, heads, L,
/// H / heads] strided views of it, as view + permute + unbind gives them, but with a backward
/// that writes their gradients into one [B, L, parts * H] tensor (one copy, none when the
/// attention kernel's backward already packed them) where unbind's stacks them and the reshape
/// back copies them again.
inline std::vector<torch::Tensor> split_heads(const torch::Tensor& y, int64_t parts,
                                              int64_t heads) {
  TORCH_CHECK(y.dim() == 3 && y.size(2) % (parts * heads) == 0, "split_heads: y of shape ",
              y.sizes(), " is not [B, L, ", parts, " * heads * head_dim]");
  return detail::SplitHeadsFunction::apply(y.contiguous(), parts, heads);
}

// ---- Causal masks ----

/// Additive causal masks [q_len, k_len] (0 where key j <= query i, -inf after it) for one
/// module: the mask of the shape last asked for is kept and reused while the shape stays, and
/// released before another shape's is built. One mask per module at a time, as the plain path
/// holds one per forward, so that no step holds the masks of shapes it does not run: a search
/// probe at one token batch then peaks as high as that batch does inside a cycle of batches of
/// other shapes. Built in the eager runs before a CUDA graph's capture, never inside it.
class CausalMasks {
 public:
  /// The mask of this shape in `options`' dtype and device.
  const torch::Tensor& get(int64_t q_len, int64_t k_len, const torch::TensorOptions& options) {
    const Key key{q_len, k_len, static_cast<int>(c10::typeMetaToScalarType(options.dtype())),
                  static_cast<int>(options.device().type()), options.device().index()};
    if (!mask_.defined() || key != key_) {
      mask_ = torch::Tensor();  // released first: never two shapes' masks at once
      torch::NoGradGuard no_grad;
      auto future = torch::ones({q_len, k_len}, options.dtype(torch::kBool)).triu(1);
      mask_ = torch::zeros({q_len, k_len}, options.requires_grad(false))
                  .masked_fill(future, -std::numeric_limits<float>::infinity());
      key_ = key;
      ++built_;
    }
    return mask_;
  }
  /// Masks built so far (a shape asked again after another is built again).
  std::size_t size() const { return built_; }

 private:
  using Key = std::tuple<int64_t, int64_t, int, int, int>;
  Key key_{};
  torch::Tensor mask_;
  std::size_t built_ = 0;
};

}  // namespace gpubench::models
