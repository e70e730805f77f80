// The max-batch search against simulated devices: memory that grows linearly, that the H200
// measured, with noise, with a workspace that jumps when free memory allows and shrinks near
// the limit, with fragmentation near the edge, with probes that leave their worker unusable,
// and hints from 0.1x to 10x the answer. Each test checks the answer is exact (the batch fits
// and the next candidate does not, both probed) and bounds the probes it took.
#include "gpubench/measure/batch_search.h"

#include "gpubench/base/errors.h"
#include "gpubench/run/job.h"
#include "gpubench/run/worker.h"
#include "gpubench/train/workload.h"

#include <c10/util/Exception.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>

namespace gpubench {
namespace {

constexpr double kGiB = double(int64_t{1} << 30);

/// A simulated device: a probe at `batch` needs `need(batch)` bytes to fit and shows
/// `shown(batch)` as its peak (benchmark-mode cuDNN shows more than it needs: a workspace that
/// takes what is free). The resident bytes are what stays after the step.
struct Device {
  std::function<double(int64_t)> need;
  std::function<double(int64_t)> shown;  // defaults to need
  std::function<double(int64_t)> allocated;  // defaults to shown less 1000 bytes
  double capacity = 0;
  double resident = 0;
  std::map<int64_t, int> probed;  // batch -> times probed
  int probes = 0;

  ProbeOutcome operator()(int64_t batch) {
    ++probes;
    ++probed[batch];
    ProbeOutcome o;
    o.fits = need(batch) <= capacity;
    if (o.fits) {
      o.peak_bytes = static_cast<int64_t>(shown ? shown(batch) : need(batch));
      o.peak_allocated_bytes =
          allocated ? static_cast<int64_t>(allocated(batch)) : o.peak_bytes - 1000;
      o.resident_bytes = static_cast<int64_t>(resident);
    } else {
      o.error = "out of memory";
    }
    return o;
  }
  bool fits(int64_t batch) const { return need(batch) <= capacity; }
};

/// fixed + per_sample * batch; fits up to `limit` exactly.
Device linear(int64_t limit, double fixed = 2e9, double per_sample = 1e8) {
  Device d;
  d.need = [=](int64_t b) { return fixed + per_sample * static_cast<double>(b); };
  d.capacity = fixed + per_sample * static_cast<double>(limit) + 50;
  d.resident = fixed;
  return d;
}

/// 2e9 + 1e8 * batch, +-0.5% per batch like allocator rounding: fits up to about `limit`, and
/// the fitting batches need not form an interval near it.
Device noisy(int64_t limit) {
  Device d;
  d.need = [](int64_t b) {
    std::mt19937_64 rng(static_cast<uint64_t>(b));
    return (2e9 + 1e8 * static_cast<double>(b)) *
           (1 + 0.005 * std::uniform_real_distribution<double>(-1, 1)(rng));
  };
  d.capacity = 2e9 + 1e8 * static_cast<double>(limit);
  d.resident = 2e9;
  return d;
}

/// Fits up to `limit` exactly; from a third of it on, the peak shows a workspace of 3% of the
/// memory while that fits, then whatever is left near the capacity.
Device workspace_jump(int64_t limit) {
  Device d;
  const double fixed = 2e9, per = 1e8;
  const double capacity = fixed + per * static_cast<double>(limit) + 10;
  const double workspace = 0.03 * capacity;
  d.capacity = capacity;
  d.need = [=](int64_t b) { return fixed + per * static_cast<double>(b); };
  d.shown = [=](int64_t b) {
    const double base = fixed + per * static_cast<double>(b);
    if (static_cast<double>(b) < limit / 3.0) return base;
    return std::min(base + workspace, std::max(base, capacity - 1e6));
  };
  d.resident = fixed;
  return d;
}

/// linear(limit), except that limit - 2 fails (a fragmented cache) and limit + 2 fits.
Device fragmented(int64_t limit) {
  Device d = linear(limit);
  const double cap = d.capacity;
  d.need = [=](int64_t b) {
    if (b == limit - 2) return 2 * cap;  // fragmentation
    if (b == limit + 2) return 0.0;      // fits after one just below it failed
    return 2e9 + 1e8 * static_cast<double>(b);
  };
  d.shown = [](int64_t b) { return 2e9 + 1e8 * static_cast<double>(b); };
  return d;
}

SearchSettings settings(int64_t min, int64_t max, int64_t granularity, int64_t first,
                        int max_probes = 30) {
  SearchSettings s;
  s.min_batch = min;
  s.max_batch = max;
  s.granularity = granularity;
  s.first_probe = first;
  s.max_probes = max_probes;
  return s;
}

/// The answer is exact: it fits and the next candidate does not, both seen (or it is max_batch).
void expect_exact(const SearchRecord& r, const SearchSettings& s, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(r.converged) << r.stop_reason;
  bool fit_seen = false, next_failed = false;
  const int64_t next = r.max_batch < s.min_batch ? s.min_batch
                                                 : (r.max_batch / s.granularity + 1) * s.granularity;
  for (const auto& p : r.probes) {
    if (p.sticky) continue;
    if (p.batch == r.max_batch && p.fits) fit_seen = true;
    if (p.batch == next && !p.fits) next_failed = true;
  }
  if (r.stop_reason.rfind("limited by", 0) == 0) {
    EXPECT_TRUE(fit_seen);
    return;
  }
  if (r.max_batch > 0) {
    EXPECT_TRUE(fit_seen) << "batch " << r.max_batch << " never probed";
  }
  EXPECT_TRUE(next_failed) << "batch " << next << " not seen to fail";
  EXPECT_EQ(r.smallest_failure, next);
}

std::string trace(const SearchRecord& r) {
  std::string out;
  for (const auto& p : r.probes) {
    out += fmt::format("{}{}{} ", p.batch, p.sticky ? "!" : p.fits ? "+" : "x", p.phase[0]);
  }
  return out + "(" + r.stop_reason + ")";
}

TEST(BatchSearchTest, FindsAnExactLinearLimitInEightProbes) {
  Device d = linear(1312);
  const SearchSettings s = settings(1, 65536, 1, 16);
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
  EXPECT_EQ(r.max_batch, 1312);
  EXPECT_EQ(r.stop_reason, "bracket closed");
  expect_exact(r, s, "linear 1312");
  EXPECT_LE(r.probes.size(), 8u) << trace(r);
  EXPECT_EQ(r.largest_pow2, 1024);
  EXPECT_EQ(r.peak_bytes_at_max, static_cast<int64_t>(d.need(1312)));
  EXPECT_EQ(r.resident_bytes_at_max, 2'000'000'000);
  EXPECT_EQ(r.activation_peak_bytes, r.peak_allocated_bytes_at_max - r.resident_bytes_at_max);
  EXPECT_NEAR(r.bytes_per_sample, 1e8, 1);
  EXPECT_NEAR(r.fixed_bytes, 2e9, 1e3);
}

TEST(BatchSearchTest, LinearMemoryConvergesExactlyForLimitsFromOneTo30000) {
  // Two scouts, one or two predictions, an edge probe just above the line's limit, then a
  // bisection of what lies between (0.3-0.6% of the limit): within 8 probes up to 2000 batches,
  // a probe more per doubling of the limit beyond. (A real allocator runs out a little before
  // the line, which lands the edge closer: the next test, 8 at 2688.)
  for (int64_t limit : {1, 2, 3, 7, 16, 55, 100, 555, 1000, 1669, 2688, 4097, 30000}) {
    Device d = linear(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("limit {}", limit));
    const std::size_t bound = limit <= 2000 ? 8 : limit <= 3000 ? 9 : limit <= 5000 ? 10 : 12;
    EXPECT_LE(r.probes.size(), bound) << "limit " << limit << ": " << trace(r);
  }
}

TEST(BatchSearchTest, FindsTheLimitWhenTheLineOvershootsLikeTheRealAllocator) {
  // On an H200 the line through two probes predicted 1673 and 2695 where 1669 and 2688 were the
  // limits (the allocator runs out a little before the bytes do): memory that costs 0.3% more
  // near the limit than the line says.
  for (int64_t limit : {300, 1669, 2688}) {
    Device d = linear(limit);
    d.capacity = 2e9 + 1e8 * (static_cast<double>(limit) * 1.003);
    d.need = [limit, cap = d.capacity](int64_t b) { return b <= limit ? 0.0 : 2 * cap; };
    d.shown = [](int64_t b) { return 2e9 + 1e8 * static_cast<double>(b); };
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("limit {}", limit));
    EXPECT_LE(r.probes.size(), 8u) << "limit " << limit << ": " << trace(r);
  }
}

/// Linear interpolation through measured (batch, GiB) points, extrapolated from the end ones.
std::function<double(int64_t)> interpolate(std::vector<std::pair<double, double>> points) {
  return [points](int64_t b) {
    auto upper = std::lower_bound(points.begin(), points.end(), std::make_pair(double(b), 0.0));
    if (upper == points.begin()) upper = std::next(upper);
    if (upper == points.end()) upper = std::prev(upper);
    const auto lower = std::prev(upper);
    const double t = (static_cast<double>(b) - lower->first) / (upper->first - lower->first);
    return (lower->second + t * (upper->second - lower->second)) * kGiB;
  };
}

/// Peak memory interpolated from what an H200 measured (GiB against batch); out of memory
/// above `limit`.
Device measured(std::vector<std::pair<double, double>> points, int64_t limit) {
  Device d;
  d.capacity = 139.3 * kGiB;
  d.resident = 1850.0 * double(1 << 20);
  d.need = [limit, cap = d.capacity](int64_t b) { return b <= limit ? 0.0 : 2 * cap; };
  d.shown = interpolate(std::move(points));
  return d;
}

TEST(BatchSearchTest, FindsTheH200LimitsOfBertWithinEightProbes) {
  // 2026-11-30 on one H200 (docs/results): the allocator had 139.3 GiB; bert-base fp32 fitted
  // 1669 and bert-finetune fp32 609, where the line through the scouts predicted 1673 and 603.
  Device base = measured({{16, 2.84}, {975, 81.8}, {1668, 138.9}, {1669, 139.0}, {1700, 141.6}},
                         1669);
  Device finetune = measured(
      {{8, 3.5}, {307, 71.6}, {601, 137.1}, {606, 138.1}, {609, 138.8}, {640, 145.0}}, 609);
  const SearchSettings s16 = settings(1, 65536, 1, 16), s8 = settings(1, 65536, 1, 8);
  const SearchRecord a = find_max_batch(s16, static_cast<int64_t>(base.capacity), std::ref(base));
  EXPECT_EQ(a.max_batch, 1669) << trace(a);
  expect_exact(a, s16, "bert-base");
  EXPECT_LE(a.probes.size(), 8u) << trace(a);
  const SearchRecord b =
      find_max_batch(s8, static_cast<int64_t>(finetune.capacity), std::ref(finetune));
  EXPECT_EQ(b.max_batch, 609) << trace(b);
  expect_exact(b, s8, "bert-finetune");
  EXPECT_LE(b.probes.size(), 8u) << trace(b);
}

TEST(BatchSearchTest, ConvergesWhenTheReservedPeaksSitAtTheCapacityLikeNasnetOnTheH200) {
  // 2026-12-01, nasnet-large fp32 on one H200 (docs/results/2026-12-01-h200-fp32-suite-partial):
  // from batch 208 on, the reserved peaks sat at 136-139 GiB of 139.3 whatever the batch, while
  // the allocated peaks grew 0.59 GiB an image up to 224 (the largest probed; it fitted). The
  // search then walked 208, 210, 211, 215, ... 224 and spent its 10 probes without a failure.
  // The limit lies past 224; the live tensors' line puts it near 232.
  const auto allocated = interpolate({{16, 10.63}, {105, 63.6}, {208, 124.9}, {224, 134.39}});
  for (int64_t limit : {224, 227, 230, 233}) {
    Device d;
    d.capacity = 139.29 * kGiB;
    d.resident = 1.66 * kGiB;
    d.need = [limit](int64_t b) { return b <= limit ? 0.0 : 1e15; };
    d.allocated = allocated;
    d.shown = [reserved = interpolate({{16, 11.88}, {105, 69.28}, {208, 138.22}})](int64_t b) {
      return std::min(reserved(b), 138.5 * kGiB);  // pinned: cached blocks take what is free
    };
    const SearchSettings s = settings(1, 65536, 1, 16, SearchSettings{}.max_probes);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("pinned nasnet {}", limit));
    EXPECT_LE(r.probes.size(), 9u) << "limit " << limit << ": " << trace(r);
  }
}

TEST(BatchSearchTest, ConvergesThroughTheWorkspacesOfDeeplabOnTheH200) {
  // 2026-12-01, deeplabv3 fp32 on one H200 under cuDNN heuristics: the reserved peaks rose and
  // fell with the algorithms the heuristics picked (137.5 GiB at 62, 131.6 at 64, 117.4 at 72,
  // 139.0 at 87), batch 87 fitted and 89 did not (88 was not probed). Neither line is a model
  // there: the search gallops and bisects, and ends exact within the default budget of 14 (13
  // probes for a limit of 88), where the budget of 10 left it one batch short.
  const auto reserved = interpolate({{8, 14.12}, {40, 102.63}, {52, 121.7}, {62, 137.54},
                                     {64, 131.57}, {72, 117.43}, {84, 134.81}, {86, 137.79},
                                     {87, 138.99}, {88, 139.2}});
  const auto allocated = interpolate({{8, 12.78}, {40, 96.6}, {52, 114.13}, {62, 128.57},
                                      {64, 131.29}, {72, 112.38}, {84, 130.99}, {86, 134.1},
                                      {87, 135.82}, {88, 137.0}});
  for (int64_t limit : {87, 88}) {
    Device d;
    d.capacity = 139.29 * kGiB;
    d.resident = 0.8 * kGiB;
    d.need = [limit](int64_t b) { return b <= limit ? 0.0 : 1e15; };
    d.shown = reserved;
    d.allocated = allocated;
    const SearchSettings s = settings(2, 4096, 1, 8, SearchSettings{}.max_probes);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("deeplab {}: {}", limit, trace(r)));
    EXPECT_LE(r.probes.size(), 13u) << trace(r);
  }
}

