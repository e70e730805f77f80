// The fused residual + dropout + LayerNorm's CUDA kernels (residual_norm_kernel.h). The ATen
// path runs a sub-layer's ending as five kernels forward (dropout, the add, LayerNorm's) and five
// backward (LayerNorm's two, the cast of the residual's gradient, the dropout's, the sum into the
// residual), each reading or writing whole [tokens, hidden] tensors; these are one kernel forward
// and two backward (the second sums the weight's and bias's gradients over the blocks).
#include "src/train/kernel_device.cuh"
#include "src/train/residual_norm_kernel.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace gpubench::train::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBackwardBlocks = 1024;

using device::from_float;
using device::round_to;
using device::to_float;
using device::warp_sum;

/// One warp a row; lane l holds columns l, l + 32, ... (kPer of them at most).
template <typename TX, typename TZ, typename TY, int kPer>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(int64_t rows, int width, const TX* __restrict__ x,
                   const TZ* __restrict__ residual, const uint8_t* __restrict__ mask, float scale,
                   const float* __restrict__ weight, const float* __restrict__ bias, float eps,
                   TZ* __restrict__ z, TY* __restrict__ y, float* __restrict__ mean_out,
                   float* __restrict__ rstd_out) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t base = row * width;
  float v[kPer];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = i * 32 + lane;
    v[i] = 0.0f;
    if (c < width) {
      float d = to_float(x[base + c]);
      if (mask != nullptr) d = round_to<TX>(mask[base + c] ? d * scale : 0.0f);
      const float zz = round_to<TZ>(to_float(residual[base + c]) + d);
      z[base + c] = from_float<TZ>(zz);
      v[i] = zz;
      sum += zz;
    }
  }
  const float mu = warp_sum(sum) / static_cast<float>(width);
  float sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const float t = i * 32 + lane < width ? v[i] - mu : 0.0f;
    sq += t * t;
  }
  const float rs = rsqrtf(warp_sum(sq) / static_cast<float>(width) + eps);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = i * 32 + lane;
    if (c < width) y[base + c] = from_float<TY>((v[i] - mu) * rs * weight[c] + bias[c]);
  }
  if (lane == 0) {
    mean_out[row] = mu;
    rstd_out[row] = rs;
  }
}

/// One warp a row, the rows strided over the grid; each lane sums its columns' dweight and dbias
/// terms over its rows, the block's warps add theirs in turn (a fixed order) and the block
/// writes its two partial rows to `partial` [blocks, 2, width].
template <typename TX, typename TZ, typename TY, int kPer>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(int64_t rows, int width, const TY* __restrict__ dy, const TZ* __restrict__ z,
                    const uint8_t* __restrict__ mask, float scale, const float* __restrict__ weight,
                    const float* __restrict__ mean, const float* __restrict__ rstd,
                    TZ* __restrict__ grad_residual, TX* __restrict__ grad_x,
                    float* __restrict__ partial) {
  __shared__ float block_sums[2][kMaxNormWidth];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  float dw[kPer], db[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) dw[i] = db[i] = 0.0f;
  const float inv_width = 1.0f / static_cast<float>(width);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t base = row * width;
    const float mu = mean[row], rs = rstd[row];
    // Two passes over the row: the sums, then the gradients. The second reads dy and z again
    // (from L1: a warp's row is at most 8 KiB of them) where holding them would take 2 * kPer
    // more registers a lane and halve the warps in flight.
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = i * 32 + lane;
      if (c < width) {
        const float g = to_float(dy[base + c]) * weight[c];
        s1 += g;
        s2 += g * ((to_float(z[base + c]) - mu) * rs);
      }
    }
    s1 = warp_sum(s1) * inv_width;
    s2 = warp_sum(s2) * inv_width;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = i * 32 + lane;
      if (c < width) {
        const float d = to_float(dy[base + c]);
        const float xhat = (to_float(z[base + c]) - mu) * rs;
        dw[i] += d * xhat;
        db[i] += d;
        const float dz = rs * (d * weight[c] - s1 - xhat * s2);
        grad_residual[base + c] = from_float<TZ>(dz);
        const float dx = mask == nullptr ? dz : (mask[base + c] ? dz * scale : 0.0f);
        grad_x[base + c] = from_float<TX>(dx);
      }
    }
  }
  for (int c = threadIdx.x; c < width; c += kThreads) block_sums[0][c] = block_sums[1][c] = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    __syncthreads();
    if (warp == w) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = i * 32 + lane;
        if (c < width) {
          block_sums[0][c] += dw[i];
          block_sums[1][c] += db[i];
        }
      }
    }
  }
  __syncthreads();
  float* out = partial + static_cast<int64_t>(blockIdx.x) * 2 * width;
  for (int c = threadIdx.x; c < width; c += kThreads) {
    out[c] = block_sums[0][c];
    out[width + c] = block_sums[1][c];
  }
}

/// grad_weight[c] and grad_bias[c]: the backward blocks' partial sums. A block takes
/// kSumColumns columns; its kSumSlices rows of threads each add every kSumSlices-th partial
/// (slice y: partials y, y + kSumSlices, ...), then the slices are added in slice order: a fixed
/// order, so the same inputs give the same sums, with a chain of blocks / kSumSlices loads a
/// thread where one thread a column would wait on every block's partial in turn.
constexpr int kSumColumns = 32;
constexpr int kSumSlices = 16;

