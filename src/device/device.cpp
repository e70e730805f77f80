#include "gpubench/device/device.h"
#include "gpubench/base/json_int.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/env.h"
#include "gpubench/device/nvml.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/version.h"

#include <torch/cuda.h>

#include <fmt/format.h>
#include <torch/version.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <ATen/Context.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#if GPUBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cuda_runtime_api.h>
#endif

namespace gpubench {

Json DeviceInfo::to_json() const {
  return {{"type", type},
          {"index", index},
          {"name", name},
          {"memory_bytes", memory_bytes},
          {"multiprocessors", multiprocessors},
          {"compute_capability", compute_capability},
          {"pci_bus_id", pci_bus_id}};
}

DeviceInfo DeviceInfo::from_json(const Json& json) {
  DeviceInfo d;
  d.type = json.value("type", std::string("cpu"));
  d.index = value_int(json, "index", -1);
  d.name = json.value("name", std::string());
  d.memory_bytes = json.value("memory_bytes", int64_t{0});
  d.multiprocessors = value_int(json, "multiprocessors", 0);
  d.compute_capability = json.value("compute_capability", std::string());
  d.pci_bus_id = json.value("pci_bus_id", std::string());
  return d;
}

bool built_with_cuda() { return GPUBENCH_WITH_CUDA != 0; }

int cuda_device_count() {
#if GPUBENCH_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the sticky error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

DeviceInfo cuda_device_info(int index) {
  DeviceInfo d;
  d.type = "cuda";
  d.index = index;
#if GPUBENCH_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
    d.name = prop.name;
    d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.multiprocessors = prop.multiProcessorCount;
    d.compute_capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) == cudaSuccess) d.pci_bus_id = bus;
  }
#endif
  return d;
}

namespace {
std::string read_first_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    return value;
  }
  return "";
}
}  // namespace

DeviceInfo cpu_device_info() {
  DeviceInfo d;
  d.type = "cpu";
  d.name = read_first_field("/proc/cpuinfo", "model name");
  if (d.name.empty()) d.name = "CPU";
  const std::string mem_kb = read_first_field("/proc/meminfo", "MemTotal");
  if (!mem_kb.empty()) d.memory_bytes = std::stoll(mem_kb) * 1024;
  d.multiprocessors = static_cast<int>(std::thread::hardware_concurrency());
  return d;
}

Json software_versions() {
  Json v = {{"libtorch", TORCH_VERSION}, {"built_with_cuda", built_with_cuda()}};
#if GPUBENCH_WITH_CUDA
  int runtime = 0, driver_api = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver_api);
  auto dotted = [](int version) {
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
  };
  v["cuda_runtime"] = runtime ? Json(dotted(runtime)) : Json(nullptr);
  v["cuda_driver_api"] = driver_api ? Json(dotted(driver_api)) : Json(nullptr);
  const long cudnn =
      at::detail::getCUDAHooks().hasCuDNN() ? at::detail::getCUDAHooks().versionCuDNN() : 0;
  // cuDNN 9 encodes major*10000 + minor*100 + patch; 8 and older major*1000 + minor*100 + patch.
  if (cudnn >= 90000) {
    v["cudnn"] = fmt::format("{}.{}.{}", cudnn / 10000, (cudnn % 10000) / 100, cudnn % 100);
  } else if (cudnn > 0) {
    v["cudnn"] = fmt::format("{}.{}.{}", cudnn / 1000, (cudnn % 1000) / 100, cudnn % 100);
  } else {
    v["cudnn"] = nullptr;
  }
#else
  v["cuda_runtime"] = nullptr;
  v["cuda_driver_api"] = nullptr;
  v["cudnn"] = nullptr;
#endif
  const auto driver = nvml_driver_version();
  v["driver"] = driver ? Json(*driver) : Json(nullptr);
  return v;
}

Json environment_json(const DeviceInfo& device) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  struct utsname uts {};
  uname(&uts);
  const DeviceInfo cpu = cpu_device_info();
  return {{"host", host},
          {"os", std::string(uts.sysname) + " " + uts.release},
          {"cpu", cpu.name},
          {"cpu_threads", cpu.multiprocessors},
          {"device", device.to_json()},
          {"software", software_versions()},
          {"gpubench",
           {{"version", version_info::kVersion}, {"git_commit", version_info::kGitCommit}}},
          {"variables", env::recorded_variables()},
          {"modified_by", env::modifying_variables(env::recorded_variables())}};
}

MemoryStats memory_stats(const torch::Device& device) {
  MemoryStats s;
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    const auto a = compat::allocator_stats(device.index());
    s.allocated_current = a.allocated_current;
    s.allocated_peak = a.allocated_peak;
    s.reserved_current = a.reserved_current;
    s.reserved_peak = a.reserved_peak;
    s.alloc_retries = a.alloc_retries;
    s.ooms = a.ooms;
    s.device_allocations = a.segments_allocated;
    s.device_frees = a.segments_freed;
  }