/// One search of the H200's fp32 suite: its settings, the answer, the probes it took there, and
/// the peaks (GiB) of the probes that fitted.
struct MeasuredSearch {
  const char* model;
  int64_t min_batch, max_batch, granularity, first_probe, limit;
  std::size_t h200_probes;
  double resident_gib;
  std::vector<std::pair<double, double>> reserved, allocated;
};

/// The device `m` measured: its peaks interpolated between the batches it probed, out of memory
/// above its answer.
Device replay_device(const MeasuredSearch& m) {
  Device d;
  d.capacity = 139.286 * kGiB;
  d.resident = m.resident_gib * kGiB;
  const int64_t limit = m.limit;
  d.need = [limit](int64_t b) { return b <= limit ? 0.0 : 1e15; };
  const double top = d.capacity - 0.01 * kGiB;  // a fit never reserves past the capacity
  auto reserved = interpolate(m.reserved), allocated = interpolate(m.allocated);
  d.shown = [=](int64_t b) { return std::min(reserved(b), top); };
  d.allocated = [=](int64_t b) { return std::min(allocated(b), std::min(reserved(b), top)); };
  return d;
}

SearchSettings replay_settings(const MeasuredSearch& m) {
  return settings(m.min_batch, m.max_batch, m.granularity, m.first_probe,
                  SearchSettings{}.max_probes);
}

/// Replays `m` against its measured peaks, exact to its answer; `expandable` picks the memory
/// model.
SearchRecord replay(const MeasuredSearch& m, bool expandable) {
  Device d = replay_device(m);
  const SearchSettings s = replay_settings(m);
  SearchOptions options;
  options.expandable_allocator = expandable;
  SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), options);
  EXPECT_EQ(r.max_batch, m.limit) << m.model << ": " << trace(r);
  expect_exact(r, s, fmt::format("{}: {}", m.model, trace(r)));
  return r;
}

/// Replays every search of `set` (exact each time, in no more probes than the H200 took),
/// prints each one's probes beside the H200's count and the totals, and returns the records by
/// model.
std::map<std::string, SearchRecord> replay_set(const std::vector<MeasuredSearch>& set,
                                               bool expandable) {
  std::map<std::string, SearchRecord> records;
  std::size_t width = 0, total = 0, h200_total = 0;
  for (const auto& m : set) width = std::max(width, std::strlen(m.model));
  for (const auto& m : set) {
    const SearchRecord r = replay(m, expandable);
    EXPECT_LE(r.probes.size(), m.h200_probes) << m.model << ": " << trace(r);
    std::printf("  %-*s %2zu probes (H200: %2zu): %s\n", static_cast<int>(width), m.model,
                r.probes.size(), m.h200_probes, trace(r).c_str());
    total += r.probes.size();
    h200_total += m.h200_probes;
    records.emplace(m.model, r);
  }
  std::printf("  total %zu probes (H200: %zu)\n", total, h200_total);
  return records;
}

// Generated from docs/results/2026-12-01-h200-fp32-suite/journal.jsonl: per search, the
// settings, the limit, the probe count the H200 took, and the reserved and allocated peaks
// (GiB) of the probes that fitted.
const std::vector<MeasuredSearch> kH200Fp32Searches = {
    {"nasnet-large", 1, 65536, 1, 16, 228, 8, 1.68,
     {{16, 11.88}, {105, 69.28}, {208, 138.22}, {219, 137.52}, {225, 138.98}, {228, 138.81}},
     {{16, 10.63}, {105, 63.60}, {208, 124.90}, {219, 131.43}, {225, 134.96}, {228, 136.74}}},
    {"deeplabv3", 2, 4096, 1, 8, 87, 12, 0.89,
     {{8, 14.12}, {40, 102.63}, {52, 121.70}, {62, 137.54}, {64, 131.57}, {69, 139.15}, {74, 120.67}, {81, 130.19}, {85, 137.86}, {87, 138.99}},
     {{8, 12.78}, {40, 96.60}, {52, 114.13}, {62, 128.57}, {64, 131.29}, {69, 138.46}, {74, 115.47}, {81, 126.31}, {85, 132.73}, {87, 135.82}}},
    {"yolov3", 1, 4096, 1, 8, 180, 8, 1.45,
     {{8, 8.03}, {75, 60.35}, {171, 137.13}, {173, 138.56}, {177, 138.31}, {179, 138.66}, {180, 139.15}},
     {{8, 6.64}, {75, 57.76}, {171, 130.99}, {173, 132.51}, {177, 135.58}, {179, 137.09}, {180, 137.86}}},
    {"pix2pixhd", 1, 256, 1, 2, 8, 5, 3.28,
     {{2, 133.13}, {3, 134.28}, {7, 111.34}, {8, 127.15}},
     {{2, 133.04}, {3, 134.16}, {7, 103.28}, {8, 117.73}}},
    {"stylegan", 1, 4096, 4, 8, 92, 5, 1.18,
     {{8, 13.47}, {44, 67.81}, {88, 132.23}, {92, 137.13}},
     {{8, 12.31}, {44, 66.12}, {88, 123.05}, {92, 128.22}}},
    {"mask-rcnn", 1, 4096, 1, 2, 103, 11, 1.80,
     {{2, 3.82}, {43, 84.15}, {69, 115.22}, {88, 122.04}, {99, 136.90}, {101, 138.17}, {102, 138.81}, {103, 137.28}},
     {{2, 3.25}, {43, 54.32}, {69, 86.71}, {88, 111.25}, {99, 123.91}, {101, 126.41}, {102, 127.65}, {103, 128.54}}},
    {"transformer-big", 256, 1048576, 128, 4096, 114816, 11, 3.22,
     {{4096, 6.91}, {74880, 91.00}, {113536, 137.34}, {114688, 138.72}, {114816, 138.96}},
     {{4096, 6.82}, {74880, 83.01}, {113536, 126.37}, {114688, 127.72}, {114816, 127.88}}},
    {"conv-seq2seq", 256, 1048576, 128, 4096, 129280, 13, 2.46,
     {{4096, 6.37}, {71040, 77.70}, {126080, 137.06}, {127616, 138.63}, {128896, 138.51}, {129152, 138.40}, {129280, 138.74}},
     {{4096, 5.94}, {71040, 67.16}, {126080, 117.62}, {127616, 118.94}, {128896, 120.26}, {129152, 120.27}, {129280, 120.59}}},
    {"unsupmt", 100, 1048576, 100, 2000, 69300, 11, 4.70,
     {{2000, 8.72}, {33400, 78.71}, {59300, 138.54}, {66900, 135.40}, {68800, 137.38}, {69200, 138.19}, {69300, 138.39}},
     {{2000, 7.20}, {33400, 64.15}, {59300, 111.16}, {66900, 124.96}, {68800, 128.37}, {69200, 129.10}, {69300, 129.28}}},
    {"bert-base", 1, 65536, 1, 16, 1669, 11, 1.72,
     {{16, 2.93}, {906, 76.04}, {1640, 137.18}, {1659, 138.87}, {1665, 138.74}, {1668, 138.91}, {1669, 138.96}},
     {{16, 2.61}, {906, 74.27}, {1640, 133.37}, {1659, 134.83}, {1665, 135.33}, {1668, 135.58}, {1669, 135.65}}},
    {"bert-finetune", 1, 65536, 1, 8, 609, 7, 1.69,
     {{8, 3.39}, {324, 75.58}, {589, 134.32}, {608, 138.52}, {609, 138.84}},
     {{8, 3.10}, {324, 74.01}, {589, 133.47}, {608, 137.74}, {609, 138.03}}},
};

TEST(BatchSearchTest, ReplaysTheH200Fp32SuiteExactlyInNoMoreProbesThanItTook) {
  // Each search of the 2026-12-01 fp32 suite replayed against its measured peaks (interpolated
  // between the batches it probed; out of memory above its answer): exact every time, and in no
  // more probes than the H200 search took with the rules of that day. bert-base shows the open
  // question: its second prediction is pinned at the capacity, and the allocated line, 2.6% above
  // the reserved one there, puts the limit near 1715 where 1669 is: the edge probe overshoots and
  // a bisection of 5 follows (11 probes, where the 8 of the target need the reserved line's
  // edge). A rule that tells nasnet-large's case (reserved line wrong) from this one (right) is
  // open: docs/search.md, "What the H200 measured".
  replay_set(kH200Fp32Searches, false);
}

