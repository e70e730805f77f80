// LayerNorm(residual + dropout(x)) (gpubench/train/residual_norm.h): the ATen path, and the fused
// autograd function with its two implementations, the CUDA kernels (residual_norm_kernel.cu) and
// the same formulas in double on the CPU.
#include "gpubench/train/residual_norm.h"

#include "gpubench/base/compat.h"

#include <torch/torch.h>

#include <atomic>
#include <cmath>

#include "src/train/kernel_glue.h"

#if GPUBENCH_CUDA_KERNELS
#include "src/train/residual_norm_kernel.h"

#include <c10/cuda/CUDAGuard.h>
#endif

namespace gpubench::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kMaxWidth = 1024;  // kernels::kMaxNormWidth, also where no kernels are built

/// The type of residual + dropout(x): the add's promotion.
torch::ScalarType sum_type(const torch::Tensor& x, const torch::Tensor& residual) {
  return torch::promote_types(x.scalar_type(), residual.scalar_type());
}

/// The type of ATen's layer_norm output for an input of `z_type`: fp32 under CUDA autocast
/// (layer_norm is on its fp32 list), else the input's.
torch::ScalarType norm_type(const torch::Tensor& x, torch::ScalarType z_type) {
  return x.is_cuda() && compat::autocast_enabled(torch::kCUDA) ? torch::kFloat : z_type;
}

// ---- The CPU implementation: the kernels' formulas over [rows, width], in double ----

struct Forward {
  torch::Tensor z, y, mean, rstd;
};

Forward cpu_forward(const torch::Tensor& x, const torch::Tensor& residual,
                    const torch::Tensor& mask, double scale, const NormParams& norm,
                    torch::ScalarType z_type, torch::ScalarType y_type) {
  auto d = x.to(torch::kDouble);
  if (mask.defined()) d = (d * mask.to(torch::kDouble) * scale).to(x.scalar_type());
  const auto z = (residual.to(torch::kDouble) + d.to(torch::kDouble)).to(z_type);
  const auto zd = z.to(torch::kDouble);
  // Statistics kept in fp32, as the kernels keep them.
  const auto mean = zd.mean(-1, /*keepdim=*/true).to(torch::kFloat);
  const auto centered = zd - mean.to(torch::kDouble);
  const auto rstd = (centered.pow(2).mean(-1, true) + norm.eps).rsqrt().to(torch::kFloat);
  const auto y = centered * rstd.to(torch::kDouble) * norm.weight.to(torch::kDouble) +
                 norm.bias.to(torch::kDouble);
  return {z, y.to(y_type), mean, rstd};
}

struct Backward {
  torch::Tensor grad_x, grad_residual, grad_weight, grad_bias;
};

Backward cpu_backward(const torch::Tensor& dy, const torch::Tensor& z, const torch::Tensor& mask,
                      double scale, const torch::Tensor& weight, const torch::Tensor& mean,
                      const torch::Tensor& rstd, torch::ScalarType x_type) {
  const int64_t width = z.size(-1);
  const auto d = dy.to(torch::kDouble).reshape({-1, width});
  const auto rs = rstd.to(torch::kDouble).reshape({-1, 1});
  const auto xhat =
      (z.to(torch::kDouble).reshape({-1, width}) - mean.to(torch::kDouble).reshape({-1, 1})) * rs;
  const auto g = d * weight.to(torch::kDouble);
  const auto dz = rs * (g - g.mean(1, true) - xhat * (g * xhat).mean(1, true));
  auto dx = mask.defined() ? dz * mask.to(torch::kDouble).reshape({-1, width}) * scale : dz;
  return {dx.to(x_type).view(z.sizes()), dz.to(z.scalar_type()).view(z.sizes()),
          (d * xhat).sum(0).to(torch::kFloat), d.sum(0).to(torch::kFloat)};
}

