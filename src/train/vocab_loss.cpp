// The vocabulary cross-entropy's two sums (gpubench/train/losses.h): the ATen path, and the
// fused autograd function with its two implementations, the CUDA kernels
// (vocab_loss_kernel.cu) and the same algorithm in plain loops on the CPU.
#include "gpubench/train/losses.h"

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "src/train/kernel_glue.h"

#if GPUBENCH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "src/train/vocab_loss_kernel.h"
#endif

namespace gpubench::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The ATen path: log_softmax to fp32, the target's log-probability and the smoothing sum.
torch::Tensor aten_sums(const torch::Tensor& logits, const torch::Tensor& target, int64_t vocab,
                        int64_t ignore_index) {
  const auto lprobs = torch::log_softmax(logits, -1, torch::kFloat);
  const auto keep = target.ne(ignore_index);
  // An ignored row's target may be no column (BERT's -100): it gathers column 0, then counts 0.
  const auto safe = target.masked_fill(keep.logical_not(), 0);
  const auto keep_f = keep.to(torch::kFloat);
  const auto nll = -lprobs.gather(1, safe.unsqueeze(1)).squeeze(1);
  const auto smooth = -lprobs.narrow(1, 0, vocab).sum(1);
  return torch::stack({(nll * keep_f).sum(), (smooth * keep_f).sum()});
}

// ---- The CPU implementation: the kernels' algorithm, one row at a time, in double ----

/// lse [N] (fp32) and the per-row (nll, smooth) [N, 2] (fp32), as the forward kernel writes them.
void cpu_forward(const torch::Tensor& logits, const torch::Tensor& target, int64_t vocab,
                 int64_t ignore_index, torch::Tensor& lse, torch::Tensor& per_row) {
  const auto x = logits.to(torch::kDouble).contiguous();
  const auto t = target.contiguous();
  const int64_t rows = x.size(0), width = x.size(1);
  lse = torch::empty({rows}, logits.options().dtype(torch::kFloat));
  per_row = torch::empty({rows, 2}, logits.options().dtype(torch::kFloat));
  const double* xd = x.data_ptr<double>();
  const int64_t* td = t.data_ptr<int64_t>();
  float* lse_d = lse.data_ptr<float>();
  float* row_d = per_row.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xd + r * width;
    double m = -std::numeric_limits<double>::infinity(), s = 0, words = 0;
    for (int64_t j = 0; j < width; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < width; ++j) {
      if (row[j] > -std::numeric_limits<double>::infinity()) s += std::exp(row[j] - m);
      if (j < vocab) words += row[j];
    }
    const double row_lse = m + std::log(s);
    lse_d[r] = static_cast<float>(row_lse);
    double nll = 0, smooth = 0;
    if (td[r] != ignore_index) {
      if (td[r] < 0 || td[r] >= width) {
        nll = smooth = std::numeric_limits<double>::quiet_NaN();
      } else {
        nll = row_lse - row[td[r]];
        smooth = static_cast<double>(vocab) * row_lse - words;
      }
    }
    row_d[2 * r] = static_cast<float>(nll);
    row_d[2 * r + 1] = static_cast<float>(smooth);
  }
}

/// The gradient of the logits, in their type, as the backward kernel writes it.
torch::Tensor cpu_backward(const torch::Tensor& logits, const torch::Tensor& target, int64_t vocab,
                           int64_t ignore_index, const torch::Tensor& lse,
                           const torch::Tensor& grad) {
  const auto x = logits.to(torch::kDouble).contiguous();
  const auto t = target.contiguous();
  const auto g = grad.to(torch::kDouble).contiguous();
  const int64_t rows = x.size(0), width = x.size(1);
  auto out = torch::empty({rows, width}, x.options());
  const double* xd = x.data_ptr<double>();
  const int64_t* td = t.data_ptr<int64_t>();
  const float* lse_d = lse.data_ptr<float>();
  double* od = out.data_ptr<double>();
  const double ga = g.data_ptr<double>()[0], gb = g.data_ptr<double>()[1];
  for (int64_t r = 0; r < rows; ++r) {
    const bool keep = td[r] != ignore_index;
    const double a = keep ? ga : 0, b = keep ? gb : 0, c = a + b * static_cast<double>(vocab);
    for (int64_t j = 0; j < width; ++j) {
      const double v = xd[r * width + j];
      const double p =
          v > -std::numeric_limits<double>::infinity() ? std::exp(v - lse_d[r]) : 0.0;
      od[r * width + j] = c * p - (j == td[r] ? a : 0.0) - (j < vocab ? b : 0.0);
    }
  }
  return out.to(logits.scalar_type());
}