// Generated from docs/results/2026-12-01-h200-bf16-suite-partial/journal.jsonl and
// docs/results/2026-12-01-h200-expandable-segments/*.jsonl: searches with expandable segments,
// where the allocated peak at the limit sat 0.2-0.6% below the capacity and the reserved peaks in
// mid-range ran 5-12 GiB above the allocated ones (cached blocks, given back near the limit).
const std::vector<MeasuredSearch> kH200ExpandableSearches = {
    {"nasnet-large amp-bf16", 1, 65536, 1, 16, 456, 7, 1.94,
     {{16, 6.16}, {232, 71.65}, {444, 135.89}, {453, 138.68}, {455, 138.83}, {456, 138.99}},
     {{16, 6.05}, {232, 71.08}, {444, 134.91}, {453, 137.62}, {455, 138.22}, {456, 138.52}}},
    {"deeplabv3 amp-bf16", 2, 4096, 1, 8, 170, 8, 1.26,
     {{8, 7.04}, {84, 70.06}, {163, 135.51}, {166, 138.01}, {170, 138.68}},
     {{8, 6.88}, {84, 68.65}, {163, 132.85}, {166, 135.28}, {170, 138.53}}},
    {"yolov3 amp-bf16", 1, 4096, 1, 8, 349, 9, 2.08,
     {{8, 3.82}, {179, 72.80}, {336, 138.40}, {348, 138.66}, {349, 139.09}},
     {{8, 3.75}, {179, 71.56}, {336, 133.81}, {348, 138.57}, {349, 138.96}}},
    {"pix2pixhd amp-bf16", 1, 256, 1, 2, 14, 5, 3.51,
     {{2, 21.84}, {7, 70.09}, {13, 127.84}, {14, 137.43}},
     {{2, 21.72}, {7, 69.61}, {13, 127.07}, {14, 136.65}}},
    {"stylegan amp-bf16", 1, 4096, 4, 8, 212, 7, 1.49,
     {{8, 6.45}, {100, 70.11}, {192, 130.01}, {204, 137.59}, {208, 138.26}, {212, 138.86}},
     {{8, 6.18}, {100, 66.88}, {192, 124.59}, {204, 132.32}, {208, 134.90}, {212, 137.48}}},
    {"mask-rcnn amp-bf16", 1, 4096, 1, 2, 184, 8, 2.49,
     {{2, 2.17}, {87, 74.27}, {160, 135.85}, {163, 138.39}, {184, 138.74}},
     {{2, 2.01}, {87, 65.76}, {160, 120.51}, {163, 122.75}, {184, 138.50}}},
    {"transformer-big amp-bf16", 256, 1048576, 128, 4096, 167552, 11, 3.22,
     {{4096, 6.44}, {85888, 78.42}, {151808, 138.05}, {167296, 138.74}, {167424, 138.89}, {167552, 139.01}},
     {{4096, 6.05}, {85888, 71.56}, {151808, 125.99}, {167296, 138.58}, {167424, 138.71}, {167552, 138.83}}},
    {"conv-seq2seq amp-bf16", 256, 1048576, 128, 4096, 191488, 13, 2.44,
     {{4096, 5.30}, {96640, 79.75}, {167168, 135.32}, {171392, 135.65}, {175488, 138.86}, {183680, 136.63}, {187776, 136.33}, {189824, 137.84}, {190848, 138.68}, {191360, 138.93}, {191488, 138.83}},
     {{4096, 4.80}, {96640, 70.82}, {167168, 120.26}, {171392, 124.31}, {175488, 127.14}, {183680, 133.05}, {187776, 135.88}, {189824, 137.43}, {190848, 138.20}, {191360, 138.46}, {191488, 138.46}}},
    {"mask-rcnn fp32", 1, 4096, 1, 2, 111, 8, 1.84,
     {{2, 3.42}, {48, 65.09}, {100, 130.27}, {106, 138.08}, {110, 138.04}, {111, 138.90}},
     {{2, 3.24}, {48, 60.54}, {100, 125.32}, {106, 132.79}, {110, 137.77}, {111, 138.48}}},
    {"transformer-big fp32", 256, 1048576, 128, 4096, 125312, 10, 3.21,
     {{4096, 6.91}, {75008, 84.54}, {122624, 138.45}, {124800, 138.61}, {125312, 138.96}},
     {{4096, 6.78}, {75008, 83.00}, {122624, 136.34}, {124800, 138.50}, {125312, 138.83}}},
    {"yolov3 amp-fp16", 1, 4096, 1, 8, 349, 9, 1.85,
     {{8, 3.59}, {179, 72.59}, {336, 135.97}, {342, 138.39}, {349, 138.86}},
     {{8, 3.52}, {179, 71.32}, {336, 133.58}, {342, 135.96}, {349, 138.73}}},
};

TEST(BatchSearchTest, WithExpandableSegmentsTheAllocatedLineFindsEachH200LimitInEightProbes) {
  // The same searches under the reserved line (the rules the H200 ran) take what they took there
  // (5-13 probes; the replay differs from the H200 by one probe in all, where the interpolated
  // peaks differ from the measured ones); under the allocated line every one is exact in at most
  // 8, 69 in all against 94.
  std::size_t live_total = 0, reserved_total = 0, h200_total = 0;
  for (const auto& m : kH200ExpandableSearches) {
    const SearchRecord live = replay(m, true);
    const SearchRecord reserved = replay(m, false);
    EXPECT_EQ(live.memory_line, "allocated");
    EXPECT_EQ(reserved.memory_line, "reserved");
    EXPECT_LE(live.probes.size(), 8u) << m.model << ": " << trace(live);
    EXPECT_LE(live.probes.size(), reserved.probes.size()) << m.model << ": " << trace(live);
    std::printf("  %-24s allocated %2zu, reserved %2zu (H200: %2zu): %s\n", m.model,
                live.probes.size(), reserved.probes.size(), m.h200_probes, trace(live).c_str());
    live_total += live.probes.size();
    reserved_total += reserved.probes.size();
    h200_total += m.h200_probes;
  }
  std::printf("  total: allocated %zu, reserved %zu (H200: %zu)\n", live_total, reserved_total,
              h200_total);
}

// Generated from docs/results/2026-12-01-h200-allocated-line/*.jsonl: the searches the H200 ran
// with the allocated line (expandable segments), their probe counts there.
const std::vector<MeasuredSearch> kH200AllocatedLineSearches = {
    {"bert-base-amp-bf16", 1, 65536, 1, 16, 2767, 10, 1.71,
     {{16, 2.45}, {1864, 97.94}, {2720, 136.69}, {2754, 138.38}, {2765, 138.97}, {2766, 138.95}, {2767, 139.03}},
     {{16, 2.29}, {1864, 94.02}, {2720, 136.51}, {2754, 138.20}, {2765, 138.75}, {2766, 138.80}, {2767, 138.84}}},
    {"bert-finetune-amp-bf16", 1, 65536, 1, 8, 1047, 8, 1.69,
     {{8, 2.58}, {666, 89.10}, {1027, 136.58}, {1041, 138.71}, {1046, 138.84}, {1047, 139.00}},
     {{8, 2.51}, {666, 88.89}, {1027, 136.29}, {1041, 138.13}, {1046, 138.78}, {1047, 138.91}}},
    {"conv-seq2seq-amp-bf16", 256, 1048576, 128, 4096, 191488, 8, 2.44,
     {{4096, 5.30}, {116736, 96.41}, {187776, 136.33}, {190976, 138.60}, {191360, 138.93}, {191488, 138.83}},
     {{4096, 4.80}, {116736, 85.34}, {187776, 135.88}, {190976, 138.20}, {191360, 138.46}, {191488, 138.46}}},
    {"deeplabv3-amp-bf16-deeplab-nchw", 2, 4096, 1, 8, 170, 6, 1.27,
     {{8, 7.04}, {86, 71.70}, {166, 138.05}, {169, 137.82}, {170, 138.64}},
     {{8, 6.88}, {86, 70.27}, {166, 135.28}, {169, 137.72}, {170, 138.53}}},
    {"mask-rcnn-amp-fp16", 1, 4096, 1, 2, 184, 6, 2.73,
     {{2, 2.15}, {97, 82.49}, {180, 135.58}, {183, 137.87}, {184, 138.62}},
     {{2, 1.85}, {97, 73.09}, {180, 135.34}, {183, 137.59}, {184, 138.34}}},
    {"mt-dnn-amp-bf16", 1, 65536, 1, 8, 433, 7, 5.27,
     {{8, 8.08}, {210, 70.01}, {423, 136.30}, {430, 138.37}, {433, 138.94}},
     {{8, 7.81}, {210, 69.85}, {423, 135.75}, {430, 138.04}, {433, 138.91}}},
    {"nasnet-large-amp-bf16-nasnet-nchw", 1, 65536, 1, 16, 456, 7, 1.94,
     {{16, 6.16}, {236, 72.74}, {446, 136.57}, {454, 138.84}, {455, 138.74}, {456, 138.95}},
     {{16, 6.05}, {236, 72.29}, {446, 135.51}, {454, 137.92}, {455, 138.22}, {456, 138.52}}},
    {"nasnet-large-fp32-nasnet-nchw", 1, 65536, 1, 16, 231, 6, 1.66,
     {{16, 10.85}, {119, 72.57}, {226, 136.61}, {230, 138.88}, {231, 139.03}},
     {{16, 10.59}, {119, 71.85}, {226, 135.48}, {230, 137.86}, {231, 138.46}}},
    {"transformer-big-amp-bf16", 256, 1048576, 128, 4096, 167552, 12, 3.22,
     {{4096, 6.44}, {97024, 86.04}, {133632, 121.90}, {151936, 138.19}, {161152, 133.83}, {165760, 137.53}, {166912, 138.46}, {167424, 138.89}, {167552, 139.01}},
     {{4096, 6.05}, {97024, 78.59}, {133632, 111.30}, {151936, 126.12}, {161152, 133.65}, {165760, 137.35}, {166912, 138.34}, {167424, 138.71}, {167552, 138.83}}},
    {"yolov3-amp-fp16", 1, 4096, 1, 8, 349, 6, 1.87,
     {{8, 3.59}, {182, 73.80}, {341, 137.98}, {347, 138.86}, {349, 138.86}},
     {{8, 3.52}, {182, 72.51}, {341, 135.56}, {347, 137.94}, {349, 138.73}}},
};

TEST(BatchSearchTest, ReplaysTheH200SearchesOfTheAllocatedLineInNoMoreProbesThanTheyTook) {
  // transformer-big's scouts at 4096 and 97024 tokens gave 0.78 GB per thousand tokens where
  // 0.85 held from there to the limit (curvature: longer sentences at larger token batches), so
  // the first prediction, 1.7% under the line, failed 1.7% above the limit and a bisection of
  // nine followed (12 probes). With one more prediction 2% under a failed one it takes 8. The
  // others took 6-10 there.
  replay_set(kH200AllocatedLineSearches, true);
}

