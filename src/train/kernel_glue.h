// The libtorch side of gpubench's fused functions and their CUDA kernels, shared by their callers
// (vocab_loss.cpp, residual_norm.cpp, attention_softmax.cpp). The first part holds in every
// build; the second only in builds with the kernels (GPUBENCH_CUDA_KERNELS).
#pragma once

#include "src/train/kernel_types.h"

#include <torch/torch.h>

#if GPUBENCH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>
#endif

namespace gpubench::train::kernels {

/// Whether the kernels (and the CPU twins) take elements of `type`: fp32, fp16 or bf16.
inline bool has_element_type(torch::ScalarType type) {
  return type == torch::kFloat || type == torch::kHalf || type == torch::kBFloat16;
}

/// libtorch 1.13's Function::apply takes no undefined tensor: an absent input travels as an
/// empty one of `options` (as_input), and the function reads it back as undefined (present).
inline torch::Tensor as_input(const torch::Tensor& t, const torch::TensorOptions& options) {
  return t.defined() ? t : torch::empty({0}, options);
}
inline torch::Tensor present(const torch::Tensor& t) { return t.numel() > 0 ? t : torch::Tensor(); }

#if GPUBENCH_CUDA_KERNELS
/// The kernels' element type of `type`; fails naming `what` for any other.
inline ElementType element_type(torch::ScalarType type, const char* what) {
  switch (type) {
    case torch::kFloat:
      return ElementType::kFloat32;
    case torch::kHalf:
      return ElementType::kFloat16;
    case torch::kBFloat16:
      return ElementType::kBFloat16;
    default:
      TORCH_CHECK(false, what, ": elements of type ", type);
  }
}

/// libtorch's current stream on `t`'s device, as the kernels take it.
inline void* current_stream(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
#endif

}  // namespace gpubench::train::kernels
