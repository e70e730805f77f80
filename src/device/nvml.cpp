#include "gpubench/device/nvml.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace gpubench {

namespace {

// The few NVML entry points gpubench uses; their C ABI has been stable for a decade.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlTemperatureGpu = 0;

struct NvmlApi {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*handle_by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*default_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, void*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  bool ok = false;
};

template <typename F>
void bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

const NvmlApi& nvml() {
  static const NvmlApi api = [] {
    NvmlApi a;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return a;
    bind(lib, "nvmlInit_v2", a.init);
    bind(lib, "nvmlSystemGetDriverVersion", a.driver_version);
    bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", a.handle_by_pci);
    bind(lib, "nvmlDeviceGetClockInfo", a.clock);
    bind(lib, "nvmlDeviceGetPowerUsage", a.power);
    bind(lib, "nvmlDeviceGetTemperature", a.temperature);
    bind(lib, "nvmlDeviceGetCurrentClocksEventReasons", a.reasons);
    if (!a.reasons) bind(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", a.reasons);
    bind(lib, "nvmlDeviceGetMaxClockInfo", a.max_clock);
    bind(lib, "nvmlDeviceGetEnforcedPowerLimit", a.power_limit);
    bind(lib, "nvmlDeviceGetDefaultApplicationsClock", a.default_clock);
    bind(lib, "nvmlDeviceGetTotalEnergyConsumption", a.energy);
    // nvmlProcessInfo_v1_t {pid, usedGpuMemory}: the unversioned symbol keeps the v1 layout.
    bind(lib, "nvmlDeviceGetComputeRunningProcesses", a.processes);
    bind(lib, "nvmlDeviceGetHandleByIndex_v2", a.handle_by_index);
    bind(lib, "nvmlDeviceGetNvLinkState", a.nvlink_state);
    a.ok = a.init && a.init() == kNvmlSuccess;
    return a;
  }();
  return api;
}

struct ReasonBit {
  unsigned long long bit;
  const char* name;
  bool slowdown;
};
constexpr ReasonBit kReasons[] = {
    {0x1, "gpu_idle", false},
    {0x2, "applications_clocks", false},
    {kPowerCapReason, "sw_power_cap", false},  // judged with the clocks: summarize_clock_samples
    {0x8, "hw_slowdown", true},
    {0x10, "sync_boost", false},
    {0x20, "sw_thermal_slowdown", true},
    {0x40, "hw_thermal_slowdown", true},
    {0x80, "hw_power_brake_slowdown", true},
    {0x100, "display_clock_setting", false},
};

}  // namespace

std::optional<std::string> nvml_driver_version() {
  const NvmlApi& api = nvml();
  if (!api.ok || !api.driver_version) return std::nullopt;
  char buffer[96] = {};
  if (api.driver_version(buffer, sizeof buffer) != kNvmlSuccess) return std::nullopt;
  return std::string(buffer);
}

std::vector<std::string> throttle_reason_names(unsigned long long mask) {
  std::vector<std::string> out;
  for (const auto& r : kReasons) {
    if (mask & r.bit) out.emplace_back(r.name);
  }
  return out;
}

std::vector<std::string> slowdown_reason_names(unsigned long long mask) {
  std::vector<std::string> out;
  for (const auto& r : kReasons) {
    if ((mask & r.bit) && r.slowdown) out.emplace_back(r.name);
  }
  return out;
}

bool is_slowdown(unsigned long long mask) { return !slowdown_reason_names(mask).empty(); }

ClockSampler::ClockSampler(const std::string& pci_bus_id, double interval_s)
    : interval_s_(interval_s) {
  const NvmlApi& api = nvml();
  if (api.ok && api.handle_by_pci && !pci_bus_id.empty()) {
    nvmlDevice_t device = nullptr;
    if (api.handle_by_pci(pci_bus_id.c_str(), &device) == kNvmlSuccess) device_ = device;
  }
}

ClockSampler::~ClockSampler() {
  if (running_) stop();
}

void ClockSampler::start() {
  if (!device_ || running_) return;
  samples_.clear();
  energy_start_mj_.reset();
  energy_end_mj_.reset();
  const NvmlApi& api = nvml();
  unsigned long long mj = 0;
  if (api.energy && api.energy(device_, &mj) == kNvmlSuccess) {
    energy_start_mj_ = mj;
    energy_start_at_ = std::chrono::steady_clock::now();
  }
  running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void ClockSampler::loop() {
  const NvmlApi& api = nvml();
  while (running_) {
    Sample s;
    if (api.clock) api.clock(device_, kNvmlClockSm, &s.sm_mhz);
    if (api.power) api.power(device_, &s.power_mw);
    if (api.temperature) api.temperature(device_, kNvmlTemperatureGpu, &s.temperature_c);
    if (api.reasons) api.reasons(device_, &s.reasons);
    samples_.push_back(s);
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s_));
  }
}

