// The libtorch side of gpubench's CUDA kernels, shared by their callers (vocab_loss.cpp,
// residual_norm.cpp, attention_softmax.cpp) in builds with the kernels (GPUBENCH_CUDA_KERNELS).
#pragma once

#include "src/train/kernel_types.h"

#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

namespace gpubench::train::kernels {

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

}  // namespace gpubench::train::kernels
