// Devices: what they are (for `info` and the environment block of every result), their memory
// (caching-allocator statistics, caps, release), synchronization and step timing. The CUDA code
// compiles only against a CUDA libtorch; a CPU build answers "no CUDA devices".
#pragma once

#include "gpubench/base/json.h"

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// One device as `info` and the results describe it.
struct DeviceInfo {
  std::string type = "cpu";        ///< "cuda" | "cpu"
  int index = -1;                  ///< CUDA ordinal; -1 for the CPU
  std::string name;                ///< "NVIDIA H200"
  int64_t memory_bytes = 0;        ///< total device memory
  int multiprocessors = 0;         ///< SMs (CUDA) or hardware threads (CPU)
  std::string compute_capability;  ///< "9.0"; empty for the CPU
  std::string pci_bus_id;          ///< "0000:19:00.0"; empty for the CPU

  Json to_json() const;
  static DeviceInfo from_json(const Json& json);
};

/// True when this binary was built against a CUDA libtorch.
bool built_with_cuda();
/// Number of visible CUDA devices (0 in a CPU build or without a driver). Creates no context.
int cuda_device_count();
/// Properties of CUDA device `index`.
DeviceInfo cuda_device_info(int index);
/// The host CPU.
DeviceInfo cpu_device_info();

/// Software versions: libtorch, CUDA runtime (compiled), cuDNN, driver (via NVML).
Json software_versions();
/// The environment block of a result: host, the device used, software versions, gpubench.
Json environment_json(const DeviceInfo& device);

/// Caching-allocator statistics in bytes (all zero on the CPU).
struct MemoryStats {
  int64_t allocated_current = 0;
  int64_t allocated_peak = 0;
  int64_t reserved_current = 0;
  int64_t reserved_peak = 0;
  // Counters since the process started; differences of two readings say what happened between.
  int64_t alloc_retries = 0;       ///< cudaMalloc failures that made the allocator free its cache
  int64_t ooms = 0;                ///< out-of-memory errors raised
  int64_t device_allocations = 0;  ///< segments the allocator took from the driver
  int64_t device_frees = 0;        ///< segments it gave back
};
MemoryStats memory_stats(const torch::Device& device);
/// The allocator's counters between two readings: {alloc_retries, ooms, device_allocations,
/// device_frees}.
Json allocator_counters_between(const MemoryStats& before, const MemoryStats& after);
void reset_peak_memory(const torch::Device& device);
/// Returns cached blocks to the driver (after a probe, after an out-of-memory error).
void release_cached_memory(const torch::Device& device);
/// Free and total device memory as the driver reports them.
std::pair<int64_t, int64_t> device_memory_info(const torch::Device& device);
/// Caps the caching allocator at `bytes` (setMemoryFraction) to emulate a smaller card.
void set_memory_cap(const torch::Device& device, int64_t bytes);
/// Loads what every step needs outside the caching allocator: the context, the cuBLAS handle
/// and a cuDNN convolution's kernels (CUDA loads modules lazily), with one small matmul and
/// one small convolution. Does nothing on the CPU.
void touch_device_libraries(const torch::Device& device);
/// What the device holds outside this process's caching allocator: used memory (total - free,
/// cudaMemGetInfo) minus the allocator's reserved bytes: the CUDA context, loaded kernels,
/// library handles (and any other process on the device). 0 on the CPU.
int64_t outside_allocator_bytes(const torch::Device& device);
/// The allocator's share of a `cap_bytes` card once `outside_bytes` of it is taken outside the
/// allocator (at least 1/8 of the cap, so a wrong reading cannot leave nothing).
int64_t allocator_cap_bytes(int64_t cap_bytes, int64_t outside_bytes);
/// Waits for all work queued on the device.
void synchronize(const torch::Device& device);
/// Makes `device` current for the calling thread.
void set_current_device(const torch::Device& device);

/// Empty when the device still works; else what is wrong with it (a sticky CUDA error, say).
/// Synchronizes. Always empty for the CPU.
std::string device_error(const torch::Device& device);

/// cuDNN's algorithm choice for convolutions: autotuning (`benchmark`, timing up to
/// `benchmark_limit` algorithms per convolution, 0 = all) or heuristics, and whether the caching
/// allocator is emptied after each autotuning (libtorch 2.x only).
void set_cudnn_algorithm_choice(bool benchmark, int benchmark_limit, bool empty_cache);
/// The current choice as a record states it: {"benchmark", "benchmark_limit",
/// "empty_cache_after_benchmark"}, plus CUDNN_CONV_WSCAP_DBG and CUBLAS_WORKSPACE_CONFIG when
/// set in the environment (they bound cuDNN's and cuBLAS's workspaces).
Json cudnn_algorithm_choice_json();

/// The caching allocator's options with `expandable_segments` set as asked: `options` (a
/// PYTORCH_CUDA_ALLOC_CONF value, "key:value" pairs separated by commas) without any
/// expandable_segments pair of its own, then "expandable_segments:True" or ":False".
std::string allocator_options_with(const std::string& options, bool expandable_segments);
/// Sets the CUDA caching allocator's expandable_segments option for this process (in
/// PYTORCH_ALLOC_CONF when the user set that, else PYTORCH_CUDA_ALLOC_CONF), keeping the user's
/// other options. The allocator reads its options once, at its first use: call this before
/// anything touches CUDA memory. Does nothing without CUDA or before libtorch 2.1.
void configure_allocator(bool expandable_segments);
/// For the record: {"conf": the options the allocator was given (or null),
/// "expandable_segments": whether its segments are expandable (null when it holds none)}.
Json allocator_json(const torch::Device& device);

/// The dense-matmul peaks `info` and the timed runs measure: "fp32" (TF32 off), "tf32",
/// "bf16", "fp16".
const std::vector<std::string>& matmul_peak_kinds();
/// The peak kind a training precision runs its matmuls at: fp32 -> "fp32", tf32 -> "tf32",
/// amp-bf16 -> "bf16", amp-fp16 -> "fp16"; empty for an unknown name.
std::string matmul_peak_kind(const std::string& precision);
/// Measures the device's dense-matmul throughput of `kind` [TFLOP/s]: square n x n products
/// (2n^3 FLOPs each), the best of five rounds of about 0.1 s. Sets the cuBLAS TF32 mode for
/// fp32 and tf32 and restores it. None on the CPU or when it fails (out of memory, say).
std::optional<double> measure_matmul_peak_tflops(const torch::Device& device,
                                                 const std::string& kind, int64_t n = 8192);

/// True for a typed out-of-memory error only: c10::OutOfMemoryError, and a libtorch check's
/// c10::Error carrying an allocation status (CUDNN_STATUS_ALLOC_FAILED,
/// CUBLAS_STATUS_ALLOC_FAILED, CUDA's "out of memory" error). Any other error is not one, even
/// when its message says "out of memory": it fails the probe or the job with its message.
bool is_out_of_memory(const std::exception& error);

/// Marks points on the device's stream (CUDA events with timing; host clock on the CPU) and
/// reports the intervals between consecutive marks.
class StepClock {
 public:
  explicit StepClock(const torch::Device& device);
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;

  /// Records a point after the work queued so far.
  void mark();
  /// Waits for the last mark and returns the intervals between marks [ms].
  std::vector<double> intervals_ms();
  /// Forgets all marks.
  void clear();
  int marks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpubench
