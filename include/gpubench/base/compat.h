// Every difference between the libtorch versions gpubench builds against (1.13 on Debian 12,
// 2.x from the PyTorch wheel on the GPU machine) lives here and nowhere else.
#pragma once

#include <ATen/autocast_mode.h>
#include <ATen/native/ConvUtils.h>
#include <c10/core/Allocator.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <optional>
#include <type_traits>
#include <utility>

#if GPUBENCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

/// True when the libtorch being compiled against is at least version major.minor.
#define GPUBENCH_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR >= (major)*100 + (minor))

namespace gpubench::compat {

/// libtorch version as major * 100 + minor (1.13 -> 113, 2.11 -> 211).
constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;

/// True where CPU autocast handles mixed-dtype layer_norm (bf16 input, fp32 weight); libtorch
/// 1.13's CPU kernel rejects it, CUDA autocast always ran layer_norm in fp32.
constexpr bool kCpuAutocastLayerNorm = kTorchVersion >= 201;

/// True where libtorch has at::scaled_dot_product_attention (fused flash / memory-efficient
/// kernels); 1.13 has only the composite math path.
constexpr bool kHasFusedAttention = kTorchVersion >= 200;

// ---- autocast: 1.13 has per-backend functions, 2.x takes a device type ----
inline bool autocast_enabled(torch::DeviceType type) {
#if GPUBENCH_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(type);
#else
  return type == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline torch::ScalarType autocast_dtype(torch::DeviceType type) {
#if GPUBENCH_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(type);
#else
  return type == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                              : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast(torch::DeviceType type, bool enabled, torch::ScalarType dtype) {
#if GPUBENCH_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(type, enabled);
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == torch::kCUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

/// a @ b * scale for batched matrices [n, r, c] (the scores of stored attention), the scale
/// applied by the GEMM itself (baddbmm's alpha, beta 0) where that is sound: libtorch 1.13's
/// CPU baddbmm with beta 0 still reads its uninitialized result (0 * NaN = NaN: NaN losses now
/// and then, FastPathsTest.FastStoredAttentionComputesThePlainOne), so there it is bmm and a
/// multiply, the same values up to one rounding.
inline torch::Tensor scaled_bmm(const torch::Tensor& a, const torch::Tensor& b, double scale) {
  if (kTorchVersion < 200) return torch::bmm(a, b) * scale;
  return torch::baddbmm(torch::zeros({1, 1, 1}, a.options().requires_grad(false)), a, b,
                        /*beta=*/0, /*alpha=*/scale);
}

/// softmax(q k^T * scale + mask) v with dropout on the probabilities; q, k, v are
/// [batch, heads, length, head_dim]. `mask` is additive (0 or -inf/-large), broadcastable to
/// [batch, heads, q_len, k_len]. Uses the fused kernel where libtorch has one.
inline torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v,
                                                  const std::optional<torch::Tensor>& mask,
                                                  double dropout_p, bool is_causal = false) {
#if GPUBENCH_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal);
#else
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (is_causal) {
    const auto length = q.size(-2);
    auto causal = torch::ones({length, k.size(-2)}, q.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
  }
  if (mask) scores = scores + *mask;
  auto probs = torch::softmax(scores, -1);
  if (dropout_p > 0) probs = torch::dropout(probs, dropout_p, /*train=*/true);
  return torch::matmul(probs, v);
#endif
}

/// True where libtorch's CPU embedding_bag takes bf16 tables; 1.13's takes half, float and
/// double only (its CUDA kernel always took bf16).
constexpr bool kCpuBf16EmbeddingBag = kTorchVersion >= 201;

/// The dtype an embedding_bag table of `dtype` on `device` is kept in: `dtype` itself, except
/// bf16 on the CPU of a libtorch without that kernel, where it is float.
inline torch::ScalarType embedding_bag_dtype(torch::ScalarType dtype, const torch::Device& device) {
  if (dtype == torch::kBFloat16 && device.is_cpu() && !kCpuBf16EmbeddingBag) return torch::kFloat;
  return dtype;
}

// ---- c10's memory-profiling hook: 1.13 passes the allocator's totals as int64_t, 2.x as ----
// ---- size_t ----
/// c10::MemoryReportingInfoBase with one callback whatever this libtorch's signature:
/// on_memory(bytes, device) for every allocation (bytes > 0) and free (bytes < 0) the hook
/// sees while installed (c10::DebugInfoGuard with DebugInfoKind::PROFILER_STATE). Both
/// signatures are declared; the one this libtorch has overrides, the other is never called.
class MemoryReportingHook : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void*, int64_t bytes, int64_t, int64_t, c10::Device device) {
    on_memory(bytes, device);
  }
  void reportMemoryUsage(void*, int64_t bytes, size_t, size_t, c10::Device device) {
    on_memory(bytes, device);
  }
  bool memoryProfilingEnabled() const override { return true; }

 protected:
  virtual void on_memory(int64_t bytes, const c10::Device& device) = 0;
};

/// tensors[i] *= scalar for a 0-dim tensor `scalar`, without reading it on the host.
inline void foreach_mul_(std::vector<torch::Tensor>& tensors, const torch::Tensor& scalar) {
#if GPUBENCH_TORCH_AT_LEAST(2, 1)
  at::_foreach_mul_(tensors, scalar);
#else
  for (auto& t : tensors) t.mul_(scalar);
#endif
}

/// Whether PyTorch empties the caching allocator after each cuDNN autotuning of a convolution
/// (at::native::_cudnn_set_conv_benchmark_empty_cache, in libtorch 2.x; 1.13 always empties it,
/// and the setting is ignored there). The cuDNN autotuner's other bound, the number of algorithms
/// it times (at::globalContext().setBenchmarkLimitCuDNN), exists in both versions.
constexpr bool kHasCudnnBenchmarkEmptyCache = kTorchVersion >= 206;
inline void set_cudnn_benchmark_empty_cache(bool enable) {
#if GPUBENCH_TORCH_AT_LEAST(2, 6)
  at::native::_cudnn_set_conv_benchmark_empty_cache(enable);
#else
  (void)enable;
#endif
}
inline bool cudnn_benchmark_empty_cache() {
#if GPUBENCH_TORCH_AT_LEAST(2, 6)
  return at::native::_cudnn_get_conv_benchmark_empty_cache();
#else
  return true;
#endif
}

/// tensors[i] /= scalar for a 0-dim tensor `scalar`, without reading it on the host.
inline void foreach_div_(std::vector<torch::Tensor>& tensors, const torch::Tensor& scalar) {
#if GPUBENCH_TORCH_AT_LEAST(2, 1)
  at::_foreach_div_(tensors, scalar);
#else
  for (auto& t : tensors) t.div_(scalar);
#endif
}

/// dst[i].copy_(src[i]) as one multi-tensor kernel (at::_foreach_copy_, libtorch 2.1 and
/// later); a copy per tensor on 1.13.
inline void foreach_copy_(std::vector<torch::Tensor>& dst, const std::vector<torch::Tensor>& src) {
#if GPUBENCH_TORCH_AT_LEAST(2, 1)
  at::_foreach_copy_(dst, src);
#else
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
#endif
}

/// tensors[i] += weight * (ends[i] - tensors[i]). libtorch 1.13 has no _foreach_lerp_: there it
/// is a difference and an add (two passes and a temporary copy).
inline void foreach_lerp_(std::vector<torch::Tensor>& tensors,
                          const std::vector<torch::Tensor>& ends, double weight) {
#if GPUBENCH_TORCH_AT_LEAST(2, 0)
  at::_foreach_lerp_(tensors, ends, weight);
#else
  const auto difference = at::_foreach_sub(ends, tensors);
  at::_foreach_add_(tensors, difference, weight);
#endif
}

/// True where libtorch has the fused optimizer kernels with a tensor learning rate
/// (_fused_adam_, _fused_adamw_, _fused_sgd_ on CUDA and CPU).
constexpr bool kHasFusedOptimizers = kTorchVersion >= 204;

/// at::_fused_adam_ (adamw false: L2 decay) or at::_fused_adamw_ (decoupled decay), the rate read
/// from the 0-dim float tensor `lr` and the step count from `steps` (one float tensor per
/// parameter), both on the parameters' device. No amsgrad, no maximize, no grad scale.
inline void fused_adam_(bool adamw, std::vector<torch::Tensor>& params,
                        const std::vector<torch::Tensor>& grads,
                        std::vector<torch::Tensor>& exp_avgs,
                        std::vector<torch::Tensor>& exp_avg_sqs,
                        const std::vector<torch::Tensor>& steps, const torch::Tensor& lr,
                        double beta1, double beta2, double weight_decay, double eps) {
#if GPUBENCH_TORCH_AT_LEAST(2, 4)
  if (adamw) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2,
                      weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2,
                     weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
#else
  (void)adamw, (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps;
  (void)lr, (void)beta1, (void)beta2, (void)weight_decay, (void)eps;
  TORCH_CHECK(false, "fused Adam needs libtorch 2.4 or later");
#endif
}

/// at::_fused_sgd_ with dampening 0, the rate read from the 0-dim float tensor `lr`.
/// `momentum_buffers` empty for momentum 0; `first_step` makes each buffer the gradient.
inline void fused_sgd_(std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                       std::vector<torch::Tensor>& momentum_buffers, double weight_decay,
                       double momentum, const torch::Tensor& lr, bool nesterov, bool first_step) {
#if GPUBENCH_TORCH_AT_LEAST(2, 4)
  at::_fused_sgd_(params, grads, momentum_buffers, weight_decay, momentum, lr, /*dampening=*/0.0,
                  nesterov, /*maximize=*/false, first_step);
#else
  (void)params, (void)grads, (void)momentum_buffers, (void)weight_decay, (void)momentum;
  (void)lr, (void)nesterov, (void)first_step;
  TORCH_CHECK(false, "fused SGD needs libtorch 2.4 or later");
#endif
}

/// The CUDA allocator option `expandable_segments` exists from libtorch 2.1; 1.13 refuses the
/// whole PYTORCH_CUDA_ALLOC_CONF when it meets an option it does not know.
constexpr bool kHasExpandableSegments = kTorchVersion >= 201;

#if GPUBENCH_WITH_CUDA
/// Caching-allocator statistics of one device (aggregate over pools), in bytes.
struct AllocatorStats {
  int64_t allocated_current = 0;
  int64_t allocated_peak = 0;
  int64_t reserved_current = 0;
  int64_t reserved_peak = 0;
  // Counters since the process started. num_alloc_retries and num_ooms exist in 1.13 and 2.x;
  // num_device_alloc/free only in newer 2.x, so device allocations are counted as segments
  // (Stat::allocated/freed, in every version): each is one cudaMalloc (or mapping) and free.
  int64_t alloc_retries = 0;
  int64_t ooms = 0;
  int64_t segments_allocated = 0;
  int64_t segments_freed = 0;
};

inline AllocatorStats allocator_stats(int device) {
  // Index 0 is StatType::AGGREGATE in every version; the enum moved namespaces in 2.x.
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  AllocatorStats out;
  out.allocated_current = stats.allocated_bytes[0].current;
  out.allocated_peak = stats.allocated_bytes[0].peak;
  out.reserved_current = stats.reserved_bytes[0].current;
  out.reserved_peak = stats.reserved_bytes[0].peak;
  out.alloc_retries = stats.num_alloc_retries;
  out.ooms = stats.num_ooms;
  out.segments_allocated = stats.segment[0].allocated;
  out.segments_freed = stats.segment[0].freed;
  return out;
}

/// Whether the caching allocator of `device` holds expandable segments: -1 when it holds no
/// segment (or this libtorch cannot say), else 0 or 1. What the allocator does, as opposed to
/// what PYTORCH_CUDA_ALLOC_CONF asked for.
inline int expandable_segments_in_use(int device) {
#if GPUBENCH_TORCH_AT_LEAST(2, 1)
  int answer = -1;
  for (const auto& segment : c10::cuda::CUDACachingAllocator::snapshot().segments) {
    if (segment.device != device) continue;
    if (segment.is_expandable) return 1;
    answer = 0;
  }
  return answer;
#else
  (void)device;
  return -1;
#endif
}
#endif

/// Ends a process group before it is destroyed: libtorch 2.x's ProcessGroupNCCL has shutdown()
/// (it flushes and frees its communicators) and warns at exit when it was never called, as
/// torch.distributed.destroy_process_group() would; libtorch 1.13's has none, and its destructor
/// does the same work. A group type without shutdown() is left to its destructor.
template <typename Group, typename = void>
struct HasShutdown : std::false_type {};
template <typename Group>
struct HasShutdown<Group, std::void_t<decltype(std::declval<Group&>().shutdown())>>
    : std::true_type {};

template <typename Group>
void shutdown_group(Group& group) {
  if constexpr (HasShutdown<Group>::value) group.shutdown();
}

}  // namespace gpubench::compat

// ---- c10d (src/distributed/comm.cpp alone defines GPUBENCH_COMPAT_C10D, before this) ----
// Which process groups this libtorch has is known from its headers:
// - Gloo: Debian's 1.13 headers include gloo/*.h (libgloo-dev); 2.x's ProcessGroupGloo.hpp
//   declares nothing unless USE_C10D_GLOO is defined, as the wheel's own build does.
// - NCCL: ProcessGroupNCCL.hpp needs nccl.h (pip's nvidia-nccl, found by
//   cmake/Distributed.cmake) and, in 2.x, USE_C10D_NCCL; a CPU-only libtorch has neither.
// In 1.13 both derive from c10d::ProcessGroup; from 2.0 on from c10d::Backend (the
// ProcessGroup became a dispatcher over backends). TCPStore, PrefixStore, Work::wait() and
// Node::add_post_hook / del_post_hook are the same in both.
#if defined(GPUBENCH_COMPAT_C10D) && !defined(GPUBENCH_COMPAT_C10D_DONE)
#define GPUBENCH_COMPAT_C10D_DONE 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if __has_include(<gloo/algorithm.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define GPUBENCH_HAS_C10D_GLOO 1
#else
#define GPUBENCH_HAS_C10D_GLOO 0
#endif
#if GPUBENCH_WITH_CUDA && __has_include(<nccl.h>) && \
    __has_include(<torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>)
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define GPUBENCH_HAS_C10D_NCCL 1
#else
#define GPUBENCH_HAS_C10D_NCCL 0
#endif

namespace gpubench::compat {
#if GPUBENCH_TORCH_AT_LEAST(2, 0)
using CollectiveGroup = c10d::Backend;
#else
using CollectiveGroup = c10d::ProcessGroup;
#endif

/// The port a TCPStore server bound (asked for port 0: a free one).
inline int store_port(const c10::intrusive_ptr<c10d::Store>& store) {
  return static_cast<const c10d::TCPStore&>(*store).getPort();
}
}  // namespace gpubench::compat
#endif
