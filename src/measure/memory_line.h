// The max-batch search's memory model (batch_search.cpp decides from it): the line
// peak = fixed + per_sample * batch through what the probes that fitted measured (the reserved
// peaks, or the allocated ones under an expandable allocator, drawn under the workspace spikes
// the fits exposed), and what a SearchHint predicts under this capacity before the first probe.
// Internal to src/measure/.
#pragma once

#include "gpubench/measure/batch_search.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpubench::memory_model {

/// What one probe that fitted measured (the latest probe of its batch).
struct FitPoint {
  int64_t batch;
  double peak;       ///< reserved by the allocator: what the line predicts against the capacity
  double resident;
  double allocated;  ///< held by live tensors (the workspace that was used included)
};

/// A line peak = fixed + per_sample * batch.
struct Line {
  double fixed = 0;
  double per_sample = 0;
  bool valid() const { return per_sample > 0 && std::isfinite(per_sample) && std::isfinite(fixed); }
  double batch_at(double bytes) const { return (bytes - fixed) / per_sample; }
};

/// The line through what the probes that fitted measured. Two points: the largest batch and the
/// largest one at least 10% below it (the shortest extrapolation to the limit, on a lever long
/// enough that allocator noise barely tilts it). One point: what stays after the step is fixed,
/// the rest grows with the batch. `slope` (a trusted hint's), through the largest fit, while
/// there is only one.
Line fit_line(const std::vector<FitPoint>& fits, double slope = 0);

/// The line through the fits' allocated peaks (the live tensors), or an invalid line when the
/// probes did not report them.
Line allocated_line(const std::vector<FitPoint>& fits, double slope = 0);

/// With the allocated line: the smallest batch whose fit shows that a smaller batch's fit held
/// a workspace spike (its allocated peak lies above this larger batch's), or 0 when the
/// allocated peaks rise with the batch. In strict fp32 cuDNN's heuristics pick algorithms
/// with large workspaces at some shapes: deeplabv3 on the H200 peaked at 137.1 GiB at batch 68
/// and 109.2 GiB at 70 (2026-12-02).
int64_t spike_exposure(const std::vector<FitPoint>& fits);

/// The fits on the lower convex hull of allocated peak against batch: what grows with the
/// batch, without the workspace spikes above it. The largest fit is always on it.
std::vector<FitPoint> lower_hull(const std::vector<FitPoint>& fits);

/// What the search makes of a hint before its first probe.
struct HintPlan {
  double limit = 0;  ///< predicted limit under this capacity (0: no hint)
  double slope = 0;  ///< the hint's slope, while trusted (0: the probes' own)
  double margin = 0;
  std::string note;
};

/// The hint's prediction under `capacity` less the probes' ballast `headroom_bytes`: its line's
/// limit while that agrees with its own answer scaled to this capacity, else that scaled answer;
/// refused (a note, no limit) when it makes no sense or predicts that not even min_batch fits.
HintPlan plan_hint(const SearchSettings& s, int64_t capacity, int64_t headroom_bytes,
                   const std::optional<SearchHint>& h);

}  // namespace gpubench::memory_model
