#include "gpubench/measure/timing.h"

#include "gpubench/device/device.h"
#include "gpubench/device/nvml.h"
#include "gpubench/base/errors.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {
namespace {

// The clocks of a timed window: the power cap is how a loaded GPU runs, and only counts as
// throttling when it pulls the median SM clock below 97% of the device's maximum.
TEST(TimingTest, ThePowerCapAloneIsNotThrottlingUnlessItLowersTheClocks) {
  const ClockLimits h200{1980, 700000};
  auto window = [](unsigned mhz, unsigned long long reasons) {
    std::vector<ClockSample> samples;
    for (unsigned i = 0; i < 9; ++i)
      samples.push_back({mhz - (i == 0 ? 30 : 0), 650000, 60, reasons});
    return samples;
  };
  // At the maximum under the power cap (5 of 28 records of 2026-12-01 said "throttled" so).
  const Json at_max = summarize_clock_samples(window(1980, kPowerCapReason), h200);
  EXPECT_TRUE(at_max["power_capped"].get<bool>());
  EXPECT_FALSE(at_max["throttled"].get<bool>());
  EXPECT_EQ(at_max["sm_clock_max_mhz"], 1980);
  EXPECT_DOUBLE_EQ(at_max["power_limit_w"].get<double>(), 700.0);
  EXPECT_EQ(at_max["sm_clock_mhz"]["median"], 1980);
  // The cap holding the clocks at 1755 MHz (89%): throttled, and the note says by how much.
  const Json held = summarize_clock_samples(window(1755, kPowerCapReason), h200);
  EXPECT_TRUE(held["throttled"].get<bool>());
  EXPECT_EQ(held["throttle_note"],
            "the power limit held the median SM clock at 1755 MHz, 89% of 1980 MHz");
  // Low clocks without the cap (an idle or application-clock reason) are not throttling.
  EXPECT_FALSE(summarize_clock_samples(window(1400, 0x2), h200)["throttled"].get<bool>());
  // A thermal slowdown always is, whatever the clocks.
  const Json hot = summarize_clock_samples(window(1980, 0x40), h200);
  EXPECT_TRUE(hot["throttled"].get<bool>());
  EXPECT_EQ(hot["throttle_note"], "a thermal or hardware slowdown: hw_thermal_slowdown");
  EXPECT_EQ(hot["throttle_reasons"], Json::array({"hw_thermal_slowdown"}));
  // Without the device's maximum, the highest sampled clock stands for it.
  EXPECT_FALSE(summarize_clock_samples(window(1755, kPowerCapReason), ClockLimits{})["throttled"]
                   .get<bool>());
  const Json none = summarize_clock_samples({}, ClockLimits{});
  EXPECT_EQ(none["samples"], 0);
  EXPECT_FALSE(none.contains("throttled"));
}

// The share of samples per reason: a window mostly at the power cap with one thermal sample.
TEST(TimingTest, CountsTheShareOfSamplesPerThrottleReason) {
  std::vector<ClockSample> samples(8, ClockSample{1980, 690000, 70, kPowerCapReason});
  samples[3].reasons = kPowerCapReason | 0x20;
  samples[5].reasons = 0;
  const Json s = summarize_clock_samples(samples, ClockLimits{1980, 700000, 1590});
  EXPECT_DOUBLE_EQ(s["throttle_reason_share"]["sw_power_cap"].get<double>(), 7.0 / 8);
  EXPECT_DOUBLE_EQ(s["throttle_reason_share"]["sw_thermal_slowdown"].get<double>(), 1.0 / 8);
  EXPECT_FALSE(s["throttle_reason_share"].contains("hw_slowdown"));
  EXPECT_EQ(s["sm_clock_default_mhz"], 1590);
  // One thermal sample is a slowdown: throttled, whatever the clocks.
  EXPECT_TRUE(s["throttled"].get<bool>());
  EXPECT_FALSE(summarize_clock_samples(samples, ClockLimits{}).contains("sm_clock_default_mhz"));
}

// Energy over the window: joules per step, units per joule (throughput per watt), mean power.
TEST(TimingTest, EnergySummaryDividesTheCountersDifference) {
  const Json e = energy_summary(3000.0, 6000.0, 30, 5.0);
  EXPECT_DOUBLE_EQ(e["joules"].get<double>(), 3000.0);
  EXPECT_DOUBLE_EQ(e["joules_per_step"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(e["units_per_joule"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(e["mean_power_w"].get<double>(), 600.0);  // over the counter's 5 s
  EXPECT_DOUBLE_EQ(e["counter_seconds"].get<double>(), 5.0);
  EXPECT_TRUE(energy_summary(std::nullopt, 6000.0, 30, 5.0).empty());  // no counter (CPU)
  EXPECT_TRUE(energy_summary(0.0, 6000.0, 30, 5.0).empty());           // a counter that stood
  EXPECT_TRUE(energy_summary(3000.0, 6000.0, 0, 5.0).empty());
  EXPECT_FALSE(energy_summary(3000.0, 6000.0, 30, 0).contains("mean_power_w"));
}

// Achieved TFLOP/s and the share of the measured peak, each only where its inputs are known.
TEST(TimingTest, ComputeSummaryIsThroughputTimesFlopsOverThePeak) {
  const ComputeRecord c = compute_summary(1000.0, 6.0e10, "bf16", 600.0);  // 60 TFLOP/s of 600
  EXPECT_DOUBLE_EQ(c.tflops.value_or(0), 60.0);
  EXPECT_DOUBLE_EQ(c.peak_share.value_or(0), 0.1);
  EXPECT_EQ(c.peak_kind, std::optional<std::string>("bf16"));
  const ComputeRecord no_flops = compute_summary(1000.0, std::nullopt, "bf16", 600.0);
  EXPECT_FALSE(no_flops.tflops.has_value());
  EXPECT_FALSE(no_flops.peak_share.has_value());
  EXPECT_DOUBLE_EQ(no_flops.peak_tflops.value_or(0), 600.0);
  const ComputeRecord no_peak = compute_summary(1000.0, 6.0e10, "fp32", std::nullopt);
  EXPECT_DOUBLE_EQ(no_peak.tflops.value_or(0), 60.0);
  EXPECT_FALSE(no_peak.peak_share.has_value());
  EXPECT_TRUE(compute_summary(0.0, std::nullopt, "", std::nullopt).empty());
}

// A capped card: what the process holds outside the allocator comes off the cap.
TEST(TimingTest, MemoryCapLeavesTheAllocatorWhatTheContextDoesNotTake) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(allocator_cap_bytes(8 * gib, 600 << 20), 8 * gib - (600 << 20));
  EXPECT_EQ(allocator_cap_bytes(8 * gib, 0), 8 * gib);
  EXPECT_EQ(allocator_cap_bytes(8 * gib, -5), 8 * gib);   // a reading below zero: none
  EXPECT_EQ(allocator_cap_bytes(gib, 2 * gib), gib / 8);  // never nothing
  EXPECT_EQ(matmul_peak_kind("amp-bf16"), "bf16");
  EXPECT_EQ(matmul_peak_kind("amp-fp16"), "fp16");
  EXPECT_EQ(matmul_peak_kind("tf32"), "tf32");
  EXPECT_EQ(matmul_peak_kind("fp64"), "");
  // The CPU has no peak probe and no counters.
  EXPECT_FALSE(measure_matmul_peak_tflops(torch::Device(torch::kCPU), "fp32").has_value());
  MemoryStats before, after;
  after.alloc_retries = 2;
  after.ooms = 1;
  after.device_allocations = 7;
  before.device_allocations = 4;
  const Json counters = allocator_counters_between(before, after);
  EXPECT_EQ(counters["alloc_retries"], 2);
  EXPECT_EQ(counters["ooms"], 1);
  EXPECT_EQ(counters["device_allocations"], 3);
  EXPECT_EQ(counters["device_frees"], 0);
}

TEST(TimingTest, SummarizesStepTimes) {
  const TimingStats s = summarize_steps({10, 12, 11, 13, 9}, 0.055);
  EXPECT_EQ(s.steps, 5);
  EXPECT_DOUBLE_EQ(s.median_ms, 11);
  EXPECT_DOUBLE_EQ(s.mean_ms, 11);
  EXPECT_DOUBLE_EQ(s.min_ms, 9);
  EXPECT_DOUBLE_EQ(s.max_ms, 13);
  EXPECT_NEAR(s.stddev_ms, 1.5811388, 1e-6);  // sample standard deviation
  EXPECT_DOUBLE_EQ(s.window_seconds, 0.055);
  EXPECT_DOUBLE_EQ(summarize_steps({4, 2}, 0).median_ms, 3);
  EXPECT_EQ(summarize_steps({}, 0).steps, 0);
}

TEST(TimingTest, SteadyMeansTheLastThreeStepsAgree) {
  EXPECT_FALSE(is_steady({100, 100}, 0.05));
  EXPECT_FALSE(is_steady({900, 300, 100, 100}, 0.05));  // autotuning still in the window
  EXPECT_TRUE(is_steady({900, 300, 100, 102, 99}, 0.05));
  EXPECT_FALSE(is_steady({100, 100, 120}, 0.05));
}

TEST(TimingTest, WarmupRunsUntilSteadyOrALimit) {
  TimingSettings t;
  t.warmup_steps = 3;
  t.max_warmup_steps = 6;
  t.max_warmup_seconds = 100;
  EXPECT_FALSE(warmup_done({}, 0, t).done);
  EXPECT_FALSE(warmup_done({500, 100}, 1, t).done);
  EXPECT_EQ(warmup_done({500, 100, 100, 100}, 1, t).reason, WarmupEnd::steady);
  EXPECT_FALSE(warmup_done({500, 100, 200, 100}, 1, t).done);
  EXPECT_EQ(warmup_done({5, 1, 2, 1, 2, 1}, 1, t).reason, WarmupEnd::step_limit);
  EXPECT_EQ(warmup_done({5, 1, 2, 1}, 101, t).reason, WarmupEnd::time_limit);
  t.warmup_steps = 0;
  EXPECT_TRUE(warmup_done({}, 0, t).done);  // no warm-up asked for
  t.warmup_steps = 4;
  t.steady_tolerance = -1;  // steps of varying work: no steadiness to wait for
  EXPECT_FALSE(warmup_done({900, 100, 300}, 1, t).done);
  EXPECT_EQ(warmup_done({900, 100, 300, 50}, 1, t).reason, WarmupEnd::every_shape);
}

TEST(TimingTest, AWarmupEndIsWrittenAsItsStringAndReadBack) {
  const std::vector<std::pair<WarmupEnd, std::string>> ends = {
      {WarmupEnd::none, ""},
      {WarmupEnd::steady, "steady"},
      {WarmupEnd::every_shape, "every batch shape ran"},
      {WarmupEnd::nothing_to_build, "nothing left to build"},
      {WarmupEnd::step_limit, "step limit"},
      {WarmupEnd::time_limit, "time limit"},
      {WarmupEnd::minimum_steps, "minimum steps"},
      // What an older gpubench wrote (docs/results/2026-12-02-h200-speed-fp16): still read.
      {WarmupEnd::steps_ran, "warm-up steps ran"}};
  for (const auto& [end, text] : ends) {
    EXPECT_EQ(to_string(end), text);
    EXPECT_EQ(parse_warmup_end(text), end) << text;
    EXPECT_EQ(require_warmup_end(text, "warmup.reason"), end) << text;
  }
  for (const char* text : {"Steady", "steady ", "step-limit", "timeout"}) {
    EXPECT_FALSE(parse_warmup_end(text).has_value()) << text;
  }
  EXPECT_THROWS_WITH(require_warmup_end("stedy", "warmup.reason"), ConfigError,
                     "warmup.reason 'stedy' is not a warm-up's end (did you mean 'steady'?); the "
                     "allowed values are: steady, every batch shape ran, nothing left to build, "
                     "step limit, time limit, minimum steps, warm-up steps ran");
}

TEST(TimingTest, AStepIsHostBoundWhenTheHostTakesNearlyAllOfItsDeviceTime) {
  // mt-dnn at batch 8 in amp-bf16 (2026-12-02): the device finished right behind the host.
  // The first step (autotuning, 900 ms on the device) is left out; the last 3 count.
  const std::vector<double> device{900, 58, 57, 56, 56};
  const std::vector<double> host{40, 50, 55, 54, 55};
  HostShare s = host_share(host, device, 3);
  EXPECT_EQ(s.steps, 3);
  EXPECT_DOUBLE_EQ(s.host_ms, 55 + 54 + 55);
  EXPECT_DOUBLE_EQ(s.device_ms, 57 + 56 + 56);
  EXPECT_NEAR(s.share, 164.0 / 169.0, 1e-12);
  EXPECT_TRUE(s.host_bound);
  // At its max batch the device runs long after the host has enqueued the step.
  s = host_share({50, 50, 52, 51}, {400, 190, 187, 188}, 3);
  EXPECT_NEAR(s.share, 153.0 / 565.0, 1e-12);
  EXPECT_FALSE(s.host_bound);
  // Asked for more steps than there are: every step but the first.
  s = host_share({10, 9, 9}, {100, 10, 10}, 24);
  EXPECT_EQ(s.steps, 2);
  EXPECT_DOUBLE_EQ(s.share, 0.9);
  EXPECT_TRUE(s.host_bound);  // the threshold itself counts
  s = host_share({8.9, 8.9}, {10, 10}, 1);
  EXPECT_EQ(s.steps, 1);
  EXPECT_FALSE(s.host_bound);  // 0.89
  // One step is all there is: it counts. None: no verdict.
  s = host_share({9.5}, {10}, 3);
  EXPECT_EQ(s.steps, 1);
  EXPECT_TRUE(s.host_bound);
  s = host_share({}, {}, 3);
  EXPECT_EQ(s.steps, 0);
  EXPECT_FALSE(s.host_bound);
  EXPECT_FALSE(host_share({1, 2}, {0, 0}, 2).host_bound);  // no device time: no verdict
}

TEST(TimingTest, WarmupNeverCutsTheStepsThatMayStillAutotune) {
  TimingSettings t;
  t.warmup_steps = 3;
  t.max_warmup_steps = 50;
  t.max_warmup_seconds = 30;
  // stylegan fp32 on an H200: a first step of 129 s (autotuning), then 21 s steps.
  EXPECT_FALSE(warmup_done({129000}, 129, t, 2).done);  // the second may re-tune
  const auto d = warmup_done({129000, 21000}, 150, t, 2);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.reason, WarmupEnd::time_limit);
  EXPECT_NE(d.detail.find("2 steps in 150.0 s of 30 s"), std::string::npos) << d.detail;
  EXPECT_NE(d.detail.find("the first, autotuning included, took 129.0 s"), std::string::npos)
      << d.detail;
  // Steps of varying shapes: the whole cycle and the first shape again.
  EXPECT_EQ(autotune_steps(true, 1), 2);
  EXPECT_EQ(autotune_steps(false, 8), 9);
  t.warmup_steps = 8;
  t.steady_tolerance = -1;
  EXPECT_FALSE(warmup_done(std::vector<double>(8, 5000), 40, t, 9).done);
  EXPECT_EQ(warmup_done(std::vector<double>(9, 5000), 45, t, 9).reason, WarmupEnd::every_shape);
}

TEST(TimingTest, AVaryingStepThatBuildsNothingPerShapeStopsWarmingOnceNothingIsLeftToBuild) {
  // transformer-big fp32 on the H100 (2026-12-06): 8 token batches, eager, no cuDNN
  // convolution; each batch's first run after the first step took its steady time (1903 ms
  // against 1906 in the window, 1739 against 1743, ...), yet the warm-up ran all 9 steps (14.7 s).
  TimingSettings t;
  t.warmup_steps = 3;
  t.max_warmup_steps = 50;
  t.max_warmup_seconds = 30;
  t.steady_tolerance = -1;  // steps of varying work
  const std::vector<double> steps{1863, 1903, 1739, 1603, 1541, 1258, 1537, 1694, 1550};
  EXPECT_EQ(autotune_steps(false, 8, /*builds_per_shape=*/false), 2);
  EXPECT_EQ(autotune_steps(false, 8, /*builds_per_shape=*/true), 9);  // as before
  const WarmupShapes none{/*every_shape=*/false, /*allocator_grew=*/false};
  const std::vector<double> three(steps.begin(), steps.begin() + 3);
  const std::vector<double> two(steps.begin(), steps.begin() + 2);
  EXPECT_FALSE(warmup_done(two, 3.8, t, 2, none).done);  // below warmup_steps
  const WarmupDecision d = warmup_done(three, 5.5, t, 2, none);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.reason, WarmupEnd::nothing_to_build);
  EXPECT_NE(d.detail.find("3 steps"), std::string::npos) << d.detail;
  // A last step that took memory from the driver (a larger shape): on, one step at a time.
  const WarmupShapes growing{false, true};
  EXPECT_FALSE(warmup_done(three, 5.5, t, 2, growing).done);
  const std::vector<double> four(steps.begin(), steps.begin() + 4);
  EXPECT_EQ(warmup_done(four, 7.1, t, 2, none).reason, WarmupEnd::nothing_to_build);
  // ... up to the limits, as any warm-up.
  EXPECT_EQ(warmup_done(four, 30.5, t, 2, growing).reason, WarmupEnd::time_limit);
  // A step that builds per shape (cuDNN autotuning, CUDA graphs) still runs every shape,
  // whatever the allocator does: its first runs are not at their steady times.
  const WarmupShapes every{true, false};
  t.warmup_steps = 8;
  EXPECT_FALSE(warmup_done(three, 5.5, t, 9, every).done);
  EXPECT_FALSE(warmup_done(std::vector<double>(8, 1600), 13, t, 9, every).done);
  EXPECT_EQ(warmup_done(steps, 14.7, t, 9, every).reason, WarmupEnd::every_shape);
  EXPECT_EQ(warmup_done(steps, 14.7, t, 9).reason, WarmupEnd::every_shape);  // the default
  // An opening that precedes the cycle (mt-dnn: the peak batch twice, each task's first) is
  // the minimum: warmup_steps holds it, and the window's whole cycles start after it.
  t.warmup_steps = 11;
  const std::vector<double> mtdnn{1760, 1289, 319, 795, 247, 365, 349, 175, 105, 316, 319};
  EXPECT_FALSE(warmup_done(std::vector<double>(mtdnn.begin(), mtdnn.end() - 1), 5.7, t, 2, none)
                   .done);
  EXPECT_EQ(warmup_done(mtdnn, 6.0, t, 2, none).reason, WarmupEnd::nothing_to_build);
  // Steps of one shape are judged by their times, as before: the shapes' facts do not apply.
  t.warmup_steps = 3;
  t.steady_tolerance = 0.05;
  EXPECT_FALSE(warmup_done({500, 100, 200, 100}, 1, t, 2, none).done);
  EXPECT_EQ(warmup_done({500, 100, 100, 100}, 1, t, 2, growing).reason, WarmupEnd::steady);
}

TEST(TimingTest, WarmupStopsBeforeAStepThatWouldEndPastTheTimeLimit) {
  TimingSettings t;
  t.warmup_steps = 5;
  t.max_warmup_steps = 50;
  t.max_warmup_seconds = 30;
  // Autotuning is over after two steps; the third would end at 30.6 s.
  const auto d = warmup_done({10300, 10100}, 20.5, t, 2);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.reason, WarmupEnd::time_limit);
  EXPECT_NE(d.detail.find("the next step would end past the limit"), std::string::npos)
      << d.detail;
  EXPECT_NE(d.detail.find("not steady yet"), std::string::npos) << d.detail;
  // Short steps: steady long before the limit, once warmup_steps have run.
  EXPECT_EQ(warmup_done({8000, 100, 100, 100, 100}, 8.4, t, 2).reason, WarmupEnd::steady);
  EXPECT_FALSE(warmup_done({8000, 100, 100, 100}, 8.3, t, 2).done);  // below warmup_steps
}

TEST(TimingTest, WindowNeedsBothStepsAndSeconds) {
  TimingSettings t;
  t.min_steps = 10;
  t.min_seconds = 5;
  EXPECT_FALSE(window_done(9, 100, t));
  EXPECT_FALSE(window_done(100, 4.9, t));
  EXPECT_TRUE(window_done(10, 5, t));
}

TEST(TimingTest, TheWindowsNoiseIsTheRelativeIntervalOfTheMeanCycleTime) {
  // Steps of one shape: each step a cycle. 12 -+ 4.30265 x 2 / sqrt(3) around a mean of 12.
  ASSERT_TRUE(window_noise({14, 10, 12}, 1).has_value());
  EXPECT_NEAR(*window_noise({14, 10, 12}, 1), 4.302652729749464 * 2 / std::sqrt(3.0) / 12, 1e-12);
  EXPECT_NEAR(*window_noise({100, 100, 100, 100}, 1), 0.0, 1e-12);
  // A cycle of two different steps: the cycles are equal, so the mean is known exactly; the
  // steps alone would look noisy.
  EXPECT_NEAR(*window_noise({50, 150, 50, 150, 50, 150}, 2), 0.0, 1e-12);
  EXPECT_GT(*window_noise({50, 150, 50, 150, 50, 150}, 1), 0.3);
  // A cycle that has not run whole twice says nothing.
  EXPECT_FALSE(window_noise({50, 150, 50}, 2).has_value());
  EXPECT_FALSE(window_noise({100}, 1).has_value());
  EXPECT_FALSE(window_noise({}, 1).has_value());
}

TEST(TimingTest, TheWindowGoesOnWhileNoisyUpToItsTimeLimit) {
  TimingSettings t;
  t.min_seconds = 5;
  t.max_seconds = 15;
  t.noise_target = 0.005;
  EXPECT_EQ(window_stop(0.001, 3, 5.2, t), WindowStop::noise);
  EXPECT_EQ(window_stop(0.005, 3, 5.2, t), WindowStop::noise);
  // Noisy with time left: on while two cycles are too few to project from, or while the noise
  // projects to the target within the limit (14 cycles, 7.3 s).
  EXPECT_EQ(window_stop(0.02, 2, 5.2, t), WindowStop::none);
  EXPECT_EQ(window_stop(0.006, 10, 5.2, t), WindowStop::none);
  EXPECT_EQ(window_stop(std::nullopt, 1, 8, t), WindowStop::none);  // one cycle so far: go on
  EXPECT_EQ(window_stop(0.02, 2, 15, t), WindowStop::time_limit);
  EXPECT_EQ(window_stop(std::nullopt, 1, 16, t), WindowStop::time_limit);
  // A noise that projects past the limit: no use going on.
  EXPECT_EQ(window_stop(0.02, 3, 5.2, t), WindowStop::noise_unreachable);
  // A limit at or below the minimum turns the noise stop off: the window ends at its minimum.
  t.max_seconds = 5;
  EXPECT_EQ(window_stop(0.5, 3, 5.2, t), WindowStop::minimum);
  const RunSettings defaults;
  // The CPU: as before.
  EXPECT_EQ(window_stop(0.5, 3, 0.1, defaults.cpu_timing), WindowStop::minimum);
  EXPECT_GT(defaults.timing.max_seconds, defaults.timing.min_seconds);
}

TEST(TimingTest, TheProjectedWindowHoldsTheCyclesSpreadAndShrinksTheirInterval) {
  // Three cycles with a coefficient of variation of 1%: +-4.30265 x 1% / sqrt(3) = +-2.48%. The
  // interval reaches 0.5% at 18 cycles (2.10982 x 1% / sqrt(18) = 0.497%; 17 give 0.514%), not
  // at the 74 that the noise's square alone says (3 x (2.48 / 0.5)^2): t shrinks too.
  const double noise = 4.302652729749464 * 0.01 / std::sqrt(3.0);
  EXPECT_NEAR(projected_window_seconds(noise, 3, 6.0, 0.005), 18 * 2.0, 1e-9);
  // Many cycles: about cycles x (noise / target)^2, a little less as t still falls (1.97196 at
  // 199 degrees of freedom, 1.96296 at 792), at the mean cycle time so far. The counts are
  // mpmath's, searched cycle by cycle.
  EXPECT_NEAR(projected_window_seconds(0.01, 200, 10.0, 0.005), 793 * 10.0 / 200, 1e-9);
  EXPECT_NEAR(projected_window_seconds(0.02, 400, 8.0, 0.005), 6364 * 8.0 / 400, 1e-9);
  // Already within the target: the window so far.
  EXPECT_DOUBLE_EQ(projected_window_seconds(0.004, 5, 6.0, 0.005), 6.0);
  // Fewer than two cycles project nothing.
  EXPECT_TRUE(std::isinf(projected_window_seconds(0.01, 1, 6.0, 0.005)));
}

/// Steps of `mean_ms` alternately `deviation` (relative) above and below it.
std::vector<double> alternating_steps(int n, double mean_ms, double deviation) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(mean_ms * (1 + (i % 2 == 0 ? deviation : -deviation)));
  return out;
}

