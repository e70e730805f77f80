#include "src/measure/memory_line.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpubench::memory_model {

namespace {

/// A hint's first probe aims this far below the limit it predicts (a line it came with), or
/// below its answer scaled by the capacity (cruder).
constexpr double kHintMargin = 0.01;
constexpr double kRescaledHintMargin = 0.03;
/// A hint's line is kept while its limit lies within this factor of its scaled answer (its
/// slope: kHintSlopeAgreement, batch_search.cpp).
constexpr double kHintAgreement = 1.5;

double gib(double bytes) { return bytes / double(int64_t{1} << 30); }

double median_resident(const std::vector<FitPoint>& fits) {
  std::vector<double> r;
  for (const auto& f : fits) r.push_back(f.resident);
  std::sort(r.begin(), r.end());
  return r.empty() ? 0 : r[r.size() / 2];
}

}  // namespace

Line fit_line(const std::vector<FitPoint>& fits, double slope) {
  Line line;
  if (fits.empty()) return line;
  const FitPoint& top = fits.back();
  if (slope > 0 && fits.size() == 1) {
    line.per_sample = slope;
    line.fixed = top.peak - slope * static_cast<double>(top.batch);
    return line;
  }
  if (fits.size() >= 2) {
    std::size_t k = fits.size() - 2;
    while (k > 0 && static_cast<double>(fits[k].batch) > 0.9 * static_cast<double>(top.batch)) --k;
    const FitPoint& a = fits[k];
    if (top.batch != a.batch) {
      line.per_sample = (top.peak - a.peak) / static_cast<double>(top.batch - a.batch);
      line.fixed = top.peak - line.per_sample * static_cast<double>(top.batch);
      if (line.valid()) return line;
    }
  }
  const double resident = median_resident(fits);
  line.fixed = resident;
  line.per_sample = (top.peak - resident) / static_cast<double>(top.batch);
  return line;
}

Line allocated_line(const std::vector<FitPoint>& fits, double slope) {
  std::vector<FitPoint> live;
  for (const auto& f : fits) {
    if (!(f.allocated > 0)) return Line{};
    live.push_back({f.batch, f.allocated, f.resident, f.allocated});
  }
  return fit_line(live, slope);
}

int64_t spike_exposure(const std::vector<FitPoint>& fits) {
  double highest = -1;          // the highest allocated peak of the batches below
  for (const auto& f : fits) {  // by batch, ascending
    if (f.allocated < highest) return f.batch;
    highest = std::max(highest, f.allocated);
  }
  return 0;
}

std::vector<FitPoint> lower_hull(const std::vector<FitPoint>& fits) {
  std::vector<FitPoint> hull;
  for (const auto& f : fits) {
    while (hull.size() >= 2) {
      const FitPoint& a = hull[hull.size() - 2];
      const FitPoint& b = hull.back();
      // b above the segment from a to f: not on the lower hull.
      const double above = (b.allocated - a.allocated) * static_cast<double>(f.batch - a.batch) -
                           (f.allocated - a.allocated) * static_cast<double>(b.batch - a.batch);
      if (above <= 0) break;
      hull.pop_back();
    }
    hull.push_back(f);
  }
  return hull;
}

HintPlan plan_hint(const SearchSettings& s, int64_t capacity, int64_t headroom_bytes,
                   const std::optional<SearchHint>& h) {
  HintPlan plan;
  if (!h) return plan;
  // The hint's bytes hold no ballast (SearchHint::from_searches); this search's probes hold
  // `headroom_bytes`, which leaves the hint's model that much less room.
  const double c = static_cast<double>(capacity - std::max<int64_t>(0, headroom_bytes));
  auto refuse = [&](const std::string& why) {
    plan = HintPlan{};
    plan.note = "hint refused: " + why + "; the search starts cold";
    return plan;
  };
  if (capacity <= 0) return refuse("no capacity is known to scale it to");
  if (!std::isfinite(h->bytes_per_sample) || h->bytes_per_sample < 0 ||
      (h->bytes_per_sample == 0 && h->max_batch == 0)) {
    return refuse(fmt::format("bytes_per_sample {} is not a positive number of bytes",
                              format_number(h->bytes_per_sample)));
  }
  if (!std::isfinite(h->fixed_bytes) || h->fixed_bytes < 0) {
    return refuse(
        fmt::format("fixed_bytes {} is not a non-negative number", format_number(h->fixed_bytes)));
  }
  if (h->capacity_bytes < 0 || h->max_batch < 0 || h->peak_bytes_at_max < 0 ||
      h->resident_bytes < 0) {
    return refuse("its capacity, max_batch, peak or resident bytes is negative");
  }
  // Its line's limit here (-1: it has no line, only an answer).
  const double line_limit =
      h->bytes_per_sample > 0 ? (c - h->fixed_bytes) / h->bytes_per_sample : -1.0;
  // Its own answer, scaled: what grows with the batch fills the capacity less what stays.
  double scaled = 0;
  if (h->max_batch > 0 && h->capacity_bytes > 0) {
    const double peak0 = h->peak_bytes_at_max > 0 ? static_cast<double>(h->peak_bytes_at_max)
                                                  : static_cast<double>(h->capacity_bytes);
    const double resident0 = static_cast<double>(h->resident_bytes);
    if (peak0 > resident0 && c > resident0) {
      scaled = static_cast<double>(h->max_batch) * (c - resident0) / (peak0 - resident0);
    }
  }
  const bool line_agrees =
      line_limit > 0 && (scaled <= 0 || (line_limit >= scaled / kHintAgreement &&
                                         line_limit <= scaled * kHintAgreement));
  if (line_agrees && line_limit >= static_cast<double>(s.min_batch)) {
    plan.limit = line_limit;
    plan.slope = h->bytes_per_sample;
    plan.margin = kHintMargin;
    plan.note = fmt::format("hint used: its line puts the limit near batch {} under {:.1f} GiB",
                            static_cast<int64_t>(line_limit), gib(static_cast<double>(capacity)));
  } else if (scaled >= static_cast<double>(s.min_batch)) {
    plan.limit = scaled;
    plan.margin = kRescaledHintMargin;
    const std::string line_text =
        line_limit > 0
            ? fmt::format("its line puts the limit at batch {}, far from its own answer",
                          static_cast<int64_t>(line_limit))
            : std::string("it has no usable line; its answer");
    plan.note = fmt::format(
        "hint rescaled: {} (batch {} under {:.1f} GiB) scaled to {:.1f} GiB is batch {}; the "
        "search starts from that",
        line_text, h->max_batch, gib(static_cast<double>(h->capacity_bytes)),
        gib(static_cast<double>(capacity)), static_cast<int64_t>(scaled));
  } else {
    return refuse(fmt::format(
        "it predicts that not even search.min_batch={} fits in {:.1f} GiB (its fixed memory is "
        "{:.1f} GiB)",
        s.min_batch, gib(static_cast<double>(capacity)), gib(h->fixed_bytes)));
  }
  return plan;
}

}  // namespace gpubench::memory_model