#if GPUBENCH_CUDA_KERNELS
kernels::VocabRows rows_of(const torch::Tensor& logits, const torch::Tensor& target, int64_t vocab,
                           int64_t ignore_index) {
  kernels::VocabRows r;
  r.type = kernels::element_type(logits.scalar_type(), "fused vocabulary loss");
  r.logits = logits.data_ptr();
  r.rows = logits.size(0);
  r.row_stride = logits.stride(0);
  r.width = logits.size(1);
  r.vocab = vocab;
  r.target = target.data_ptr<int64_t>();
  r.ignore_index = ignore_index;
  return r;
}

#endif

class FusedVocabLoss : public torch::autograd::Function<FusedVocabLoss> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target, int64_t vocab, int64_t ignore_index) {
    torch::Tensor lse, per_row;
    if (logits.is_cuda()) {
#if GPUBENCH_CUDA_KERNELS
      const c10::cuda::CUDAGuard guard(logits.device());
      lse = torch::empty({logits.size(0)}, logits.options().dtype(torch::kFloat));
      per_row = torch::empty({logits.size(0), 2}, logits.options().dtype(torch::kFloat));
      kernels::vocab_loss_forward(rows_of(logits, target, vocab, ignore_index),
                                  lse.data_ptr<float>(), per_row.data_ptr<float>(),
                                  kernels::current_stream(logits));
#endif
    } else {
      cpu_forward(logits, target, vocab, ignore_index, lse, per_row);
    }
    ctx->save_for_backward({logits, target, lse});
    ctx->saved_data["vocab"] = vocab;
    ctx->saved_data["ignore_index"] = ignore_index;
    return per_row.sum(0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& logits = saved[0];
    const auto& target = saved[1];
    const auto& lse = saved[2];
    const int64_t vocab = ctx->saved_data["vocab"].toInt();
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const auto grad = grads[0].to(torch::kFloat).contiguous();
    torch::Tensor grad_logits;
    if (logits.is_cuda()) {
#if GPUBENCH_CUDA_KERNELS
      const c10::cuda::CUDAGuard guard(logits.device());
      grad_logits = torch::empty({logits.size(0), logits.size(1)}, logits.options());
      kernels::vocab_loss_backward(rows_of(logits, target, vocab, ignore_index),
                                   lse.data_ptr<float>(), grad.data_ptr<float>(),
                                   grad_logits.data_ptr(), kernels::current_stream(logits));
#endif
    } else {
      grad_logits = cpu_backward(logits, target, vocab, ignore_index, lse, grad);
    }
    return {grad_logits, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool have_vocab_loss_kernels() { return GPUBENCH_CUDA_KERNELS != 0; }

namespace {
std::atomic<int64_t> loss_calls{0};
}  // namespace

int64_t fused_vocab_loss_calls() { return loss_calls.load(); }

bool fused_vocab_loss_runs(const torch::Tensor& logits) {
  if (!logits.defined() || !kernels::has_element_type(logits.scalar_type())) return false;
  if (logits.is_cuda()) return have_vocab_loss_kernels();
  return logits.is_cpu();
}

torch::Tensor fused_vocab_loss_sums(const torch::Tensor& logits, const torch::Tensor& target,
                                    int64_t vocab, int64_t ignore_index) {
  TORCH_CHECK(fused_vocab_loss_runs(logits),
              "the fused vocabulary loss does not run for these logits (",
              logits.defined() ? logits.toString() : "undefined",
              logits.is_cuda() ? ", and this build has no CUDA kernels for it)" : ")");
  TORCH_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
              "fused vocabulary loss: logits [N, W] and target [N], got ", logits.sizes(), " and ",
              target.sizes());
  TORCH_CHECK(vocab > 0 && vocab <= logits.size(1), "fused vocabulary loss: vocab ", vocab,
              " of ", logits.size(1), " columns");
  TORCH_CHECK(target.scalar_type() == torch::kLong, "fused vocabulary loss: int64 targets");
  // The kernels read each row's columns contiguously; a row stride is fine.
  const auto rows = logits.stride(1) == 1 ? logits : logits.contiguous();
  ++loss_calls;
  return FusedVocabLoss::apply(rows, target.contiguous(), vocab, ignore_index);
}

torch::Tensor vocab_loss_sums(const torch::Tensor& logits, const torch::Tensor& target,
                              int64_t vocab, int64_t ignore_index, bool fused) {
  if (fused && fused_vocab_loss_runs(logits)) {
    return fused_vocab_loss_sums(logits, target, vocab, ignore_index);
  }
  return aten_sums(logits, target, vocab, ignore_index);
}

}  // namespace gpubench::train
