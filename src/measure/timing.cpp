#include "gpubench/measure/timing.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json_fields.h"
#include "gpubench/base/json_int.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/word_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpubench {

namespace {
double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}
}  // namespace

TimingStats summarize_steps(const std::vector<double>& step_ms, double window_seconds) {
  TimingStats s;
  s.steps = static_cast<int>(step_ms.size());
  s.window_seconds = window_seconds;
  if (step_ms.empty()) return s;
  s.median_ms = median_of(step_ms);
  s.mean_ms = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / static_cast<double>(s.steps);
  s.min_ms = *std::min_element(step_ms.begin(), step_ms.end());
  s.max_ms = *std::max_element(step_ms.begin(), step_ms.end());
  if (s.steps > 1) {
    double sum = 0;
    for (double t : step_ms) sum += (t - s.mean_ms) * (t - s.mean_ms);
    s.stddev_ms = std::sqrt(sum / static_cast<double>(s.steps - 1));
  }
  return s;
}

namespace {

constexpr double kLogPi = 1.1447298858494002;             // log(pi)
constexpr double kInverseSqrtTwoPi = 0.3989422804014327;  // 1 / sqrt(2 pi)

/// The continued fraction of the regularized incomplete beta function I_x(a, b), evaluated by
/// the modified Lentz method (Numerical Recipes, betacf); it converges fast for
/// x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;  // keeps a denominator off zero
  constexpr double kEpsilon = 1e-16;
  // The terms needed grow as the square root of the larger parameter: 1e6 is far past any df.
  constexpr int kMaxTerms = 1000000;
  auto nonzero = [](double v) { return std::fabs(v) < kTiny ? kTiny : v; };
  double c = 1;
  double d = 1 / nonzero(1 - (a + b) * x / (a + 1));
  double h = d;
  for (int m = 1; m <= kMaxTerms; ++m) {
    const double m2 = 2.0 * m;
    const double even = m * (b - m) * x / ((a - 1 + m2) * (a + m2));
    d = 1 / nonzero(1 + even * d);
    c = nonzero(1 + even / c);
    h *= d * c;
    const double odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2));
    d = 1 / nonzero(1 + odd * d);
    c = nonzero(1 + odd / c);
    h *= d * c;
    if (std::fabs(d * c - 1) < kEpsilon) break;
  }
  return h;
}

/// I_x(a, b), with y = 1 - x passed apart so that neither loses digits near 0 or 1.
double regularized_beta(double a, double b, double x, double y) {
  if (x <= 0) return 0;
  if (y <= 0) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log(y));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
  return 1 - front * beta_fraction(b, a, y) / b;
}

/// P(T > t) for t >= 0: I_{df / (df + t^2)}(df / 2, 1 / 2) / 2, the small tails computed as
/// they are (not as one minus the rest).
double student_t_upper_tail(double t, double df) {
  if (t == 0) return 0.5;
  if (std::isinf(t)) return 0;
  const double ratio = df / (t * t);  // 0 where t^2 overflows
  return 0.5 * regularized_beta(0.5 * df, 0.5, ratio / (1 + ratio), 1 / (1 + ratio));
}

double student_t_density(double t, double df) {
  return std::exp(std::lgamma(0.5 * (df + 1)) - std::lgamma(0.5 * df) -
                  0.5 * (std::log(df) + kLogPi) - 0.5 * (df + 1) * std::log1p(t * t / df));
}

/// The x >= 0 with upper_tail(x) = q, for q in (0, 0.5) and a tail that falls from 0.5 at 0
/// with slope -density: Newton steps, each kept inside a bracket that the values narrow (a
/// step that would leave it bisects instead).
template <typename Tail, typename Density>
double solve_upper_tail(double q, Tail upper_tail, Density density) {
  double low = 0, high = 1;
  while (upper_tail(high) > q) {
    low = high;
    high *= 2;
    if (std::isinf(high)) return high;
  }
  double x = 0.5 * (low + high);
  for (int i = 0; i < 200; ++i) {
    const double excess = upper_tail(x) - q;  // positive below the answer
    if (excess == 0) return x;
    (excess > 0 ? low : high) = x;
    double next = x + excess / density(x);
    if (!(next > low && next < high)) next = 0.5 * (low + high);
    if (std::fabs(next - x) <= 1e-15 * next || high - low <= 1e-15 * high) return next;
    x = next;
  }
  return x;
}

