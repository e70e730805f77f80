// The fused vocabulary cross-entropy's CUDA kernels (vocab_loss_kernel.h): one pass over a row
// of logits for the forward (an online max and sum of exponentials, the smoothing sum and the
// target's logit), one for the backward (the softmax from the saved log-sum-exp, the gradient
// written in the logits' type). The ATen path reads and writes the [rows, vocab] matrix about
// six times in fp32 (the copy, log_softmax, the two sums, log_softmax's backward, the cast);
// these read it twice and write it once, in its own type.
#include "src/train/vocab_loss_kernel.h"

#include "src/train/kernel_device.cuh"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gpubench::train::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

using device::from_float;
using device::to_float;

/// (m, s): the largest value seen and the sum of exp(v - m) over the values seen.
__device__ __forceinline__ void add_value(float& m, float& s, float v) {
  if (v > m) {
    s = s * expf(m - v) + 1.0f;  // m == -inf: s is 0 and stays 0 before the + 1
    m = v;
  } else if (v > -INFINITY) {
    s += expf(v - m);
  }
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (m2 > m) {
    s = s * expf(m - m2) + s2;
    m = m2;
  } else if (m2 > -INFINITY) {
    s += s2 * expf(m2 - m);
  }
}

/// Elements a thread loads at once: 16 bytes where the rows allow it, else 1.
template <typename T, bool kVector>
struct Pack {
  static constexpr int kSize = kVector ? 16 / static_cast<int>(sizeof(T)) : 1;
};

template <typename T, int kSize>
__device__ __forceinline__ void load(const T* from, T (&to)[kSize]) {
  if constexpr (kSize == 1) {
    to[0] = from[0];
  } else {
    static_assert(sizeof(T) * kSize == 16, "a pack is 16 bytes");
    *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
  }
}

template <typename T, int kSize>
__device__ __forceinline__ void store(T* to, const T (&from)[kSize]) {
  if constexpr (kSize == 1) {
    to[0] = from[0];
  } else {
    *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(from);
  }
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ logits, int64_t row_stride, int64_t width, int64_t vocab,
                   const int64_t* __restrict__ target, int64_t ignore_index,
                   float* __restrict__ lse, float* __restrict__ per_row) {
  constexpr int kSize = Pack<T, kVector>::kSize;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  float m = -INFINITY, s = 0.0f, sum_words = 0.0f;
  const int64_t whole = width / kSize * kSize;
  for (int64_t base = static_cast<int64_t>(threadIdx.x) * kSize; base < whole;
       base += static_cast<int64_t>(kThreads) * kSize) {
    alignas(16) T pack[kSize];
    load<T, kSize>(x + base, pack);
#pragma unroll
    for (int k = 0; k < kSize; ++k) {
      const float v = to_float(pack[k]);
      add_value(m, s, v);
      if (base + k < vocab) sum_words += v;
    }
  }
  for (int64_t j = whole + threadIdx.x; j < width; j += kThreads) {
    const float v = to_float(x[j]);
    add_value(m, s, v);
    if (j < vocab) sum_words += v;
  }
  // The block's (m, s) and sum: within each warp, then across the warps.
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    merge(m, s, m2, s2);
    sum_words += __shfl_xor_sync(0xffffffffu, sum_words, offset);
  }
  __shared__ float warp_m[kWarps], warp_s[kWarps], warp_sum[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
    warp_sum[warp] = sum_words;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  m = warp_m[0];
  s = warp_s[0];
  sum_words = warp_sum[0];
  for (int w = 1; w < kWarps; ++w) {
    merge(m, s, warp_m[w], warp_s[w]);
    sum_words += warp_sum[w];
  }
  const float row_lse = m + logf(s);
  lse[row] = row_lse;
  const int64_t t = target[row];
  float nll = 0.0f, smooth = 0.0f;
  if (t != ignore_index) {
    if (t < 0 || t >= width) {
      nll = smooth = NAN;  // as a device assert would, but readable: the loss is NaN
    } else {
      nll = row_lse - to_float(x[t]);
      smooth = static_cast<float>(vocab) * row_lse - sum_words;
    }
  }
  per_row[2 * row] = nll;
  per_row[2 * row + 1] = smooth;
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ logits, int64_t row_stride, int64_t width, int64_t vocab,
                    const int64_t* __restrict__ target, int64_t ignore_index,
                    const float* __restrict__ lse, const float* __restrict__ grad,
                    T* __restrict__ grad_logits) {
  constexpr int kSize = Pack<T, kVector>::kSize;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  T* g = grad_logits + row * width;
  const int64_t t = target[row];
  const bool keep = t != ignore_index;
  const float a = keep ? grad[0] : 0.0f;  // d loss / d nll
  const float b = keep ? grad[1] : 0.0f;  // d loss / d smoothing term
  const float c = a + b * static_cast<float>(vocab);
  const float row_lse = lse[row];
  auto gradient = [&](float v, int64_t j) {
    const float p = v > -INFINITY ? expf(v - row_lse) : 0.0f;
    return c * p - (j == t ? a : 0.0f) - (j < vocab ? b : 0.0f);
  };
  const int64_t whole = width / kSize * kSize;
  for (int64_t base = static_cast<int64_t>(threadIdx.x) * kSize; base < whole;
       base += static_cast<int64_t>(kThreads) * kSize) {
    alignas(16) T pack[kSize];
    load<T, kSize>(x + base, pack);
#pragma unroll
    for (int k = 0; k < kSize; ++k) pack[k] = from_float<T>(gradient(to_float(pack[k]), base + k));
    store<T, kSize>(g + base, pack);
  }
  for (int64_t j = whole + threadIdx.x; j < width; j += kThreads) {
    g[j] = from_float<T>(gradient(to_float(x[j]), j));
  }
}