struct WindowEnd {
  int steps = 0;
  double seconds = 0;
  WindowStop stop = WindowStop::none;  // none when the series ran out first
};

/// The window over `step_ms` as the runner judges it, looking after every step once its minimum
/// is met: where it ends and why.
WindowEnd walk_window(const std::vector<double>& step_ms, const TimingSettings& t) {
  WindowEnd end;
  for (double ms : step_ms) {
    ++end.steps;
    end.seconds += ms / 1000.0;
    if (!window_done(end.steps, end.seconds, t)) continue;
    const std::vector<double> so_far(step_ms.begin(), step_ms.begin() + end.steps);
    end.stop = window_stop(window_noise(so_far, 1), end.steps, end.seconds, t);
    if (end.stop != WindowStop::none) return end;
  }
  return end;
}

TEST(TimingTest, AWindowThatCannotReachItsNoiseTargetByItsLimitStopsAtItsMinimum) {
  TimingSettings t;  // 2 steps and 5 s, then up to 15 s for +-0.5%
  ASSERT_EQ(t.min_seconds, 5);
  ASSERT_EQ(t.max_seconds, 15);
  ASSERT_EQ(t.noise_target, 0.005);
  // 1 s steps +-7% (nasnet-large fp32 on the H200: cv 6.9%): +-9.4% after five steps, which
  // would take hundreds of seconds to reach +-0.5%. The window stops at its minimum and says so.
  WindowEnd end = walk_window(alternating_steps(100, 1000, 0.07), t);
  EXPECT_EQ(end.stop, WindowStop::noise_unreachable);
  EXPECT_EQ(end.steps, 5);
  // 0.5 s steps +-1.35%: +-1.02% at the minimum (ten steps), 17 s projected: stops there.
  end = walk_window(alternating_steps(100, 500, 0.0135), t);
  EXPECT_EQ(end.stop, WindowStop::noise_unreachable);
  EXPECT_EQ(end.steps, 10);
  // +-1.2%: +-0.90% at the minimum, 14 s projected (28 cycles; the noise's square alone would
  // say 16.4 s): the window goes on and reaches the target at 26 steps, 13 s.
  end = walk_window(alternating_steps(100, 500, 0.012), t);
  EXPECT_EQ(end.stop, WindowStop::noise);
  EXPECT_EQ(end.steps, 26);
  EXPECT_LT(end.seconds, t.max_seconds);
  // +-0.8%: quiet enough to converge soon after the minimum (+-0.60% there): on to the target.
  end = walk_window(alternating_steps(100, 500, 0.008), t);
  EXPECT_EQ(end.stop, WindowStop::noise);
  EXPECT_GT(end.steps, 10);
  EXPECT_LE(end.steps, 14);
  // Too few cycles to project from (a minimum window of two cycles of eight steps): on, up to
  // the limit; from three cycles the noise projects.
  EXPECT_EQ(window_stop(0.2, 2, 5.0, t), WindowStop::none);
  EXPECT_EQ(window_stop(0.2, 3, 7.5, t), WindowStop::noise_unreachable);
}

