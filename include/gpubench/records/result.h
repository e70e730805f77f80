// Result records: one JobRecord per model run, a versioned ResultDocument per `gpubench run`,
// and atomic writing. Reporters only read these.
#pragma once

#include "gpubench/measure/batch_search.h"
#include "gpubench/device/device.h"
#include "gpubench/base/json.h"
#include "gpubench/measure/timing.h"
#include "gpubench/records/enums.h"
#include "gpubench/records/files.h"  // every writer of a record writes its file through it
#include "gpubench/records/window_fields.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// Version of the result schema. Bump when a field changes meaning or is removed.
constexpr int kResultSchemaVersion = 1;

/// Throughput relative to the 2020 baseline GPU on the same model.
struct NormalizedScore {
  std::string reference_row;       ///< "BERT Base"
  std::string baseline_gpu;        ///< "Quadro RTX 8000"'s id
  double baseline_throughput = 0;  ///< the baseline's 2020 throughput
  double baseline_max_batch = 0;   ///< the baseline's 2020 max batch
  double score = 0;                ///< throughput / baseline_throughput
};

/// What the job's GPU time costs (issue 46): the price of one card per hour and where it came
/// from. A data-parallel job pays it once per rank.
struct JobCost {
  double usd_per_hour = 0;  ///< one card (or the CPU machine), USD per hour
  /// "run --price-per-hour", "run.price_per_hour_usd in FILE" (a --config file), or
  /// "report --price-per-hour" (applied when the report was made, not kept in the file)
  std::string source;
};

/// One timed run of a job in a fresh process (an entry of JobRecord::confirm): the search's
/// batch, a step down after an out-of-memory error, or a bisection back up.
struct TimedAttempt {
  int64_t batch = 0;
  JobStatus status = JobStatus::ok;  ///< written as its string; "oom" where it ran out
  std::string message;
  std::optional<double> seconds;      ///< the process's wall time; older records lack it
  std::optional<AttemptPhase> phase;  ///< written as its string; older records lack it

  /// {batch, status, message, seconds, phase}: the keys it has, in that order.
  Json to_json() const;
  /// `json` read from the field `field` of a record ("confirm[2]"): a status or phase outside
  /// its set is a ConfigError naming the field ("confirm[2].phase"), the value and the allowed
  /// values.
  static TimedAttempt from_json(const Json& json, const std::string& field);
};

/// How a timed run's warm-up went (JobRecord::warmup). Records of an older gpubench hold only
/// steps, reason and step_time_ms; every_shape and host_bound came later, host_bound only where
/// runtime.cuda_graphs_if_host_bound asked.
struct WarmupRecord {
  int64_t steps = 0;
  /// Written as its string (warmup.reason); one outside the set is refused when read.
  WarmupEnd reason = WarmupEnd::none;
  std::optional<std::string> detail;      ///< warmup_done's detail ("" when none)
  std::optional<double> seconds;          ///< the warm-up's wall time
  std::optional<int64_t> autotune_steps;  ///< steps that may still autotune (never cut short)
  std::vector<double> step_time_ms;       ///< every warm-up step
  std::optional<bool> every_shape;        ///< steps of varying work that build per shape
  /// The host's share of the steps and what it decided (timed_phase.cpp graphs_if_host_bound):
  /// {steps, host_ms, device_ms, share, threshold, host_bound, graphs, ...}, kept as written.
  std::optional<Json> host_bound;

  /// {steps, reason, detail, seconds, autotune_steps, step_time_ms, every_shape, host_bound}:
  /// the keys it has, in that order.
  Json to_json() const;
  /// `json` read from the record's field `field` ("warmup"): a reason outside WarmupEnd's set is
  /// a ConfigError naming "warmup.reason", the value and the allowed values.
  static WarmupRecord from_json(const Json& json, const std::string& field);
};