Json summarize_clock_samples(const std::vector<ClockSample>& samples, const ClockLimits& limits) {
  Json out = {{"samples", samples.size()}};
  if (limits.max_sm_mhz > 0) out["sm_clock_max_mhz"] = limits.max_sm_mhz;
  if (limits.power_limit_mw > 0) out["power_limit_w"] = limits.power_limit_mw / 1000.0;
  if (limits.default_sm_mhz > 0) out["sm_clock_default_mhz"] = limits.default_sm_mhz;
  if (samples.empty()) return out;
  std::vector<unsigned> clocks;
  double power_sum = 0, power_max = 0;
  unsigned temperature_max = 0;
  unsigned long long reasons = 0;
  Json share = Json::object();
  for (const auto& r : kReasons) {
    std::size_t with = 0;
    for (const auto& s : samples) with += (s.reasons & r.bit) ? 1 : 0;
    if (with > 0) share[r.name] = static_cast<double>(with) / static_cast<double>(samples.size());
  }
  for (const auto& s : samples) {
    clocks.push_back(s.sm_mhz);
    power_sum += s.power_mw / 1000.0;
    power_max = std::max(power_max, s.power_mw / 1000.0);
    temperature_max = std::max(temperature_max, s.temperature_c);
    reasons |= s.reasons;
  }
  std::sort(clocks.begin(), clocks.end());
  const unsigned median = clocks[clocks.size() / 2];
  out["sm_clock_mhz"] = {{"min", clocks.front()}, {"median", median}, {"max", clocks.back()}};
  out["power_w"] = {{"mean", power_sum / static_cast<double>(samples.size())}, {"max", power_max}};
  out["temperature_c_max"] = temperature_max;
  out["throttle_reasons"] = throttle_reason_names(reasons);
  out["throttle_reason_share"] = share;
  const bool capped = (reasons & kPowerCapReason) != 0;
  out["power_capped"] = capped;
  // The power cap is how a loaded GPU runs; it slows the work only when it pulls the clocks down.
  const unsigned reference = limits.max_sm_mhz > 0 ? limits.max_sm_mhz : clocks.back();
  const bool slowed_by_cap =
      capped && reference > 0 && median < kUnthrottledClockShare * static_cast<double>(reference);
  std::string note;
  if (const auto slow = slowdown_reason_names(reasons); !slow.empty()) {
    note = "a thermal or hardware slowdown: " + join(slow, ", ");
  } else if (slowed_by_cap) {
    note = fmt::format("the power limit held the median SM clock at {} MHz, {:.0f}% of {} MHz",
                       median, 100.0 * median / reference, reference);
  }
  out["throttled"] = !note.empty();
  if (!note.empty()) out["throttle_note"] = note;
  return out;
}

Json ClockSampler::stop() {
  if (running_) {
    running_ = false;
    thread_.join();
  }
  ClockLimits limits;
  const NvmlApi& api = nvml();
  if (device_ != nullptr) {
    if (api.max_clock && api.max_clock(device_, kNvmlClockSm, &limits.max_sm_mhz) != kNvmlSuccess) {
      limits.max_sm_mhz = 0;
    }
    if (api.power_limit && api.power_limit(device_, &limits.power_limit_mw) != kNvmlSuccess) {
      limits.power_limit_mw = 0;
    }
    if (api.default_clock &&
        api.default_clock(device_, kNvmlClockSm, &limits.default_sm_mhz) != kNvmlSuccess) {
      limits.default_sm_mhz = 0;
    }
    unsigned long long mj = 0;
    if (energy_start_mj_ && api.energy && api.energy(device_, &mj) == kNvmlSuccess) {
      energy_end_mj_ = mj;
      energy_end_at_ = std::chrono::steady_clock::now();
    }
  }
  Json out = summarize_clock_samples(samples_, limits);
  out["available"] = device_ != nullptr;
  return out;
}

std::optional<double> ClockSampler::energy_joules() const {
  if (!energy_start_mj_ || !energy_end_mj_ || *energy_end_mj_ < *energy_start_mj_) {
    return std::nullopt;
  }
  return static_cast<double>(*energy_end_mj_ - *energy_start_mj_) / 1000.0;
}

double ClockSampler::energy_seconds() const {
  if (!energy_start_mj_ || !energy_end_mj_) return 0;
  return std::chrono::duration<double>(energy_end_at_ - energy_start_at_).count();
}

Json energy_summary(std::optional<double> joules, double units, int64_t steps,
                    double counter_seconds) {
  if (!joules || *joules <= 0 || steps <= 0) return Json::object();
  Json out = {{"joules", *joules},
              {"joules_per_step", *joules / static_cast<double>(steps)},
              {"units_per_joule", units / *joules}};
  if (counter_seconds > 0) {
    out["mean_power_w"] = *joules / counter_seconds;
    out["counter_seconds"] = counter_seconds;
  }
  return out;
}

std::optional<long long> nvml_process_memory_bytes(const std::string& pci_bus_id, long pid) {
  const NvmlApi& api = nvml();
  if (!api.ok || !api.handle_by_pci || !api.processes || pci_bus_id.empty()) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (api.handle_by_pci(pci_bus_id.c_str(), &device) != kNvmlSuccess) return std::nullopt;
  struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t
    unsigned pid;
    unsigned long long used_gpu_memory;
  };
  ProcessInfoV1 infos[64] = {};
  unsigned count = 64;
  if (api.processes(device, &count, infos) != kNvmlSuccess) return std::nullopt;
  for (unsigned i = 0; i < count && i < 64; ++i) {
    // NVML_VALUE_NOT_AVAILABLE (all ones) where the driver cannot say (MIG, containers).
    if (static_cast<long>(infos[i].pid) == pid && infos[i].used_gpu_memory != ~0ULL) {
      return static_cast<long long>(infos[i].used_gpu_memory);
    }
  }
  return std::nullopt;
}

std::optional<bool> nvml_has_active_nvlink(int index) {
  const NvmlApi& api = nvml();
  if (!api.ok || !api.handle_by_index || !api.nvlink_state) return std::nullopt;
  nvmlDevice_t device = nullptr;
  if (api.handle_by_index(static_cast<unsigned>(index), &device) != kNvmlSuccess) {
    return std::nullopt;
  }
  constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
  constexpr int kFeatureEnabled = 1;  // NVML_FEATURE_ENABLED: the link is active
  for (unsigned link = 0; link < kMaxLinks; ++link) {
    int state = 0;
    if (api.nvlink_state(device, link, &state) == kNvmlSuccess && state == kFeatureEnabled) {
      return true;
    }
  }
  return false;
}

}  // namespace gpubench