TEST(TimingTest, ASlowStepsWindowTakesTwoStepsWhenTheNoiseRuleAsksForNoMore) {
  const TimingSettings t;  // the defaults: 2 steps and 5 s, then up to 15 s for +-0.5%
  ASSERT_EQ(t.min_steps, 2);
  ASSERT_EQ(t.min_seconds, 5);
  // stylegan fp32 on the H200: 5.2 s steps within 0.02% of each other. Two steps give
  // +-12.706 x 0.02% / 2 = +-0.13%: the noise is met at 10.4 s, where three steps took 15.6 s.
  WindowEnd end = walk_window(alternating_steps(10, 5200, 0.0001), t);
  EXPECT_EQ(end.stop, WindowStop::noise);
  EXPECT_EQ(end.steps, 2);
  EXPECT_NEAR(end.seconds, 10.4, 1e-9);
  // Two steps that disagree by 2% (+-25%): on to a third, as the noise rule asks; at 15 s the
  // time limit ends it, with the noise of three steps.
  end = walk_window(alternating_steps(10, 5000, 0.01), t);
  EXPECT_EQ(end.stop, WindowStop::time_limit);
  EXPECT_EQ(end.steps, 3);
  // unsupmt fp32 (12.6 s steps): two steps are past the time limit already; the window ends
  // there with a noise (two cycles), where three steps took 37.8 s.
  end = walk_window(alternating_steps(10, 12600, 0.005), t);
  EXPECT_EQ(end.stop, WindowStop::time_limit);
  EXPECT_EQ(end.steps, 2);
  // Never a window of one step at the default, however slow: no noise without two.
  EXPECT_FALSE(window_done(1, 30, t));
  EXPECT_TRUE(window_done(2, 30, t));
  // Fast steps: min_seconds decides, as before (0.6 s steps: 5.4 s at the ninth).
  end = walk_window(alternating_steps(100, 600, 0.0001), t);
  EXPECT_EQ(end.steps, 9);
  EXPECT_EQ(end.stop, WindowStop::noise);
  // A minimum asked for is kept (--min-steps 3).
  TimingSettings three = t;
  three.min_steps = 3;
  end = walk_window(alternating_steps(10, 5200, 0.0001), three);
  EXPECT_EQ(end.steps, 3);
}