#endif
  return s;
}

Json allocator_counters_between(const MemoryStats& before, const MemoryStats& after) {
  return {{"alloc_retries", after.alloc_retries - before.alloc_retries},
          {"ooms", after.ooms - before.ooms},
          {"device_allocations", after.device_allocations - before.device_allocations},
          {"device_frees", after.device_frees - before.device_frees}};
}

void reset_peak_memory(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

void release_cached_memory(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    synchronize(device);
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#endif
}

std::pair<int64_t, int64_t> device_memory_info(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    size_t free = 0, total = 0;
    set_current_device(device);
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
    }
  }
#endif
  return {0, 0};
}

void set_memory_cap(const torch::Device& device, int64_t bytes) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    // The allocator of a device initializes on its first allocation; the cap needs it.
    (void)torch::empty({1}, torch::TensorOptions().device(device));
    const auto [free, total] = device_memory_info(device);
    (void)free;
    const double fraction = std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index());
  }
#endif
}

void touch_device_libraries(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    const auto options = torch::TensorOptions().device(device);
    const auto a = torch::ones({64, 64}, options);
    (void)torch::mm(a, a);
    const auto image = torch::ones({1, 8, 16, 16}, options);
    const auto weight = torch::ones({8, 8, 3, 3}, options);
    (void)torch::conv2d(image, weight, torch::Tensor(), /*stride=*/{1, 1}, /*padding=*/{1, 1});
    synchronize(device);
  }
#else
  (void)device;
#endif
}

int64_t outside_allocator_bytes(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  synchronize(device);
  const auto [free, total] = device_memory_info(device);
  return std::max<int64_t>(0, total - free - memory_stats(device).reserved_current);
}

int64_t allocator_cap_bytes(int64_t cap_bytes, int64_t outside_bytes) {
  return std::max(cap_bytes / 8, cap_bytes - std::max<int64_t>(0, outside_bytes));
}

void synchronize(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
#endif
}

void set_current_device(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) c10::cuda::set_device(static_cast<c10::DeviceIndex>(device.index()));
#endif
}

std::string device_error(const torch::Device& device) {
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    try {
      set_current_device(device);
      const cudaError_t sync = cudaDeviceSynchronize();
      const cudaError_t last = cudaGetLastError();
      const cudaError_t error = sync != cudaSuccess ? sync : last;
      if (error != cudaSuccess) return cudaGetErrorString(error);
      // A small allocation and a kernel: a context that lost its state fails here.
      auto t = torch::ones({256}, torch::TensorOptions().device(device));
      (void)t.sum().item<float>();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return what.substr(0, what.find('\n'));
    }
  }
#else
  (void)device;
#endif
  return "";
}

void set_cudnn_algorithm_choice(bool benchmark, int benchmark_limit, bool empty_cache) {
  auto& context = at::globalContext();
  context.setBenchmarkCuDNN(benchmark);
  context.setBenchmarkLimitCuDNN(benchmark_limit);
  compat::set_cudnn_benchmark_empty_cache(empty_cache);
}

Json cudnn_algorithm_choice_json() {
  const auto& context = at::globalContext();
  Json j = {{"benchmark", context.benchmarkCuDNN()},
            {"benchmark_limit", context.benchmarkLimitCuDNN()},
            {"empty_cache_after_benchmark", compat::cudnn_benchmark_empty_cache()}};
  for (const char* name : {"CUDNN_CONV_WSCAP_DBG", "CUBLAS_WORKSPACE_CONFIG",
                           "CUBLASLT_WORKSPACE_SIZE"}) {
    if (const char* value = std::getenv(name)) j[name] = value;
  }
  return j;
}

std::string allocator_options_with(const std::string& options, bool expandable_segments) {
  std::vector<std::string> kept = env::allocator_options_without(options, "expandable_segments");
  kept.push_back(expandable_segments ? "expandable_segments:True" : "expandable_segments:False");
  return join(kept, ",");
}

void configure_allocator(bool expandable_segments) {
#if GPUBENCH_WITH_CUDA
  if constexpr (compat::kHasExpandableSegments) {
    // Newer libtorch reads PYTORCH_ALLOC_CONF before PYTORCH_CUDA_ALLOC_CONF: edit the one the
    // user set, so that the user's other options and ours are read together.
    const char* name = std::getenv("PYTORCH_ALLOC_CONF") ? "PYTORCH_ALLOC_CONF"
                                                          : "PYTORCH_CUDA_ALLOC_CONF";
    const char* current = std::getenv(name);
    const std::string options =
        allocator_options_with(current ? current : "", expandable_segments);
    setenv(name, options.c_str(), 1);
  }
#else
  (void)expandable_segments;
#endif
}

Json allocator_json(const torch::Device& device) {
  Json j = {{"conf", nullptr}, {"expandable_segments", nullptr}};
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    if (const char* value = std::getenv(name)) {
      j["conf"] = value;
      break;
    }
  }
