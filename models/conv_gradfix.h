// A 2-D convolution whose gradients are convolutions again, to any order, at the speed of a
// first-order backward. StyleGAN's R1 penalty differentiates the discriminator's input gradient
// with respect to its weights (a double backward through every convolution). libtorch's own
// double backward of a convolution computes that weight term as a convolution that uses the
// output gradient as its kernel: a kernel as large as the feature map (1024 x 1024 at
// StyleGAN's first layers), which cuDNN runs orders of magnitude slower than its weight-
// gradient kernels. Here the backward is written as ordinary convolutions and weight-gradient
// calls (at::convolution_backward), each itself differentiable the same way, so the double
// backward is made of the same fast kernels as the first (the technique of StyleGAN2-ADA's
// conv2d_gradfix, rebuilt on libtorch's C++ autograd).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace gpubench::models {

/// torch::conv2d (groups 1, dilation 1) or torch::conv_transpose2d (`transposed`), with the
/// same result and first-order gradients, and a double backward built from convolutions.
/// Under autocast the operands are cast to the autocast dtype first, as autocast casts a
/// convolution's. `output_padding` applies to the transposed form only.
torch::Tensor gradfix_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                             const torch::Tensor& bias, int64_t stride, int64_t padding,
                             bool transposed = false, int64_t output_padding = 0);

}  // namespace gpubench::models
