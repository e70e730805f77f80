#include "models/conv_gradfix.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <limits>

namespace gpubench::models {

namespace {

std::atomic<int64_t>& split_elements() {
  static std::atomic<int64_t> limit{[] {
    const char* env = env::get(env::Switch::kConvSplitElements);
    if (env == nullptr) return int64_t{std::numeric_limits<int32_t>::max()};
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(env, &end, 10);
    GPUBENCH_CHECK(end != env && *end == '\0' && errno == 0 && v >= 0, ConfigError,
                   "GPUBENCH_CONV_SPLIT_ELEMENTS='{}' is not a whole number of elements; give "
                   "one (0 turns the split off) or unset it",
                   env);
    return static_cast<int64_t>(v);
  }()};
  return limit;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The geometry of one convolution: square stride and padding, groups 1, dilation 1.
struct Geometry {
  int64_t stride = 1;
  int64_t padding = 0;
  bool transposed = false;
  int64_t output_padding = 0;
};

void save(AutogradContext* ctx, const Geometry& g) {
  ctx->saved_data["stride"] = g.stride;
  ctx->saved_data["padding"] = g.padding;
  ctx->saved_data["transposed"] = g.transposed;
  ctx->saved_data["output_padding"] = g.output_padding;
}

Geometry load(AutogradContext* ctx) {
  Geometry g;
  g.stride = ctx->saved_data["stride"].toInt();
  g.padding = ctx->saved_data["padding"].toInt();
  g.transposed = ctx->saved_data["transposed"].toBool();
  g.output_padding = ctx->saved_data["output_padding"].toInt();
  return g;
}

/// libtorch's CPU transposed convolution has no bfloat16 kernels (slow_conv_transpose2d and its
/// weight gradient, 1.13): on the CPU, where only the smoke tests run, a reduced-precision one
/// is computed in float and rounded back.
bool reduced_transposed_on_cpu(const torch::Tensor& input, const Geometry& g) {
  return g.transposed && input.device().is_cpu() && input.scalar_type() != torch::kFloat &&
         input.scalar_type() != torch::kDouble;
}

}  // namespace

int64_t gradfix_images_per_call(int64_t n, int64_t per_image) {
  const int64_t limit = split_elements().load();
  if (limit <= 0 || n <= 1 || per_image * n <= limit) return n;
  const int64_t most = std::max<int64_t>(1, (limit / 8) / std::max<int64_t>(per_image, 1));
  const int64_t calls = (n + most - 1) / most;
  return (n + calls - 1) / calls;  // balanced pieces
}

namespace {

/// Elements per image of a convolution's output (geometry g, square kernel of side k).
int64_t output_elements_per_image(const torch::Tensor& input, const torch::Tensor& weight,
                                  const Geometry& g) {
  const int64_t k = weight.size(-1);
  auto side = [&](int64_t n) {
    return g.transposed ? (n - 1) * g.stride - 2 * g.padding + k + g.output_padding
                        : (n + 2 * g.padding - k) / g.stride + 1;
  };
  const int64_t channels = g.transposed ? weight.size(1) : weight.size(0);
  return channels * side(input.size(2)) * side(input.size(3));
}

torch::Tensor convolve_call(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, const Geometry& g) {
  return at::convolution(input, weight, bias, {g.stride, g.stride}, {g.padding, g.padding}, {1, 1},
                         g.transposed, {g.output_padding, g.output_padding}, 1);
}

torch::Tensor convolve(const torch::Tensor& input, const torch::Tensor& weight,
                       const torch::Tensor& bias, const Geometry& g) {
  if (reduced_transposed_on_cpu(input, g)) {
    const auto type = input.scalar_type();
    return convolve(input.to(torch::kFloat), weight.to(torch::kFloat),
                    bias.defined() ? bias.to(torch::kFloat) : bias, g)
        .to(type);
  }
  const int64_t n = input.size(0);
  const int64_t per_image =
      std::max(input.numel() / std::max<int64_t>(n, 1), output_elements_per_image(input, weight, g));
  const int64_t step = gradfix_images_per_call(n, per_image);
  if (step >= n) return convolve_call(input, weight, bias, g);
  torch::Tensor out;
  for (int64_t start = 0; start < n; start += step) {
    const int64_t len = std::min(step, n - start);
    const auto piece = convolve_call(input.narrow(0, start, len), weight, bias, g);
    if (!out.defined()) {
      auto sizes = piece.sizes().vec();
      sizes[0] = n;
      out = at::empty(sizes, piece.options().memory_format(piece.suggest_memory_format()));
    }
    out.narrow(0, start, len).copy_(piece);
  }
  return out;
}

/// libtorch's weight-gradient kernel of a convolution of geometry g (cuDNN's backward-filter on a
/// GPU). The weight is passed for its shape only: the weight gradient does not depend on it.
torch::Tensor weight_gradient_call(const torch::Tensor& grad_output, const torch::Tensor& input,
                                   const torch::Tensor& weight, const Geometry& g) {
  return std::get<1>(at::convolution_backward(
      grad_output, input, weight, c10::nullopt, {g.stride, g.stride}, {g.padding, g.padding},
      {1, 1}, g.transposed, {g.output_padding, g.output_padding}, 1, {false, true, false}));
}

torch::Tensor weight_gradient_kernel(const torch::Tensor& grad_output, const torch::Tensor& input,
                                     const torch::Tensor& weight, const Geometry& g) {
  if (reduced_transposed_on_cpu(input, g)) {  // in float there, as convolve() does
    return weight_gradient_kernel(grad_output.to(torch::kFloat), input.to(torch::kFloat),
                                  weight.to(torch::kFloat), g)
        .to(input.scalar_type());
  }
  const int64_t n = input.size(0);
  const int64_t per_image = std::max(input.numel(), grad_output.numel()) / std::max<int64_t>(n, 1);
  const int64_t step = gradfix_images_per_call(n, per_image);
  if (step >= n) return weight_gradient_call(grad_output, input, weight, g);
  // The sum over the batch, piece by piece, accumulated in fp32 at least.
  const auto accumulate = at::promote_types(input.scalar_type(), torch::kFloat);
  torch::Tensor sum;
  for (int64_t start = 0; start < n; start += step) {
    const int64_t len = std::min(step, n - start);
    // A fresh tensor each time (the kernel's result, or its cast), so the first is the sum.
    auto piece = weight_gradient_call(grad_output.narrow(0, start, len),
                                      input.narrow(0, start, len), weight, g)
                     .to(accumulate);
    sum = sum.defined() ? sum.add_(piece) : std::move(piece);
  }
  return sum.to(input.scalar_type());
}

/// The convolution in the other direction that maps an output gradient of `g` back onto an
/// input of `input_sizes`: a transposed convolution whose output padding restores the input's
/// exact size (a strided convolution drops rows), or a plain convolution for a transposed one.
Geometry adjoint(const Geometry& g, const torch::Tensor& grad_output,
                 at::IntArrayRef input_sizes, int64_t kernel) {
  Geometry a = g;
  a.transposed = !g.transposed;
  a.output_padding = 0;
  if (!g.transposed) {
    // conv_transpose's output side: (n - 1) * stride - 2 * padding + (kernel - 1) + 1 + op.
    const int64_t produced =
        (grad_output.size(2) - 1) * g.stride - 2 * g.padding + (kernel - 1) + 1;
    a.output_padding = input_sizes[2] - produced;
    TORCH_CHECK(a.output_padding >= 0 && a.output_padding < g.stride,
                "gradfix_conv2d: cannot restore input size ", input_sizes[2], " from ",
                grad_output.size(2));
  }
  return a;
}

torch::Tensor weight_gradient(const torch::Tensor& grad_output, const torch::Tensor& input,
                              const torch::Tensor& weight, const Geometry& g);

/// No bias: a defined, empty tensor (libtorch's custom functions take defined tensors only).
torch::Tensor no_bias(const torch::Tensor& like) { return torch::empty({0}, like.options()); }

/// The convolution itself; its backward is made of GradfixConv and GradfixWeight again.
/// `bias` is empty for none.
struct GradfixConv : public torch::autograd::Function<GradfixConv> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               int64_t stride, int64_t padding, bool transposed,
                               int64_t output_padding) {
    const Geometry g{stride, padding, transposed, output_padding};
    save(ctx, g);
    const bool has_bias = bias.numel() > 0;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->save_for_backward({input, weight});
    return convolve(input, weight, has_bias ? bias : torch::Tensor(), g);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Geometry g = load(ctx);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& grad = grads[0];
    torch::Tensor grad_input, grad_weight, grad_bias;
    if (grad.defined()) {
      if (ctx->needs_input_grad(0)) {
        const Geometry a = adjoint(g, grad, input.sizes(), weight.size(-1));
        grad_input = GradfixConv::apply(grad, weight, no_bias(grad), a.stride, a.padding,
                                        a.transposed, a.output_padding);
      }
      if (ctx->needs_input_grad(1)) grad_weight = weight_gradient(grad, input, weight, g);
      if (ctx->needs_input_grad(2) && ctx->saved_data["has_bias"].toBool()) {
        grad_bias = grad.sum({0, 2, 3});
      }
    }
    return {grad_input, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

/// The weight gradient of a convolution of geometry g, given its output gradient and input:
/// libtorch's weight-gradient kernel (cuDNN's backward-filter on a GPU). It is bilinear in
/// (grad_output, input), so its own gradients are convolutions: towards grad_output the
/// convolution of the input with the incoming weight-shaped gradient, towards the input the
/// adjoint of that.
struct GradfixWeight : public torch::autograd::Function<GradfixWeight> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& grad_output,
                               const torch::Tensor& input, const torch::Tensor& weight,
                               int64_t stride, int64_t padding, bool transposed,
                               int64_t output_padding) {
    const Geometry g{stride, padding, transposed, output_padding};
    save(ctx, g);
    ctx->save_for_backward({grad_output, input});
    return weight_gradient_kernel(grad_output, input, weight, g);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Geometry g = load(ctx);
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad_output = saved[0];
    const torch::Tensor& input = saved[1];
    const torch::Tensor& gg = grads[0];  // weight-shaped
    torch::Tensor grad_grad_output, grad_input;
    if (gg.defined() && ctx->needs_input_grad(0)) {
      grad_grad_output = GradfixConv::apply(input, gg, no_bias(gg), g.stride, g.padding,
                                            g.transposed, g.output_padding);
    }
    if (gg.defined() && ctx->needs_input_grad(1)) {
      const Geometry a = adjoint(g, grad_output, input.sizes(), gg.size(-1));
      grad_input = GradfixConv::apply(grad_output, gg, no_bias(gg), a.stride, a.padding,
                                      a.transposed, a.output_padding);
    }
    return {grad_grad_output, grad_input, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor weight_gradient(const torch::Tensor& grad_output, const torch::Tensor& input,
                              const torch::Tensor& weight, const Geometry& g) {
  return GradfixWeight::apply(grad_output, input, weight.detach(), g.stride, g.padding,
                              g.transposed, g.output_padding);
}

}  // namespace

int64_t gradfix_split_elements() { return split_elements().load(); }

void set_gradfix_split_elements(int64_t elements) { split_elements().store(elements); }

torch::Tensor gradfix_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                             const torch::Tensor& bias, int64_t stride, int64_t padding,
                             bool transposed, int64_t output_padding) {
  TORCH_CHECK(input.dim() == 4 && weight.dim() == 4, "gradfix_conv2d: 4-D input and weight");
  TORCH_CHECK(weight.size(-1) == weight.size(-2), "gradfix_conv2d: square kernels only");
  // Autocast casts a convolution's operands; the custom function's backward runs outside
  // autocast, so the casts happen here, as differentiable ops, and every saved tensor has the
  // dtype its backward computes in.
  const auto type = input.device().type();
  const torch::ScalarType dtype =
      compat::autocast_enabled(type) ? compat::autocast_dtype(type) : input.scalar_type();
  auto cast = [&](const torch::Tensor& t) {
    return t.defined() && t.scalar_type() != dtype ? t.to(dtype) : t;
  };
  const torch::Tensor x = cast(input);
  return GradfixConv::apply(x, cast(weight), bias.defined() ? cast(bias) : no_bias(x), stride,
                            padding, transposed, output_padding);
}

}  // namespace gpubench::models
