// NVML, loaded at run time (dlopen) so the binary runs without a driver: the driver version and
// clock, power, temperature and throttle sampling during a timed window.
#pragma once

#include "gpubench/json.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace gpubench {

/// The NVIDIA driver version ("580.159.04"), when NVML loads.
std::optional<std::string> nvml_driver_version();

/// Samples SM clock, power, temperature and throttle reasons of one GPU on a background thread.
class ClockSampler {
 public:
  /// `pci_bus_id` as CUDA reports it; sampling every `interval_s` seconds.
  explicit ClockSampler(const std::string& pci_bus_id, double interval_s = 0.1);
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  void start();
  /// Stops and summarizes: {available, samples, sm_clock_mhz {min,median,max}, power_w {mean,max},
  /// temperature_c_max, throttle_reasons [...], throttled}.
  Json stop();

 private:
  struct Sample {
    unsigned sm_mhz = 0;
    unsigned power_mw = 0;
    unsigned temperature_c = 0;
    unsigned long long reasons = 0;
  };
  void loop();

  void* device_ = nullptr;
  double interval_s_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::vector<Sample> samples_;
};

/// Names of the throttle-reason bits set in `mask`, and whether any is a real slowdown (power,
/// thermal or hardware), as opposed to idling or application settings.
std::vector<std::string> throttle_reason_names(unsigned long long mask);
bool is_slowdown(unsigned long long mask);

}  // namespace gpubench
