// Warm-up and timed-window logic (pure, testable), and the summary statistics of step times.
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/base/json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubench {

/// Why a timed window ended (window_stop, and the runner's own two), written as its string in
/// the record's timing.stop: the schema is unchanged.
enum class WindowStop {
  none,               ///< "": not ended (window_stop: go on), or a record without one
  minimum,            ///< "minimum": no limit above the minimum, it ended there
  noise,              ///< "noise": within settings.noise_target
  noise_unreachable,  ///< "noise unreachable": the target projects past max_seconds
  time_limit,         ///< "time limit": at max_seconds
  step_limit,         ///< "step limit": the runner's cap on a window's steps
  with_rank_0,        ///< "with rank 0": a data-parallel rank that ended where rank 0 did
};

const char* to_string(WindowStop stop);
/// The stop whose string `text` is ("" is WindowStop::none), or none for a string outside the
/// set.
std::optional<WindowStop> parse_window_stop(std::string_view text);
/// `text` read from the field `field` of a file: the stop, or a ConfigError naming the field,
/// the value and the allowed values.
WindowStop require_window_stop(std::string_view text, std::string_view field);

/// Summary of the timed window.
struct TimingStats {
  int steps = 0;  ///< timed steps
  double median_ms = 0;
  double mean_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double stddev_ms = 0;       ///< sample standard deviation
  double window_seconds = 0;  ///< first step start to last step end, device time
  /// The window's noise: half-width of the 95% interval of the mean step time over whole
  /// cycles, relative to it (window_noise); unset where fewer than two cycles ran.
  std::optional<double> noise;
  /// Why the window ended (window_stop); written as its string, "" for none. A string outside
  /// the set is refused when read.
  WindowStop stop = WindowStop::none;

  Json to_json() const;
  static TimingStats from_json(const Json& json);
};

/// A sample of values (the throughputs of a job's repeated timed runs): its median, range and
/// the 95% confidence interval of its mean (Student's t with n - 1 degrees of freedom).
struct SampleStats {
  int n = 0;
  double median = 0, mean = 0, min = 0, max = 0;
  double stddev = 0;                   ///< sample standard deviation (n - 1)
  double ci95_low = 0, ci95_high = 0;  ///< the mean's 95% interval; equal to the mean when n < 2

  /// Half the interval's width over the mean (0.004: "±0.4%"); 0 when n < 2.
  double relative_half_width() const;
  Json to_json() const;
  static SampleStats from_json(const Json& json);
};
SampleStats summarize_sample(const std::vector<double>& values);

/// Student's t distribution with `df` degrees of freedom (> 0, not necessarily whole: Welch's
/// test gives fractional ones): P(T <= t), from the regularized incomplete beta function. Its
/// digits fall slowly with df (the gamma logarithms it takes grow): about 1e-13 relative up to
/// 1000 degrees of freedom, 1e-11 at 1e6. NaN for df <= 0.
double student_t_cdf(double t, double df);
/// The quantile of Student's t: the t with student_t_cdf(t, df) = p, to about 1e-12 relative;
/// -inf and inf at p 0 and 1, NaN for df <= 0. Up to 1000 degrees of freedom student_t_cdf
/// solved by Newton steps kept inside a bracket; past that the Cornish-Fisher expansion around
/// the normal's quantile (Abramowitz and Stegun 26.7.5), which there is exact to rounding.
double student_t_quantile(double p, double df);
/// student_t_quantile(0.975, df): the two-sided 95% point (12.7062 for 1, 4.3027 for 2, 1.95996
/// as df grows); infinity for df < 1.
double t_quantile_975(int df);

/// Statistics of per-step times; `window_seconds` is the device time of the whole window.
TimingStats summarize_steps(const std::vector<double>& step_ms, double window_seconds);

/// True once the last three warm-up step times lie within `tolerance` (relative) of their
/// median: cuDNN autotuning and allocator growth are over.
bool is_steady(const std::vector<double>& step_ms, double tolerance);

/// Why a warm-up ended (the rules of warmup_done), written as its string in the record's
/// warmup.reason: the schema is unchanged.
enum class WarmupEnd {
  none,              ///< "": not ended
  steady,            ///< "steady"
  every_shape,       ///< "every batch shape ran"
  nothing_to_build,  ///< "nothing left to build"
  step_limit,        ///< "step limit"
  time_limit,        ///< "time limit"
  minimum_steps,     ///< "minimum steps"
  /// "warm-up steps ran": records of an older gpubench only (its rule for steps of varying
  /// work, before every_shape and nothing_to_build); read and written back, never decided.
  steps_ran,
};

const char* to_string(WarmupEnd reason);
/// The reason whose string `text` is ("" is WarmupEnd::none), or none for a string outside the
/// set.
std::optional<WarmupEnd> parse_warmup_end(std::string_view text);
/// `text` read from the field `field` of a file: the reason, or a ConfigError naming the field,
/// the value and the allowed values.
WarmupEnd require_warmup_end(std::string_view text, std::string_view field);

/// Whether warm-up is done after these steps, and why (`reason`); `detail` says more in words
/// (a time limit: how long the steps took, the first one, autotuning included, on its own).
struct WarmupDecision {
  bool done = false;
  WarmupEnd reason = WarmupEnd::none;
  std::string detail;
};

/// What a warm-up knows of its step besides the step times (warmup_done).
struct WarmupShapes {
  /// Steps of varying work (negative steady_tolerance) whose first run of each shape builds
  /// something (TrainStep::builds_per_shape): the warm-up runs every shape (warmup_steps covers
  /// them). False: nothing builds per shape, and the warm-up ends once nothing is left to build.
  bool every_shape = true;
  /// The caching allocator took memory from the driver during the last step (it still grows).
  bool allocator_grew = false;
};

/// The rules, in order:
/// 1. Never before `autotune_steps` steps: the steps during which cuDNN may still autotune (the
///    first step meets every convolution; the second re-tunes any whose algorithm's workspace no
///    longer fits once the optimizer state exists; steps of varying shapes that build per shape
///    need one whole cycle and the first shape again). No timed step may still be autotuning,
///    whatever the limits.
/// 2. Steps of varying work (negative steady_tolerance), whose times differ by shape and never
///    agree: after warmup_steps, "every batch shape ran" where each shape's first run builds
///    (`shapes.every_shape`); else "nothing left to build" once the last step took nothing new
///    from the driver (`shapes.allocator_grew` false).
/// 3. After warmup_steps, once the last three step times agree ("steady").
/// 4. At max_warmup_steps ("step limit").
/// 5. At max_warmup_seconds, or one step before it when the next step would end past it (the
///    last step took longer than what is left): "time limit". This may cut warmup_steps short.
/// 6. A warmup_steps below three is taken as asked ("minimum steps").
WarmupDecision warmup_done(const std::vector<double>& step_ms, double elapsed_seconds,
                           const TimingSettings& settings, int autotune_steps = 0,
                           const WarmupShapes& shapes = {});

/// A step waits on the host (is host-bound) when enqueueing it takes the host at least this
/// share of the step's device time: the device finishes right behind the host, and a CUDA graph
/// that replays the step in one launch can run it faster (RuntimeSettings::
/// cuda_graphs_if_host_bound).
inline constexpr double kHostBoundShare = 0.9;

/// How much of a warm-up's steps the host took: over its last `steps` steps (the first step,
/// which autotunes, left out when there are others), the host's time to enqueue them against
/// their device time, both summed.
struct HostShare {
  int steps = 0;            ///< steps looked at
  double host_ms = 0;       ///< the host's time inside run() [ms]
  double device_ms = 0;     ///< the device's time from the step's start mark to its end [ms]
  double share = 0;         ///< host_ms / device_ms (0 without steps)
  bool host_bound = false;  ///< share >= kHostBoundShare
};
HostShare host_share(const std::vector<double>& host_ms, const std::vector<double>& device_ms,
                     int steps);

/// The steps during which cuDNN may still autotune: 2 for steps of one shape, and for steps that
/// vary but build nothing per shape (`builds_per_shape` false); the whole cycle of shapes and one
/// more for steps that vary and build per shape (rule 1 of warmup_done).
int autotune_steps(bool uniform_steps, int64_t cycle_steps, bool builds_per_shape = true);

/// Whether the timed window has enough steps and time.
bool window_done(int steps, double elapsed_seconds, const TimingSettings& settings);

/// The window's noise: the half-width of the 95% interval (Student's t) of the mean time of a
/// cycle of `cycle` steps, relative to that mean, over the whole cycles in `step_ms`; nullopt
/// with fewer than two whole cycles.
std::optional<double> window_noise(const std::vector<double>& step_ms, int cycle);

/// Cycles a window needs before window_stop projects from its noise: three, so that the spread
/// is estimated with two degrees of freedom at least.
constexpr int kMinCyclesToProject = 3;

/// The device time a window would need for its noise to come down to `target`, projected from
/// `noise` over `cycles` whole cycles in `elapsed_seconds`: the cycles' coefficient of variation
/// (noise x sqrt(cycles) / t(cycles - 1)) held, the smallest count of cycles m >= cycles whose
/// interval t(m - 1) x cv / sqrt(m) is within the target (about cycles x (noise / target)^2 for
/// many cycles), at the mean cycle time so far. Infinity for fewer than two cycles.
double projected_window_seconds(double noise, int cycles, double elapsed_seconds, double target);

/// After the window's minimum (window_done) is met: whether it ends now, and why. It goes on
/// while its noise is above settings.noise_target and its device time below
/// settings.max_seconds (as nvbench's noise stop): "noise" once within the target, "time
/// limit" at max_seconds; and "noise unreachable" as soon as the noise over at least
/// kMinCyclesToProject `cycles` projects (projected_window_seconds) that the target would be
/// reached only past max_seconds: those seconds would buy a noise still above it. A max_seconds
/// at or below min_seconds turns all of that off ("minimum"). WindowStop::none = go on.
WindowStop window_stop(const std::optional<double>& noise, int cycles, double elapsed_seconds,
                       const TimingSettings& settings);

/// A record's throughput as arithmetic (JobRecord::compute, records/result.h; declared here
/// since compute_summary builds it and measure/ comes before records/). Every key is optional:
/// each is written only where its inputs are known, and older records lack the peak's source,
/// the FLOPs' derivation or both; a data-parallel run adds tflops_total. An empty one is not
/// written.
struct ComputeRecord {
  std::optional<double> flops_per_unit;  ///< training FLOPs per unit (FlopsPerUnit)
  std::optional<double> tflops;          ///< achieved: throughput x FLOPs per unit (one GPU's)
  std::optional<std::string> peak_kind;  ///< the precision's matmul kind the peak is for
  std::optional<double> peak_tflops;     ///< the device's measured dense-matmul peak
  std::optional<double> peak_share;      ///< tflops / peak_tflops
  /// "measured" (by this run) or "reused" (run/job_spec.h compute_with_peak).
  std::optional<std::string> peak_source;
  std::optional<std::string> peak_measured_by;  ///< "reused": the job that measured it
  std::optional<std::string> flops_source;      ///< FlopsPerUnit::source
  std::optional<double> flops_per_step;         ///< FlopsPerUnit::per_step
  /// A data-parallel run: tflops x world size, the whole job's (run/worker.cpp batch_phase).
  std::optional<double> tflops_total;

  bool empty() const;
  /// {flops_per_unit, tflops, peak_kind, peak_tflops, peak_share, peak_source,
  /// peak_measured_by, flops_source, flops_per_step, tflops_total}: the keys it has, in that
  /// order (the order the builders write them, so every stored record writes back as it is).
  Json to_json() const;
  /// `json` read from the record's field `field` ("compute"): a value of the wrong type is a
  /// ConfigError naming it ("compute.tflops").
  static ComputeRecord from_json(const Json& json, const std::string& field);
};

/// What a throughput means in arithmetic: flops_per_unit, tflops (achieved: throughput x
/// FLOPs per unit), peak_kind, peak_tflops (the device's measured dense-matmul peak for the
/// precision), peak_share (tflops / peak_tflops); each only where its inputs are known (no
/// flops_per_unit: the workload's FLOPs are not derived, docs/workloads/).
ComputeRecord compute_summary(double throughput, std::optional<double> flops_per_unit,
                     const std::string& peak_kind, std::optional<double> peak_tflops);

/// A record's training FLOPs per unit and how they were derived (its compute.flops_source):
/// - "step shapes": each timed step's own analytic count from the shapes it ran
///   (TrainStep::step_flops()), summed over the window and divided by the units it trained, so
///   they follow the batch actually run (its lengths, tokens, RoIs);
/// - "config": the workload's flops_per_unit constant (docs/workloads/), taken only for a model
///   as shipped: a step without a formula of its own;
/// - none: a model changed by a config whose step has no formula (never the shipped constant).
struct FlopsPerUnit {
  std::optional<double> value;     ///< FLOPs per unit; none: not derived
  std::string source;              ///< "step shapes" | "config" | "" (none)
  std::optional<double> per_step;  ///< "step shapes": the window's mean FLOPs per step

  /// The window's: `flops`, the sum of its `steps` steps' step_flops() (none when a step had
  /// none), over the `units` they trained.
  static FlopsPerUnit of_window(std::optional<double> flops, double units, int64_t steps);
  /// What a record's compute says (flops_per_unit, flops_source, flops_per_step).
  static FlopsPerUnit from_compute(const ComputeRecord& compute);
  /// These where derived, else `config_flops_per_unit` ("config") when the model is as shipped
  /// (`modified` false), else none.
  FlopsPerUnit or_config(std::optional<double> config_flops_per_unit, bool modified) const;
  /// A compute with flops_per_unit, flops_source and flops_per_step, each where known: what
  /// the timed phase hands batch_phase (run/worker.cpp) in the record.
  ComputeRecord to_compute() const;
};

}  // namespace gpubench
