// The max-batch search, as pure logic over a probe function so it is testable without a GPU.
//
// The largest batch for which a full training step (two steps, so optimizer state exists) runs
// without running out of memory. A cheap probe measures the memory that stays (weights,
// gradients, optimizer state) and the peak; a second probe halfway to the predicted limit gives
// the slope of peak memory against batch; the line through the two predicts the limit. Probes
// then land just under the line's limit, refitting the line through the two largest batches
// that fit after each (a short, accurate extrapolation), then on the limit itself; steps away
// from the prediction that double until the outcome flips, and a bisection, close the bracket
// [largest fit, smallest failure]. A few probes, not a doubling ladder from 1.
#pragma once

#include "gpubench/config.h"
#include "gpubench/json.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// What one probe observed.
struct ProbeOutcome {
  bool fits = false;           ///< two full steps ran without running out of memory
  int64_t peak_bytes = 0;      ///< peak memory the probe held (the allocator's reservation)
  int64_t resident_bytes = 0;  ///< memory still held after the steps (weights, grads, state)
  std::string error;           ///< why it did not fit ("out of memory: ...")
};

/// One probe as recorded.
struct ProbeRecord {
  int64_t batch = 0;
  bool fits = false;
  int64_t peak_bytes = 0;
  int64_t resident_bytes = 0;
  double seconds = 0;  ///< wall time of the probe (build, two steps, release)
  std::string phase;   ///< "scout", "predict", "bracket", "bisect"
  std::string error;
};

/// The search's answer and how it got there.
struct SearchRecord {
  int64_t max_batch = 0;          ///< largest batch that fits; 0 when not even min_batch fits
  int64_t largest_pow2 = 0;       ///< largest power of two <= max_batch (the 2020 post's habit)
  int64_t peak_bytes_at_max = 0;  ///< peak memory of the probe at max_batch
  double bytes_per_sample = 0;    ///< slope of the fitted line [bytes per batch unit]
  double fixed_bytes = 0;         ///< intercept of the fitted line [bytes]
  int64_t capacity_bytes = 0;     ///< memory the search aimed to fill
  std::vector<ProbeRecord> probes;
  std::string stop_reason;  ///< "bracket closed", "limited by search.max_batch=...", ...
  bool hinted = false;      ///< started from an earlier search's memory line
  double seconds = 0;       ///< wall time of the whole search

  Json to_json() const;
  static SearchRecord from_json(const Json& json);
};

/// A memory line learned by an earlier search of the same workload and precision (another
/// memory cap, say): peak = fixed_bytes + bytes_per_sample * batch. With one, the search skips
/// its scouts and probes the hinted limit at once; the slope is trusted and the intercept is
/// re-anchored on what the probes measure, so a stale hint costs probes, never correctness.
struct SearchHint {
  double fixed_bytes = 0;
  double bytes_per_sample = 0;
  bool valid() const { return bytes_per_sample > 0 && fixed_bytes >= 0; }
  Json to_json() const;
  static std::optional<SearchHint> from_json(const Json& json);  ///< none for null
};

/// Called after every probe (for progress lines).
using ProbeCallback = std::function<void(const ProbeRecord& probe, int index)>;
/// Runs one probe at a batch size. Must release everything it built before returning.
using ProbeFunction = std::function<ProbeOutcome(int64_t batch)>;

/// Finds the largest batch in [settings.min_batch, settings.max_batch], a multiple of
/// settings.granularity (or min_batch itself), for which `probe` fits. `capacity_bytes` is the
/// memory available to the allocator (for predictions only; the probes decide). Assumes that a
/// batch fits whenever a larger one does.
SearchRecord find_max_batch(const SearchSettings& settings, int64_t capacity_bytes,
                            const ProbeFunction& probe, const ProbeCallback& on_probe = {},
                            const std::optional<SearchHint>& hint = std::nullopt);

/// Largest power of two <= value (0 for value < 1).
int64_t largest_power_of_two_at_most(int64_t value);

}  // namespace gpubench