#if GPUBENCH_WITH_CUDA
  if (device.is_cuda()) {
    const int in_use = compat::expandable_segments_in_use(device.index());
    if (in_use >= 0) j["expandable_segments"] = in_use == 1;
  }
#else
  (void)device;
#endif
  return j;
}

const std::vector<std::string>& matmul_peak_kinds() {
  static const std::vector<std::string> kinds = {"fp32", "tf32", "bf16", "fp16"};
  return kinds;
}

std::string matmul_peak_kind(const std::string& precision) {
  if (precision == "fp32" || precision == "tf32") return precision;
  if (precision == "amp-bf16") return "bf16";
  if (precision == "amp-fp16") return "fp16";
  return "";
}

std::optional<double> measure_matmul_peak_tflops(const torch::Device& device,
                                                 const std::string& kind, int64_t n) {
#if GPUBENCH_WITH_CUDA
  if (!device.is_cuda() || n <= 0) return std::nullopt;
  const torch::ScalarType dtype = kind == "bf16"   ? torch::kBFloat16
                                  : kind == "fp16" ? torch::kHalf
                                                   : torch::kFloat;
  auto& context = at::globalContext();
  const bool tf32_before = context.allowTF32CuBLAS();
  std::optional<double> best;
  try {
    if (kind == "fp32" || kind == "tf32") context.setAllowTF32CuBLAS(kind == "tf32");
    set_current_device(device);
    const auto options = torch::TensorOptions().device(device).dtype(dtype);
    const auto a = torch::randn({n, n}, options);
    const auto b = torch::randn({n, n}, options);
    auto c = torch::empty({n, n}, options);
    const double flops =
        2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    auto seconds_for = [&](int iterations) {
      synchronize(device);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) torch::mm_out(c, a, b);
      synchronize(device);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    seconds_for(3);  // cuBLAS picks its kernel and loads it
    const double one = std::max(seconds_for(1), 1e-6);
    const int iterations = std::max(1, static_cast<int>(0.1 / one));
    double tflops = 0;
    for (int round = 0; round < 5; ++round) {
      tflops = std::max(tflops, flops * iterations / seconds_for(iterations) / 1e12);
    }
    best = tflops;
  } catch (const std::exception&) {
    best.reset();
  }
  context.setAllowTF32CuBLAS(tf32_before);
  release_cached_memory(device);  // the operands are gone; their blocks go back
  return best;
#else
  (void)device, (void)kind, (void)n;
  return std::nullopt;
#endif
}

bool is_out_of_memory(const std::exception& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error)) return true;
  // A library's allocation status, as libtorch's checks raise it (c10::Error): cuDNN's and
  // cuBLAS's ALLOC_FAILED, and CUDA's cudaErrorMemoryAllocation from a checked runtime call.
  // Any other error, a message that merely says "out of memory" included, is not taken as one:
  // the probe fails with its message instead of lowering the max batch.
  if (!dynamic_cast<const c10::Error*>(&error)) return false;
  const std::string what = error.what();
  for (const char* status : {"CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED",
                             "CUDA error: out of memory"}) {
    if (what.find(status) != std::string::npos) return true;
  }
  return false;
}

// ---- StepClock ----

struct StepClock::Impl {
  torch::Device device;
  std::vector<std::chrono::steady_clock::time_point> host_marks;
#if GPUBENCH_WITH_CUDA
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
#endif
};

StepClock::StepClock(const torch::Device& device) : impl_(new Impl{device, {}}) {}
StepClock::~StepClock() = default;

void StepClock::mark() {
#if GPUBENCH_WITH_CUDA
  if (impl_->device.is_cuda()) {
    auto event = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    event->record(at::cuda::getCurrentCUDAStream(impl_->device.index()));
    impl_->events.push_back(std::move(event));
    return;
  }
#endif
  impl_->host_marks.push_back(std::chrono::steady_clock::now());
}

std::vector<double> StepClock::intervals_ms() {
  std::vector<double> out;
#if GPUBENCH_WITH_CUDA
  if (impl_->device.is_cuda()) {
    auto& events = impl_->events;
    if (events.empty()) return out;
    events.back()->synchronize();
    for (std::size_t i = 1; i < events.size(); ++i) {
      out.push_back(static_cast<double>(events[i - 1]->elapsed_time(*events[i])));
    }
    return out;
  }
#endif
  const auto& marks = impl_->host_marks;
  for (std::size_t i = 1; i < marks.size(); ++i) {
    out.push_back(std::chrono::duration<double, std::milli>(marks[i] - marks[i - 1]).count());
  }
  return out;
}

void StepClock::clear() {
#if GPUBENCH_WITH_CUDA
  impl_->events.clear();
#endif
  impl_->host_marks.clear();
}

int StepClock::marks() const {
#if GPUBENCH_WITH_CUDA
  if (impl_->device.is_cuda()) return static_cast<int>(impl_->events.size());
#endif
  return static_cast<int>(impl_->host_marks.size());
}

}  // namespace gpubench
