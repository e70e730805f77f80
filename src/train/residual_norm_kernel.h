// The CUDA kernels of the fused residual + dropout + LayerNorm (src/train/residual_norm_kernel.cu,
// issue 44 item 4), behind a plain interface like vocab_loss_kernel.h: raw pointers and the
// stream as void*, so that the .cu file compiles with nvcc alone. src/train/residual_norm.cpp is
// the one caller.
#pragma once

#include <cstdint>

#include "src/train/kernel_types.h"

namespace gpubench::train::kernels {


/// `rows` contiguous rows of `width` elements: x (the sub-layer's output, `x_type`), the residual
/// and z = residual + dropout(x) (`z_type`: x's type or fp32), y = LayerNorm(z) (`y_type`: z's
/// type or fp32). `mask` [rows, width] (1 keeps, 0 drops) or null for no dropout; a kept element
/// is scaled by `scale`.
/// (The weight, the bias and the statistics are always fp32.)
struct NormRows {
  ElementType x_type = ElementType::kFloat32;
  ElementType z_type = ElementType::kFloat32;
  ElementType y_type = ElementType::kFloat32;
  int64_t rows = 0;
  int64_t width = 0;
  const uint8_t* mask = nullptr;
  float scale = 1.0f;
};

/// The widest row the kernels take (one warp a row, 32 elements a lane).
inline constexpr int64_t kMaxNormWidth = 1024;

/// Whether the kernels take these types: z's is x's or fp32, y's is z's or fp32.
bool residual_norm_types_supported(ElementType x, ElementType z, ElementType y);

/// Forward, one warp a row: d = x * mask * scale rounded to x's type (the dropout's output),
/// z = residual + d rounded to z's type, y = (z - mean) * rstd * weight + bias, with the row's
/// mean and rstd = 1 / sqrt(var + eps) (fp32) written for the backward.
/// Throws std::runtime_error when the launch fails.
void residual_norm_forward(const NormRows& rows, const void* x, const void* residual,
                           const float* weight, const float* bias, float eps, void* z, void* y,
                           float* mean, float* rstd, void* stream);

/// The backward's blocks for `rows` rows: `workspace` holds 2 * blocks * width floats.
int64_t residual_norm_backward_blocks(int64_t rows);

/// Backward from dy (y's type): dz = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
/// g = dy * weight and xhat = (z - mean) * rstd, written as the residual's gradient (z's type)
/// and, times mask * scale, as x's (x's type); dweight = sum over rows of dy * xhat and
/// dbias = sum of dy (fp32), summed in a fixed order (per block, then over the blocks).
void residual_norm_backward(const NormRows& rows, const void* dy, const void* z,
                            const float* weight, const float* mean, const float* rstd,
                            void* grad_residual, void* grad_x, float* grad_weight,
                            float* grad_bias, float* workspace, void* stream);

}  // namespace gpubench::train::kernels