// Generated from docs/results/2026-12-02-h200-fp32-suite/journal.jsonl: the fp32 suite's
// searches with one-step probes and the allocated line, their probe counts on the H200.
const std::vector<MeasuredSearch> kH200OneStepFp32Searches = {
    {"nasnet-large-fp32", 1, 65536, 1, 16, 231, 6, 1.67,
     {{16, 10.81}, {119, 72.51}, {226, 136.61}, {230, 138.86}, {231, 139.04}},
     {{16, 10.59}, {119, 71.85}, {226, 135.48}, {230, 137.86}, {231, 138.46}}},
    {"deeplabv3-fp32", 2, 4096, 1, 8, 89, 14, 0.90,
     {{8, 12.91}, {45, 105.35}, {58, 124.65}, {68, 137.24}, {70, 110.48}, {71, 112.07}, {73, 115.21}, {77, 121.52}, {85, 134.06}, {89, 138.82}},
     {{8, 12.75}, {45, 103.81}, {58, 122.65}, {68, 137.14}, {70, 109.19}, {71, 110.74}, {73, 113.85}, {77, 120.08}, {85, 132.52}, {89, 138.74}}},
    {"yolov3-fp32", 1, 4096, 1, 8, 181, 6, 1.44,
     {{8, 6.60}, {94, 73.57}, {177, 138.12}, {180, 139.15}, {181, 138.68}},
     {{8, 6.57}, {94, 72.20}, {177, 135.54}, {180, 137.83}, {181, 138.60}}},
    {"pix2pixhd-fp32", 1, 256, 1, 2, 9, 7, 3.32,
     {{2, 135.26}, {3, 136.76}, {4, 138.28}, {6, 139.12}, {8, 124.01}, {9, 134.73}},
     {{2, 135.24}, {3, 136.75}, {4, 138.26}, {6, 139.10}, {8, 117.71}, {9, 132.15}}},
    {"stylegan-fp32", 1, 4096, 4, 8, 104, 6, 1.20,
     {{8, 12.39}, {48, 71.41}, {88, 123.13}, {96, 133.64}, {104, 136.65}},
     {{8, 12.29}, {48, 71.28}, {88, 123.03}, {96, 133.39}, {104, 136.59}}},
    {"mask-rcnn-fp32", 1, 4096, 1, 2, 111, 6, 1.90,
     {{2, 3.38}, {52, 69.80}, {108, 138.04}, {110, 138.00}, {111, 138.74}},
     {{2, 3.24}, {52, 65.52}, {108, 135.28}, {110, 137.77}, {111, 138.48}}},
    {"transformer-big-fp32", 256, 1048576, 128, 4096, 125312, 7, 3.21,
     {{4096, 6.83}, {77952, 87.51}, {124288, 137.94}, {125184, 138.78}, {125312, 138.94}},
     {{4096, 6.75}, {77952, 86.27}, {124288, 137.84}, {125184, 138.67}, {125312, 138.83}}},
    {"conv-seq2seq-fp32", 256, 1048576, 128, 4096, 149376, 8, 2.43,
     {{4096, 5.99}, {80512, 77.27}, {146176, 136.24}, {148480, 138.19}, {149248, 138.90}, {149376, 138.90}},
     {{4096, 5.87}, {80512, 75.71}, {146176, 136.06}, {148480, 138.04}, {149248, 138.70}, {149376, 138.70}}},
    {"unsupmt-fp32", 100, 1048576, 100, 2000, 74600, 7, 4.69,
     {{2000, 7.22}, {53500, 100.89}, {73400, 137.06}, {74200, 138.54}, {74600, 138.99}},
     {{2000, 7.19}, {53500, 100.62}, {73400, 136.70}, {74200, 138.17}, {74600, 138.93}}},
    {"bert-base-fp32", 1, 65536, 1, 16, 1711, 9, 1.71,
     {{16, 2.71}, {1227, 100.72}, {1683, 137.66}, {1701, 138.27}, {1708, 138.85}, {1710, 138.99}, {1711, 139.05}},
     {{16, 2.60}, {1227, 100.05}, {1683, 136.75}, {1701, 138.20}, {1708, 138.76}, {1710, 138.93}, {1711, 139.01}}},
    {"bert-finetune-fp32", 1, 65536, 1, 8, 613, 7, 1.69,
     {{8, 3.15}, {392, 89.41}, {601, 136.38}, {610, 138.41}, {613, 138.91}},
     {{8, 3.08}, {392, 89.25}, {601, 136.15}, {610, 138.17}, {613, 138.85}}},
    {"mt-dnn-fp32", 1, 65536, 1, 8, 254, 6, 5.50,
     {{8, 8.59}, {178, 98.74}, {249, 136.48}, {252, 138.07}, {254, 139.04}},
     {{8, 8.48}, {178, 98.63}, {249, 136.31}, {252, 137.88}, {254, 139.00}}},
};

TEST(BatchSearchTest, ALineDrawnUnderTheWorkspaceSpikesFindsDeeplabFp32InNineProbes) {
  // deeplabv3 in strict fp32 took 14 probes on the H200: the fits at 45, 58 and 68 held
  // large-workspace algorithms (68: 137.1 GiB allocated, 70: 109.2), the line through them put
  // the limit at 68, and edge probes galloped from 70 to 101 and bisected back to 89. Drawn
  // through the lower hull of the fits once 70 exposes the spike, the line predicts the limit
  // again: 87 and 88 fit, 89 fits, 90 does not (9 probes; issue 10's target is 8). The rest of
  // the suite takes no more probes than it took there.
  const auto records = replay_set(kH200OneStepFp32Searches, true);
  EXPECT_LE(records.at("deeplabv3-fp32").probes.size(), 9u)
      << trace(records.at("deeplabv3-fp32"));
}

// Generated from docs/results/2026-12-04-h200-fp32-suite-host-bound/fp32/journal.jsonl: the fp32
// suite in the tree of 2026-12-04 (one-step probes, the allocated line drawn under workspace
// spikes, a ballast of 0.25% of the capacity in every probe, its peaks included), with the probe
// counts the H200 took. The resident memory is the first probe's, the one the scout sized its
// step by: mask-rcnn's grew from 0.93 GiB at batch 2 to 2.75 GiB at 120, and with the largest the
// replay scouted from 2 to 206 where the H200 went to 55; the others' moved by 0.7 GiB at most.
// With the first, every replayed scout lands where the H200's did or within 0.5% of it.
const std::vector<MeasuredSearch> kH200BallastFp32Searches = {
    {"nasnet-large-fp32", 1, 65536, 1, 16, 230, 6, 1.76,
     {{16, 11.14}, {119, 72.86}, {225, 136.20}, {229, 138.76}, {230, 139.05}},
     {{16, 10.94}, {119, 72.20}, {225, 135.24}, {229, 137.62}, {230, 138.21}}},
    {"deeplabv3-fp32", 2, 4096, 1, 8, 89, 10, 0.85,
     {{8, 13.26}, {45, 105.70}, {58, 124.98}, {68, 137.60}, {69, 139.04}, {70, 110.84}, {87, 137.55}, {88, 139.14}, {89, 139.16}},
     {{8, 13.10}, {45, 104.16}, {58, 123.00}, {68, 137.49}, {69, 138.94}, {70, 109.54}, {87, 135.98}, {88, 137.53}, {89, 139.09}}},
    {"yolov3-fp32", 1, 4096, 1, 8, 181, 7, 1.07,
     {{8, 6.95}, {94, 73.92}, {176, 137.69}, {179, 138.72}, {180, 138.27}, {181, 139.03}},
     {{8, 6.92}, {94, 72.55}, {176, 135.13}, {179, 137.42}, {180, 138.18}, {181, 138.95}}},
    {"pix2pixhd-fp32", 1, 256, 1, 2, 9, 6, 3.34,
     {{2, 135.61}, {3, 137.11}, {4, 138.62}, {6, 93.91}, {9, 135.08}},
     {{2, 135.59}, {3, 137.10}, {4, 138.61}, {6, 89.17}, {9, 132.49}}},
    {"stylegan-fp32", 1, 4096, 4, 8, 104, 7, 1.27,
     {{8, 12.74}, {48, 71.76}, {88, 123.48}, {96, 133.99}, {100, 138.99}, {104, 137.02}},
     {{8, 12.64}, {48, 71.63}, {88, 123.38}, {96, 133.73}, {100, 138.91}, {104, 136.93}}},
    {"mask-rcnn-fp32", 1, 4096, 1, 2, 153, 11, 0.93,
     {{2, 3.83}, {55, 68.24}, {120, 129.17}, {129, 134.38}, {133, 136.01}, {135, 137.06}, {138, 138.82}, {140, 134.95}, {152, 137.90}, {153, 138.78}},
     {{2, 3.41}, {55, 62.64}, {120, 128.61}, {129, 133.35}, {133, 135.46}, {135, 136.51}, {138, 138.09}, {140, 126.87}, {152, 137.66}, {153, 138.56}}},
    {"transformer-big-fp32", 256, 1048576, 128, 4096, 122112, 6, 3.54,
     {{4096, 7.51}, {74752, 86.21}, {121856, 138.66}, {122112, 139.00}},
     {{4096, 7.24}, {74752, 84.58}, {121856, 138.12}, {122112, 138.46}}},
    {"conv-seq2seq-fp32", 256, 1048576, 128, 4096, 148992, 8, 2.75,
     {{4096, 6.34}, {80384, 77.70}, {145536, 138.86}, {148096, 138.27}, {148864, 138.90}, {148992, 138.90}},
     {{4096, 6.22}, {80384, 76.06}, {145536, 135.75}, {148096, 138.06}, {148864, 138.72}, {148992, 138.72}}},
    {"unsupmt-fp32", 100, 1048576, 100, 2000, 72000, 7, 5.03,
     {{2000, 7.81}, {51200, 103.47}, {71000, 137.01}, {71800, 138.54}, {72000, 138.87}},
     {{2000, 7.64}, {51200, 99.58}, {71000, 136.60}, {71800, 138.09}, {72000, 138.44}}},
    {"bert-base-fp32", 1, 65536, 1, 16, 1370, 9, 2.05,
     {{16, 3.39}, {900, 93.29}, {1345, 138.59}, {1363, 138.30}, {1369, 138.88}, {1370, 138.98}},
     {{16, 3.27}, {900, 91.82}, {1345, 136.40}, {1363, 138.21}, {1369, 138.81}, {1370, 138.91}}},
    {"bert-finetune-fp32", 1, 65536, 1, 8, 340, 6, 2.03,
     {{8, 4.95}, {192, 79.71}, {332, 136.65}, {338, 138.35}, {340, 138.88}},
     {{8, 4.87}, {192, 79.11}, {332, 135.61}, {338, 138.03}, {340, 138.84}}},
    {"mt-dnn-fp32", 1, 65536, 1, 8, 147, 6, 5.84,
     {{8, 11.98}, {88, 84.75}, {145, 136.66}, {147, 138.30}},
     {{8, 11.84}, {88, 84.34}, {145, 136.01}, {147, 137.78}}},
};

TEST(BatchSearchTest, ReplaysTheH200Fp32SuiteOfDecember4InNoMoreProbesThanItTook) {
  // Exact every time, and in no more probes than the H200 took. Three searches took more than
  // issue 10's eight there: mask-rcnn 11 (its allocated peaks grew by 1.0 GiB a batch up to 120
  // and by 0.53 above, so each prediction through the long lever from 55 fitted a few batches
  // short of the limit: 120, 129, 133, 135, 138; then 140's peak fell by 11 GiB), deeplabv3 10
  // (a workspace spike at 68-69, exposed by 70) and bert-base 9 (its first edge step, 0.5% of
  // 1369, overshot a limit one batch above). Replayed they take 10, 10 and 9, mask-rcnn one
  // fewer because the interpolated peaks bend less than the H200's. A secant through the two
  // largest fits, after a prediction that fitted well under its line, was tried for mask-rcnn
  // and saved no probe in this replay (10 again), so the rule was not kept. With the aimed
  // probes (Search::aim) bert-base takes 8: 1369 fits past the line, 1370 fits where the line
  // reaches 0.2% under the capacity, 1373 (the line's crossing of the capacity) and 1371 fail.
  const auto records = replay_set(kH200BallastFp32Searches, true);
  EXPECT_LE(records.at("bert-base-fp32").probes.size(), 8u) << trace(records.at("bert-base-fp32"));
}

