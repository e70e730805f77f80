#include "gpubench/measure/batch_search.h"
#include "gpubench/measure/search_stop.h"
#include "src/measure/memory_line.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json_int.h"
#include "gpubench/base/strings.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace gpubench {

int64_t largest_power_of_two_at_most(int64_t value) {
  if (value < 1) return 0;
  int64_t p = 1;
  while (p <= value / 2) p *= 2;
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;
using memory_model::allocated_line;
using memory_model::FitPoint;
using memory_model::fit_line;
using memory_model::HintPlan;
using memory_model::Line;
using memory_model::lower_hull;
using memory_model::plan_hint;
using memory_model::spike_exposure;

/// On a real allocator the line through two probes overshoots the limit by a few tenths of a
/// percent (rounding, a little fragmentation; 0.24% and 0.26% for bert-base on an H200): a
/// predicted probe aims that much below the line.
constexpr double kPredictionBias = 0.003;
/// ... plus this much per unit of extrapolation (the share of the predicted limit that lies
/// beyond the largest fit): a line through two points far below the limit misses a slight
/// curvature, and a failed prediction from far below costs a long bisection, a little margin
/// one more short prediction.
constexpr double kExtrapolationMargin = 0.04;
/// Above the line's limit, an edge probe that still fits steps on by this share of the largest
/// fit, doubling. The line was wrong there (a workspace that shrinks near the limit, peaks that
/// stopped growing), so the step is sized to the batch, not to the line's precision: on the
/// H200 a step of 0.3% walked nasnet-large from 208 to 224 in 8 probes without a failure.
constexpr double kEdgeStep = 0.04;
/// With an allocator whose segments grow on demand (expandable segments), what a batch needs is
/// its allocated peak and little more: on the H200 the largest batch that fitted peaked 0.2-0.6%
/// of the capacity below it (allocated), where its reserved peaks in mid-range ran 5-12 GiB above
/// the allocated ones (blocks cached, then given back when memory ran short), so a line through
/// the reserved peaks put the limit 8-10% too low and the edge probes galloped past it. The line
/// through the allocated peaks aims this far below the capacity.
constexpr double kLiveHeadroom = 0.004;
/// ... and once an edge probe has fitted past that line, the edge steps start at this share of the
/// largest fit (the line is off by a few tenths of a percent there, not by the 5-20% that cached
/// workspaces make of a reserved line).
constexpr double kLiveEdgeStep = 0.005;
/// ... and the first of two aimed probes after that fit (Search::aim) goes where the allocated
/// line reaches this share under the capacity. On the H200 (2026-12-04, ballast included) the
/// largest batch that fitted peaked 0.14-0.93% under the capacity, 0.2-0.33% for the BERT
/// searches, whose slopes are small enough for the gap to hold several batches.
constexpr double kLiveAim = 0.002;
/// After a first prediction that failed, one more this far under it before bisecting. On the H200
/// transformer-big's scouts (4096 and 97024 tokens, amp-bf16) put the limit 3.9% too high; its
/// prediction failed 1.7% above the limit and a bisection of the whole extrapolation took nine
/// more probes.
constexpr double kRetryMargin = 0.02;
/// Inside a bracket with the allocated line, the split that is not the line's: this share of
/// the bracket above its lower end (Search::close_bracket).
constexpr double kCheapSplit = 0.618;
/// A scout whose peak lies this close to the capacity is pinned there: the workspace took what
/// was free (benchmark-mode cuDNN), so its peak says how much was free, not how much the batch
/// needs, and there is no memory model to predict from.
constexpr double kPinned = 0.01;
/// A second scout when the first one's line puts the limit this many times above it: halfway
/// there, so the slope is measured on a long lever.
constexpr double kScoutFactor = 4.0;
/// A hint's slope is kept while it lies within this factor of the slope the first fit
/// measures (Search::hint_slope; its line: kHintAgreement, memory_line.cpp).
constexpr double kHintSlopeAgreement = 2.0;

/// The batches the search may probe: min_batch, and multiples of granularity above it up to
/// max_batch.
class Candidates {
 public:
  explicit Candidates(const SearchSettings& s)
      : min_(s.min_batch), g_(s.granularity), top_(align_down_raw(s.max_batch)) {}

  int64_t min() const { return min_; }
  int64_t top() const { return top_; }
  int64_t granularity() const { return g_; }
  /// Largest candidate <= b (min_batch if none).
  int64_t align_down(double b) const {
    if (!(b < static_cast<double>(top_))) return top_;
    if (!(b > static_cast<double>(min_))) return min_;
    return align_down_raw(static_cast<int64_t>(std::floor(b)));
  }
  /// Smallest candidate > b (min_batch when b is below it).
  int64_t next_above(int64_t b) const {
    if (b < min_) return min_;
    return (b / g_ + 1) * g_;  // the next multiple of g; above min_ since b >= min_
  }

 private:
  int64_t align_down_raw(int64_t b) const {
    if (b <= min_) return min_;
    const int64_t aligned = (b / g_) * g_;
    return aligned <= min_ ? min_ : aligned;
  }
  int64_t min_, g_, top_;
};

void check_settings(const SearchSettings& s, int64_t capacity) {
  GPUBENCH_CHECK(s.min_batch >= 1, ConfigError,
                 "search.min_batch: expected a positive integer, got {}", s.min_batch);
  GPUBENCH_CHECK(s.granularity >= 1, ConfigError,
                 "search.granularity: expected a positive integer, got {}", s.granularity);
  GPUBENCH_CHECK(s.max_batch >= s.min_batch, ConfigError,
                 "search.max_batch ({}) is below search.min_batch ({}); make max_batch >= "
                 "min_batch",
                 s.max_batch, s.min_batch);
  GPUBENCH_CHECK(s.first_probe >= 0, ConfigError,
                 "search.first_probe: expected 0 (automatic) or a batch, got {}", s.first_probe);
  GPUBENCH_CHECK(s.max_probes >= 1, ConfigError,
                 "search.max_probes: expected a positive integer, got {}", s.max_probes);
  GPUBENCH_CHECK(capacity >= 0, ConfigError,
                 "the search's capacity is {} bytes; expected 0 (unknown) or a size", capacity);
}

/// The search as a function of what its probes saw: every decision is made afresh from the
/// probes so far, so a search that a fresh worker continues decides exactly as the first would.
class Search {
 public:
  Search(const SearchSettings& s, int64_t capacity, HintPlan hint, bool live)
      : s_(s),
        cand_(s),
        capacity_(static_cast<double>(capacity)),
        target_(live ? capacity_ * (1 - kLiveHeadroom) : capacity_),
        live_(live),
        hint_(std::move(hint)) {}

  void add(const ProbeRecord& p) { probes_.push_back(p); }
  const std::vector<ProbeRecord>& probes() const { return probes_; }

  /// The largest batch seen to fit (0: none) and the smallest one above it seen not to.
  int64_t lo() const {
    int64_t lo = 0;
    for (const auto& p : probes_) {
      if (!p.sticky && p.fits) lo = std::max(lo, p.batch);
    }
    return lo;
  }
  int64_t hi() const {
    const int64_t l = lo();
    int64_t hi = 0;
    for (const auto& p : probes_) {
      if (!p.sticky && !p.fits && p.batch > l) hi = hi == 0 ? p.batch : std::min(hi, p.batch);
    }
    return hi;
  }
  std::vector<FitPoint> fits() const {
    std::vector<FitPoint> out;
    for (const auto& p : probes_) {
      if (p.sticky || !p.fits) continue;
      auto same = std::find_if(out.begin(), out.end(), [&](const FitPoint& f) {
        return f.batch == p.batch;
      });
      const FitPoint point{p.batch, static_cast<double>(p.peak_bytes),
                           static_cast<double>(p.resident_bytes),
                           static_cast<double>(p.peak_allocated_bytes)};
      if (same != out.end()) {
        *same = point;  // probed again: the latest counts
      } else {
        out.push_back(point);
      }
    }
    std::sort(out.begin(), out.end(),
              [](const FitPoint& a, const FitPoint& b) { return a.batch < b.batch; });
    return out;
  }
  /// The memory model: the line through the reserved peaks, or through the allocated ones when
  /// the allocator is expandable and every fit reported them.
  Line line() const { return model_line(fits()); }
  bool live() const { return live_; }

  /// Why the search is over, or SearchStop::none.
  SearchStopReason stop_reason() const {
    const int64_t l = lo(), h = hi();
    if (l == cand_.top()) return SearchStopReason::max_batch_limit(s_.max_batch);
    if (h != 0 && cand_.next_above(l) >= h) {
      return l == 0 ? SearchStopReason::min_batch_no_fit(s_.min_batch)
                    : SearchStopReason::bracket_closed();
    }
    if (static_cast<int>(probes_.size()) >= s_.max_probes) {
      return SearchStopReason::probe_budget(s_.max_probes);
    }
    return {};
  }

  struct Step {
    int64_t batch;
    const char* phase;
  };
  Step next() const {
    const int64_t l = lo(), h = hi();
    const auto fit_points = fits();
    if (count_phase(nullptr) == 0) {  // the first probe (a retried one included)
      if (hint_.limit > 0) return {cand_.align_down(hint_.limit * (1 - hint_.margin)), "hint"};
      return {first_probe(), "scout"};
    }
    if (l == 0) {
      // Nothing fits yet. After a hint that failed, the cold search's own scout; else back off
      // fast towards min_batch.
      if (failed("hint") && count_phase("scout") == 0 && first_probe() < h) {
        return {first_probe(), "scout"};
      }
      return {cand_.align_down(static_cast<double>(h) / 4.0), "scout"};
    }
    // A prediction that just failed, the first: once more, kRetryMargin under it, when that lies
    // above the bisection's midpoint. A line off by a few percent (curvature the scouts did not
    // see) fails narrowly, and a fit there leaves a bracket that narrow where a bisection starts
    // from the whole extrapolation.
    const ProbeRecord* last = last_outcome();
    if (h != 0 && last && last->phase == "predict" && !last->fits &&
        count_failed("predict") == 1 && !failed("edge")) {
      const int64_t b = cand_.align_down(static_cast<double>(h) * (1 - kRetryMargin));
      if (b > l + (h - l) / 2) return {b, "predict"};  // else the bisection's midpoint is higher
    }
    // After any other failed prediction (or edge or aimed probe): bisection, never a walk; with
    // the allocated line, the line's batches inside the bracket in turn with the midpoint.
    if (h != 0 && (failed("predict") || failed("edge") || failed("aim"))) {
      return live_line(fit_points) && capacity_ > 0 ? close_bracket(l, h, fit_points)
                                                     : bisect(l, h);
    }
    const Line line = capacity_ > 0 ? model_line(fit_points) : Line{};
    if (!line.valid() || lowest_scout_pinned()) {
      // No memory model: no capacity known, or a scout far below the limit already peaked at
      // the capacity (a workspace that takes what is free). Double, then bisect.
      const int64_t b = cand_.align_down(2.0 * static_cast<double>(l));
      if ((h != 0 && b >= h) || b <= l) return bisect_or_above(l, h);
      return {b, "double"};
    }
    const double limit = line.batch_at(target_);
    // Edge probes fit past the line when it was wrong there. A fit that exposed a workspace spike
    // under the line (spike_exposure) redraws it without the spike: the edges up to that fit
    // were above the old line, not the new one, which predicts again.
    const int edges = count_fitting_edges(live_line(fit_points) ? spike_exposure(fit_points) : 0);
    if (fit_points.size() == 1 && hint_slope() == 0 &&
        limit > kScoutFactor * static_cast<double>(l)) {
      // A second point halfway to the predicted limit: the slope, measured on a long lever.
      const int64_t b = cand_.align_down(limit / 2.0);
      if (b > l && (h == 0 || b < h)) return {b, "scout"};
    }
    const double extrapolation =
        limit > 0 ? std::max(0.0, (limit - static_cast<double>(l)) / limit) : 0.0;
    const double margin = kPredictionBias + kExtrapolationMargin * extrapolation;
    const int64_t p = cand_.align_down(limit * (1 - margin));
    // Predict while no edge probe has fitted: once one has, the line was wrong past its limit,
    // and a line refitted through that point predicts a few batches more each time (a walk).
    // Nor when the largest fit's reserved peak is pinned at the capacity: the reserved line stops
    // rising there and predicts a few batches more each time too.
    // (An allocated line is not pinned: its peaks grow with the batch up to the limit.)
    const bool pinned = !live_line(fit_points) && largest_fit_pinned(fit_points);
    if (edges == 0 && !pinned && p > l && static_cast<double>(l) < limit * (1 - 2 * margin) &&
        (h == 0 || p < h) && !predictions_walk(fit_points)) {
      return {p, "predict"};
    }
    if (h != 0 && p >= h) return bisect(l, h);  // the line says more fits than does
    int64_t u = 0;
    if (edges == 0) {
      // The largest fit sits at the line's limit: just above it first.
      u = cand_.next_above(cand_.align_down(limit));
    } else {
      if (live_line(fit_points)) {
        if (const auto step = aim(fit_points, l, h, edges)) return *step;
      }
      // Batches fit past the line: gallop from the largest fit in steps that double, so a zone
      // of z batches costs about 2 log2(z / step) probes, never a walk. Aimed probes that fitted
      // count as edges; once the second (the line's crossing of the capacity) has fitted, the
      // line was exact or the peaks stopped following it: one batch above it first, then the
      // gallop from its start.
      const double step = live_line(fit_points) ? kLiveEdgeStep : kEdgeStep;
      double base =
          std::max(static_cast<double>(cand_.granularity()), step * static_cast<double>(l));
      // Every aimed probe here fitted: after one that failed the search bisects (above).
      const int aims_fitted = count_phase("aim");
      int doublings = edges - 1 + aims_fitted;
      if (aims_fitted >= 2) {
        const int past = count_fitting_edges(largest_fit("aim"));
        if (past == 0) base = static_cast<double>(cand_.granularity());
        doublings = std::max(0, past - 1);
      }
      u = cand_.align_down(static_cast<double>(l) +
                           base * std::pow(2.0, static_cast<double>(doublings)));
    }
    // When the reserved line no longer says where the limit is (the largest fit's reserved peak
    // is pinned at the capacity, or batches fit past the line), at least where the live
    // tensors' line fills the capacity: workspaces and cached blocks take what is free and the
    // reserved peaks stop rising, while the allocated peaks keep growing with the batch
    // (nasnet-large on the H200: 0.59 GiB an image from 105 to 224 while the reserved peak sat
    // at 137-139 GiB).
    const Line live = allocated_line(fit_points);
    if ((pinned || edges > 0) && live.valid() && !live_line(fit_points)) {
      u = std::max(u, cand_.align_down(live.batch_at(capacity_) * (1 - kPredictionBias)));
    }
    if (u <= l) u = cand_.next_above(l);
    if (h != 0 && u >= h) return bisect(l, h);
    return {std::min(u, cand_.top()), "edge"};
  }

  /// The slope of the hint while it is trusted: before a second fit, and while the first fit
  /// agrees with it.
  double hint_slope() const {
    if (hint_.slope <= 0 || failed("hint")) return 0;
    const auto f = fits();
    if (f.size() != 1) return f.empty() ? hint_.slope : 0;
    const double own = (f[0].peak - f[0].resident) / static_cast<double>(f[0].batch);
    if (!(own > 0)) return hint_.slope;
    const double ratio = hint_.slope / own;
    return ratio <= kHintSlopeAgreement && ratio >= 1 / kHintSlopeAgreement ? hint_.slope : 0;
  }

 private:
  /// With the allocated line, inside a bracket [l, h] that a failed probe opened: the line's
  /// batches while they lie inside it, first one granule above the line's last batch that fits
  /// (meant to fail: near the edge a probe that fits costs about twice one that fails), then that
  /// batch (which closes the bracket if the line was right); after a line-guided probe that
  /// missed (it fitted, or it failed where the line put a fit), the midpoint, then the line
  /// again (as Dekker's method alternates secant and bisection), so a wrong line never walks.
  Step close_bracket(int64_t l, int64_t h, const std::vector<FitPoint>& fits) const {
    const Line line = model_line(fits);
    const ProbeRecord* last = last_outcome();
    if (!line.valid() || !last) return bisect(l, h);
    const int64_t under = cand_.align_down(line.batch_at(target_));
    const int64_t above = under < cand_.top() ? cand_.next_above(under) : under;
    const bool guided = last->phase == "aim" && count_phase("bisect") + count_phase("aim") > 0;
    const bool missed = guided && (last->fits || last->batch != above);
    if (!missed) {
      if (above > l && above < h) return {above, "aim"};
      if (under > l && under < h) return {under, "aim"};
    }
    // A line-guided probe that fitted: the line lies under the limit. One step above, twice
    // what that probe gained on the largest fit before it (a gallop), when it lies inside.
    if (missed && last->fits) {
      int64_t before = 0;
      for (const auto& p : probes_) {
        if (!p.sticky && p.fits && p.batch < last->batch) before = std::max(before, p.batch);
      }
      const int64_t u = cand_.align_down(static_cast<double>(l) + 2.0 * static_cast<double>(l - before));
      if (before > 0 && u > l && u < h) return {u, "edge"};
    }
    // The cheaper side: a probe that fails costs about half one that fits, so the split goes
    // above the midpoint, where it fails more often (golden section: with costs 2 and 1 the
    // bracket left after a fit is 0.382 of it, after a failure 0.618).
    int64_t split = cand_.align_down(static_cast<double>(l) + kCheapSplit * static_cast<double>(h - l));
    if (split <= l) split = cand_.next_above(l);
    if (split >= h) return bisect(l, h);
    return {split, "bisect"};
  }
  /// With the allocated line: the predictions so far fitted and each refitted line put the
  /// limit only a little further (curvature, or peaks that grow less near the limit: mask-rcnn
  /// fp32 on the H200 predicted 120, 129, 133, 135, 138). After two that fitted, the next probe
  /// goes above the line (an edge), not under it.
  bool predictions_walk(const std::vector<FitPoint>& fits) const {
    if (!live_line(fits)) return false;
    int fitted = 0;
    for (const auto& p : probes_) {
      if (p.sticky) continue;
      if (p.phase == "predict" && !p.fits) return false;
      if (p.phase == "predict") ++fitted;
    }
    return fitted >= 2;
  }
  /// With the allocated line, after the first edge probe fitted past the line's limit: the
  /// line was right about the bytes and only the share it keeps free (kLiveHeadroom) was wrong.
  /// Two probes aimed from the line close in from there before any gallop: where it reaches
  /// kLiveAim under the capacity, then, if that fitted, where it reaches the capacity itself
  /// (live tensors cannot outgrow the memory). On the December 4 replays this takes bert-base
  /// from 9 probes to 8 in both precisions (tests/batch_search_test.cpp).
  std::optional<Step> aim(const std::vector<FitPoint>& fits, int64_t l, int64_t h,
                          int edges) const {
    // Reached only while every aimed probe so far fitted (a failed one leads to bisection).
    const int aims = count_phase("aim");
    if (edges != 1 || aims >= 2) return std::nullopt;
    // The model line: drawn under a workspace spike the fits exposed, not through it (a line
    // through the spike and a fit past it is nearly flat and aims far past the limit: mask-rcnn
    // amp-bf16 on the H100, 2026-12-06, aimed at 261 from 162 where 168 failed).
    const Line line = model_line(fits);
    if (!line.valid()) return std::nullopt;
    const int64_t b = cand_.align_down(line.batch_at(capacity_ * (aims == 0 ? 1 - kLiveAim : 1.0)));
    if (b <= l || (h != 0 && b >= h)) return std::nullopt;
    return Step{std::min(b, cand_.top()), "aim"};
  }
  /// The largest batch that fitted in `phase` (0: none).
  int64_t largest_fit(const char* phase) const {
    int64_t b = 0;
    for (const auto& p : probes_) {
      if (!p.sticky && p.fits && p.phase == phase) b = std::max(b, p.batch);
    }
    return b;
  }
  int64_t first_probe() const {
    return s_.first_probe > 0 ? cand_.align_down(static_cast<double>(s_.first_probe))
                              : cand_.align_down(4.0 * static_cast<double>(s_.min_batch));
  }
  Step bisect(int64_t l, int64_t h) const {
    int64_t mid = cand_.align_down(static_cast<double>(l) + static_cast<double>(h - l) / 2.0);
    if (mid <= l) mid = cand_.next_above(l);
    return {mid, "bisect"};
  }
  Step bisect_or_above(int64_t l, int64_t h) const {
    if (h != 0) return bisect(l, h);
    return {std::min(cand_.next_above(l), cand_.top()), "double"};
  }
  /// Probes with an outcome (not left sticky) in `phase` (any phase for nullptr).
  int count_phase(const char* phase) const {
    int n = 0;
    for (const auto& p : probes_) {
      if (!p.sticky && (!phase || p.phase == phase)) ++n;
    }
    return n;
  }
  /// The latest probe with an outcome (a probe that left its worker unusable has none: a fresh
  /// worker decides as if it had not run, and probes it again).
  const ProbeRecord* last_outcome() const {
    for (auto it = probes_.rbegin(); it != probes_.rend(); ++it) {
      if (!it->sticky) return &*it;
    }
    return nullptr;
  }
  int count_failed(const char* phase) const {
    return static_cast<int>(std::count_if(probes_.begin(), probes_.end(), [&](const ProbeRecord& p) {
      return !p.sticky && !p.fits && p.phase == phase;
    }));
  }
  bool failed(const char* phase) const {
    return std::any_of(probes_.begin(), probes_.end(), [&](const ProbeRecord& p) {
      return !p.sticky && !p.fits && p.phase == phase;
    });
  }
  /// A reserved peak within kPinned of the capacity.
  bool pinned_at_capacity(double peak) const { return peak >= capacity_ * (1 - kPinned) - 1; }
  /// The smallest batch that fitted was a scout whose peak sits at the capacity.
  bool lowest_scout_pinned() const {
    if (capacity_ <= 0) return false;
    const ProbeRecord* lowest = nullptr;
    for (const auto& p : probes_) {
      if (!p.sticky && p.fits && (!lowest || p.batch < lowest->batch)) lowest = &p;
    }
    return lowest && lowest->phase == "scout" &&
           pinned_at_capacity(static_cast<double>(lowest->peak_bytes));
  }
  /// Whether the model is the allocated line: an expandable allocator, and every fit reported
  /// its allocated peak.
  bool live_line(const std::vector<FitPoint>& fits) const {
    return live_ && std::all_of(fits.begin(), fits.end(),
                                [](const FitPoint& f) { return f.allocated > 0; });
  }
  Line model_line(const std::vector<FitPoint>& fits) const {
    if (!live_line(fits)) return fit_line(fits, hint_slope());
    return allocated_line(spike_exposure(fits) > 0 ? lower_hull(fits) : fits, hint_slope());
  }
  bool largest_fit_pinned(const std::vector<FitPoint>& fits) const {
    return capacity_ > 0 && !fits.empty() && pinned_at_capacity(fits.back().peak);
  }
  /// Edge probes that fitted above batch `above`.
  int count_fitting_edges(int64_t above = 0) const {
    int n = 0;
    for (const auto& p : probes_) {
      if (!p.sticky && p.fits && p.phase == "edge" && p.batch > above) ++n;
    }
    return n;
  }

  SearchSettings s_;
  Candidates cand_;
  double capacity_;
  double target_;  ///< where the model line's limit lies: the capacity, less kLiveHeadroom if live
  bool live_;      ///< the allocator is expandable: the allocated peaks are the model
  HintPlan hint_;
  std::vector<ProbeRecord> probes_;
};

}  // namespace