__global__ void __launch_bounds__(kSumColumns* kSumSlices)
    sum_partials_kernel(int64_t blocks, int width, const float* __restrict__ partial,
                        float* __restrict__ grad_weight, float* __restrict__ grad_bias) {
  __shared__ float sums[2][kSumSlices][kSumColumns];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kSumColumns + tx;
  float w = 0.0f, b = 0.0f;
  if (c < width) {
    for (int64_t k = ty; k < blocks; k += kSumSlices) {
      w += partial[k * 2 * width + c];
      b += partial[k * 2 * width + width + c];
    }
  }
  sums[0][ty][tx] = w;
  sums[1][ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < width) {
    float tw = 0.0f, tb = 0.0f;
#pragma unroll
    for (int y = 0; y < kSumSlices; ++y) {
      tw += sums[0][y][tx];
      tb += sums[1][y][tx];
    }
    grad_weight[c] = tw;
    grad_bias[c] = tb;
  }
}

void check_launch(const char* what) { device::check_launch("residual norm", what); }

/// Calls f(TX{}, TZ{}, TY{}) with the element types `r` names (residual_norm_types_supported).
template <typename F>
void with_types(const NormRows& r, F&& f) {
  const auto as_x = [&](auto tx) {
    using TX = decltype(tx);
    if (r.z_type == ElementType::kFloat32) {
      f(tx, float{}, float{});  // z fp32 makes y fp32 too
    } else if (r.y_type == ElementType::kFloat32) {
      f(tx, TX{}, float{});
    } else {
      f(tx, TX{}, TX{});
    }
  };
  switch (r.x_type) {
    case ElementType::kFloat32:
      as_x(float{});
      break;
    case ElementType::kFloat16:
      as_x(__half{});
      break;
    case ElementType::kBFloat16:
      as_x(__nv_bfloat16{});
      break;
  }
}

/// Calls f(std::integral_constant<int, kPer>{}) with the fewest columns a lane holds for `width`.
template <typename F>
void with_per_lane(int64_t width, F&& f) {
  if (width <= 256) {
    f(std::integral_constant<int, 8>{});
  } else if (width <= 512) {
    f(std::integral_constant<int, 16>{});
  } else if (width <= 768) {
    f(std::integral_constant<int, 24>{});
  } else {
    f(std::integral_constant<int, 32>{});
  }
}

void check_rows(const NormRows& r) {
  if (r.width < 1 || r.width > kMaxNormWidth || r.rows < 0 ||
      !residual_norm_types_supported(r.x_type, r.z_type, r.y_type)) {
    throw std::runtime_error("residual norm kernel: unsupported rows (width " +
                             std::to_string(r.width) + ")");
  }
}

}  // namespace

bool residual_norm_types_supported(ElementType x, ElementType z, ElementType y) {
  const bool z_ok = z == x || z == ElementType::kFloat32;
  const bool y_ok = y == z || y == ElementType::kFloat32;
  return z_ok && y_ok;
}

void residual_norm_forward(const NormRows& r, const void* x, const void* residual,
                           const float* weight, const float* bias, float eps, void* z, void* y,
                           float* mean, float* rstd, void* stream) {
  check_rows(r);
  if (r.rows == 0) return;
  const auto blocks = static_cast<unsigned>((r.rows + kWarps - 1) / kWarps);
  auto* s = static_cast<cudaStream_t>(stream);
  with_types(r, [&](auto tx, auto tz, auto ty) {
    using TX = decltype(tx);
    using TZ = decltype(tz);
    using TY = decltype(ty);
    with_per_lane(r.width, [&](auto per) {
      forward_kernel<TX, TZ, TY, decltype(per)::value><<<blocks, kThreads, 0, s>>>(
          r.rows, static_cast<int>(r.width), static_cast<const TX*>(x),
          static_cast<const TZ*>(residual), r.mask, r.scale, weight, bias, eps, static_cast<TZ*>(z),
          static_cast<TY*>(y), mean, rstd);
    });
  });
  check_launch("forward");
}

int64_t residual_norm_backward_blocks(int64_t rows) {
  return std::max<int64_t>(1, std::min(kMaxBackwardBlocks, (rows + kWarps - 1) / kWarps));
}

void residual_norm_backward(const NormRows& r, const void* dy, const void* z, const float* weight,
                            const float* mean, const float* rstd, void* grad_residual, void* grad_x,
                            float* grad_weight, float* grad_bias, float* workspace, void* stream) {
  check_rows(r);
  const int64_t blocks = residual_norm_backward_blocks(r.rows);
  auto* s = static_cast<cudaStream_t>(stream);
  with_types(r, [&](auto tx, auto tz, auto ty) {
    using TX = decltype(tx);
    using TZ = decltype(tz);
    using TY = decltype(ty);
    with_per_lane(r.width, [&](auto per) {
      backward_kernel<TX, TZ, TY, decltype(per)::value>
          <<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
              r.rows, static_cast<int>(r.width), static_cast<const TY*>(dy),
              static_cast<const TZ*>(z), r.mask, r.scale, weight, mean, rstd,
              static_cast<TZ*>(grad_residual), static_cast<TX*>(grad_x), workspace);
    });
  });
  check_launch("backward");
  sum_partials_kernel<<<static_cast<unsigned>((r.width + kSumColumns - 1) / kSumColumns),
                        dim3(kSumColumns, kSumSlices), 0, s>>>(blocks, static_cast<int>(r.width),
                                                               workspace, grad_weight, grad_bias);
  check_launch("backward sums");
}

}  // namespace gpubench::train::kernels