TEST(TimingTest, ATimingRecordKeepsTheNoiseAndWhyTheWindowStopped) {
  TimingStats s = summarize_steps({10, 11, 12}, 0.033);
  s.noise = 0.0123;
  s.stop = WindowStop::noise_unreachable;
  EXPECT_EQ(s.to_json()["stop"], "noise unreachable");
  const TimingStats back = TimingStats::from_json(s.to_json());
  ASSERT_TRUE(back.noise.has_value());
  EXPECT_DOUBLE_EQ(*back.noise, 0.0123);
  EXPECT_EQ(back.stop, WindowStop::noise_unreachable);
  // Records written before the noise existed read back without one.
  Json old = s.to_json();
  old.erase("noise");
  old.erase("stop");
  EXPECT_FALSE(TimingStats::from_json(old).noise.has_value());
  EXPECT_EQ(TimingStats::from_json(old).stop, WindowStop::none);
  s.noise.reset();
  EXPECT_TRUE(s.to_json()["noise"].is_null());
}

TEST(TimingTest, AWindowStopIsWrittenAsItsStringAndReadBack) {
  const std::vector<std::pair<WindowStop, std::string>> stops = {
      {WindowStop::none, ""},
      {WindowStop::minimum, "minimum"},
      {WindowStop::noise, "noise"},
      {WindowStop::noise_unreachable, "noise unreachable"},
      {WindowStop::time_limit, "time limit"},
      {WindowStop::step_limit, "step limit"},
      {WindowStop::with_rank_0, "with rank 0"}};
  for (const auto& [stop, text] : stops) {
    EXPECT_EQ(to_string(stop), text);
    EXPECT_EQ(parse_window_stop(text), stop) << text;
    EXPECT_EQ(require_window_stop(text, "timing.stop"), stop) << text;
    // A record's timing, written and read back: the same string.
    TimingStats s;
    s.stop = stop;
    const Json json = s.to_json();
    EXPECT_EQ(json["stop"], text);
    EXPECT_EQ(dump_json(TimingStats::from_json(json).to_json()), dump_json(json)) << text;
  }
  for (const char* text : {"Noise", "noise ", "time-limit", "steady"}) {
    EXPECT_FALSE(parse_window_stop(text).has_value()) << text;
  }
  EXPECT_THROWS_WITH(require_window_stop("nosie", "timing.stop"), ConfigError,
                     "timing.stop 'nosie' is not a timed window's end (did you mean 'noise'?); the "
                     "allowed values are: minimum, noise, noise unreachable, time limit, step "
                     "limit, with rank 0");
  Json bad = TimingStats{}.to_json();
  bad["stop"] = "time limit reached";
  EXPECT_THROWS_WITH(TimingStats::from_json(bad), ConfigError,
                     "timing.stop 'time limit reached' is not a timed window's end");
}