/// One timed run of a job with run.repeat >= 2 (an entry of JobRecord::repeats): what it
/// measured and how it ended, with the GPU's power, clock and energy over its window where NVML
/// gave them (records of runs without NVML, or of an older gpubench, lack those four).
struct RepeatRun {
  double throughput = 0;  ///< 0 for a run that did not train
  double step_time_ms_median = 0;
  int64_t steps = 0;
  double window_seconds = 0;
  JobStatus status = JobStatus::ok;  ///< written as its string
  std::string message;
  double seconds = 0;                          ///< the process's wall time
  std::optional<double> power_w_mean;          ///< clocks.power_w.mean
  std::optional<int64_t> sm_clock_mhz_median;  ///< clocks.sm_clock_mhz.median (whole MHz)
  std::optional<double> units_per_joule;       ///< clocks.energy.units_per_joule
  std::optional<bool> throttled;               ///< clocks.throttled

  /// {throughput, step_time_ms_median, steps, window_seconds, status, message, seconds,
  /// power_w_mean, sm_clock_mhz_median, units_per_joule, throttled}: the keys it has, in that
  /// order.
  Json to_json() const;
  /// `json` read from the field `field` of a record ("repeats[1]"): a status outside its set is
  /// a ConfigError naming the field ("repeats[1].status"), the value and the allowed values.
  static RepeatRun from_json(const Json& json, const std::string& field);
};

/// A measurement over the timed runs that trained (an entry of RepeatSummary): its median and
/// range, as the throughputs are summarized.
struct MedianRange {
  double median = 0, min = 0, max = 0;

  /// {median, min, max}.
  Json to_json() const;
  /// `json` read from the field `field` of a record ("repeat_summary.power_w_mean"): a value that
  /// is not a number is a ConfigError naming the field ("repeat_summary.power_w_mean.median").
  static MedianRange from_json(const Json& json, const std::string& field);
};

/// With run.repeat >= 2 (JobRecord::repeat_summary): how many timed runs trained and how many of
/// them throttled, and the other measurements over those runs. The step time is every run's;
/// power, SM clock and energy only where NVML gave them (runs without NVML lack those three).
struct RepeatSummary {
  int64_t runs = 0;            ///< timed runs that trained
  int64_t throttled_runs = 0;  ///< of those, the ones whose GPU throttled
  std::optional<MedianRange> step_time_ms_median;
  std::optional<MedianRange> power_w_mean;
  std::optional<MedianRange> sm_clock_mhz_median;  ///< MHz; a median of two may end in .5
  std::optional<MedianRange> units_per_joule;

  /// {runs, throttled_runs, step_time_ms_median, power_w_mean, sm_clock_mhz_median,
  /// units_per_joule}: the keys it has, in that order.
  Json to_json() const;
  /// `json` read from the record's field `field` ("repeat_summary"): a value of the wrong type
  /// is a ConfigError naming it ("repeat_summary.runs").
  static RepeatSummary from_json(const Json& json, const std::string& field);
};

/// The caching allocator's counters over a stretch of the timed run (device.h
/// allocator_counters_between): cudaMalloc retries after freeing the cache, out-of-memory errors,
/// and the segments it took from and gave back to the device.
struct AllocatorCounters {
  int64_t alloc_retries = 0;
  int64_t ooms = 0;
  int64_t device_allocations = 0;
  int64_t device_frees = 0;

  /// {alloc_retries, ooms, device_allocations, device_frees}.
  Json to_json() const;
  /// `json` read from the field `field` of a record ("memory.allocator_counters_window"): a
  /// value that is not an integer is a ConfigError naming it.
  static AllocatorCounters from_json(const Json& json, const std::string& field);
};

/// run.memory_cap_gib's cap (MemoryRecord::cap): the card it stands for, what the process held
/// outside the allocator when it was set (taken off the cap), and what the allocator got.
struct MemoryCap {
  int64_t cap_bytes = 0;
  int64_t outside_allocator_bytes = 0;
  int64_t allocator_cap_bytes = 0;
  std::optional<int64_t> nvml_process_bytes;  ///< NVML's count, where NVML could say

  /// {cap_bytes, outside_allocator_bytes, allocator_cap_bytes, nvml_process_bytes}: the keys it
  /// has, in that order.
  Json to_json() const;
  /// `json` read from the record's field `field` ("memory.cap"): a value that is not an integer
  /// is a ConfigError naming it ("memory.cap.cap_bytes").
  static MemoryCap from_json(const Json& json, const std::string& field);
};