#if GPUBENCH_CUDA_KERNELS
kernels::NormRows rows_of(const torch::Tensor& x, torch::ScalarType z_type,
                          torch::ScalarType y_type, const torch::Tensor& mask, double scale) {
  kernels::NormRows r;
  r.x_type = kernels::element_type(x.scalar_type(), "fused residual norm");
  r.z_type = kernels::element_type(z_type, "fused residual norm");
  r.y_type = kernels::element_type(y_type, "fused residual norm");
  r.width = x.size(-1);
  r.rows = x.numel() / r.width;
  r.mask = mask.defined() ? mask.data_ptr<uint8_t>() : nullptr;
  r.scale = static_cast<float>(scale);
  return r;
}

#endif

class FusedResidualNorm : public torch::autograd::Function<FusedResidualNorm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& residual, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& mask_or_none,
                               double scale, double eps, torch::ScalarType y_type) {
    // libtorch 1.13's Function::apply takes no undefined tensor: no mask comes as an empty one.
    const torch::Tensor mask = kernels::present(mask_or_none);
    const auto z_type = sum_type(x, residual);
    Forward f;
    if (x.is_cuda()) {
#if GPUBENCH_CUDA_KERNELS
      const c10::cuda::CUDAGuard guard(x.device());
      const int64_t width = x.size(-1);
      f.z = torch::empty(x.sizes(), x.options().dtype(z_type));
      f.y = torch::empty(x.sizes(), x.options().dtype(y_type));
      f.mean = torch::empty({x.numel() / width}, x.options().dtype(torch::kFloat));
      f.rstd = torch::empty_like(f.mean);
      kernels::residual_norm_forward(rows_of(x, z_type, y_type, mask, scale), x.data_ptr(),
                                     residual.data_ptr(), weight.data_ptr<float>(),
                                     bias.data_ptr<float>(), static_cast<float>(eps),
                                     f.z.data_ptr(), f.y.data_ptr(), f.mean.data_ptr<float>(),
                                     f.rstd.data_ptr<float>(), kernels::current_stream(x));
#endif
    } else {
      f = cpu_forward(x, residual, mask, scale, {weight, bias, eps}, z_type, y_type);
    }
    ctx->save_for_backward({f.z, mask_or_none, weight, f.mean, f.rstd});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["y_type"] = static_cast<int64_t>(y_type);
    return f.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &z = saved[0], &weight = saved[2], &mean = saved[3], &rstd = saved[4];
    const torch::Tensor mask = kernels::present(saved[1]);
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto x_type = static_cast<torch::ScalarType>(ctx->saved_data["x_type"].toInt());
    const auto y_type = static_cast<torch::ScalarType>(ctx->saved_data["y_type"].toInt());
    const auto dy = grads[0].to(y_type).contiguous();
    Backward b;
    if (z.is_cuda()) {
#if GPUBENCH_CUDA_KERNELS
      const c10::cuda::CUDAGuard guard(z.device());
      const int64_t width = z.size(-1), rows = z.numel() / width;
      b.grad_x = torch::empty(z.sizes(), z.options().dtype(x_type));
      b.grad_residual = torch::empty_like(z);
      b.grad_weight = torch::empty({width}, z.options().dtype(torch::kFloat));
      b.grad_bias = torch::empty_like(b.grad_weight);
      const auto workspace =
          torch::empty({2 * kernels::residual_norm_backward_blocks(rows) * width},
                       z.options().dtype(torch::kFloat));
      auto r = rows_of(b.grad_x, z.scalar_type(), y_type, mask, scale);
      kernels::residual_norm_backward(
          r, dy.data_ptr(), z.data_ptr(), weight.data_ptr<float>(), mean.data_ptr<float>(),
          rstd.data_ptr<float>(), b.grad_residual.data_ptr(), b.grad_x.data_ptr(),
          b.grad_weight.data_ptr<float>(), b.grad_bias.data_ptr<float>(),
          workspace.data_ptr<float>(), kernels::current_stream(z));
#endif
    } else {
      b = cpu_backward(dy, z, mask, scale, weight, mean, rstd, x_type);
    }
    return {b.grad_x,        b.grad_residual, b.grad_weight,   b.grad_bias,
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor aten_path(const torch::Tensor& x, const torch::Tensor& residual, double p,
                        bool training, const NormParams& norm) {
  return torch::layer_norm(residual + torch::dropout(x, p, training), {x.size(-1)}, norm.weight,
                           norm.bias, norm.eps);
}

}  // namespace

bool have_residual_norm_kernels() { return GPUBENCH_CUDA_KERNELS != 0; }

namespace {
std::atomic<int64_t> norm_calls{0};
}  // namespace

int64_t fused_residual_norm_calls() { return norm_calls.load(); }

bool fused_residual_norm_runs(const torch::Tensor& x, const torch::Tensor& residual,
                              const NormParams& norm) {
  if (!x.defined() || !residual.defined() || !norm.weight.defined() || !norm.bias.defined()) {
    return false;
  }
  if (x.dim() == 0 || x.sizes() != residual.sizes() || x.size(-1) < 1 || x.size(-1) > kMaxWidth ||
      x.device() != residual.device()) {
    return false;
  }
  if (!kernels::has_element_type(x.scalar_type()) ||
      !kernels::has_element_type(residual.scalar_type())) {
    return false;
  }
  const auto z_type = sum_type(x, residual);
  // The kernels read the residual in the sum's type, and the sum is x's type or fp32 (not for
  // bf16 + fp16, whose sum is fp32: neither's).
  if (residual.scalar_type() != z_type || (z_type != x.scalar_type() && z_type != torch::kFloat)) {
    return false;
  }
  if (norm.weight.scalar_type() != torch::kFloat || norm.bias.scalar_type() != torch::kFloat ||
      norm.weight.numel() != x.size(-1) || norm.bias.numel() != x.size(-1)) {
    return false;
  }
  if (x.is_cuda()) return have_residual_norm_kernels();
  // CPU autocast's layer_norm types differ across libtorch versions; the ATen path keeps them.
  return x.is_cpu() && !compat::autocast_enabled(torch::kCPU);
}

torch::Tensor fused_residual_layer_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                        const torch::Tensor& mask, double scale,
                                        const NormParams& norm) {
  TORCH_CHECK(
      fused_residual_norm_runs(x, residual, norm), "the fused residual norm does not run for x ",
      x.defined() ? x.toString() : "undefined", " ", x.sizes(), " and residual ",
      residual.defined() ? residual.toString() : "undefined", " ", residual.sizes(),
      x.is_cuda() && !have_residual_norm_kernels() ? " (this build has no CUDA kernels)" : "");
  TORCH_CHECK(!mask.defined() || (mask.scalar_type() == torch::kByte && mask.sizes() == x.sizes()),
              "fused residual norm: the mask is uint8 of x's shape");
  const auto y_type = norm_type(x, sum_type(x, residual));
  ++norm_calls;
  return FusedResidualNorm::apply(
      x.contiguous(), residual.contiguous(), norm.weight.contiguous(), norm.bias.contiguous(),
      kernels::as_input(mask, x.options().dtype(torch::kByte)).contiguous(),
      scale, norm.eps, y_type);
}

torch::Tensor residual_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, double p,
                                  bool training, const NormParams& norm, bool fused) {
  const bool dropout = training && p > 0;
  if (!fused || p >= 1 || !fused_residual_norm_runs(x, residual, norm)) {
    return aten_path(x, residual, p, training, norm);
  }
  torch::Tensor mask;
  if (dropout) {
    // On the CPU ATen's dropout draws empty_like(x).bernoulli_(1 - p): the same draw here keeps
    // the same elements. On CUDA one byte an element is all the kernels read.
    mask = x.is_cuda() ? torch::empty(x.sizes(), x.options().dtype(torch::kByte)).bernoulli_(1 - p)
                       : torch::empty_like(x).bernoulli_(1 - p).to(torch::kByte);
  }
  return fused_residual_layer_norm(x, residual, mask, dropout ? 1.0 / (1.0 - p) : 1.0, norm);
}

}  // namespace gpubench::train
