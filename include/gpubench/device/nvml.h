// NVML, loaded at run time (dlopen) so the binary runs without a driver: the driver version and
// clock, power, temperature and throttle sampling during a timed window.
#pragma once

#include "gpubench/base/json.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace gpubench {

/// The NVIDIA driver version ("580.159.04"), when NVML loads.
std::optional<std::string> nvml_driver_version();

/// One reading of a GPU's clocks and power.
struct ClockSample {
  unsigned sm_mhz = 0;
  unsigned power_mw = 0;
  unsigned temperature_c = 0;
  unsigned long long reasons = 0;  ///< NVML's clocks-event (throttle) reason bits
};

/// The device's limits the samples are judged against; 0 where NVML does not say.
struct ClockLimits {
  unsigned max_sm_mhz = 0;      ///< nvmlDeviceGetMaxClockInfo(SM)
  unsigned power_limit_mw = 0;  ///< nvmlDeviceGetEnforcedPowerLimit
  unsigned default_sm_mhz = 0;  ///< nvmlDeviceGetDefaultApplicationsClock(SM): base clock
};

/// A median SM clock at or above this share of the device's maximum is not slowed down.
constexpr double kUnthrottledClockShare = 0.97;

/// The summary of a timed window's samples: {samples, sm_clock_mhz {min, median, max},
/// sm_clock_max_mhz, sm_clock_default_mhz, power_w {mean, max}, power_limit_w,
/// temperature_c_max, throttle_reasons [...], throttle_reason_share {name: share of the samples
/// that had it}, power_capped, throttled, throttle_note}. `power_capped`: the power limit held the
/// clocks at some sample (NVML's sw_power_cap, the normal state of a loaded GPU). `throttled`:
/// the clocks were really slowed: a thermal or hardware slowdown, or the power cap with the
/// median SM clock below kUnthrottledClockShare of the device's maximum (or of the highest
/// sampled clock where the maximum is not known). `throttle_note` says which.
Json summarize_clock_samples(const std::vector<ClockSample>& samples, const ClockLimits& limits);

/// Samples SM clock, power, temperature and throttle reasons of one GPU on a background thread.
class ClockSampler {
 public:
  /// `pci_bus_id` as CUDA reports it; sampling every `interval_s` seconds.
  explicit ClockSampler(const std::string& pci_bus_id, double interval_s = 0.1);
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  void start();
  /// Stops and summarizes: {available, ...summarize_clock_samples()}.
  Json stop();
  /// The energy the device used between start() and stop() [J], from NVML's total-energy
  /// counter (Volta and later); none where the counter cannot be read.
  std::optional<double> energy_joules() const;
  /// The seconds between the counter's two readings, which energy_joules() covers: the timed
  /// window and the moments around it until the host saw it end; 0 without both readings.
  double energy_seconds() const;

 private:
  using Sample = ClockSample;
  void loop();

  void* device_ = nullptr;
  double interval_s_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::vector<Sample> samples_;
  std::optional<unsigned long long> energy_start_mj_, energy_end_mj_;
  std::chrono::steady_clock::time_point energy_start_at_, energy_end_at_;
};

/// The energy fields of a timed window: {joules, joules_per_step, units_per_joule (throughput
/// per watt: units/s over J/s), mean_power_w, counter_seconds}; an empty object without a
/// reading, a step or a positive energy. `counter_seconds` is the interval the counter ran
/// (ClockSampler::energy_seconds): the mean power is the energy over it.
Json energy_summary(std::optional<double> joules, double units, int64_t steps,
                    double counter_seconds);

/// Total memory the process `pid` holds on the device per NVML (context, loaded kernels, every
/// allocation); none where NVML cannot say.
std::optional<long long> nvml_process_memory_bytes(const std::string& pci_bus_id, long pid);

/// Whether NVML sees an active NVLink on CUDA device `index`; none without NVML. (NVML counts
/// devices as CUDA does when CUDA_DEVICE_ORDER=PCI_BUS_ID, the usual order on servers.)
std::optional<bool> nvml_has_active_nvlink(int index);

/// Names of the throttle-reason bits set in `mask`.
std::vector<std::string> throttle_reason_names(unsigned long long mask);
/// The names of the thermal or hardware slowdowns in `mask` (the power cap alone is not one).
std::vector<std::string> slowdown_reason_names(unsigned long long mask);
/// Whether `mask` holds a thermal or hardware slowdown.
bool is_slowdown(unsigned long long mask);
/// NVML's sw_power_cap bit: the clocks held by the power limit.
constexpr unsigned long long kPowerCapReason = 0x4;

}  // namespace gpubench
