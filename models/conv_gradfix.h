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

/// The most elements one convolution kernel call may see in its input or output (of any order:
/// forward, input gradient, weight gradient) before gradfix_conv2d splits the batch: 2^31 - 1,
/// as 32-bit indexing allows. A larger call runs as pieces of at most 1/8 of it, copied into
/// one output (or, for a weight gradient, summed in fp32 at least), so a split adds a transient
/// of one piece. The environment variable GPUBENCH_CONV_SPLIT_ELEMENTS overrides it (0: never
/// split), for diagnosis; a value that is not a whole number >= 0 fails the job with a
/// ConfigError naming it.
int64_t gradfix_split_elements();

/// Sets that limit for the process (0: never split); tests lower it to exercise the split.
void set_gradfix_split_elements(int64_t elements);

/// How many of `images` one kernel call takes when each image touches `elements_per_image` in
/// the call's largest operand, under the current limit: all of them, or balanced pieces of at
/// most an eighth of the limit (one image at least).
int64_t gradfix_images_per_call(int64_t images, int64_t elements_per_image);

}  // namespace gpubench::models
