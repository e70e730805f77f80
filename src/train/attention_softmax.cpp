// Stored attention's fused mask + softmax + dropout (gpubench/train/attention_softmax.h): the
// autograd function with its two implementations, the CUDA kernels (attention_softmax_kernel.cu)
// and the same formulas in double on the CPU.
#include "gpubench/train/attention_softmax.h"

#include "gpubench/base/compat.h"

#include <torch/torch.h>

#include <atomic>
#include <limits>
#include <string>

#include "src/train/kernel_glue.h"

#if GPUBENCH_CUDA_KERNELS
#include "src/train/attention_softmax_kernel.h"

#include <c10/cuda/CUDAGuard.h>
#endif

namespace gpubench::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kMaxKeys = 1024;  // kernels::kMaxSoftmaxWidth, also where none are built

/// The types ATen's path has: the sum scores + mask, softmax's output (fp32 under CUDA autocast),
/// and whether it rounds the sum to the scores' type.
struct Types {
  torch::ScalarType sum, probs;
  bool round_sum;
};

Types types_of(const torch::Tensor& scores, const std::optional<torch::Tensor>& mask) {
  Types t;
  t.sum =
      mask ? torch::promote_types(scores.scalar_type(), mask->scalar_type()) : scores.scalar_type();
  t.round_sum = mask && t.sum == scores.scalar_type();
  t.probs = scores.is_cuda() && compat::autocast_enabled(torch::kCUDA) ? torch::kFloat : t.sum;
  return t;
}

/// Keys masked by `causal`: [q_len, k_len], true where key j > query i.
torch::Tensor future(int64_t q_len, int64_t k_len, const torch::Device& device) {
  return torch::ones({q_len, k_len}, torch::TensorOptions().dtype(torch::kBool).device(device))
      .triu(1);
}

// ---- The CPU implementation: the kernels' formulas, in double ----

struct Forward {
  torch::Tensor probs, out;
};

Forward cpu_forward(const torch::Tensor& scores, const torch::Tensor& mask, bool causal,
                    const torch::Tensor& keep, double keep_scale, const Types& t) {
  auto s = scores.to(torch::kDouble);
  if (causal) {
    s = s.masked_fill(future(s.size(2), s.size(3), s.device()),
                      -std::numeric_limits<double>::infinity());
  }
  if (mask.defined()) {
    s = s + mask.to(torch::kDouble);
    if (t.round_sum) s = s.to(scores.scalar_type()).to(torch::kDouble);
  }
  Forward f;
  f.probs = torch::softmax(s, -1).to(t.probs);
  if (keep.defined() || t.probs != scores.scalar_type()) {
    auto d = f.probs.to(torch::kDouble);
    if (keep.defined()) d = d * keep.to(torch::kDouble) * keep_scale;
    f.out = d.to(scores.scalar_type());
  }
  return f;
}

torch::Tensor cpu_backward(const torch::Tensor& grad_out, const torch::Tensor& probs,
                           const torch::Tensor& keep, double keep_scale,
                           torch::ScalarType score_type) {
  auto dp = grad_out.to(torch::kDouble);
  if (keep.defined()) dp = dp * keep.to(torch::kDouble) * keep_scale;
  const auto p = probs.to(torch::kDouble);
  return (p * (dp - (dp * p).sum(-1, true))).to(score_type);
}

#if GPUBENCH_CUDA_KERNELS
kernels::SoftmaxRows rows_of(const torch::Tensor& scores, torch::ScalarType probs_type,
                             const torch::Tensor& mask, bool round_sum, bool causal,
                             const torch::Tensor& keep, double keep_scale) {
  kernels::SoftmaxRows r;
  r.score_type = kernels::element_type(scores.scalar_type(), "fused attention softmax");
  r.probs_type = kernels::element_type(probs_type, "fused attention softmax");
  r.q_len = scores.size(2);
  r.k_len = scores.size(3);
  r.heads = scores.size(1);
  r.rows = scores.size(0) * r.heads * r.q_len;
  r.causal = causal;
  if (mask.defined()) {
    r.mask = mask.data_ptr<float>();
    for (int d = 0; d < 4; ++d) r.mask_strides[d] = mask.stride(d);
    r.round_sum = round_sum;
  }
  r.keep = keep.defined() ? keep.data_ptr<uint8_t>() : nullptr;
  r.keep_scale = static_cast<float>(keep_scale);
  return r;
}