TEST(TimingTest, ASampleHasItsMedianRangeAndTheMeansNinetyFivePercentInterval) {
  const SampleStats s = summarize_sample({14, 10, 12});
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.median, 12);
  EXPECT_EQ(s.mean, 12);
  EXPECT_EQ(s.min, 10);
  EXPECT_EQ(s.max, 14);
  EXPECT_DOUBLE_EQ(s.stddev, 2);
  // t(0.975, 2) = 4.30265: 12 -+ 4.30265 x 2 / sqrt(3).
  const double half = 4.302652729749464 * 2 / std::sqrt(3.0);
  EXPECT_NEAR(s.ci95_low, 12 - half, 1e-9);
  EXPECT_NEAR(s.ci95_high, 12 + half, 1e-9);
  EXPECT_NEAR(s.relative_half_width(), half / 12, 1e-9);
  const SampleStats one = summarize_sample({5});
  EXPECT_EQ(one.ci95_low, 5);
  EXPECT_EQ(one.ci95_high, 5);
  EXPECT_EQ(one.relative_half_width(), 0);
  EXPECT_EQ(summarize_sample({}).n, 0);
  EXPECT_EQ(SampleStats::from_json(s.to_json()).to_json(), s.to_json());
}

// Reference values: mpmath at 30 digits, its regularized incomplete beta inverted (the first
// ones are the textbook table's 12.706, 4.303, 2.571, 2.228, 2.042).
TEST(TimingTest, StudentsTQuantilesAreExactForEveryDegreeOfFreedom) {
  EXPECT_NEAR(t_quantile_975(1), 12.706204736174705, 1e-11);
  EXPECT_NEAR(t_quantile_975(2), 4.3026527297494639, 1e-12);
  EXPECT_NEAR(t_quantile_975(5), 2.5705818356363155, 1e-12);
  EXPECT_NEAR(t_quantile_975(10), 2.2281388519862747, 1e-12);
  EXPECT_NEAR(t_quantile_975(30), 2.0422724563012383, 1e-12);
  EXPECT_NEAR(t_quantile_975(1000), 1.9623390808264085, 1e-12);
  EXPECT_NEAR(t_quantile_975(10000), 1.9602012398906263, 1e-12);
  EXPECT_NEAR(t_quantile_975(1000000), 1.959966356814107, 1e-12);
  EXPECT_TRUE(std::isinf(t_quantile_975(0)));
  // Between the old table's rows, df was rounded up to the next one (35 read as 40's 2.021):
  // an interval 0.4% too narrow there.
  EXPECT_NEAR(t_quantile_975(35), 2.0301079282503432, 1e-12);
  EXPECT_NEAR(t_quantile_975(40), 2.0210753903062734, 1e-12);
  // Welch's degrees of freedom are fractional; other levels and the lower tail.
  EXPECT_NEAR(student_t_quantile(0.975, 2.5), 3.5746548420036832, 1e-11);
  EXPECT_NEAR(student_t_quantile(0.995, 7.3), 3.4510316556221852, 1e-11);
  EXPECT_NEAR(student_t_quantile(0.025, 5), -2.5705818356363155, 1e-12);
  EXPECT_EQ(student_t_quantile(0.5, 3), 0);
  EXPECT_TRUE(std::isinf(student_t_quantile(1, 3)));
  EXPECT_TRUE(std::isnan(student_t_quantile(0.975, 0)));
  // Both sides of the switch to the expansion at 1000 degrees of freedom agree: the quantile
  // itself falls by about 2.4e-6 per degree of freedom there (4.8e-9 over these 0.002), so a
  // jump at the switch would show as a difference far from that.
  EXPECT_NEAR(student_t_quantile(0.975, 999.999) - student_t_quantile(0.975, 1000.001), 4.76e-9,
              1e-10);
  // The distribution function, and the quantile as its inverse.
  EXPECT_NEAR(student_t_cdf(2, 3), 0.93033701572057841, 1e-14);
  EXPECT_NEAR(student_t_cdf(-1.5, 4.5), 0.10010954282807676, 1e-14);
  EXPECT_EQ(student_t_cdf(0, 7), 0.5);
  for (const double df : {1.0, 2.0, 3.7, 12.0, 250.0}) {
    for (const double p : {0.001, 0.2, 0.9, 0.975, 0.9999}) {
      EXPECT_NEAR(student_t_cdf(student_t_quantile(p, df), df), p, 1e-13) << df << " " << p;
    }
  }
}

}  // namespace
}  // namespace gpubench