ProbeRecord run_probe(const ProbeFunction& probe, int64_t batch, const std::string& phase,
                      int worker) {
  const auto t0 = Clock::now();
  const ProbeOutcome outcome = probe(batch);
  ProbeRecord p;
  p.batch = batch;
  p.fits = outcome.fits && !outcome.worker_unusable;
  p.peak_bytes = outcome.peak_bytes;
  p.peak_allocated_bytes = outcome.peak_allocated_bytes;
  p.resident_bytes = outcome.resident_bytes;
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  p.prepare_seconds = outcome.prepare_seconds;
  p.steps_seconds = outcome.steps_seconds;
  p.steps = outcome.steps;
  p.allocator = outcome.allocator;
  p.phase = phase;
  p.error = outcome.error;
  p.sticky = outcome.worker_unusable;
  p.worker = worker;
  return p;
}

int64_t next_candidate_above(const SearchSettings& settings, int64_t batch) {
  const Candidates candidates(settings);
  if (batch >= candidates.top()) return 0;
  return candidates.next_above(batch);
}

SearchRecord find_max_batch(const SearchSettings& settings, int64_t capacity_bytes,
                            const ProbeFunction& probe, const SearchOptions& options) {
  check_settings(settings, capacity_bytes);
  const auto started = Clock::now();
  auto note = [&](const std::string& text) {
    if (options.on_note) options.on_note(text);
  };

  HintPlan hint = plan_hint(settings, capacity_bytes, options.headroom_bytes, options.hint);
  SearchRecord record;
  record.capacity_bytes = capacity_bytes;
  record.hint_note = hint.note;
  record.hinted = hint.limit > 0;
  if (!hint.note.empty() && options.prior.empty()) note(hint.note);

  Search search(settings, capacity_bytes, hint, options.expandable_allocator);
  double prior_seconds = 0;
  int workers = options.worker + 1;
  for (const auto& p : options.prior) {
    search.add(p);
    prior_seconds += p.seconds;
    workers = std::max(workers, p.worker + 1);
  }

  while (true) {
    record.stop = search.stop_reason();
    if (record.stop.stopped()) {
      record.converged = !record.stop.budget_spent();
      break;
    }
    const Search::Step step = search.next();
    const ProbeRecord p = run_probe(probe, step.batch, step.phase, options.worker);
    // Whether this batch already left a worker unusable once (before this probe).
    const bool again = std::any_of(
        search.probes().begin(), search.probes().end(),
        [&](const ProbeRecord& q) { return q.sticky && q.batch == step.batch; });
    search.add(p);
    if (options.on_probe) options.on_probe(p, static_cast<int>(search.probes().size()));
    if (p.sticky) {
      record.interrupted = !again;
      record.stop = again ? SearchStopReason::probe_failed(p.batch, p.error)
                          : SearchStopReason::probe_unusable(p.batch, p.error);
      break;
    }
  }

  const auto& probes = search.probes();
  const int64_t lo = search.lo();
  record.max_batch = lo;
  record.largest_pow2 = largest_power_of_two_at_most(lo);
  record.smallest_failure = search.hi();
  for (const auto& p : probes) {
    if (!p.sticky && p.fits && p.batch == lo) {
      record.peak_bytes_at_max = p.peak_bytes;
      record.peak_allocated_bytes_at_max = p.peak_allocated_bytes;
      record.resident_bytes_at_max = p.resident_bytes;
    }
  }
  record.activation_peak_bytes =
      std::max<int64_t>(0, record.peak_allocated_bytes_at_max - record.resident_bytes_at_max);
  const Line line = search.line();
  record.memory_line = search.live() && std::all_of(probes.begin(), probes.end(),
                                                    [](const ProbeRecord& p) {
                                                      return p.sticky || !p.fits ||
                                                             p.peak_allocated_bytes > 0;
                                                    })
                           ? "allocated"
                           : "reserved";
  if (line.valid()) {
    record.bytes_per_sample = line.per_sample;
    record.fixed_bytes = line.fixed;
  }
  record.probes = probes;
  record.workers = workers;
  record.seconds =
      prior_seconds + std::chrono::duration<double>(Clock::now() - started).count();
  if (record.stop.budget_spent()) {
    note(record.smallest_failure > 0
             ? fmt::format("the search did not converge: {}; batch {} fits, the largest lies "
                           "below {} (raise search.max_probes to close the bracket)",
                           record.stop.text, lo, record.smallest_failure)
             : fmt::format("the search did not converge: {}; batch {} fits, the largest may "
                           "lie above it (raise search.max_probes)",
                           record.stop.text, lo));
  }
  return record;
}

}  // namespace gpubench
