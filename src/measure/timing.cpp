#include "gpubench/measure/timing.h"
#include "gpubench/base/json_int.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

double t_quantile_975(int df) {
  // Two-sided 95%: the 0.975 quantile, df 1..30, then 40, 60, 120, and the normal's 1.96.
  static const double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                  2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                  2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                  2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return std::numeric_limits<double>::infinity();
  if (df <= 30) return kTable[df - 1];
  if (df <= 40) return 2.021;
  if (df <= 60) return 2.000;
  if (df <= 120) return 1.980;
  return 1.960;
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

WarmupDecision warmup_done(const std::vector<double>& step_ms, double elapsed_seconds,
                           const TimingSettings& settings, int autotune_steps) {
  const int steps = static_cast<int>(step_ms.size());
  // Rule 1: autotuning may still run in these steps; no limit cuts them short.
  if (steps < std::max(autotune_steps, 0)) return {false, "", ""};
  const bool minimum_done = steps >= settings.warmup_steps;
  // A negative tolerance marks steps of varying work: every distinct batch has run once now.
  if (settings.steady_tolerance < 0) {
    if (minimum_done) return {true, "every batch shape ran", ""};
  } else if (minimum_done && is_steady(step_ms, settings.steady_tolerance)) {
    return {true, "steady", ""};
  }
  if (minimum_done && steps >= settings.max_warmup_steps) {
    return {true, "step limit", counted(steps, "step")};
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
    return {true, "time limit", detail};
  }
  // Fewer than three steps cannot show steadiness; a minimum below three is taken as asked.
  if (steps < 3 && minimum_done) return {true, "minimum steps", ""};
  return {false, "", ""};
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

int autotune_steps(bool uniform_steps, int64_t cycle_steps) {
  if (uniform_steps) return 2;
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
  auto within = [&](int64_t m) {
    return t_quantile_975(static_cast<int>(m - 1)) * cv / std::sqrt(static_cast<double>(m)) <=
           target;
  };
  // Past 121 cycles t is the normal's 1.96 and the count has a closed form.
  constexpr int64_t kTableEnd = 121;
  for (int64_t m = cycles; m <= kTableEnd; ++m) {
    if (within(m)) return static_cast<double>(m) * per_cycle;
  }
  const double m = std::max(static_cast<double>(std::max<int64_t>(cycles, kTableEnd + 1)),
                            std::ceil(std::pow(t_quantile_975(kTableEnd) * cv / target, 2)));
  return m * per_cycle;
}

std::string window_stop(const std::optional<double>& noise, int cycles, double elapsed_seconds,
                        const TimingSettings& settings) {
  if (settings.max_seconds <= settings.min_seconds) return "minimum";
  if (noise && *noise <= settings.noise_target) return "noise";
  if (elapsed_seconds >= settings.max_seconds) return "time limit";
  if (noise && cycles >= kMinCyclesToProject &&
      projected_window_seconds(*noise, cycles, elapsed_seconds, settings.noise_target) >
          settings.max_seconds) {
    return "noise unreachable";
  }
  return "";
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
          {"stop", stop}};
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
  s.stop = json.value("stop", std::string());
  return s;
}

Json compute_summary(double throughput, std::optional<double> flops_per_unit,
                     const std::string& peak_kind, std::optional<double> peak_tflops) {
  Json out = Json::object();
  std::optional<double> achieved;
  if (flops_per_unit && *flops_per_unit > 0) {
    out["flops_per_unit"] = *flops_per_unit;
    if (throughput > 0) achieved = throughput * *flops_per_unit / 1e12;
  }
  if (achieved) out["tflops"] = *achieved;
  if (!peak_kind.empty() && peak_tflops && *peak_tflops > 0) {
    out["peak_kind"] = peak_kind;
    out["peak_tflops"] = *peak_tflops;
    if (achieved) out["peak_share"] = *achieved / *peak_tflops;
  }
  return out;
}

}  // namespace gpubench
