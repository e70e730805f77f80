// The CUDA kernels of the fused vocabulary cross-entropy (src/train/vocab_loss_kernel.cu, issue
// 44 item 2), behind a plain interface: raw pointers and the stream as void*, so that the .cu
// file needs no libtorch header and compiles with nvcc alone. Built only where libtorch has CUDA
// and nvcc is found (GPUBENCH_CUDA_KERNELS); src/train/vocab_loss.cpp is the one caller.
#pragma once

#include <cstdint>

#include "src/train/kernel_types.h"

namespace gpubench::train::kernels {


/// One row's shape: `rows` rows of `width` logits, row r at logits + r * row_stride elements
/// (the last dimension contiguous); the first `vocab` columns are the words, the rest padding
/// (-inf, probability 0). `target` [rows] (int64, on the device): a column, or ignore_index.
struct VocabRows {
  ElementType type = ElementType::kFloat32;
  const void* logits = nullptr;
  int64_t rows = 0;
  int64_t row_stride = 0;
  int64_t width = 0;
  int64_t vocab = 0;
  const int64_t* target = nullptr;
  int64_t ignore_index = -100;
};

/// Forward, one block a row: lse[r] = log sum_j exp(x_rj) (fp32) and per_row[2r], per_row[2r+1]
/// = the row's nll (lse - x_rt) and smoothing term (sum over the first `vocab` columns of
/// -(x_rj - lse)), both 0 for an ignored row and NaN for a target outside [0, width).
/// Throws std::runtime_error when the launch fails.
void vocab_loss_forward(const VocabRows& rows, float* lse, float* per_row, void* stream);

/// Backward: grad_logits [rows, width] (contiguous, the logits' type) =
/// a_r * (softmax_r - onehot(t_r)) + b_r * (vocab * softmax_r - [j < vocab]), with
/// a_r = grad[0], b_r = grad[1] for a kept row and 0 for an ignored one; `grad` [2] (fp32, on
/// the device) is the gradient of the summed (nll, smoothing) pair.
void vocab_loss_backward(const VocabRows& rows, const float* lse, const float* grad,
                         void* grad_logits, void* stream);

}  // namespace gpubench::train::kernels