#endif

class FusedAttentionSoftmax : public torch::autograd::Function<FusedAttentionSoftmax> {
 public:
  /// `mask`: fp32, expanded to the scores' shape, or empty; `keep`: uint8 or empty.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& scores,
                               const torch::Tensor& mask_or_none, const torch::Tensor& keep_or_none,
                               bool causal, double keep_scale, bool round_sum,
                               torch::ScalarType probs_type) {
    const auto mask = kernels::present(mask_or_none), keep = kernels::present(keep_or_none);
    const bool separate_out = keep.defined() || probs_type != scores.scalar_type();
    Forward f;
    if (scores.is_cuda()) {
#if GPUBENCH_CUDA_KERNELS
      const c10::cuda::CUDAGuard guard(scores.device());
      f.probs = torch::empty(scores.sizes(), scores.options().dtype(probs_type));
      if (separate_out) f.out = torch::empty_like(scores);
      kernels::attention_softmax_forward(
          rows_of(scores, probs_type, mask, round_sum, causal, keep, keep_scale), scores.data_ptr(),
          f.probs.data_ptr(), separate_out ? f.out.data_ptr() : nullptr,
          kernels::current_stream(scores));
#endif
    } else {
      Types t{torch::kFloat, probs_type, round_sum};
      f = cpu_forward(scores, mask, causal, keep, keep_scale, t);
    }
    // Without dropout and with the probabilities in the scores' type they are the output: one
    // tensor, kept once, as ATen keeps softmax's output that the product with v reads.
    ctx->save_for_backward({f.probs, keep_or_none});
    ctx->saved_data["keep_scale"] = keep_scale;
    ctx->saved_data["score_type"] = static_cast<int64_t>(scores.scalar_type());
    return separate_out ? f.out : f.probs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& probs = saved[0];
    const auto keep = kernels::present(saved[1]);
    const double keep_scale = ctx->saved_data["keep_scale"].toDouble();
    const auto score_type = static_cast<torch::ScalarType>(ctx->saved_data["score_type"].toInt());
    const auto grad_out = grads[0].to(score_type).contiguous();
    torch::Tensor grad_scores;
    if (probs.is_cuda()) {
#if GPUBENCH_CUDA_KERNELS
      const c10::cuda::CUDAGuard guard(probs.device());
      grad_scores = torch::empty(probs.sizes(), probs.options().dtype(score_type));
      // The geometry and the types are the scores', which grad_scores has.
      kernels::attention_softmax_backward(rows_of(grad_scores, probs.scalar_type(), torch::Tensor(),
                                                  false, false, keep, keep_scale),
                                          grad_out.data_ptr(), probs.data_ptr(),
                                          grad_scores.data_ptr(), kernels::current_stream(probs));
#endif
    } else {
      grad_scores = cpu_backward(grad_out, probs, keep, keep_scale, score_type);
    }
    return {grad_scores,     torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool have_attention_softmax_kernels() { return GPUBENCH_CUDA_KERNELS != 0; }

namespace {
std::atomic<int64_t> softmax_calls{0};
}  // namespace

int64_t fused_attention_softmax_calls() { return softmax_calls.load(); }

bool fused_attention_softmax_runs(const torch::Tensor& scores,
                                  const std::optional<torch::Tensor>& mask) {
  if (!scores.defined() || scores.dim() != 4 || !kernels::has_element_type(scores.scalar_type())) return false;
  if (scores.size(3) < 1 || scores.size(3) > kMaxKeys || scores.size(2) < 1) return false;
  if (mask) {
    if (!mask->defined() || !kernels::has_element_type(mask->scalar_type()) || mask->dim() > 4 ||
        mask->device() != scores.device()) {
      return false;
    }
    // Broadcastable to the scores' shape: each of its sizes (from the right) 1 or theirs.
    for (int64_t d = 1; d <= mask->dim(); ++d) {
      const int64_t size = mask->size(-d);
      if (size != 1 && size != scores.size(-d)) return false;
    }
  }
  const Types t = types_of(scores, mask);
  if (t.probs != torch::kFloat && t.probs != scores.scalar_type()) return false;
  if (scores.is_cuda()) {
    // The product with v reads the scores' type: under autocast that is autocast's type.
    if (compat::autocast_enabled(torch::kCUDA) &&
        compat::autocast_dtype(torch::kCUDA) != scores.scalar_type()) {
      return false;
    }
    if (!compat::autocast_enabled(torch::kCUDA) && t.probs != scores.scalar_type()) return false;
    return have_attention_softmax_kernels();
  }
  // Without autocast the probabilities are the output, in the scores' type.
  return scores.is_cpu() && !compat::autocast_enabled(torch::kCPU) &&
         t.probs == scores.scalar_type();
}

torch::Tensor fused_attention_softmax(const torch::Tensor& scores,
                                      const std::optional<torch::Tensor>& mask, bool causal,
                                      const torch::Tensor& keep, double keep_scale) {
  TORCH_CHECK(fused_attention_softmax_runs(scores, mask),
              "the fused attention softmax does not run for scores ",
              scores.defined() ? scores.toString() : "undefined", " ", scores.sizes(),
              mask ? " with a mask " + mask->toString() : std::string(),
              scores.is_cuda() && !have_attention_softmax_kernels()
                  ? " (this build has no CUDA kernels)"
                  : "");
  TORCH_CHECK(
      !keep.defined() || (keep.scalar_type() == torch::kByte && keep.sizes() == scores.sizes()),
      "fused attention softmax: the keep-mask is uint8 of the scores' shape");
  const Types t = types_of(scores, mask);
  // The kernels read an fp32 mask through strides (0 on its broadcast dimensions); the CPU
  // twin adds it with broadcasting.
  torch::Tensor m;
  if (mask) m = scores.is_cuda() ? mask->to(torch::kFloat).expand(scores.sizes()) : *mask;
  ++softmax_calls;
  return FusedAttentionSoftmax::apply(scores.contiguous(),
                                      kernels::as_input(m, scores.options().dtype(torch::kFloat)),
                                      kernels::as_input(keep, scores.options().dtype(torch::kByte))
                                          .contiguous(),
                                      causal, keep_scale, t.round_sum, t.probs);
}

torch::Tensor fused_attention_probs(const torch::Tensor& scores,
                                    const std::optional<torch::Tensor>& mask, bool causal,
                                    double dropout_p) {
  torch::Tensor keep;
  double scale = 1.0;
  if (dropout_p > 0) {
    TORCH_CHECK(dropout_p < 1, "fused attention softmax: dropout ", dropout_p, " of 1 or more");
    const auto t = types_of(scores, mask);
    // On the CPU ATen's dropout of the probabilities draws empty_like(probs).bernoulli_(1 - p):
    // the same draw here keeps the same elements. On CUDA one byte an element.
    keep = scores.is_cuda() ? torch::empty(scores.sizes(), scores.options().dtype(torch::kByte))
                                  .bernoulli_(1 - dropout_p)
                            : torch::empty(scores.sizes(), scores.options().dtype(t.probs))
                                  .bernoulli_(1 - dropout_p)
                                  .to(torch::kByte);
    scale = 1.0 / (1.0 - dropout_p);
  }
  return fused_attention_softmax(scores, mask, causal, keep, scale);
}

}  // namespace gpubench::train
