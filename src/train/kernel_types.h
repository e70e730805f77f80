// The element types gpubench's CUDA kernels take (issue 44), shared by their raw-pointer
// headers (vocab_loss_kernel.h, residual_norm_kernel.h, attention_softmax_kernel.h).
#pragma once

namespace gpubench::train::kernels {

/// fp32, fp16 or bf16 elements; the kernels compute in fp32 either way.
enum class ElementType { kFloat32, kFloat16, kBFloat16 };

}  // namespace gpubench::train::kernels