/// The standard normal's upper quantile: the z with P(Z > z) = q, q in (0, 0.5).
double normal_upper_quantile(double q) {
  return solve_upper_tail(
      q, [](double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); },
      [](double z) { return kInverseSqrtTwoPi * std::exp(-0.5 * z * z); });
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  const double tail = student_t_upper_tail(std::fabs(t), df);
  return t < 0 ? tail : 1 - tail;
}

double student_t_quantile(double p, double df) {
  if (!(p >= 0 && p <= 1) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0) return -std::numeric_limits<double>::infinity();
  if (p == 1) return std::numeric_limits<double>::infinity();
  if (p == 0.5) return 0;
  const double q = p < 0.5 ? p : 1 - p;  // the tail beyond the answer; 1 - p is exact here
  const double sign = p < 0.5 ? -1 : 1;
  // Past 1000 degrees of freedom the expansion is the more accurate: the first term it leaves
  // out is of order df^-5 (below 1e-15 of t), while the incomplete beta function's gamma
  // logarithms, about df in size, lose digits.
  constexpr double kExpansionFrom = 1e3;
  if (df > kExpansionFrom) {
    const double z = normal_upper_quantile(q);
    const double z2 = z * z;
    const double g1 = z * (z2 + 1) / 4;
    const double g2 = z * ((5 * z2 + 16) * z2 + 3) / 96;
    const double g3 = z * (((3 * z2 + 19) * z2 + 17) * z2 - 15) / 384;
    const double g4 = z * ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) / 92160;
    return sign * (z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df);
  }
  return sign * solve_upper_tail(
                    q, [df](double t) { return student_t_upper_tail(t, df); },
                    [df](double t) { return student_t_density(t, df); });
}

double t_quantile_975(int df) {
  if (df < 1) return std::numeric_limits<double>::infinity();
  return student_t_quantile(0.975, df);
}

SampleStats summarize_sample(const std::vector<double>& values) {
  SampleStats s;
  s.n = static_cast<int>(values.size());
  if (values.empty()) return s;
  s.median = median_of(values);
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.n);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  s.ci95_low = s.ci95_high = s.mean;
  if (s.n > 1) {
    double sum = 0;
    for (double v : values) sum += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(sum / static_cast<double>(s.n - 1));
    const double half = t_quantile_975(s.n - 1) * s.stddev / std::sqrt(static_cast<double>(s.n));
    s.ci95_low = s.mean - half;
    s.ci95_high = s.mean + half;
  }
  return s;
}

double SampleStats::relative_half_width() const {
  return n > 1 && mean != 0 ? 0.5 * (ci95_high - ci95_low) / mean : 0.0;
}

Json SampleStats::to_json() const {
  return {{"n", n},     {"median", median}, {"mean", mean},         {"min", min},
          {"max", max}, {"stddev", stddev}, {"ci95_low", ci95_low}, {"ci95_high", ci95_high}};
}

SampleStats SampleStats::from_json(const Json& json) {
  SampleStats s;
  s.n = value_int(json, "n", 0);
  s.median = json.value("median", 0.0);
  s.mean = json.value("mean", 0.0);
  s.min = json.value("min", 0.0);
  s.max = json.value("max", 0.0);
  s.stddev = json.value("stddev", 0.0);
  s.ci95_low = json.value("ci95_low", 0.0);
  s.ci95_high = json.value("ci95_high", 0.0);
  return s;
}

bool is_steady(const std::vector<double>& step_ms, double tolerance) {
  constexpr std::size_t kWindow = 3;
  if (step_ms.size() < kWindow) return false;
  const std::vector<double> last(step_ms.end() - kWindow, step_ms.end());
  const double m = median_of(last);
  if (m <= 0) return false;
  return std::all_of(last.begin(), last.end(),
                     [&](double t) { return std::fabs(t - m) <= tolerance * m; });
}

namespace {

/// Each warm-up end's string, in the enum's order: the only place they are spelled.
constexpr WordTable<WarmupEnd, 8> kWarmupEnds = {{
    {WarmupEnd::none, ""},
    {WarmupEnd::steady, "steady"},
    {WarmupEnd::every_shape, "every batch shape ran"},
    {WarmupEnd::nothing_to_build, "nothing left to build"},
    {WarmupEnd::step_limit, "step limit"},
    {WarmupEnd::time_limit, "time limit"},
    {WarmupEnd::minimum_steps, "minimum steps"},
    {WarmupEnd::steps_ran, "warm-up steps ran"},
}};

}  // namespace