// Generated from docs/results/2026-12-04-h200-bf16-suite-tiers-repeats/bf16/journal.jsonl: the
// amp-bf16 suite in the same tree as the fp32 one above (one-step probes, the ballast in every
// probe's peaks), resident memory from each search's first probe, with the probe counts the H200
// took (84 in all; mask-rcnn 10, bert-base 9).
const std::vector<MeasuredSearch> kH200BallastBf16Searches = {
    {"nasnet-large-amp-bf16", 1, 65536, 1, 16, 455, 7, 1.76,
     {{16, 6.51}, {236, 73.04}, {445, 136.36}, {453, 138.93}, {454, 139.01}, {455, 138.91}},
     {{16, 6.40}, {236, 72.63}, {445, 135.56}, {453, 137.97}, {454, 138.27}, {455, 138.57}}},
    {"deeplabv3-amp-bf16", 2, 4096, 1, 8, 170, 6, 0.85,
     {{8, 7.37}, {86, 72.04}, {165, 137.52}, {169, 138.17}, {170, 138.99}},
     {{8, 7.23}, {86, 70.62}, {165, 134.82}, {169, 138.07}, {170, 138.88}}},
    {"yolov3-amp-bf16", 1, 4096, 1, 8, 348, 6, 1.07,
     {{8, 4.17}, {182, 74.38}, {339, 137.76}, {346, 139.03}, {348, 139.01}},
     {{8, 4.10}, {182, 73.09}, {339, 135.35}, {346, 138.12}, {348, 138.92}}},
    {"pix2pixhd-amp-bf16", 1, 256, 1, 2, 14, 5, 3.34,
     {{2, 22.16}, {7, 70.37}, {13, 128.18}, {14, 137.71}},
     {{2, 22.07}, {7, 69.96}, {13, 127.42}, {14, 137.00}}},
    {"stylegan-amp-bf16", 1, 4096, 4, 8, 212, 5, 1.27,
     {{8, 6.79}, {104, 73.13}, {200, 135.66}, {212, 138.37}},
     {{8, 6.43}, {104, 69.77}, {200, 130.07}, {212, 137.80}}},
    {"mask-rcnn-amp-bf16", 1, 4096, 1, 2, 290, 10, 0.93,
     {{2, 2.19}, {123, 70.16}, {249, 129.97}, {271, 137.72}, {272, 138.21}, {274, 134.21}, {288, 137.88}, {289, 138.37}, {290, 138.84}},
     {{2, 2.05}, {123, 67.18}, {249, 127.18}, {271, 137.64}, {272, 138.12}, {274, 131.12}, {288, 137.78}, {289, 138.26}, {290, 138.73}}},
    {"transformer-big-amp-bf16", 256, 1048576, 128, 4096, 154880, 8, 3.54,
     {{4096, 7.06}, {90624, 91.38}, {151296, 136.16}, {154624, 139.05}, {154752, 139.01}, {154880, 139.01}},
     {{4096, 6.59}, {90624, 82.67}, {151296, 135.26}, {154624, 137.99}, {154752, 137.99}, {154880, 137.99}}},
    {"conv-seq2seq-amp-bf16", 256, 1048576, 128, 4096, 191104, 8, 2.75,
     {{4096, 5.60}, {118016, 97.54}, {187520, 136.26}, {190592, 138.62}, {190848, 138.89}, {190976, 138.89}, {191104, 138.89}},
     {{4096, 5.11}, {118016, 86.51}, {187520, 135.98}, {190592, 138.29}, {190848, 138.55}, {190976, 138.55}, {191104, 138.55}}},
    {"unsupmt-amp-bf16", 100, 1048576, 100, 2000, 95300, 7, 5.03,
     {{2000, 7.78}, {62600, 102.91}, {93800, 136.79}, {95000, 138.58}, {95200, 138.86}, {95300, 139.04}},
     {{2000, 7.17}, {62600, 92.50}, {93800, 136.46}, {95000, 138.17}, {95200, 138.44}, {95300, 138.60}}},
    {"bert-base-amp-bf16", 1, 65536, 1, 16, 2109, 9, 2.05,
     {{16, 2.96}, {1312, 90.60}, {2069, 136.94}, {2099, 138.91}, {2108, 138.89}, {2109, 138.99}},
     {{16, 2.89}, {1312, 87.06}, {2069, 136.23}, {2099, 138.18}, {2108, 138.76}, {2109, 138.82}}},
    {"bert-finetune-amp-bf16", 1, 65536, 1, 8, 502, 7, 2.03,
     {{8, 4.07}, {281, 81.34}, {490, 137.64}, {499, 138.87}, {501, 139.03}, {502, 139.06}},
     {{8, 3.98}, {281, 78.59}, {490, 135.72}, {499, 138.18}, {501, 138.73}, {502, 139.00}}},
    {"mt-dnn-amp-bf16", 1, 65536, 1, 8, 222, 6, 5.84,
     {{8, 10.11}, {128, 83.54}, {217, 137.36}, {220, 138.24}, {222, 139.04}},
     {{8, 9.98}, {128, 82.34}, {217, 135.96}, {220, 137.70}, {222, 138.89}}},
};

TEST(BatchSearchTest, ReplaysTheH200Bf16SuiteOfDecember4InNoMoreProbesThanItTook) {
  // Exact every time, and in no more probes than the H200 took. Two searches took more than
  // issue 10's eight there: mask-rcnn 10 (its peaks drop by 4 GiB from 272 to 274, so the
  // search drew its line under the fits and predicted again up to 290) and bert-base 9 (its edge
  // step from 2108 overshot a limit one batch above, then three bisection probes). A first edge
  // step of 0.25% of the largest fit in place of kLiveEdgeStep's 0.5% takes bert-base to 8 here
  // and in the fp32 replay above (11 probes fewer over the five H200 sets), but one probe past
  // the bounds of three simulated devices whose lines miss by more (limits 2688, 20000 and
  // 30000), so it was not kept. The aimed probes (Search::aim) take bert-base to 8 without
  // that cost: 2108 fits past the line, 2111 (where the line reaches 0.2% under the capacity)
  // fails, and the bisection closes on 2109 in two.
  const auto records = replay_set(kH200BallastBf16Searches, true);
  EXPECT_LE(records.at("bert-base-amp-bf16").probes.size(), 8u)
      << trace(records.at("bert-base-amp-bf16"));
}

TEST(BatchSearchTest, TheAllocatedLineFindsALimitThatLiesUnderTheCapacityInFewProbes) {
  // Linear allocated memory on an expandable allocator that runs out `gap` under the capacity
  // (0.14-0.93% on the H200 on 2026-12-04, the ballast included): exact at every gap, and where
  // the allocator runs out between the line's aim (kLiveHeadroom, 0.4%) and the capacity, the
  // aimed probes close in within 8 probes at BERT's limits, where a gallop of 0.5% steps took 9
  // or 10 (gaps 0 and 0.25%, limits 1370 and 2109).
  SearchOptions live;
  live.expandable_allocator = true;
  for (const double gap : {0.0, 0.001, 0.0025, 0.004, 0.006, 0.009}) {
    for (const int64_t limit : {50, 300, 1370, 2109, 20000}) {
      Device d = linear(limit);
      d.capacity = (2e9 + 1e8 * static_cast<double>(limit) + 50) / (1 - gap);
      d.shown = d.need;  // the peaks follow the line; the allocator gives out above `limit`
      d.need = [limit, cap = d.capacity](int64_t b) { return b <= limit ? 0.0 : 2 * cap; };
      const SearchSettings s = settings(1, 65536, 1, 16);
      const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
      const std::string what = fmt::format("gap {} limit {}: {}", gap, limit, trace(r));
      EXPECT_EQ(r.max_batch, limit) << what;
      expect_exact(r, s, what);
      EXPECT_LE(r.probes.size(), limit <= 2200 ? 10u : 13u) << what;
      if ((gap == 0.0 || gap == 0.0025) && (limit == 1370 || limit == 2109)) {
        EXPECT_LE(r.probes.size(), 8u) << what;
      }
    }
  }
}

TEST(BatchSearchTest, WorkspaceSpikesUnderAnExpandableAllocatorCostProbesButNotTheAnswer) {
  // Linear memory; every third batch from a fifth of the limit up holds a workspace of 25%
  // of the capacity (while it fits), as cuDNN's heuristics do at some shapes in strict fp32.
  for (const int64_t limit : {40, 89, 231, 1711, 20000}) {
    Device d = linear(limit);
    const double cap = d.capacity;
    d.shown = [=](int64_t b) {
      const double base = 2e9 + 1e8 * static_cast<double>(b);
      const bool spiked = b % 3 == 0 && static_cast<double>(b) > limit / 5.0;
      return spiked ? std::min(base + 0.25 * cap, cap - 1e6) : base;
    };
    d.allocated = [=](int64_t b) { return d.shown(b) - 1000; };
    const SearchSettings s = settings(1, 65536, 1, 8);
    SearchOptions options;
    options.expandable_allocator = true;
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(cap), std::ref(d), options);
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, trace(r));
    EXPECT_LE(r.probes.size(), 14u) << trace(r);
  }
}

