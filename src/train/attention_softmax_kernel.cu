// Stored attention's fused mask + softmax + dropout (attention_softmax_kernel.h). ATen runs it,
// under amp, as the mask's add, a cast to fp32, softmax, dropout and a cast back for the product
// with v, each over [batch, heads, q_len, k_len], and as many kernels backward; these are one
// kernel each way, keeping what ATen keeps (the fp32 probabilities and the keep-mask; the
// product with v keeps its input, this output).
#include "src/train/attention_softmax_kernel.h"
#include "src/train/kernel_device.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace gpubench::train::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

using device::from_float;
using device::to_float;
using device::warp_max;
using device::warp_sum;

struct Geometry {
  int64_t rows, q_len, heads;
  int k_len;
  bool causal;
  const float* mask;
  int64_t s0, s1, s2, s3;
  bool round_sum;
  const uint8_t* keep;
  float keep_scale;
};

/// One warp a row; lane l holds keys l, l + 32, ... (kPer of them at most).
template <typename TS, typename TP, int kPer>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Geometry g, const TS* __restrict__ scores, TP* __restrict__ probs,
                   TS* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= g.rows) return;
  const int64_t i = row % g.q_len;
  const int64_t h = (row / g.q_len) % g.heads;
  const int64_t b = row / (g.q_len * g.heads);
  const float* mask_row = g.mask == nullptr ? nullptr : g.mask + b * g.s0 + h * g.s1 + i * g.s2;
  const int64_t base = row * g.k_len;
  float v[kPer];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = k * 32 + lane;
    v[k] = -INFINITY;
    if (j < g.k_len) {
      float s = to_float(scores[base + j]);
      if (g.causal && j > i) s = -INFINITY;
      if (mask_row != nullptr) {
        s += mask_row[j * g.s3];
        if (g.round_sum) s = to_float(from_float<TS>(s));
      }
      v[k] = s;
      m = fmaxf(m, s);
    }
  }
  m = warp_max(m);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = k * 32 + lane;
    v[k] = j < g.k_len ? expf(v[k] - m) : 0.0f;
    sum += v[k];
  }
  const float inv = 1.0f / warp_sum(sum);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = k * 32 + lane;
    if (j < g.k_len) {
      const TP p = from_float<TP>(v[k] * inv);
      probs[base + j] = p;
      if (out != nullptr) {
        float d = to_float(p);
        if (g.keep != nullptr) d = g.keep[base + j] ? d * g.keep_scale : 0.0f;
        out[base + j] = from_float<TS>(d);
      }
    }
  }
}

template <typename TS, typename TP, int kPer>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(Geometry g, const TS* __restrict__ grad_out, const TP* __restrict__ probs,
                    TS* __restrict__ grad_scores) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= g.rows) return;
  const int64_t base = row * g.k_len;
  float dp[kPer], p[kPer];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = k * 32 + lane;
    dp[k] = p[k] = 0.0f;
    if (j < g.k_len) {
      float d = to_float(grad_out[base + j]);
      if (g.keep != nullptr) d = g.keep[base + j] ? d * g.keep_scale : 0.0f;
      dp[k] = d;
      p[k] = to_float(probs[base + j]);
      dot += d * p[k];
    }
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = k * 32 + lane;
    if (j < g.k_len) grad_scores[base + j] = from_float<TS>(p[k] * (dp[k] - dot));
  }
}

void check_launch(const char* what) { device::check_launch("attention softmax", what); }

Geometry geometry(const SoftmaxRows& r) {
  if (r.k_len < 1 || r.k_len > kMaxSoftmaxWidth || r.rows < 0 || r.q_len < 1 || r.heads < 1 ||
      (r.probs_type != ElementType::kFloat32 && r.probs_type != r.score_type)) {
    throw std::runtime_error("attention softmax kernel: unsupported rows (k_len " +
                             std::to_string(r.k_len) + ")");
  }
  return {r.rows,
          r.q_len,
          r.heads,
          static_cast<int>(r.k_len),
          r.causal,
          r.mask,
          r.mask_strides[0],
          r.mask_strides[1],
          r.mask_strides[2],
          r.mask_strides[3],
          r.round_sum,
          r.keep,
          r.keep_scale};
}

/// Calls f(TS{}, TP{}) with the element types `r` names.
template <typename F>
void with_types(const SoftmaxRows& r, F&& f) {
  const auto as_scores = [&](auto ts) {
    using TS = decltype(ts);
    if (r.probs_type == ElementType::kFloat32) {
      f(ts, float{});
    } else {
      f(ts, TS{});
    }
  };
  switch (r.score_type) {
    case ElementType::kFloat32:
      as_scores(float{});
      break;
    case ElementType::kFloat16:
      as_scores(__half{});
      break;
    case ElementType::kBFloat16:
      as_scores(__nv_bfloat16{});
      break;
  }
}

template <typename F>
void with_per_lane(int64_t width, F&& f) {
  if (width <= 128) {
    f(std::integral_constant<int, 4>{});
  } else if (width <= 256) {
    f(std::integral_constant<int, 8>{});
  } else if (width <= 512) {
    f(std::integral_constant<int, 16>{});
  } else {
    f(std::integral_constant<int, 32>{});
  }
}

}  // namespace

void attention_softmax_forward(const SoftmaxRows& r, const void* scores, void* probs, void* out,
                               void* stream) {
  const Geometry g = geometry(r);
  if (r.rows == 0) return;
  const auto blocks = static_cast<unsigned>((r.rows + kWarps - 1) / kWarps);
  auto* s = static_cast<cudaStream_t>(stream);
  with_types(r, [&](auto ts, auto tp) {
    using TS = decltype(ts);
    using TP = decltype(tp);
    with_per_lane(r.k_len, [&](auto per) {
      forward_kernel<TS, TP, decltype(per)::value><<<blocks, kThreads, 0, s>>>(
          g, static_cast<const TS*>(scores), static_cast<TP*>(probs), static_cast<TS*>(out));
    });
  });
  check_launch("forward");
}

void attention_softmax_backward(const SoftmaxRows& r, const void* grad_out, const void* probs,
                                void* grad_scores, void* stream) {
  const Geometry g = geometry(r);
  if (r.rows == 0) return;
  const auto blocks = static_cast<unsigned>((r.rows + kWarps - 1) / kWarps);
  auto* s = static_cast<cudaStream_t>(stream);
  with_types(r, [&](auto ts, auto tp) {
    using TS = decltype(ts);
    using TP = decltype(tp);
    with_per_lane(r.k_len, [&](auto per) {
      backward_kernel<TS, TP, decltype(per)::value><<<blocks, kThreads, 0, s>>>(
          g, static_cast<const TS*>(grad_out), static_cast<const TP*>(probs),
          static_cast<TS*>(grad_scores));
    });
  });
  check_launch("backward");
}

}  // namespace gpubench::train::kernels