const char* to_string(WarmupEnd reason) { return word_of(kWarmupEnds, reason); }

std::optional<WarmupEnd> parse_warmup_end(std::string_view text) {
  return value_of(kWarmupEnds, text);
}

WarmupEnd require_warmup_end(std::string_view text, std::string_view field) {
  return require_word(kWarmupEnds, text, field, "a warm-up's end", {WarmupEnd::none});
}

WarmupDecision warmup_done(const std::vector<double>& step_ms, double elapsed_seconds,
                           const TimingSettings& settings, int autotune_steps,
                           const WarmupShapes& shapes) {
  const int steps = static_cast<int>(step_ms.size());
  // Rule 1: autotuning may still run in these steps; no limit cuts them short.
  if (steps < std::max(autotune_steps, 0)) return {false, WarmupEnd::none, ""};
  const bool minimum_done = steps >= settings.warmup_steps;
  // A negative tolerance marks steps of varying work, whose times differ by shape: every shape
  // has run once now, or nothing builds per shape and the allocator no longer grows.
  if (settings.steady_tolerance < 0) {
    if (minimum_done && shapes.every_shape) return {true, WarmupEnd::every_shape, ""};
    if (minimum_done && !shapes.allocator_grew) {
      return {true, WarmupEnd::nothing_to_build,
              fmt::format("{}: nothing builds per batch shape, and the last took no memory from "
                          "the driver",
                          counted(steps, "step"))};
    }
  } else if (minimum_done && is_steady(step_ms, settings.steady_tolerance)) {
    return {true, WarmupEnd::steady, ""};
  }
  if (minimum_done && steps >= settings.max_warmup_steps) {
    return {true, WarmupEnd::step_limit, counted(steps, "step")};
  }
  const double last_s = steps > 0 ? step_ms.back() / 1000.0 : 0.0;
  const bool over = elapsed_seconds >= settings.max_warmup_seconds;
  const bool next_over = steps > 0 && elapsed_seconds + last_s > settings.max_warmup_seconds;
  if (steps > 0 && (over || next_over)) {
    std::string detail = fmt::format("{} in {:.1f} s of {} s", counted(steps, "step"),
                                     elapsed_seconds, format_number(settings.max_warmup_seconds));
    if (steps > 1) {
      detail += fmt::format("; the first, autotuning included, took {:.1f} s, the last {:.2f} s",
                            step_ms.front() / 1000.0, last_s);
    }
    if (!over) detail += "; the next step would end past the limit";
    if (settings.steady_tolerance >= 0 && !is_steady(step_ms, settings.steady_tolerance)) {
      detail += "; not steady yet";
    }
    return {true, WarmupEnd::time_limit, detail};
  }
  // Fewer than three steps cannot show steadiness; a minimum below three is taken as asked.
  if (steps < 3 && minimum_done) return {true, WarmupEnd::minimum_steps, ""};
  return {false, WarmupEnd::none, ""};
}

HostShare host_share(const std::vector<double>& host_ms, const std::vector<double>& device_ms,
                     int steps) {
  HostShare out;
  const std::size_t n = std::min(host_ms.size(), device_ms.size());
  if (n == 0 || steps <= 0) return out;
  // The first step autotunes and allocates: left out whenever another step is there.
  const std::size_t first = n > 1 ? 1 : 0;
  const std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(steps), n - first);
  for (std::size_t i = n - take; i < n; ++i) {
    out.host_ms += host_ms[i];
    out.device_ms += device_ms[i];
  }
  out.steps = static_cast<int>(take);
  out.share = out.device_ms > 0 ? out.host_ms / out.device_ms : 0.0;
  out.host_bound = out.device_ms > 0 && out.share >= kHostBoundShare;
  return out;
}

int autotune_steps(bool uniform_steps, int64_t cycle_steps, bool builds_per_shape) {
  if (uniform_steps || !builds_per_shape) return 2;
  return static_cast<int>(std::max<int64_t>(1, cycle_steps)) + 1;
}

bool window_done(int steps, double elapsed_seconds, const TimingSettings& settings) {
  return steps >= settings.min_steps && elapsed_seconds >= settings.min_seconds;
}