/// The job's memory, apart (JobRecord::memory): a timed run's warm-up writes the autotune peaks,
/// cuDNN's and the allocator's settings and counters, its window the rest; a memory tier's
/// confirm writes confirm_steps alone; a capped run adds cap. Every key is optional: each of
/// those records holds only its own, and older ones lack allocator, its counters and
/// outside_allocator_bytes. An empty one is written as {}.
struct MemoryRecord {
  /// The warm-up's peaks: cuDNN autotuning's trial workspaces included.
  std::optional<int64_t> autotune_peak_allocated_bytes;
  std::optional<int64_t> autotune_peak_reserved_bytes;
  /// cuDNN's algorithm choice as device.h cudnn_algorithm_choice_json reads it: {benchmark,
  /// benchmark_limit, empty_cache_after_benchmark} and any workspace variable that was set
  /// (CUDNN_CONV_WSCAP_DBG, ...), so kept as written.
  std::optional<Json> cudnn;
  /// The allocator's options as device.h allocator_json reads them: {conf, expandable_segments},
  /// each null where unset or unknown (the CPU), so kept as written.
  std::optional<Json> allocator;
  std::optional<AllocatorCounters> allocator_counters_warmup;
  /// Allocated after the timed window: weights, gradients, optimizer state, workspaces kept.
  std::optional<int64_t> resident_bytes;
  /// The timed window's peaks: the workspace-inclusive peak of training.
  std::optional<int64_t> window_peak_allocated_bytes;
  std::optional<int64_t> window_peak_reserved_bytes;
  /// What the process holds outside the allocator once training ran (CUDA runs).
  std::optional<int64_t> outside_allocator_bytes;
  std::optional<AllocatorCounters> allocator_counters_window;
  std::optional<int64_t> confirm_steps;  ///< a memory tier's confirm: the steps it trained
  std::optional<MemoryCap> cap;

  /// {autotune_peak_allocated_bytes, autotune_peak_reserved_bytes, cudnn, allocator,
  /// allocator_counters_warmup, resident_bytes, window_peak_allocated_bytes,
  /// window_peak_reserved_bytes, outside_allocator_bytes, allocator_counters_window,
  /// confirm_steps, cap}: the keys it has, in that order (the order the phases write them).
  Json to_json() const;
  /// `json` read from the record's field `field` ("memory"): a value of the wrong type is a
  /// ConfigError naming it ("memory.resident_bytes").
  static MemoryRecord from_json(const Json& json, const std::string& field);
};