void check_launch(const char* what) { device::check_launch("vocabulary loss", what); }

/// Whether 16-byte packs fit every row: the rows start 16-byte aligned and `width` of the
/// gradient's rows keeps them so.
template <typename T>
bool vector_rows(const VocabRows& r) {
  constexpr int64_t kSize = 16 / static_cast<int64_t>(sizeof(T));
  return reinterpret_cast<std::uintptr_t>(r.logits) % 16 == 0 && r.row_stride % kSize == 0 &&
         r.width % kSize == 0;
}

template <typename T>
void forward_as(const VocabRows& r, float* lse, float* per_row, cudaStream_t stream) {
  const T* logits = static_cast<const T*>(r.logits);
  const dim3 grid(static_cast<unsigned>(r.rows));
  if (vector_rows<T>(r)) {
    forward_kernel<T, true><<<grid, kThreads, 0, stream>>>(logits, r.row_stride, r.width, r.vocab,
                                                           r.target, r.ignore_index, lse, per_row);
  } else {
    forward_kernel<T, false><<<grid, kThreads, 0, stream>>>(
        logits, r.row_stride, r.width, r.vocab, r.target, r.ignore_index, lse, per_row);
  }
  check_launch("forward");
}

template <typename T>
void backward_as(const VocabRows& r, const float* lse, const float* grad, void* grad_logits,
                 cudaStream_t stream) {
  const T* logits = static_cast<const T*>(r.logits);
  T* out = static_cast<T*>(grad_logits);
  const dim3 grid(static_cast<unsigned>(r.rows));
  if (vector_rows<T>(r) && reinterpret_cast<std::uintptr_t>(out) % 16 == 0) {
    backward_kernel<T, true><<<grid, kThreads, 0, stream>>>(
        logits, r.row_stride, r.width, r.vocab, r.target, r.ignore_index, lse, grad, out);
  } else {
    backward_kernel<T, false><<<grid, kThreads, 0, stream>>>(
        logits, r.row_stride, r.width, r.vocab, r.target, r.ignore_index, lse, grad, out);
  }
  check_launch("backward");
}

}  // namespace

void vocab_loss_forward(const VocabRows& rows, float* lse, float* per_row, void* stream) {
  if (rows.rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (rows.type) {
    case ElementType::kFloat32: forward_as<float>(rows, lse, per_row, s); break;
    case ElementType::kFloat16: forward_as<__half>(rows, lse, per_row, s); break;
    case ElementType::kBFloat16: forward_as<__nv_bfloat16>(rows, lse, per_row, s); break;
  }
}

void vocab_loss_backward(const VocabRows& rows, const float* lse, const float* grad,
                         void* grad_logits, void* stream) {
  if (rows.rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (rows.type) {
    case ElementType::kFloat32: backward_as<float>(rows, lse, grad, grad_logits, s); break;
    case ElementType::kFloat16: backward_as<__half>(rows, lse, grad, grad_logits, s); break;
    case ElementType::kBFloat16:
      backward_as<__nv_bfloat16>(rows, lse, grad, grad_logits, s);
      break;
  }
}

}  // namespace gpubench::train::kernels