std::optional<double> window_noise(const std::vector<double>& step_ms, int cycle) {
  const std::size_t c = static_cast<std::size_t>(std::max(cycle, 1));
  std::vector<double> cycles;
  for (std::size_t i = 0; i + c <= step_ms.size(); i += c) {
    cycles.push_back(std::accumulate(step_ms.begin() + static_cast<std::ptrdiff_t>(i),
                                     step_ms.begin() + static_cast<std::ptrdiff_t>(i + c), 0.0));
  }
  if (cycles.size() < 2) return std::nullopt;
  const SampleStats s = summarize_sample(cycles);
  if (!(s.mean > 0)) return std::nullopt;
  return (s.ci95_high - s.mean) / s.mean;
}

double projected_window_seconds(double noise, int cycles, double elapsed_seconds, double target) {
  if (cycles < 2 || !(noise >= 0) || !(target > 0) || !(elapsed_seconds >= 0)) {
    return std::numeric_limits<double>::infinity();
  }
  const double per_cycle = elapsed_seconds / cycles;
  if (noise <= target) return elapsed_seconds;
  // noise = t(n - 1) x cv / sqrt(n): the cycles' coefficient of variation, held as it is.
  const double cv = noise * std::sqrt(static_cast<double>(cycles)) / t_quantile_975(cycles - 1);
  auto within = [&](double m) {
    return student_t_quantile(0.975, m - 1) * cv / std::sqrt(m) <= target;
  };
  // t(m - 1) / sqrt(m) falls as m grows, so the answer is the first m within. The normal's
  // quantile, below every t, gives a count no larger than it; t at that count, no smaller than t
  // further on, gives one that is within. Bisect between the two (64 halvings close any range
  // of counts a double holds).
  constexpr double kNormal975 = 1.959963984540054;
  double low = std::max<double>(cycles, std::ceil(std::pow(kNormal975 * cv / target, 2)));
  double high =
      std::max(low, std::ceil(std::pow(student_t_quantile(0.975, low - 1) * cv / target, 2)));
  for (int i = 0; i < 64 && low < high; ++i) {
    const double m = std::floor(0.5 * (low + high));
    if (within(m)) {
      high = m;
    } else {
      low = m + 1;
    }
  }
  return high * per_cycle;
}

WindowStop window_stop(const std::optional<double>& noise, int cycles, double elapsed_seconds,
                       const TimingSettings& settings) {
  if (settings.max_seconds <= settings.min_seconds) return WindowStop::minimum;
  if (noise && *noise <= settings.noise_target) return WindowStop::noise;
  if (elapsed_seconds >= settings.max_seconds) return WindowStop::time_limit;
  if (noise && cycles >= kMinCyclesToProject &&
      projected_window_seconds(*noise, cycles, elapsed_seconds, settings.noise_target) >
          settings.max_seconds) {
    return WindowStop::noise_unreachable;
  }
  return WindowStop::none;
}

namespace {

/// Each window stop's string, in the enum's order: the only place they are spelled.
constexpr WordTable<WindowStop, 7> kWindowStops = {{
    {WindowStop::none, ""},
    {WindowStop::minimum, "minimum"},
    {WindowStop::noise, "noise"},
    {WindowStop::noise_unreachable, "noise unreachable"},
    {WindowStop::time_limit, "time limit"},
    {WindowStop::step_limit, "step limit"},
    {WindowStop::with_rank_0, "with rank 0"},
}};

}  // namespace

const char* to_string(WindowStop stop) { return word_of(kWindowStops, stop); }

std::optional<WindowStop> parse_window_stop(std::string_view text) {
  return value_of(kWindowStops, text);
}

WindowStop require_window_stop(std::string_view text, std::string_view field) {
  return require_word(kWindowStops, text, field, "a timed window's end", {WindowStop::none});
}

Json TimingStats::to_json() const {
  return {{"steps", steps},
          {"step_time_ms_median", median_ms},
          {"step_time_ms_mean", mean_ms},
          {"step_time_ms_min", min_ms},
          {"step_time_ms_max", max_ms},
          {"step_time_ms_stddev", stddev_ms},
          {"window_seconds", window_seconds},
          {"noise", noise ? Json(*noise) : Json(nullptr)},
          {"stop", to_string(stop)}};
}

