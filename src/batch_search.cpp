#include "gpubench/batch_search.h"

#include "gpubench/errors.h"

#include <chrono>
#include <cmath>

namespace gpubench {

int64_t largest_power_of_two_at_most(int64_t value) {
  if (value < 1) return 0;
  int64_t p = 1;
  while (p <= value / 2) p *= 2;
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;

/// On a real allocator the line through two probes overshoots the limit by a few tenths of a
/// percent (rounding, a little fragmentation; 0.24% and 0.26% for bert-base on an H200): the
/// predicted probe aims that much below the line, and the bracket around it starts with steps of
/// that size before it halves.
constexpr double kPredictionBias = 0.003;
constexpr double kBracketFraction = 0.003;
/// How far below a hinted limit that did not fit the search gallops before it distrusts the
/// hint and backs off fast (a hint of the same workload is off by well under 1%).
constexpr double kHintGallop = 0.02;

/// The batches the search may probe: min_batch, and multiples of granularity above it up to
/// max_batch.
class Candidates {
 public:
  explicit Candidates(const SearchSettings& s)
      : min_(s.min_batch), g_(s.granularity), top_(align_down_raw(s.max_batch)) {}

  int64_t min() const { return min_; }
  int64_t top() const { return top_; }
  /// Largest candidate <= b (min_batch if none).
  int64_t align_down(double b) const {
    if (!(b < static_cast<double>(top_))) return top_;
    return align_down_raw(static_cast<int64_t>(std::floor(b)));
  }
  /// Smallest candidate > b (b may be 0 meaning "none yet").
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

struct FitPoint {
  int64_t batch;
  double peak;
  double resident;
};

/// A line peak = fixed + per_sample * batch through what the probes that fit measured.
struct Line {
  double fixed = 0;
  double per_sample = 0;
  bool valid() const { return per_sample > 0 && std::isfinite(per_sample); }
  double batch_at(double bytes) const { return (bytes - fixed) / per_sample; }
};

Line fit_line(const std::vector<FitPoint>& points) {
  Line line;
  if (points.size() >= 2) {
    // The largest batch and the largest one at least 10% below it: the shortest extrapolation
    // to the limit, on a lever long enough that allocator noise barely tilts the line.
    const FitPoint& b = points.back();
    std::size_t k = points.size() - 2;
    while (k > 0 && static_cast<double>(points[k].batch) > 0.9 * static_cast<double>(b.batch)) --k;
    const FitPoint& a = points[k];
    if (b.batch != a.batch) {
      line.per_sample = (b.peak - a.peak) / static_cast<double>(b.batch - a.batch);
      line.fixed = b.peak - line.per_sample * static_cast<double>(b.batch);
      if (line.valid()) return line;
    }
  }
  if (!points.empty()) {
    // One point: what stays after the step is fixed, the rest scales with the batch (an
    // overestimate of the slope, so the prediction errs low).
    const FitPoint& p = points.back();
    line.fixed = p.resident;
    line.per_sample = (p.peak - p.resident) / static_cast<double>(p.batch);
  }
  return line;
}

}  // namespace

Json SearchHint::to_json() const {
  return {{"fixed_bytes", fixed_bytes}, {"bytes_per_sample", bytes_per_sample}};
}

std::optional<SearchHint> SearchHint::from_json(const Json& json) {
  if (!json.is_object()) return std::nullopt;
  SearchHint hint;
  hint.fixed_bytes = json.value("fixed_bytes", 0.0);
  hint.bytes_per_sample = json.value("bytes_per_sample", 0.0);
  return hint;
}

SearchRecord find_max_batch(const SearchSettings& settings, int64_t capacity_bytes,
                            const ProbeFunction& probe, const ProbeCallback& on_probe,
                            const std::optional<SearchHint>& hint) {
  GPUBENCH_ASSERT(settings.min_batch >= 1 && settings.granularity >= 1);
  const auto started = Clock::now();
  const Candidates candidates(settings);
  SearchRecord record;
  record.capacity_bytes = capacity_bytes;

  int64_t lo = 0;              // largest batch known to fit (0: none)
  int64_t hi = 0;              // smallest batch known not to fit (0: none)
  std::vector<FitPoint> fits;  // sorted by batch

  auto run_probe = [&](int64_t batch, const char* phase) {
    const auto t0 = Clock::now();
    const ProbeOutcome outcome = probe(batch);
    ProbeRecord p;
    p.batch = batch;
    p.fits = outcome.fits;
    p.peak_bytes = outcome.peak_bytes;
    p.resident_bytes = outcome.resident_bytes;
    p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    p.phase = phase;
    p.error = outcome.error;
    record.probes.push_back(p);
    if (on_probe) on_probe(p, static_cast<int>(record.probes.size()));
    if (outcome.fits) {
      lo = std::max(lo, batch);
      auto at = std::lower_bound(fits.begin(), fits.end(), batch,
                                 [](const FitPoint& f, int64_t b) { return f.batch < b; });
      fits.insert(at, FitPoint{batch, static_cast<double>(outcome.peak_bytes),
                               static_cast<double>(outcome.resident_bytes)});
    } else {
      hi = hi == 0 ? batch : std::min(hi, batch);
    }
    return outcome.fits;
  };

  const bool can_predict = capacity_bytes > 0;
  const bool use_hint = can_predict && hint && hint->valid();
  bool trust_hint = use_hint;  // until a probe contradicts it
  record.hinted = use_hint;
  auto predicted = [&]() -> std::optional<double> {
    if (!can_predict) return std::nullopt;
    Line line = fit_line(fits);
    if (trust_hint && fits.size() < 2) {
      // The hint's slope, through the one point measured here (or as hinted before any fits).
      line.per_sample = hint->bytes_per_sample;
      line.fixed = fits.empty() ? hint->fixed_bytes
                                : fits.back().peak - line.per_sample * double(fits.back().batch);
    }
    if (!line.valid()) return std::nullopt;
    return line.batch_at(static_cast<double>(capacity_bytes));
  };

  // kScout: cheap probes that give the line. kPredict: just under the line's limit, again after
  // every fit (refitting the line). kConfirm: the line's limit itself. kUp / kDown: steps away from
  // the prediction, doubling, until the outcome flips. kBisect: halve the bracket [lo, hi] to one
  // batch.
  enum class Mode { kScout, kPredict, kConfirm, kUp, kDown, kBisect };
  Mode mode = Mode::kScout;
  int64_t step = settings.granularity;
  int64_t hinted_first = 0;
  if (use_hint && predicted() && *predicted() >= static_cast<double>(candidates.min())) {
    // Straight to just under the hinted limit; its outcome decides the direction.
    hinted_first = candidates.align_down(*predicted() * (1 - kPredictionBias));
    const bool fit = run_probe(hinted_first, "predict");
    mode = fit ? Mode::kPredict : Mode::kDown;
    trust_hint = fit;
    step = std::max(settings.granularity,
                    candidates.align_down(kBracketFraction * static_cast<double>(hinted_first)));
  } else {
    const int64_t first =
        settings.first_probe > 0
            ? candidates.align_down(static_cast<double>(settings.first_probe))
            : candidates.align_down(4.0 * static_cast<double>(settings.min_batch));
    run_probe(first, "scout");
  }

  while (true) {
    if (lo == candidates.top()) {
      record.stop_reason = fmt::format("limited by search.max_batch={}", settings.max_batch);
      break;
    }
    if (hi != 0 && candidates.next_above(lo) >= hi) {
      record.stop_reason =
          lo == 0 ? fmt::format("does not fit at search.min_batch={}", settings.min_batch)
                  : "bracket closed";
      break;
    }
    if (static_cast<int>(record.probes.size()) >= settings.max_probes) {
      record.stop_reason =
          fmt::format("probe budget spent (search.max_probes={})", settings.max_probes);
      break;
    }

    int64_t batch = 0;
    const char* phase = "bracket";
    const auto prediction = predicted();
    if (lo == 0 && mode != Mode::kDown) {
      // Nothing fits yet: back off fast towards min_batch.
      batch = candidates.align_down(static_cast<double>(hi) / 4.0);
      phase = "scout";
    } else if (mode == Mode::kScout) {
      if (prediction && fits.size() == 1 && *prediction > 4.0 * static_cast<double>(lo)) {
        // A second point halfway to the predicted limit: the slope, measured.
        batch = candidates.align_down(*prediction / 2.0);
        phase = "scout";
      } else if (prediction) {
        mode = Mode::kPredict;
        continue;
      } else {
        mode = Mode::kUp;  // no memory model: double
        step = lo;
        continue;
      }
    } else if (mode == Mode::kPredict) {
      // Each predicted probe that fits is a point near the limit: the line through it and the
      // previous one extrapolates only a little, so the next prediction is sharper.
      step = std::max(settings.granularity, candidates.align_down(kBracketFraction * *prediction));
      batch = candidates.align_down(*prediction * (1 - kPredictionBias));
      phase = "predict";
      if (batch <= lo) {
        mode = Mode::kConfirm;
        continue;
      }
    } else if (mode == Mode::kConfirm) {
      batch = candidates.align_down(*prediction);  // the line's own limit
      phase = "predict";
      if (batch <= lo) {
        // Already at the line's limit: the truth is within its error, a few tenths of a
        // percent, so step up by that much.
        mode = Mode::kUp;
        step = std::max(settings.granularity,
                        candidates.align_down(kBracketFraction * static_cast<double>(lo)));
        continue;
      }
    } else if (mode == Mode::kUp) {
      batch = candidates.align_down(static_cast<double>(lo + step));
      step *= 2;
    } else if (mode == Mode::kDown) {
      batch = candidates.align_down(static_cast<double>(hi - step));
      step *= 2;
    }
    if (mode == Mode::kBisect || batch <= lo || (hi != 0 && batch >= hi)) {
      batch = candidates.align_down(static_cast<double>(lo + (hi - lo) / 2));
      if (batch <= lo) batch = candidates.next_above(lo);
      phase = "bisect";
    }

    const bool fit = run_probe(batch, phase);
    if (std::string(phase) == "bisect" || std::string(phase) == "scout") continue;
    switch (mode) {
      case Mode::kPredict:
        if (!fit) mode = Mode::kDown;  // else predict again from the sharper line
        break;
      case Mode::kConfirm:
        mode = fit ? Mode::kUp : Mode::kBisect;
        step = settings.granularity;
        break;
      case Mode::kUp:
        if (!fit) mode = Mode::kBisect;
        break;
      case Mode::kDown:
        if (fit) {
          mode = Mode::kBisect;
        } else if (lo == 0 && static_cast<double>(step) > kHintGallop * double(hinted_first)) {
          mode = Mode::kScout;  // the hint was far off: back off fast and measure a line
        }
        break;
      default:
        break;
    }
  }

  record.max_batch = lo;
  record.largest_pow2 = largest_power_of_two_at_most(lo);
  for (const auto& p : record.probes) {
    if (p.fits && p.batch == lo) record.peak_bytes_at_max = p.peak_bytes;
  }
  const Line line = fit_line(fits);
  record.bytes_per_sample = line.per_sample;
  record.fixed_bytes = line.fixed;
  record.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return record;
}

Json SearchRecord::to_json() const {
  Json probes_json = Json::array();
  for (const auto& p : probes) {
    probes_json.push_back({{"batch", p.batch},
                           {"fits", p.fits},
                           {"peak_bytes", p.peak_bytes},
                           {"resident_bytes", p.resident_bytes},
                           {"seconds", p.seconds},
                           {"phase", p.phase},
                           {"error", p.error}});
  }
  return {{"max_batch", max_batch},
          {"largest_pow2_batch", largest_pow2},
          {"peak_bytes_at_max", peak_bytes_at_max},
          {"bytes_per_sample", bytes_per_sample},
          {"fixed_bytes", fixed_bytes},
          {"capacity_bytes", capacity_bytes},
          {"probe_count", probes.size()},
          {"stop_reason", stop_reason},
          {"hinted", hinted},
          {"seconds", seconds},
          {"probes", probes_json}};
}

SearchRecord SearchRecord::from_json(const Json& json) {
  SearchRecord r;
  r.max_batch = json.value("max_batch", int64_t{0});
  r.largest_pow2 = json.value("largest_pow2_batch", int64_t{0});
  r.peak_bytes_at_max = json.value("peak_bytes_at_max", int64_t{0});
  r.bytes_per_sample = json.value("bytes_per_sample", 0.0);
  r.fixed_bytes = json.value("fixed_bytes", 0.0);
  r.capacity_bytes = json.value("capacity_bytes", int64_t{0});
  r.stop_reason = json.value("stop_reason", std::string());
  r.hinted = json.value("hinted", false);
  r.seconds = json.value("seconds", 0.0);
  for (const auto& p : json.value("probes", Json::array())) {
    ProbeRecord probe;
    probe.batch = p.value("batch", int64_t{0});
    probe.fits = p.value("fits", false);
    probe.peak_bytes = p.value("peak_bytes", int64_t{0});
    probe.resident_bytes = p.value("resident_bytes", int64_t{0});
    probe.seconds = p.value("seconds", 0.0);
    probe.phase = p.value("phase", std::string());
    probe.error = p.value("error", std::string());
    r.probes.push_back(probe);
  }
  return r;
}

}  // namespace gpubench