TEST(BatchSearchTest, TheAllocatedLineStaysExactOnEverySimulatedDevice) {
  // The allocated line aims 0.4% under the capacity, where the H200's allocator ran out. A device
  // that fits up to the last byte (these simulations) costs it one to three edge probes more
  // than the reserved line, never the answer: linear memory from 1 to 30000, noise, a workspace
  // that jumps near the limit, fragmentation at the edge.
  SearchOptions live;
  live.expandable_allocator = true;
  std::size_t worst = 0;
  for (int64_t limit : {1, 2, 7, 50, 300, 1312, 2688, 30000}) {
    Device d = linear(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("live linear {}: {}", limit, trace(r)));
    EXPECT_EQ(r.memory_line, "allocated");
    EXPECT_LE(r.probes.size(), limit <= 3000 ? 10u : 13u) << trace(r);
    worst = std::max(worst, r.probes.size());
  }
  for (int64_t limit : {50, 300, 1312, 2688}) {
    Device d = noisy(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
    expect_exact(r, s, fmt::format("live noisy {}: {}", limit, trace(r)));
    EXPECT_TRUE(d.fits(r.max_batch));
    EXPECT_FALSE(d.fits(r.max_batch + 1));
    EXPECT_LE(r.probes.size(), 12u) << trace(r);
    worst = std::max(worst, r.probes.size());
  }
  for (int64_t limit : {100, 555, 1312}) {
    Device d = workspace_jump(limit);
    d.allocated = d.shown;
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("live workspace jump {}: {}", limit, trace(r)));
    // 16 at 1312: the line's crossing of the capacity fits with its peak pinned there, and the
    // limit lies 40 batches (3%) above it, where the shrinking workspace made room. The two
    // aimed probes (Search::aim) cost one probe more here than the gallop alone; on every H200
    // replay they cost none and save one to three.
    EXPECT_LE(r.probes.size(), 16u) << trace(r);
    worst = std::max(worst, r.probes.size());
  }
  for (int64_t limit : {55, 300, 1312, 2688}) {
    Device d = fragmented(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
    expect_exact(r, s, fmt::format("live fragmented {}: {}", limit, trace(r)));
    EXPECT_GE(r.max_batch, limit - 3);
    EXPECT_LE(r.max_batch, limit + 2);
    EXPECT_LE(r.probes.size(), 12u) << trace(r);
    worst = std::max(worst, r.probes.size());
  }
  std::printf("  at most %zu probes\n", worst);
}

TEST(BatchSearchTest, StaysExactWhenMemoryIsNoisy) {
  // +-0.5% per batch, like allocator rounding: the fitting batches need not form an interval
  // near the limit; the answer still fits and its successor does not, both seen.
  for (int64_t limit : {50, 300, 1312, 2688}) {
    Device d = noisy(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    expect_exact(r, s, fmt::format("noisy {}", limit));
    EXPECT_TRUE(d.fits(r.max_batch));
    EXPECT_FALSE(d.fits(r.max_batch + 1));
    EXPECT_NEAR(static_cast<double>(r.max_batch), static_cast<double>(limit), 0.012 * limit);
    // +-0.5% leaves about +-13 batches uncertain at 2688: a bisection of that width.
    EXPECT_LE(r.probes.size(), limit <= 2000 ? 9u : 10u) << "limit " << limit << ": " << trace(r);
  }
}

TEST(BatchSearchTest, StaysExactAcrossAWorkspaceThatJumpsAndShrinksNearTheLimit) {
  // From a third of the limit on, cuDNN picks an algorithm with a workspace of 3% of the memory
  // while it fits, and smaller ones near the limit: the peak jumps, then sits at the capacity
  // for batches the line says cannot fit (a zone of 3% of the limit). The edge probes gallop
  // past that zone (steps of 0.3% of the limit, doubling) and the bisection closes the last
  // step: about 2 log2(zone / step) probes more than a linear memory, past the default budget
  // for the larger limits (the record would say it did not converge).
  for (int64_t limit : {100, 555, 1312}) {
    Device d = workspace_jump(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("workspace jump {}", limit));
    EXPECT_LE(r.probes.size(), 14u) << "limit " << limit << ": " << trace(r);
  }
}

TEST(BatchSearchTest, AWorkspaceThatTakesAllFreeMemoryCostsProbesButNotTheAnswer) {
  // Benchmark-mode cuDNN: the autotuner's workspace takes what is free, so every peak sits near
  // the capacity and says nothing about the slope (why the search uses heuristics). With no
  // memory model left the search doubles, then bisects: exact, in 2 log2(limit / first probe)
  // probes or so; with the default budget it says it did not converge.
  Device d;
  d.capacity = 2e9 + 1e8 * 300.0 + 10;
  d.need = [](int64_t b) { return 2e9 + 1e8 * static_cast<double>(b); };
  d.shown = [&d](int64_t b) { return std::max(d.need(b), 0.995 * d.capacity); };
  d.resident = 2e9;
  const SearchSettings s = settings(1, 65536, 1, 16);
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
  EXPECT_EQ(r.max_batch, 300) << trace(r);
  expect_exact(r, s, "saturated");
  EXPECT_LE(r.probes.size(), 14u) << trace(r);

  Device again = d;
  SearchSettings budget = s;
  budget.max_probes = SearchSettings{}.max_probes;
  std::vector<std::string> notes;
  SearchOptions options;
  options.on_note = [&](const std::string& n) { notes.push_back(n); };
  const SearchRecord cut =
      find_max_batch(budget, static_cast<int64_t>(d.capacity), std::ref(again), options);
  if (r.probes.size() > static_cast<std::size_t>(budget.max_probes)) {
    EXPECT_FALSE(cut.converged);
    EXPECT_EQ(cut.stop_reason, fmt::format("probe budget spent (search.max_probes={})",
                                           budget.max_probes));
    EXPECT_TRUE(again.fits(cut.max_batch));
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes.back().find("did not converge"), std::string::npos) << notes.back();
  }
}

TEST(BatchSearchTest, FragmentationNearTheEdgeStillEndsOnAFitNextToAFailure) {
  // A batch just below the limit fails (a fragmented cache) and one just above it fits: the
  // fitting batches are not an interval. The answer fits and its successor fails, both seen.
  for (int64_t limit : {55, 300, 1312, 2688}) {
    Device d = fragmented(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    expect_exact(r, s, fmt::format("fragmented {}", limit));
    EXPECT_GE(r.max_batch, limit - 3);
    EXPECT_LE(r.max_batch, limit + 2);
    EXPECT_LE(r.probes.size(), 9u) << "limit " << limit << ": " << trace(r);
  }
}

// ---- Sticky failures: a probe that leaves its worker unusable ----

/// Runs a search across fresh workers as run_job does: an interrupted search goes on in the
/// next worker with the probes so far.
SearchRecord search_across_workers(const SearchSettings& s, int64_t capacity,
                                   const std::function<ProbeOutcome(int64_t, int)>& probe,
                                   int max_workers = kMaxSearchWorkers,
                                   SearchOptions options = {}) {
  SearchRecord r;
  for (int worker = 0; worker < max_workers; ++worker) {
    options.worker = worker;
    r = find_max_batch(s, capacity, [&](int64_t b) { return probe(b, worker); }, options);
    if (!r.interrupted) break;
    options.prior = r.probes;
  }
  return r;
}

TEST(BatchSearchTest, AProbeThatBreaksItsWorkerIsProbedAgainInAFreshOne) {
  // The worker breaks at its third probe (a non-OOM error, or an OOM after which the device is
  // unusable); the next worker continues from the probes so far and probes that batch again.
  for (bool oom : {false, true}) {
    Device d = linear(1312);
    int in_worker0 = 0;
    auto probe = [&](int64_t b, int worker) {
      if (worker == 0 && ++in_worker0 == 3) {
        ProbeOutcome o;
        o.worker_unusable = true;
        o.error = oom ? "out of memory: ...; afterwards the device reports: an illegal memory "
                        "access was encountered"
                      : "CUDA error: an illegal memory access was encountered";
        return o;
      }
      return d(b);
    };
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = search_across_workers(s, static_cast<int64_t>(d.capacity), probe);
    EXPECT_EQ(r.max_batch, 1312) << trace(r);
    expect_exact(r, s, oom ? "sticky OOM" : "sticky error");
    EXPECT_EQ(r.workers, 2);
    ASSERT_GE(r.probes.size(), 4u);
    EXPECT_TRUE(r.probes[2].sticky);
    EXPECT_EQ(r.probes[3].batch, r.probes[2].batch);  // the same batch, in the fresh worker
    EXPECT_EQ(r.probes[3].worker, 1);
    EXPECT_FALSE(r.probes[3].sticky);
    // One probe more than without the failure.
    Device clean = linear(1312);
    const SearchRecord cold = find_max_batch(s, static_cast<int64_t>(clean.capacity), std::ref(clean));
    EXPECT_EQ(r.probes.size(), cold.probes.size() + 1) << trace(r) << " vs " << trace(cold);
  }
}

TEST(BatchSearchTest, ARetryThatBreaksItsWorkerIsRetriedInTheFreshOne) {
  // transformer-big amp-bf16 as the H200 measured it: the first prediction fails, the retry 2%
  // under it is the next probe. When that probe leaves its worker unusable, the fresh worker
  // decides as the first would and probes it again; the search ends as an unbroken one does.
  const MeasuredSearch* m = nullptr;
  for (const auto& s : kH200AllocatedLineSearches) {
    if (std::string(s.model) == "transformer-big-amp-bf16") m = &s;
  }
  ASSERT_NE(m, nullptr);
  const SearchRecord whole = replay(*m, true);
  ASSERT_GE(whole.probes.size(), 4u);
  ASSERT_EQ(whole.probes[2].phase, "predict");
  ASSERT_FALSE(whole.probes[2].fits);
  const int64_t retry = whole.probes[3].batch;
  EXPECT_EQ(whole.probes[3].phase, "predict") << trace(whole);

  Device d = replay_device(*m);
  auto probe = [&](int64_t batch, int worker) {
    if (batch == retry && worker == 0) {
      ProbeOutcome o;
      o.worker_unusable = true;
      o.error = "CUDA error: an illegal memory access was encountered";
      return o;
    }
    return d(batch);
  };
  SearchOptions live;
  live.expandable_allocator = true;
  const SearchRecord r = search_across_workers(replay_settings(*m),
                                               static_cast<int64_t>(d.capacity), probe,
                                               kMaxSearchWorkers, live);
  EXPECT_FALSE(r.interrupted) << trace(r);
  ASSERT_EQ(r.probes.size(), whole.probes.size() + 1) << trace(r);
  EXPECT_TRUE(r.probes[3].sticky) << trace(r);
  EXPECT_EQ(r.probes[3].batch, retry) << trace(r);
  EXPECT_EQ(r.probes[4].batch, retry) << trace(r);
  EXPECT_EQ(r.probes[4].worker, 1) << trace(r);
  EXPECT_EQ(r.max_batch, whole.max_batch) << trace(r);
}

TEST(BatchSearchTest, ABatchThatBreaksTwoWorkersFailsTheSearch) {
  Device d = linear(1312);
  auto probe = [&](int64_t b, int) {
    if (b == 16) {
      ProbeOutcome o;
      o.worker_unusable = true;
      o.error = "shape mismatch";
      return o;
    }
    return d(b);
  };
  const SearchSettings s = settings(1, 65536, 1, 16);
  const SearchRecord r = search_across_workers(s, static_cast<int64_t>(d.capacity), probe);
  EXPECT_FALSE(r.interrupted);
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.stop_reason, "the probe at batch 16 failed in two workers: shape mismatch");
  EXPECT_EQ(r.probes.size(), 2u);
  EXPECT_EQ(r.max_batch, 0);
}

// ---- Hints ----

/// The shipped default budget: what a hinted search must live within.
SearchSettings default_budget() {
  SearchSettings s = settings(1, 65536, 1, 16);
  s.max_probes = SearchSettings{}.max_probes;
  return s;
}

/// One search of the H200's memory tiers: the cap, what its record says (the fields a hint is
/// made of, in bytes), the probes it took there, and the peaks (GiB: allocated, reserved) of the
/// probes that fitted, with the resident memory of the first.
struct MeasuredTier {
  const char* model;
  int cap_gib;
  int64_t capacity, headroom, max_batch, peak_at_max, resident_at_max;
  double fixed, per_sample;
  std::size_t h200_probes;
  double resident_gib;
  std::vector<std::tuple<int64_t, double, double>> fits;
};

// Generated from docs/results/2026-12-04-h200-bf16-suite-tiers-repeats/tiers/tiers.jsonl
// (`--memory-tiers 6,8,11,24,48` for bert-base, nasnet-large and transformer-big, fp32): 64
// probes in all.
const std::vector<MeasuredTier> kH200Tiers = {
    {"bert-base", 6, 5715984384, 14289960, 39, 5689573376, 1844289536, 1403734357.3,
     107581667.556, 8, 1.718, {{16, 2.932, 3.037}, {30, 4.313, 4.381}, {37, 5.014, 5.084},
      {38, 5.115, 5.182}, {39, 5.215, 5.299}}},
    {"bert-base", 8, 7863468032, 19658670, 59, 7828668416, 1849725440, 1409098638.2,
     107581667.556, 2, 1.723, {{59, 7.224, 7.291}}},
    {"bert-base", 11, 11084693504, 27711733, 89, 11039408128, 1857880576, 1417212416.0,
     107580928.000, 3, 1.730, {{88, 10.137, 10.262}, {89, 10.237, 10.281}}},
    {"bert-base", 24, 25043337216, 62608343, 218, 24968691712, 1893216256, 1451739136.0,
     107582976.000, 3, 1.763, {{217, 23.094, 23.156}, {218, 23.194, 23.254}}},
    {"bert-base", 48, 50813140992, 127032852, 457, 50767855616, 1958453248, 1516515328.0,
     107581440.000, 5, 1.824, {{453, 46.800, 46.871}, {454, 46.900, 47.008},
      {457, 47.201, 47.281}}},
    {"nasnet-large", 6, 5715984384, 14289960, 7, 5714739200, 1513724416, 1166304256.0,
     638625792.000, 4, 1.406, {{4, 3.465, 3.680}, {7, 5.250, 5.322}}},
    {"nasnet-large", 8, 7863468032, 19658670, 10, 7767851008, 1523037184, 1171644416.0,
     638625792.000, 2, 1.418, {{10, 7.039, 7.234}}},
    {"nasnet-large", 11, 11084693504, 27711733, 15, 10997465088, 1537664000, 1179488256.0,
     638625792.000, 2, 1.432, {{15, 10.020, 10.242}}},
    {"nasnet-large", 24, 25043337216, 62608343, 37, 25042092032, 1601484288, 1207405056.0,
     638800896.000, 3, 1.490, {{36, 22.542, 22.840}, {37, 23.137, 23.322}}},
    {"nasnet-large", 48, 50813140992, 127032852, 77, 50811895808, 1718499328, 1263633920.0,
     638801408.000, 3, 1.599, {{76, 46.392, 46.824}, {77, 46.986, 47.322}}},
    {"transformer-big", 6, 5715984384, 14289960, 2688, 5584715776, 3445655552, 2509201959.4,
     1119874.462, 5, 3.209, {{1024, 3.405, 3.605}, {2560, 5.081, 5.162}, {2688, 5.140, 5.201}}},
    {"transformer-big", 8, 7863468032, 19658670, 4608, 7765753856, 3451374080, 2497728433.2,
     1119874.462, 2, 3.214, {{4608, 7.132, 7.232}}},
    {"transformer-big", 11, 11084693504, 27711733, 7168, 11081351168, 3459887104, 2459902836.4,
     1177357.091, 6, 3.222, {{4096, 6.922, 7.193}, {5760, 8.607, 8.756}, {7040, 10.044, 10.223},
      {7168, 10.151, 10.320}}},
    {"transformer-big", 24, 25043337216, 62608343, 18816, 24884805632, 3496776704, 2703115820.5,
     1163173.739, 8, 3.254, {{4096, 6.955, 7.213}, {11008, 14.639, 14.930}, {18304, 22.447, 22.922},
      {18560, 22.674, 23.156}, {18688, 22.582, 23.039}, {18816, 22.901, 23.176}}},
    {"transformer-big", 48, 50813140992, 127032852, 40576, 50541363200, 3564950528, 3304426668.0,
     1153351.781, 8, 3.314, {{4096, 7.015, 7.271}, {24192, 29.063, 29.662}, {39808, 45.824, 46.836},
      {40320, 46.341, 46.797}, {40576, 46.662, 47.070}}},
};

TEST(BatchSearchTest, ReplaysTheH200TiersOfDecember4WithTheirHintsInNoMoreProbesThanTheyTook) {
  // Each tier's search replayed against the peaks it measured (interpolated from the resident
  // memory at batch 0 through its fits; out of memory above its answer), hinted as the suite
  // hints it (suite.cpp's hint_for: the answer of the tier below, the line of the first, cold,
  // tier): exact every time, in no more probes than the H200 took. The replay takes the H200's
  // 64 probes, the same batches in the same order. transformer-big's hints overshoot its limit by
  // 4-7% at 11, 24 and 48 GiB (its bytes per token grow with the token budget), so those
  // searches fall back to a cold scout. A line through the two latest answers in place of the
  // first tier's line was tried here: 59 probes, three fewer for transformer-big at 24 and at 48
  // GiB (0.5-2.3 s each), one more for nasnet-large at 11 GiB (about 9 s): no time saved, not
  // kept.
  std::map<std::string, std::vector<const MeasuredTier*>> chains;
  for (const auto& t : kH200Tiers) chains[t.model].push_back(&t);
  const auto record = [](const MeasuredTier& t) {
    SearchRecord r;
    r.capacity_bytes = t.capacity;
    r.headroom_bytes = t.headroom;
    r.max_batch = t.max_batch;
    r.peak_bytes_at_max = t.peak_at_max;
    r.resident_bytes_at_max = t.resident_at_max;
    r.fixed_bytes = t.fixed;
    r.bytes_per_sample = t.per_sample;
    return r;
  };
  std::size_t total = 0, h200_total = 0;
  for (const auto& [model, tiers] : chains) {
    const bool tokens = model == "transformer-big";
    const SearchSettings s = tokens ? settings(256, 1048576, 128, 4096, SearchSettings{}.max_probes)
                                    : settings(1, 65536, 1, 16, SearchSettings{}.max_probes);
    for (std::size_t i = 0; i < tiers.size(); ++i) {
      const MeasuredTier& t = *tiers[i];
      std::vector<std::pair<double, double>> allocated{{0, t.resident_gib}},
          reserved{{0, t.resident_gib}};
      for (const auto& [batch, alloc, res] : t.fits) {
        allocated.emplace_back(static_cast<double>(batch), alloc);
        reserved.emplace_back(static_cast<double>(batch), res);
      }
      Device d;
      d.capacity = static_cast<double>(t.capacity);
      d.resident = t.resident_gib * kGiB;
      d.need = [limit = t.max_batch](int64_t b) { return b <= limit ? 0.0 : 1e15; };
      d.shown = interpolate(reserved);
      d.allocated = interpolate(allocated);
      SearchOptions options;
      options.expandable_allocator = true;
      options.headroom_bytes = t.headroom;
      if (i > 0) options.hint = SearchHint::from_searches(record(*tiers[0]), record(*tiers[i - 1]));
      const SearchRecord r = find_max_batch(s, t.capacity, std::ref(d), options);
      const std::string what = fmt::format("{} at {} GiB: {}", model, t.cap_gib, trace(r));
      EXPECT_EQ(r.max_batch, t.max_batch) << what;
      expect_exact(r, s, what);
      EXPECT_EQ(r.hinted, i > 0) << what;
      EXPECT_LE(r.probes.size(), t.h200_probes) << what;
      std::printf("  %-15s %2d GiB %2zu probes (H200: %2zu): %s\n", model.c_str(), t.cap_gib,
                  r.probes.size(), t.h200_probes, trace(r).c_str());
      total += r.probes.size();
      h200_total += t.h200_probes;
    }
  }
  std::printf("  total %zu probes (H200: %zu)\n", total, h200_total);
}

TEST(BatchSearchTest, HintsFromATenthToTenTimesTheAnswerCostAtMostOneProbeMoreThanNone) {
  for (int64_t limit : {55, 300, 1312}) {
    Device cold_device = linear(limit);
    const SearchSettings s = default_budget();
    const SearchRecord cold =
        find_max_batch(s, static_cast<int64_t>(cold_device.capacity), std::ref(cold_device));
    for (double k : {0.1, 0.3, 0.5, 0.9, 1.0, 1.1, 2.0, 3.0, 10.0}) {
      Device d = linear(limit);
      // A line with the right fixed part whose slope puts the limit at k times the answer.
      SearchHint hint;
      hint.fixed_bytes = 2e9;
      hint.bytes_per_sample = (d.capacity - 2e9) / (k * static_cast<double>(limit));
      SearchOptions options;
      options.hint = hint;
      const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), options);
      const std::string what = fmt::format("limit {} hint {}x", limit, k);
      EXPECT_EQ(r.max_batch, limit) << what << ": " << trace(r);
      expect_exact(r, s, what);
      EXPECT_TRUE(r.hinted) << what;
      EXPECT_EQ(r.probes.front().phase, "hint") << what;
      EXPECT_LE(r.probes.size(), cold.probes.size() + 1) << what << ": " << trace(r);
      if (k == 1.0) {
        EXPECT_LE(r.probes.size(), 6u) << what << ": " << trace(r);
      }
    }
  }
}