TimingStats TimingStats::from_json(const Json& json) {
  TimingStats s;
  s.steps = value_int(json, "steps", 0);
  s.median_ms = json.value("step_time_ms_median", 0.0);
  s.mean_ms = json.value("step_time_ms_mean", 0.0);
  s.min_ms = json.value("step_time_ms_min", 0.0);
  s.max_ms = json.value("step_time_ms_max", 0.0);
  s.stddev_ms = json.value("step_time_ms_stddev", 0.0);
  s.window_seconds = json.value("window_seconds", 0.0);
  if (json.contains("noise") && json["noise"].is_number()) s.noise = json["noise"].get<double>();
  // A record without one (older than the noise stop) reads as none, as it did; one outside the
  // set is refused, naming it.
  s.stop = require_window_stop(json.value("stop", std::string()), "timing.stop");
  return s;
}

bool ComputeRecord::empty() const {
  return !flops_per_unit && !tflops && !peak_kind && !peak_tflops && !peak_share &&
         !peak_source && !peak_measured_by && !flops_source && !flops_per_step && !tflops_total;
}

Json ComputeRecord::to_json() const {
  Json out = Json::object();
  if (flops_per_unit) out["flops_per_unit"] = *flops_per_unit;
  if (tflops) out["tflops"] = *tflops;
  if (peak_kind) out["peak_kind"] = *peak_kind;
  if (peak_tflops) out["peak_tflops"] = *peak_tflops;
  if (peak_share) out["peak_share"] = *peak_share;
  if (peak_source) out["peak_source"] = *peak_source;
  if (peak_measured_by) out["peak_measured_by"] = *peak_measured_by;
  if (flops_source) out["flops_source"] = *flops_source;
  if (flops_per_step) out["flops_per_step"] = *flops_per_step;
  if (tflops_total) out["tflops_total"] = *tflops_total;
  return out;
}

ComputeRecord ComputeRecord::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  const auto number = [&](const char* key) { return optional_number(json, key, field); };
  const auto text = [&](const char* key) { return optional_string(json, key, field); };
  ComputeRecord c;
  c.flops_per_unit = number("flops_per_unit");
  c.tflops = number("tflops");
  c.peak_kind = text("peak_kind");
  c.peak_tflops = number("peak_tflops");
  c.peak_share = number("peak_share");
  c.peak_source = text("peak_source");
  c.peak_measured_by = text("peak_measured_by");
  c.flops_source = text("flops_source");
  c.flops_per_step = number("flops_per_step");
  c.tflops_total = number("tflops_total");
  return c;
}

ComputeRecord compute_summary(double throughput, std::optional<double> flops_per_unit,
                              const std::string& peak_kind, std::optional<double> peak_tflops) {
  ComputeRecord out;
  if (flops_per_unit && *flops_per_unit > 0) {
    out.flops_per_unit = *flops_per_unit;
    if (throughput > 0) out.tflops = throughput * *flops_per_unit / 1e12;
  }
  if (!peak_kind.empty() && peak_tflops && *peak_tflops > 0) {
    out.peak_kind = peak_kind;
    out.peak_tflops = *peak_tflops;
    if (out.tflops) out.peak_share = *out.tflops / *peak_tflops;
  }
  return out;
}

FlopsPerUnit FlopsPerUnit::of_window(std::optional<double> flops, double units, int64_t steps) {
  FlopsPerUnit f;
  if (!flops || !(*flops > 0) || !(units > 0) || steps <= 0) return f;
  f.value = *flops / units;
  f.source = "step shapes";
  f.per_step = *flops / static_cast<double>(steps);
  return f;
}

FlopsPerUnit FlopsPerUnit::from_compute(const ComputeRecord& compute) {
  FlopsPerUnit f;
  f.value = compute.flops_per_unit;
  f.source = compute.flops_source.value_or(std::string());
  f.per_step = compute.flops_per_step;
  return f;
}

FlopsPerUnit FlopsPerUnit::or_config(std::optional<double> config_flops_per_unit,
                                     bool modified) const {
  if (value && *value > 0) return *this;
  FlopsPerUnit f;
  if (!modified && config_flops_per_unit && *config_flops_per_unit > 0) {
    f.value = config_flops_per_unit;
    f.source = "config";
  }
  return f;
}

ComputeRecord FlopsPerUnit::to_compute() const {
  ComputeRecord out;
  out.flops_per_unit = value;
  if (!source.empty()) out.flops_source = source;
  out.flops_per_step = per_step;
  return out;
}

}  // namespace gpubench
