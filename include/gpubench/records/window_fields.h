// Two fields of a job record (records/result.h JobRecord) that a timed window fills: what NVML saw
// of the GPU over it (JobRecord::clocks) and, for a data-parallel run, every rank's numbers
// (JobRecord::data_parallel). Keys that older records lack, or that only some runs write, are
// optionals; to_json writes the keys a value has in the order their producers write them
// (device/nvml.cpp ClockSampler::stop and energy_summary, distributed/rank.cpp
// finish_timed_phase), so every stored record writes back byte for byte. from_json refuses a
// value of the wrong type with a ConfigError naming its place ("clocks.sm_clock_mhz.median").
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/records/enums.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {

/// The SM clock over a window's samples (ClocksRecord::sm_clock_mhz): whole MHz, as NVML gives
/// them; the median is the middle sample's (the upper one of an even count).
struct ClockRange {
  int64_t min = 0, median = 0, max = 0;

  /// {min, median, max}.
  Json to_json() const;
  /// `json` read from the field `field` ("clocks.sm_clock_mhz"): a value that is not an integer
  /// is a ConfigError naming it ("clocks.sm_clock_mhz.median").
  static ClockRange from_json(const Json& json, const std::string& field);
};

/// The board's power over a window's samples (ClocksRecord::power_w), in W.
struct PowerRange {
  double mean = 0, max = 0;

  /// {mean, max}.
  Json to_json() const;
  /// `json` read from the field `field` ("clocks.power_w"): a value that is not a number is a
  /// ConfigError naming it ("clocks.power_w.mean").
  static PowerRange from_json(const Json& json, const std::string& field);
};

/// NVML's energy counter over a window (ClocksRecord::energy, device/nvml.h energy_summary):
/// written only where the counter gave a positive reading.
struct WindowEnergy {
  double joules = 0;
  double joules_per_step = 0;
  double units_per_joule = 0;  ///< throughput units per joule: performance per watt
  /// joules / counter_seconds, and the seconds between the counter's two readings: where both
  /// readings were timed (older records lack both).
  std::optional<double> mean_power_w;
  std::optional<double> counter_seconds;

  /// {joules, joules_per_step, units_per_joule, mean_power_w, counter_seconds}: the keys it has,
  /// in that order.
  Json to_json() const;
  /// `json` read from the field `field` ("clocks.energy"): a value that is not a number is a
  /// ConfigError naming it ("clocks.energy.joules").
  static WindowEnergy from_json(const Json& json, const std::string& field);
};

/// What NVML saw of the GPU over the timed window (JobRecord::clocks): the samples' summary
/// (device/nvml.h summarize_clock_samples), whether NVML had the device (available) and the
/// energy counter's reading (energy). Every key is optional: a CPU run writes samples and
/// available alone, a window without samples only the device's limits, a run with the energy
/// counter adds energy, and records older than 2026-12-02 lack the limits, the reasons' shares,
/// power_capped and throttle_note. An empty one is written as {} (a search-only or failed job).
struct ClocksRecord {
  std::optional<int64_t> samples;               ///< NVML samples taken over the window
  std::optional<int64_t> sm_clock_max_mhz;      ///< the device's maximum SM clock
  std::optional<double> power_limit_w;          ///< the enforced power limit
  std::optional<int64_t> sm_clock_default_mhz;  ///< the default application (base) clock
  std::optional<ClockRange> sm_clock_mhz;
  std::optional<PowerRange> power_w;
  std::optional<int64_t> temperature_c_max;
  std::optional<std::vector<std::string>> throttle_reasons;  ///< every reason any sample had
  /// Per reason, the share of the samples that had it, in NVML's order of the reasons ({}
  /// where none had any).
  std::optional<std::vector<std::pair<std::string, double>>> throttle_reason_share;
  std::optional<bool> power_capped;  ///< the power limit held the clocks at some sample
  /// The clocks were really slowed (a thermal or hardware slowdown, or the power cap pulling the
  /// median SM clock down); throttle_note says which.
  std::optional<bool> throttled;
  std::optional<std::string> throttle_note;
  std::optional<bool> available;  ///< NVML had the device
  std::optional<WindowEnergy> energy;
  /// The layout of a gpubench older than 2026-12-02 (c451355), which wrote available before
  /// samples rather than after throttle_note: set when read from such a record, so that it
  /// writes back as it is.
  bool available_first = false;

  bool empty() const;
  /// What the tables and checks read of the window, none where it was not measured: the SM
  /// clock's median (MHz), the mean power (W), the energy counter's units per joule.
  std::optional<double> sm_clock_median_mhz() const;
  std::optional<double> power_mean_w() const;
  std::optional<double> units_per_joule() const;
  /// {samples, sm_clock_max_mhz, power_limit_w, sm_clock_default_mhz, sm_clock_mhz, power_w,
  /// temperature_c_max, throttle_reasons, throttle_reason_share, power_capped, throttled,
  /// throttle_note, available, energy}: the keys it has, in that order (available first where
  /// available_first); {} when empty.
  Json to_json() const;
  /// `json` read from the record's field `field` ("clocks"): a value of the wrong type is a
  /// ConfigError naming it ("clocks.power_limit_w").
  static ClocksRecord from_json(const Json& json, const std::string& field);
};

/// One network's gradient buckets (GradientSyncRecord::networks): how many, and each one's
/// size in bytes, in the order they are all-reduced.
struct GradientBuckets {
  int64_t buckets = 0;
  std::vector<int64_t> bucket_bytes;

  /// {buckets, bucket_bytes}.
  Json to_json() const;
  static GradientBuckets from_json(const Json& json, const std::string& field);
};

/// What a data-parallel run's gradient sync did (DataParallelRecord::gradient_sync,
/// distributed/comm.h BucketedGradientSync::info): its buckets per network and its all-reduces,
/// by when they started.
struct GradientSyncRecord {
  std::string name;  ///< "nccl-allreduce-bucketed"
  int64_t bucket_cap_bytes = 0;
  /// Per network (its name in the workload), in the order the sync holds them.
  std::vector<std::pair<std::string, GradientBuckets>> networks;
  int64_t updates = 0;
  int64_t allreduces_started_in_backward = 0;
  int64_t allreduces_started_at_update = 0;
  int64_t allreduces_repeated = 0;
  /// Gradients that arrived from another backward than the bucket's (records before 2026-12-06
  /// lack it).
  std::optional<int64_t> gradients_from_other_backward;

  /// {name, bucket_cap_bytes, networks, updates, allreduces_started_in_backward,
  /// allreduces_started_at_update, allreduces_repeated, gradients_from_other_backward}: the keys
  /// it has, in that order.
  Json to_json() const;
  /// `json` read from the field `field` ("data_parallel.gradient_sync"): a value of the wrong type
  /// is a ConfigError naming it ("data_parallel.gradient_sync.updates").
  static GradientSyncRecord from_json(const Json& json, const std::string& field);
};

/// One rank's timed run in a data-parallel job (an entry of DataParallelRecord::ranks): what it
/// measured and how it ended.
struct RankResult {
  int64_t rank = 0;
  std::string device;                ///< the device's name ("NVIDIA H200")
  JobStatus status = JobStatus::ok;  ///< written as its string
  std::string message;
  double throughput = 0;
  double units_per_step = 0;
  int64_t steps = 0;
  double step_time_ms_median = 0;
  double step_time_ms_mean = 0;
  std::vector<double> step_time_ms;  ///< every timed step
  /// The device the one-host launcher gave the rank ("cuda:1"); none under torchrun or Slurm,
  /// where the rank's environment chose it.
  std::optional<std::string> device_index;

  /// {rank, device, status, message, throughput, units_per_step, steps, step_time_ms_median,
  /// step_time_ms_mean, step_time_ms, device_index}: the keys it has, in that order.
  Json to_json() const;
  /// `json` read from the field `field` ("data_parallel.ranks[1]"): a status outside its set is
  /// a ConfigError naming the field ("data_parallel.ranks[1].status"), the value and the
  /// allowed values; a value of the wrong type one naming it.
  static RankResult from_json(const Json& json, const std::string& field);
};

/// A data-parallel run (issue 15; JobRecord::data_parallel): how it was spread (world size,
/// backend, interconnect, devices), its batches, every rank's numbers and the gradient sync's.
/// The job's throughput is the sum over the ranks (weak scaling). Every gpubench that ran data
/// parallel wrote all of these but throughput_per_gpu, which a failed rank leaves out and
/// records before 2026-12-06 lack.
struct DataParallelRecord {
  int64_t world_size = 1;  ///< 1 to INT_MAX: a larger or smaller one is refused when read
  std::string backend;     ///< "nccl" | "gloo"
  std::string interconnect;
  std::vector<std::string> devices;  ///< the one-host launcher's; empty under torchrun or Slurm
  int64_t per_rank_batch = 0;
  int64_t global_batch = 0;  ///< per_rank_batch x world_size
  std::string scaling;       ///< how the ranks' work adds up ("weak: ...")
  std::vector<RankResult> ranks;
  double rank_throughput = 0;       ///< this record's rank's own throughput
  double step_time_spread_pct = 0;  ///< slowest over fastest rank's median step time
  GradientSyncRecord gradient_sync;
  /// Left for a one-GPU record of the same job beside it: no gpubench has filled them (the
  /// report works them out), so they are written as null where none.
  std::optional<double> single_gpu_throughput;
  std::optional<double> scaling_efficiency;
  std::optional<double> throughput_per_gpu;  ///< the ranks' mean, when every rank trained

  /// {world_size, backend, interconnect, devices, per_rank_batch, global_batch, scaling, ranks,
  /// rank_throughput, step_time_spread_pct, gradient_sync, single_gpu_throughput,
  /// scaling_efficiency, throughput_per_gpu}: all but the last always, in that order.
  Json to_json() const;
  /// `json` read from the record's field `field` ("data_parallel"): a value of the wrong type is
  /// a ConfigError naming it ("data_parallel.ranks[0].throughput").
  static DataParallelRecord from_json(const Json& json, const std::string& field);
};

}  // namespace gpubench