TEST(BatchSearchTest, AHintFromAnotherCapIsScaledByItsCapacity) {
  // Memory tiers of one workload: the 24 GiB search's answer, scaled to 48 GiB, starts the 48 GiB
  // search just under its limit.
  const double fixed = 3e9, per = 2.5e8;
  auto limit_at = [&](double cap) { return static_cast<int64_t>((cap - fixed) / per); };
  const double cap24 = 24 * kGiB, cap48 = 48 * kGiB;
  Device d;
  d.need = [=](int64_t b) { return fixed + per * static_cast<double>(b); };
  d.capacity = cap48;
  d.resident = fixed;
  SearchHint hint;
  hint.fixed_bytes = fixed;
  hint.bytes_per_sample = per;
  hint.capacity_bytes = static_cast<int64_t>(cap24);
  hint.max_batch = limit_at(cap24);
  hint.peak_bytes_at_max = static_cast<int64_t>(d.need(hint.max_batch));
  hint.resident_bytes = static_cast<int64_t>(fixed);
  SearchOptions options;
  options.hint = hint;
  const SearchSettings s = default_budget();
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(cap48), std::ref(d), options);
  EXPECT_EQ(r.max_batch, limit_at(cap48)) << trace(r);
  expect_exact(r, s, "tier");
  EXPECT_LE(r.probes.size(), 5u) << trace(r);
  EXPECT_EQ(r.hint_note.rfind("hint used", 0), 0u) << r.hint_note;
}

TEST(BatchSearchTest, AHintCarriesNoBallastAndEachSearchTakesItsOwnFromTheCapacity) {
  // Memory tiers again, each search's probes holding a ballast of 2% of its capacity
  // (search.headroom): 0.48 GiB under 24 GiB, 0.96 under 48, 20 and 41 batches' worth.
  const double fixed = 3e9, per = 2.5e7, share = 0.02;
  const double cap24 = 24 * kGiB, cap48 = 48 * kGiB;
  auto device = [&](double cap, double ballast) {
    Device d;
    d.need = [=](int64_t b) { return fixed + ballast + per * static_cast<double>(b); };
    d.capacity = cap;
    d.resident = fixed + ballast;
    return d;
  };
  const auto b24 = static_cast<int64_t>(share * cap24), b48 = static_cast<int64_t>(share * cap48);
  const SearchSettings s = default_budget();
  Device d24 = device(cap24, static_cast<double>(b24));
  SearchRecord r24 = find_max_batch(s, static_cast<int64_t>(cap24), std::ref(d24));
  r24.headroom_bytes = b24;  // as the runner records it
  ASSERT_EQ(r24.max_batch, static_cast<int64_t>((cap24 - b24 - fixed) / per)) << trace(r24);

  // The hint is the workload's memory alone: the 24 GiB search's ballast is not in it.
  const SearchHint hint = SearchHint::from_searches(r24, r24);
  EXPECT_NEAR(hint.fixed_bytes, fixed, 0.01 * per) << trace(r24);
  EXPECT_EQ(hint.resident_bytes, static_cast<int64_t>(fixed));
  EXPECT_EQ(hint.peak_bytes_at_max, r24.peak_bytes_at_max - b24);

  // Under 48 GiB with its own ballast, the hinted search starts where a search without one on a
  // device smaller by the ballast starts, and finds the same answer.
  auto hinted = [&](double cap, double ballast, int64_t headroom) {
    Device d = device(cap, ballast);
    SearchOptions options;
    options.hint = hint;
    options.headroom_bytes = headroom;
    return find_max_batch(s, static_cast<int64_t>(cap), std::ref(d), options);
  };
  const SearchRecord with = hinted(cap48, static_cast<double>(b48), b48);
  const SearchRecord smaller = hinted(cap48 - static_cast<double>(b48), 0, 0);
  const int64_t limit = static_cast<int64_t>((cap48 - b48 - fixed) / per);
  EXPECT_EQ(with.max_batch, limit) << trace(with);
  expect_exact(with, s, "tier with ballast");
  EXPECT_EQ(with.hint_note.rfind("hint used", 0), 0u) << with.hint_note;
  EXPECT_EQ(with.probes.front().batch, smaller.probes.front().batch) << trace(with);
  // Left out of the hint's prediction, the ballast would have aimed the first probe higher.
  const SearchRecord blind = hinted(cap48, static_cast<double>(b48), 0);
  EXPECT_GT(blind.probes.front().batch, with.probes.front().batch + 30) << trace(blind);
}

TEST(BatchSearchTest, AHintWhoseLineContradictsItsOwnAnswerIsRescaled) {
  // What the H200 showed (2026-12-01): nasnet-large's 11 GiB search left a line (11.7 GB fixed,
  // 4.2 MB per image: peaks pinned at the cap by autotuning) whose limit under 48 GiB is batch
  // 9468, while its answer was 15. Its answer, scaled by the capacity, predicts about 73; the
  // 48 GiB limit was 77. Peaks below from that search: 31.6 GiB at 36, 47.8 at 76.
  Device d;
  d.capacity = 48 * kGiB;
  d.resident = 1.45 * kGiB;
  d.need = [](int64_t b) { return b <= 77 ? 0.0 : 1e15; };
  d.shown = [](int64_t b) { return (31.62 + (47.81 - 31.62) * (b - 36.0) / 40.0) * kGiB; };
  SearchHint hint;
  hint.fixed_bytes = 11706302464.0;
  hint.bytes_per_sample = 4194304.0;
  hint.capacity_bytes = static_cast<int64_t>(11 * kGiB);
  hint.max_batch = 15;
  hint.peak_bytes_at_max = static_cast<int64_t>(10.96 * kGiB);
  hint.resident_bytes = static_cast<int64_t>(1.43 * kGiB);
  SearchOptions options;
  options.hint = hint;
  std::vector<std::string> notes;
  options.on_note = [&](const std::string& n) { notes.push_back(n); };
  const SearchSettings s = default_budget();
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), options);
  EXPECT_EQ(r.max_batch, 77) << trace(r);
  expect_exact(r, s, "nasnet tier");
  EXPECT_EQ(r.hint_note.rfind("hint rescaled", 0), 0u) << r.hint_note;
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes.front(), r.hint_note);  // said before the first probe
  EXPECT_LT(r.probes.front().batch, 77);  // not 9468
  EXPECT_GT(r.probes.front().batch, 60);
  EXPECT_LE(r.probes.size(), 6u) << trace(r);
}