/// One model on one device at one precision: the search, the timed run and their context.
struct JobRecord {
  std::string model;            ///< "bert-base"
  std::string family;           ///< "image" | "language"
  std::string precision;        ///< "fp32", "amp-bf16", ...
  std::string batch_unit;       ///< "sequences"
  std::string throughput_unit;  ///< "examples/s"
  DeviceInfo device;
  /// ok | no_fit | diverged (losses not finite, or the model degenerate: not a result) | failed |
  /// timeout | crashed; oom only from a worker, before the parent steps down (records/enums.h).
  /// Written as its string ("no-fit"); one outside the list is refused when read.
  JobStatus status = JobStatus::ok;
  std::string message;        ///< why it did not succeed
  bool emulated = false;      ///< run under --memory-cap
  bool search_only = false;   ///< a memory-tier job: the search, no timed run (throughput 0)
  std::optional<double> memory_cap_gib;
  int64_t batch = 0;                 ///< batch of the timed run, in batch_unit
  std::string batch_source;          ///< "search" | "flag" | "cpu"
  Json batch_info = Json::object();  ///< what the workload reports of its batch
  Json runtime = Json::object();     ///< how the step ran: launch, precision, optimizer kernels
  /// A data-parallel run (issue 15; DataParallelRecord, records/window_fields.h): world size,
  /// backend, interconnect, every rank's step times and throughput, the batches, the gradient
  /// sync's buckets; none (not written; {} and null read as none) on one device. `throughput` is
  /// then the sum over the ranks.
  std::optional<DataParallelRecord> data_parallel;
  std::optional<SearchRecord> search;
  /// The timed-run attempts, in the order they ran: [{batch, status, message, seconds, phase}]
  /// (older records: {batch, status, message}); a memory tier's confirm runs.
  std::vector<TimedAttempt> confirm;
  /// The timed run's warm-up; none (written as {}) where none ran: a search-only job, a failed
  /// one.
  std::optional<WarmupRecord> warmup;
  TimingStats timing;
  std::vector<double> step_time_ms;  ///< every timed step
  double units_per_step = 0;         ///< mean throughput units per step
  double throughput = 0;  ///< throughput_unit over the timed window; with repeats, their median
  /// With run.repeat >= 2: each timed run at the job's batch, the first (whose window, memory
  /// and clocks the fields above describe) included, in the order they ran. Not written when
  /// empty.
  std::vector<RepeatRun> repeats;
  /// With run.repeat >= 2: the throughputs of the repeats that trained (median, min, max and the
  /// mean's 95% interval); none with one timed run.
  std::optional<SampleStats> throughput_stats;
  /// With run.repeat >= 2: the other measurements over the timed runs that trained, each as
  /// {median, min, max}: step_time_ms_median, power_w_mean, sm_clock_mhz_median,
  /// units_per_joule (the ones a run measured); and runs, throttled_runs. None (not written)
  /// with one timed run. The tables show these medians, as `throughput` is the throughputs'
  /// median; clocks, timing and step_time_ms stay the first run's.
  std::optional<RepeatSummary> repeat_summary;
  int64_t peak_memory_bytes = 0;     ///< peak reserved by the allocator in the timed run
  int64_t peak_allocated_bytes = 0;
  /// The timed run's memory, apart: the warm-up's (autotuning) peak, the resident bytes and
  /// the timed window's peak, cuDNN's and the allocator's settings; a tier's confirm steps; a
  /// capped run's cap (MemoryRecord). The activation peak is the search's
  /// (search.activation_peak_bytes).
  MemoryRecord memory;
  std::map<std::string, int64_t> trainable_params;  ///< as built, by network
  Json losses_start = Json::object();               ///< loss values before the timed window
  Json losses = Json::object();                     ///< loss values after the timed window
  double diverged_throughput = 0;  ///< what a diverged job timed (not a result: throughput is 0)
  /// NVML's samples over the timed window and the energy counter's reading (ClocksRecord,
  /// records/window_fields.h); empty (written as {}; null reads as empty) where none were taken.
  ClocksRecord clocks;
  /// The throughput as arithmetic (compute_summary, timing.h): FLOPs per unit, achieved TFLOP/s,
  /// the device's measured matmul peak for the precision and the share of it, and where that
  /// peak came from (peak_source "measured" or "reused", peak_measured_by: run/job_spec.h
  /// compute_with_peak). Timed CUDA runs; empty (not written) otherwise. ComputeRecord is
  /// declared in measure/timing.h, which builds it.
  ComputeRecord compute;
  std::optional<NormalizedScore> normalized;
  std::optional<JobCost> cost;        ///< the card's price per hour, when one was given
  Json config = Json::object();       ///< the resolved model config
  Json environment = Json::object();  ///< host, device, software, gpubench
  double wall_seconds = 0;            ///< the whole job, process starts included
  std::string created_utc;

  bool ok() const { return status == JobStatus::ok; }
  /// Why the job is not the shipped workload as gpubench runs it: "config" when a user config
  /// changed its model or optimizer (config.modified), then each variable of
  /// environment.modified_by (env::modifying_variables: TF32 turned off, an allocator option, a
  /// diagnostic switch). Empty for an unmodified job. A modified job gets no 2020 score, and
  /// every table marks it.
  std::vector<std::string> modifications() const;
  /// A job that ran on the CPU: no GPU speed, so no 2020 score.
  bool on_cpu() const { return device.type == "cpu"; }
  Json to_json() const;
  static JobRecord from_json(const Json& json);
};

/// The file `gpubench run --json` writes.
struct ResultDocument {
  std::string created_utc;
  std::vector<std::string> command_line;
  Json run_settings = Json::object();
  Json environment = Json::object();
  std::vector<JobRecord> jobs;

  Json to_json() const;
  /// Throws ConfigError naming `file` for a wrong schema or version.
  static ResultDocument from_json(const Json& json, const std::string& file);
};

}  // namespace gpubench
