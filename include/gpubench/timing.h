// Warm-up and timed-window logic (pure, testable), and the summary statistics of step times.
#pragma once

#include "gpubench/config.h"
#include "gpubench/json.h"

#include <vector>

namespace gpubench {

/// Summary of the timed window.
struct TimingStats {
  int steps = 0;  ///< timed steps
  double median_ms = 0;
  double mean_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double stddev_ms = 0;       ///< sample standard deviation
  double window_seconds = 0;  ///< first step start to last step end, device time

  Json to_json() const;
  static TimingStats from_json(const Json& json);
};

/// Statistics of per-step times; `window_seconds` is the device time of the whole window.
TimingStats summarize_steps(const std::vector<double>& step_ms, double window_seconds);

/// True once the last three warm-up step times lie within `tolerance` (relative) of their
/// median: cuDNN autotuning and allocator growth are over.
bool is_steady(const std::vector<double>& step_ms, double tolerance);

/// Whether warm-up is done after these steps, and why ("steady", "step limit", "time limit").
/// A negative steady_tolerance means the steps vary in work: warm-up ends at warmup_steps.
struct WarmupDecision {
  bool done = false;
  std::string reason;
};
WarmupDecision warmup_done(const std::vector<double>& step_ms, double elapsed_seconds,
                           const TimingSettings& settings);

/// Whether the timed window has enough steps and time.
bool window_done(int steps, double elapsed_seconds, const TimingSettings& settings);

}  // namespace gpubench
