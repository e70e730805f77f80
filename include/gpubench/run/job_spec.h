// What crosses the process boundary between the parent and a worker: the job spec the parent
// writes for `gpubench worker` (the worker answers with a JobRecord), the config overlays it
// carries, and the matmul peak one job's timed run measures for the jobs after it.
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/measure/batch_search.h"
#include "gpubench/measure/timing.h"
#include "gpubench/records/result.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {

/// One config document applied on top of the shipped configs: {file label, document}.
using ConfigOverlay = std::pair<std::string, Json>;

/// A device's dense-matmul peak as one timed run of a suite measured it, for the jobs after it:
/// measured once per device and kind instead of in every job (0.5-1 s each on the H200).
struct MatmulPeak {
  std::string device;       ///< "cuda:0"
  std::string kind;         ///< "fp32", "tf32", "bf16" or "fp16" (matmul_peak_kind)
  double tflops = 0;        ///< measure_matmul_peak_tflops
  std::string measured_by;  ///< the job whose timed run measured it: "bert-base"

  Json to_json() const;
  static MatmulPeak from_json(const Json& json);
};

/// What a worker is asked to do.
struct JobSpec {
  std::string model;                      ///< workload name
  WorkerPhase phase = WorkerPhase::time;  ///< search | time | confirm (a memory tier's batch)
  int64_t batch = 0;                      ///< batch of the timed run (phase "time")
  std::string device = "cpu";             ///< "cpu" | "cuda:N"
  std::vector<ConfigOverlay> overlays;    ///< user config file, then the command line
  std::optional<SearchHint> search_hint;  ///< an earlier search's memory line (phase "search")
  /// Probes of this search that an earlier worker made before it became unusable: the search
  /// goes on from them (phase "search").
  std::vector<ProbeRecord> search_probes;
  int search_worker = 0;  ///< which worker of the search this is, from 0
  /// No timed run follows the search (a memory tier): its probes build the workload exactly as a
  /// timed run would, without the workload's probe_memory_format (phase "search").
  bool search_only = false;
  std::string progress_label;        ///< "job 3/12 nasnet-large": prefix of progress lines
  double progress_started_unix = 0;  ///< when the suite started (for elapsed times)
  double progress_eta_unix = 0;      ///< when the suite should end, as estimated (0: no estimate)
  /// A data-parallel timed run: this worker's rank (distributed::RankSpec); null otherwise.
  Json distributed;
  /// Phase "time": the peak an earlier job of the suite measured, used instead of measuring it
  /// again where it is for this device and the run's kind (choose_matmul_peak).
  std::optional<MatmulPeak> matmul_peak;

  Json to_json() const;
  static JobSpec from_json(const Json& json);
};

/// Rebuilds the config store a job runs with: the shipped configs plus the overlays.
ConfigStore resolve_store(const std::vector<ConfigOverlay>& overlays);
/// The same from `shipped`, the shipped configs already loaded (ConfigStore::load_builtin).
ConfigStore resolve_store(const std::vector<ConfigOverlay>& overlays, ConfigStore shipped);

/// The matmul peak a timed run's record uses, and where it came from.
struct PeakChoice {
  std::optional<double> tflops;
  std::string source;       ///< "measured" (by this run), "reused", or "" for none
  std::string measured_by;  ///< "reused": the job that measured it
};
/// `given` where it was measured on `device` at `kind` (source "reused"), else what `measure`
/// returns (source "measured"; none on the CPU or when the measurement failed).
PeakChoice choose_matmul_peak(const std::optional<MatmulPeak>& given, const std::string& device,
                              const std::string& kind,
                              const std::function<std::optional<double>()>& measure);
/// The record's `compute` (compute_summary) with where its peak came from: `peak_source`, and
/// `peak_measured_by` for a reused one; neither without a peak.
ComputeRecord compute_with_peak(double throughput, std::optional<double> flops_per_unit,
                                const std::string& kind, const PeakChoice& peak);
/// The same with the FLOPs' derivation (FlopsPerUnit, measure/timing.h): flops_source and
/// flops_per_step beside flops_per_unit.
ComputeRecord compute_with_peak(double throughput, const FlopsPerUnit& flops,
                                const std::string& kind, const PeakChoice& peak);
/// The peak `record`'s timed run on `device` measured itself (compute.peak_source "measured"),
/// for the jobs after it; none when it reused one or has none.
std::optional<MatmulPeak> measured_matmul_peak(const JobRecord& record, const std::string& device);

}  // namespace gpubench