TEST(BatchSearchTest, AHintThatMakesNoSenseIsRefusedBeforeAnyProbe) {
  struct Case {
    SearchHint hint;
    const char* names;
  };
  const std::vector<Case> cases = {
      {{1e9, std::nan(""), 0, 0, 0, 0}, "bytes_per_sample nan"},
      {{1e9, -5e7, 0, 0, 0, 0}, "bytes_per_sample -50000000"},
      {{-1e9, 1e8, 0, 0, 0, 0}, "fixed_bytes -1000000000"},
      {{1e13, 1e8, 0, 0, 0, 0}, "not even search.min_batch=1 fits"},
  };
  for (const auto& c : cases) {
    Device d = linear(300);
    SearchOptions options;
    options.hint = c.hint;
    std::vector<std::string> notes;
    options.on_note = [&](const std::string& n) {
      if (d.probes == 0) notes.push_back(n);  // before any probe
    };
    const SearchSettings s = default_budget();
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), options);
    EXPECT_FALSE(r.hinted) << c.names;
    EXPECT_EQ(r.probes.front().phase, "scout") << c.names;
    EXPECT_EQ(r.max_batch, 300) << c.names;
    ASSERT_EQ(notes.size(), 1u) << c.names;
    EXPECT_EQ(notes[0].rfind("hint refused: ", 0), 0u) << notes[0];
    EXPECT_NE(notes[0].find(c.names), std::string::npos) << notes[0];
    EXPECT_EQ(r.hint_note, notes[0]);
  }
}

// ---- Bounds, budget, bad input ----

TEST(BatchSearchTest, SettingsThatMakeNoSenseAreRefusedBeforeAnyProbe) {
  Device d = linear(100);
  auto expect_refused = [&](SearchSettings s, int64_t capacity, const std::string& names) {
    try {
      find_max_batch(s, capacity, std::ref(d));
      ADD_FAILURE() << "accepted: " << names;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
    EXPECT_EQ(d.probes, 0) << names;
  };
  const auto cap = static_cast<int64_t>(d.capacity);
  SearchSettings s = settings(1, 1024, 1, 16);
  s.granularity = 0;
  expect_refused(s, cap, "search.granularity");
  s = settings(64, 32, 1, 16);
  expect_refused(s, cap, "search.max_batch (32) is below search.min_batch (64)");
  s = settings(0, 32, 1, 16);
  expect_refused(s, cap, "search.min_batch");
  s = settings(1, 1024, 1, -4);
  expect_refused(s, cap, "search.first_probe");
  expect_refused(settings(1, 1024, 1, 16), -5, "capacity");
}

TEST(BatchSearchTest, RespectsGranularityAndMinimum) {
  Device d = linear(16'100, 2e9, 10'000);  // tokens
  const SearchSettings s = settings(64, 1 << 20, 64, 1024);
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
  EXPECT_EQ(r.max_batch, 16'064);  // largest multiple of 64 at or under 16,100
  expect_exact(r, s, "tokens");
  for (const auto& p : r.probes) EXPECT_EQ(p.batch % 64, 0) << p.batch;
  EXPECT_EQ(r.largest_pow2, 8192);
  EXPECT_LE(r.probes.size(), 8u) << trace(r);
}

TEST(BatchSearchTest, AGranularityAboveOneWithAMinimumOfOne) {
  // stylegan: 1, 2, 3 or a multiple of 4.
  for (int64_t limit : {1, 3, 6, 61}) {
    Device d = linear(limit);
    const SearchSettings s = settings(1, 4096, 4, 8);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    const int64_t expected = limit < 4 ? 1 : limit / 4 * 4;
    EXPECT_EQ(r.max_batch, expected) << trace(r);
    expect_exact(r, s, fmt::format("granularity 4, limit {}", limit));
    for (const auto& p : r.probes) EXPECT_TRUE(p.batch == 1 || p.batch % 4 == 0) << p.batch;
  }
}

TEST(BatchSearchTest, StopsAtMaxBatchAndSaysSo) {
  Device d = linear(100'000);
  const SearchRecord r = find_max_batch(settings(1, 512, 1, 16), static_cast<int64_t>(d.capacity),
                                        std::ref(d));
  EXPECT_EQ(r.max_batch, 512);
  EXPECT_EQ(r.stop_reason, "limited by search.max_batch=512");
  EXPECT_TRUE(r.converged);
  EXPECT_LE(r.probes.size(), 4u) << trace(r);
}

TEST(BatchSearchTest, ReportsZeroWhenEvenTheMinimumDoesNotFit) {
  Device d = linear(0);
  d.capacity = 1e9;
  const SearchRecord r = find_max_batch(settings(2, 64, 1, 16), static_cast<int64_t>(d.capacity),
                                        std::ref(d));
  EXPECT_EQ(r.max_batch, 0);
  EXPECT_EQ(r.largest_pow2, 0);
  EXPECT_EQ(r.stop_reason, "does not fit at search.min_batch=2");
  EXPECT_TRUE(r.converged);
  EXPECT_FALSE(r.probes.back().fits);
  EXPECT_EQ(r.probes.back().batch, 2);
}

TEST(BatchSearchTest, RecoversWhenTheFirstProbeIsAlreadyTooLarge) {
  Device d = linear(5);
  const SearchSettings s = settings(1, 4096, 1, 64);
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
  EXPECT_EQ(r.max_batch, 5);
  expect_exact(r, s, "first probe too large");
  EXPECT_FALSE(r.probes.front().fits);
  EXPECT_LE(r.probes.size(), 6u) << trace(r);
}

TEST(BatchSearchTest, WithoutACapacityItDoublesThenBisects) {
  Device d = linear(777);
  const SearchSettings s = settings(1, 65536, 1, 16);
  const SearchRecord r = find_max_batch(s, /*capacity_bytes=*/0, std::ref(d));
  EXPECT_EQ(r.max_batch, 777);
  expect_exact(r, s, "no capacity");
  EXPECT_LE(r.probes.size(), 16u) << trace(r);
}

TEST(BatchSearchTest, ASearchThatSpendsItsBudgetSaysSo) {
  Device d = linear(777);
  SearchSettings s = settings(1, 65536, 1, 16);
  s.max_probes = 3;
  std::vector<std::string> notes;
  SearchOptions options;
  options.on_note = [&](const std::string& n) { notes.push_back(n); };
  const SearchRecord r = find_max_batch(s, 0, std::ref(d), options);
  EXPECT_EQ(r.probes.size(), 3u);
  EXPECT_EQ(r.stop_reason, "probe budget spent (search.max_probes=3)");
  EXPECT_FALSE(r.converged);
  EXPECT_GT(r.max_batch, 0);  // the largest batch seen to fit
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("did not converge"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("search.max_probes"), std::string::npos) << notes[0];
}

TEST(BatchSearchTest, RecordRoundTripsThroughJson) {
  Device d = linear(300);
  const SearchRecord r =
      find_max_batch(settings(1, 65536, 1, 16), static_cast<int64_t>(d.capacity), std::ref(d));
  SearchRecord with_headroom = r;
  with_headroom.headroom_bytes = 375809638;
  ASSERT_FALSE(with_headroom.probes.empty());
  with_headroom.probes[0].allocator = {{"alloc_retries", 412}, {"ooms", 3}};
  const SearchRecord back = SearchRecord::from_json(with_headroom.to_json());
  EXPECT_EQ(back.headroom_bytes, 375809638);
  EXPECT_EQ(back.probes[0].allocator.value("alloc_retries", 0), 412);
  EXPECT_TRUE(back.probes[1].allocator.is_null());  // not read: not written
  EXPECT_EQ(back.to_json(), with_headroom.to_json());
  SearchHint hint{1e9, 2e8, 5, 6, 7, 8};
  EXPECT_EQ(SearchHint::from_json(hint.to_json())->to_json(), hint.to_json());
  // A record written before the converged field: only a spent budget did not converge.
  Json old = r.to_json();
  old.erase("converged");
  EXPECT_TRUE(SearchRecord::from_json(old).converged);
  old["stop_reason"] = "probe budget spent (search.max_probes=12)";
  EXPECT_FALSE(SearchRecord::from_json(old).converged);
}

// ---- The probe as the worker runs it: a real TrainStep that throws OutOfMemoryError ----

int g_live_steps = 0;

class FakeOomStep final : public TrainStep {
 public:
  FakeOomStep(int64_t batch, int64_t limit) : batch_(batch), limit_(limit) {
    ++g_live_steps;
    weights_ = torch::zeros({batch_});  // something to release
  }
  ~FakeOomStep() override { --g_live_steps; }
  double run() override {
    TORCH_CHECK_WITH(OutOfMemoryError, batch_ <= limit_, "fake OOM at batch ", batch_);
    return static_cast<double>(batch_);
  }
  std::map<std::string, torch::Tensor> losses() const override { return {}; }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override { return {}; }

 private:
  int64_t batch_, limit_;
  torch::Tensor weights_;
};

TEST(BatchSearchTest, ProbeCatchesOutOfMemoryAndReleasesTheStep) {
  Architecture arch;
  arch.name = "fake";
  arch.prepare = [](const StepContext& ctx) -> std::unique_ptr<TrainStep> {
    return std::make_unique<FakeOomStep>(ctx.batch, 37);
  };
  StepContext ctx;
  ctx.device = torch::kCPU;
  auto probe = [&](int64_t batch) {
    ctx.batch = batch;
    EXPECT_EQ(g_live_steps, 0) << "a previous probe leaked its step";
    return probe_step(arch, ctx);
  };
  const SearchSettings s = settings(1, 1024, 1, 16);
  const SearchRecord r = find_max_batch(s, 0, probe);
  EXPECT_EQ(r.max_batch, 37);
  expect_exact(r, s, "fake step");
  EXPECT_EQ(g_live_steps, 0);
  int failures = 0;
  for (const auto& p : r.probes) {
    EXPECT_FALSE(p.sticky);  // a CPU never breaks
    EXPECT_GE(p.seconds, p.prepare_seconds);
    // The allocator's counters over the probe, fits or not (zeros on the CPU).
    ASSERT_TRUE(p.allocator.is_object()) << p.allocator;
    EXPECT_EQ(p.allocator.value("alloc_retries", -1), 0);
    EXPECT_EQ(p.allocator.value("ooms", -1), 0);
    if (!p.fits) {
      ++failures;
      EXPECT_NE(p.error.find("out of memory: fake OOM at batch"), std::string::npos) << p.error;
    }
  }
  EXPECT_GT(failures, 0);
}

/// Counts its runs; readies for a one-step probe when told it can.
class CountingStep final : public TrainStep {
 public:
  CountingStep(bool ready, int* runs, int* readied) : ready_(ready), runs_(runs), readied_(readied) {}
  double run() override {
    ++*runs_;
    return 1;
  }
  bool prepare_probe() override {
    ++*readied_;
    return ready_;
  }
  std::map<std::string, torch::Tensor> losses() const override { return {}; }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override { return {}; }

 private:
  bool ready_;
  int *runs_, *readied_;
};

TEST(BatchSearchTest, AProbeRunsOneStepWhenTheStepIsReadiedAndTwoWhenNot) {
  for (const bool ready : {true, false}) {
    int runs = 0, readied = 0;
    Architecture arch;
    arch.name = "counting";
    arch.prepare = [&](const StepContext&) -> std::unique_ptr<TrainStep> {
      return std::make_unique<CountingStep>(ready, &runs, &readied);
    };
    StepContext ctx;
    ctx.device = torch::kCPU;
    ctx.batch = 4;
    const ProbeOutcome outcome = probe_step(arch, ctx);
    EXPECT_TRUE(outcome.fits);
    EXPECT_EQ(readied, 1);
    EXPECT_EQ(runs, ready ? 1 : 2);
    EXPECT_EQ(outcome.steps, runs);
  }
}

TEST(BatchSearchTest, ProbeLetsOtherErrorsThrough) {
  Architecture arch;
  arch.name = "broken";
  arch.prepare = [](const StepContext&) -> std::unique_ptr<TrainStep> {
    throw std::runtime_error("shape mismatch");
  };
  StepContext ctx;
  ctx.batch = 4;
  EXPECT_THROW(probe_step(arch, ctx), std::runtime_error);
}

}  // namespace
}  // namespace gpubench
