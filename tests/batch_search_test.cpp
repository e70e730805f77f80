// The max-batch search against simulated devices: memory that grows linearly, that the H200
// measured, with noise, with a workspace that jumps when free memory allows and shrinks near
// the limit, with fragmentation near the edge, with probes that leave their worker unusable,
// and hints from 0.1x to 10x the answer. Each test checks the answer is exact (the batch fits
// and the next candidate does not, both probed) and bounds the probes it took.
#include "gpubench/measure/batch_search.h"
#include "gpubench/measure/search_stop.h"

#include "gpubench/base/errors.h"
#include "gpubench/run/job.h"
#include "gpubench/run/worker.h"
#include "gpubench/train/workload.h"
#include "tests/testing.h"

#include <c10/util/Exception.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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
  EXPECT_TRUE(r.converged) << r.stop.text;
  bool fit_seen = false, next_failed = false;
  const int64_t next = r.max_batch < s.min_batch ? s.min_batch
                                                 : (r.max_batch / s.granularity + 1) * s.granularity;
  for (const auto& p : r.probes) {
    if (p.sticky) continue;
    if (p.batch == r.max_batch && p.fits) fit_seen = true;
    if (p.batch == next && !p.fits) next_failed = true;
  }
  if (r.stop.kind == SearchStop::max_batch_limit) {
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
  return out + "(" + r.stop.text + ")";
}

/// Prints one search's probe count and trace under `label`: the counts docs/search.md cites
/// are read from these lines (`build/gpubench_tests --gtest_filter='BatchSearchTest.*'`).
void print_search(const std::string& label, const SearchRecord& r) {
  std::printf("  %s: %zu probes: %s\n", label.c_str(), r.probes.size(), trace(r).c_str());
}

TEST(BatchSearchTest, FindsAnExactLinearLimitInEightProbes) {
  Device d = linear(1312);
  const SearchSettings s = settings(1, 65536, 1, 16);
  const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
  EXPECT_EQ(r.max_batch, 1312);
  EXPECT_EQ(r.stop.kind, SearchStop::bracket_closed);
  print_search("linear 1312", r);
  EXPECT_EQ(r.stop.text, "bracket closed");
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
  // bisection of what lies between (0.3-0.6% of the limit): 4-8 probes up to 2000 batches, 9 at
  // 2688, 10 at 4097, 12 at 30000. (A real allocator runs out a little before the line, which
  // lands the edge closer: the next test, 8 at 2688.)
  for (int64_t limit : {1, 2, 3, 7, 16, 55, 100, 555, 1000, 1669, 2688, 4097, 30000}) {
    Device d = linear(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d));
    EXPECT_EQ(r.max_batch, limit) << trace(r);
    expect_exact(r, s, fmt::format("limit {}", limit));
    print_search(fmt::format("linear {}", limit), r);
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
    print_search(fmt::format("line 0.3% over, limit {}", limit), r);
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

TEST(BatchSearchTest, FindsALimitTheScoutsMissByAFewBatchesWithinEightProbes) {
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
  print_search("bert-base 1669", a);
  EXPECT_LE(a.probes.size(), 8u) << trace(a);
  const SearchRecord b =
      find_max_batch(s8, static_cast<int64_t>(finetune.capacity), std::ref(finetune));
  EXPECT_EQ(b.max_batch, 609) << trace(b);
  expect_exact(b, s8, "bert-finetune");
  print_search("bert-finetune 609", b);
  EXPECT_LE(b.probes.size(), 8u) << trace(b);
}

TEST(BatchSearchTest, ConvergesWhenTheReservedPeaksArePinnedAtTheCapacity) {
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
    print_search(fmt::format("pinned nasnet-large {}", limit), r);
    EXPECT_LE(r.probes.size(), 9u) << "limit " << limit << ": " << trace(r);
  }
}

TEST(BatchSearchTest, ConvergesWhenWorkspacesMakeThePeaksRiseAndFallWithTheBatch) {
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
    print_search(fmt::format("deeplabv3 rising and falling {}", limit), r);
    EXPECT_LE(r.probes.size(), 13u) << trace(r);
  }
}

/// One search an H200 ran: its settings, the answer, the probes it took there, and the peaks
/// (GiB) of the probes that fitted.
struct MeasuredSearch {
  std::string model;
  int64_t min_batch, max_batch, granularity, first_probe, limit;
  std::size_t h200_probes;
  double resident_gib;
  std::vector<std::pair<double, double>> reserved, allocated;
  double capacity_gib = 139.286;  ///< the search's capacity (the H200's where the set omits it)
};

/// The most probes any replay of a measured search under the allocated line takes (the sets of
/// the H200 and the H100 in tests/data), where the recorded searches took up to 14.
constexpr std::size_t kReplayProbes = 9;

/// A measured set in tests/data/ (GPUBENCH_TEST_DATA_DIR, set by the build): one JSON file per
/// set, whose "measured" field names the card, the day and the docs/results records it came
/// from. The numbers are kept as the records printed them, so the replays probe as they did.
nlohmann::json read_test_data(const std::string& name) {
  const std::string path = std::string(GPUBENCH_TEST_DATA_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the test data " + path);
  return nlohmann::json::parse(in);
}

/// (batch, GiB) points as the data files list them: [[batch, GiB], ...].
std::vector<std::pair<double, double>> read_points(const nlohmann::json& points) {
  std::vector<std::pair<double, double>> out;
  for (const auto& p : points) out.emplace_back(p.at(0).get<double>(), p.at(1).get<double>());
  return out;
}

/// The searches of the measured set `name` (tests/data/NAME), in the order they ran.
std::vector<MeasuredSearch> measured_searches(const std::string& name) {
  const nlohmann::json data = read_test_data(name);
  std::vector<MeasuredSearch> set;
  for (const auto& j : data.at("searches")) {
    MeasuredSearch m;
    m.model = j.at("model").get<std::string>();
    m.min_batch = j.at("min_batch").get<int64_t>();
    m.max_batch = j.at("max_batch").get<int64_t>();
    m.granularity = j.at("granularity").get<int64_t>();
    m.first_probe = j.at("first_probe").get<int64_t>();
    m.limit = j.at("limit").get<int64_t>();
    m.h200_probes = j.at("h200_probes").get<std::size_t>();
    m.resident_gib = j.at("resident_gib").get<double>();
    m.reserved = read_points(j.at("reserved"));
    m.allocated = read_points(j.at("allocated"));
    if (j.contains("capacity_gib")) m.capacity_gib = j.at("capacity_gib").get<double>();
    set.push_back(std::move(m));
  }
  if (set.empty()) throw std::runtime_error("no searches in the test data " + name);
  return set;
}

/// The device `m` measured: its peaks interpolated between the batches it probed, out of memory
/// above its answer.
Device replay_device(const MeasuredSearch& m) {
  Device d;
  d.capacity = m.capacity_gib * kGiB;
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

/// Replays every search of `set` (exact each time, in no more probes than the H200 took or
/// kReplayProbes: the bracket that closes on failures (Search::close_bracket) takes one more
/// than the H200 on three searches it had closed in 6-8, and far fewer where it had walked),
/// prints each one's probes beside the H200's count and the totals, and returns the records by
/// model.
std::map<std::string, SearchRecord> replay_set(const std::vector<MeasuredSearch>& set,
                                               bool expandable) {
  std::map<std::string, SearchRecord> records;
  std::size_t width = 0, total = 0, h200_total = 0;
  for (const auto& m : set) width = std::max(width, m.model.size());
  for (const auto& m : set) {
    const SearchRecord r = replay(m, expandable);
    EXPECT_LE(r.probes.size(), std::max(m.h200_probes, kReplayProbes)) << m.model << ": " << trace(r);
    std::printf("  %-*s %2zu probes (H200: %2zu): %s\n", static_cast<int>(width), m.model.c_str(),
                r.probes.size(), m.h200_probes, trace(r).c_str());
    total += r.probes.size();
    h200_total += m.h200_probes;
    records.emplace(m.model, r);
  }
  std::printf("  total %zu probes (H200: %zu)\n", total, h200_total);
  return records;
}

TEST(BatchSearchTest, ReplaysMeasuredSearchesUnderTheReservedLineInNoMoreProbesThanTheyTook) {
  // Each search of the 2026-12-01 fp32 suite replayed against its measured peaks (interpolated
  // between the batches it probed; out of memory above its answer): exact every time, and in no
  // more probes than the H200 search took with the rules of that day. bert-base shows the open
  // question: its second prediction is pinned at the capacity, and the allocated line, 2.6% above
  // the reserved one there, puts the limit near 1715 where 1669 is: the edge probe overshoots and
  // a bisection of 5 follows (11 probes, where the 8 of the target need the reserved line's
  // edge). A rule that tells nasnet-large's case (reserved line wrong) from this one (right) is
  // open: docs/search.md, "What the H200 measured".
  replay_set(measured_searches("h200-fp32-suite-2026-12-01.json"), false);
}

TEST(BatchSearchTest, WithExpandableSegmentsTheAllocatedLineFindsEachMeasuredLimitInEightProbes) {
  // The same searches under the reserved line (the rules the H200 ran) take what they took there
  // (5-13 probes; the replay differs from the H200 by one probe in all, 94 against 95, where the
  // interpolated peaks differ from the measured ones); under the allocated line every one is
  // exact in at most 8, 66 in all.
  std::size_t live_total = 0, reserved_total = 0, h200_total = 0;
  for (const auto& m : measured_searches("h200-expandable-segments-2026-12-01.json")) {
    const SearchRecord live = replay(m, true);
    const SearchRecord reserved = replay(m, false);
    EXPECT_EQ(live.memory_line, "allocated");
    EXPECT_EQ(reserved.memory_line, "reserved");
    EXPECT_LE(live.probes.size(), 8u) << m.model << ": " << trace(live);
    EXPECT_LE(live.probes.size(), reserved.probes.size()) << m.model << ": " << trace(live);
    std::printf("  %-24s allocated %2zu, reserved %2zu (H200: %2zu): %s\n", m.model.c_str(),
                live.probes.size(), reserved.probes.size(), m.h200_probes, trace(live).c_str());
    live_total += live.probes.size();
    reserved_total += reserved.probes.size();
    h200_total += m.h200_probes;
  }
  std::printf("  total: allocated %zu, reserved %zu (H200: %zu)\n", live_total, reserved_total,
              h200_total);
}

TEST(BatchSearchTest, ReplaysMeasuredSearchesOfTheAllocatedLineInNoMoreProbesThanTheyTook) {
  // transformer-big's scouts at 4096 and 97024 tokens gave 0.78 GB per thousand tokens where
  // 0.85 held from there to the limit (curvature: longer sentences at larger token batches), so
  // the first prediction, 1.7% under the line, failed 1.7% above the limit and a bisection of
  // nine followed (12 probes). With one more prediction 2% under a failed one, and the bracket
  // closed on failures, its replay takes 9. The others took 6-10 there.
  replay_set(measured_searches("h200-allocated-line-2026-12-01.json"), true);
}

TEST(BatchSearchTest, ALineDrawnUnderTheWorkspaceSpikesFindsDeeplabFp32InSevenProbes) {
  // deeplabv3 in strict fp32 took 14 probes on the H200: the fits at 45, 58 and 68 held
  // large-workspace algorithms (68: 137.1 GiB allocated, 70: 109.2), the line through them put
  // the limit at 68, and edge probes galloped from 70 to 101 and bisected back to 89. Drawn
  // through the lower hull of the fits once 70 exposes the spike, the line puts the limit near
  // 89 again: the edge probe at 89 fits and 90 does not (7 probes; issue 45's target is 8). The
  // rest of the suite takes no more probes than it took there.
  const auto records =
      replay_set(measured_searches("h200-fp32-suite-one-step-2026-12-02.json"), true);
  EXPECT_LE(records.at("deeplabv3-fp32").probes.size(), 7u)
      << trace(records.at("deeplabv3-fp32"));
}

TEST(BatchSearchTest, ReplaysMeasuredFp32SearchesWithABallastInNoMoreProbesThanTheyTook) {
  // Exact every time, and in no more probes than the H200 took. Three searches took more than
  // issue 10's eight there: mask-rcnn 11 (its allocated peaks grew by 1.0 GiB a batch up to 120
  // and by 0.53 above, so each prediction through the long lever from 55 fitted a few batches
  // short of the limit: 120, 129, 133, 135, 138; then 140's peak fell by 11 GiB), deeplabv3 10
  // (a workspace spike at 68-69, exposed by 70) and bert-base 9 (its first edge step, 0.5% of
  // 1369, overshot a limit one batch above). Replayed they take 9, 8 and 8. (A secant through
  // the two largest fits, after a prediction that fitted well under its line, was tried for
  // mask-rcnn on 2026-12-04 and saved no probe in the replay of that day's rules, so the rule was
  // not kept.) With the aimed probes (Search::aim) bert-base takes 8: 1369 fits past the line,
  // 1370 fits where the line reaches 0.2% under the capacity, 1373 (the line's crossing of the
  // capacity) and 1371 fail.
  const auto records =
      replay_set(measured_searches("h200-fp32-suite-ballast-2026-12-04.json"), true);
  EXPECT_LE(records.at("bert-base-fp32").probes.size(), 8u) << trace(records.at("bert-base-fp32"));
}

TEST(BatchSearchTest, ReplaysMeasuredBf16SearchesWithABallastInNoMoreProbesThanTheyTook) {
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
  const auto records =
      replay_set(measured_searches("h200-bf16-suite-ballast-2026-12-04.json"), true);
  EXPECT_LE(records.at("bert-base-amp-bf16").probes.size(), 8u)
      << trace(records.at("bert-base-amp-bf16"));
}

TEST(BatchSearchTest, ReplaysTheH100SuitesInAtMostNineProbesEach) {
  // The H100 suites of 2026-12-06 (78.66 GiB): mask-rcnn took 10 probes in fp32 (a prediction
  // and its retry failed, then a bisection walked up 76, 81, 83, 84, 85) and spent its budget of
  // 14 in amp-bf16 without converging (a fit past a workspace spike drew a line through it that
  // was nearly flat and aimed at 261 from 162). Replayed: the aim follows the line drawn under
  // the spike, and inside a bracket the line's batches alternate with a split.
  for (const char* name : {"h100-fp32-suite-2026-12-06.json", "h100-bf16-suite-2026-12-06.json"}) {
    SCOPED_TRACE(name);
    const auto records = replay_set(measured_searches(name), true);
    for (const auto& [model, r] : records) {
      EXPECT_LE(r.probes.size(), kReplayProbes) << model << ": " << trace(r);
    }
    EXPECT_LE(records.at(name[5] == 'f' ? "mask-rcnn-fp32" : "mask-rcnn-amp-bf16").probes.size(),
              9u);
  }
}

TEST(BatchSearchTest, EveryMeasuredSearchOfTheAllocatedLineReplaysInAtMostNineProbes) {
  // Issue 45 asks for 8; the replays of every allocated-line set take at most kReplayProbes (9:
  // mask-rcnn, bert-base and transformer-big at most once each per set).
  for (const char* name :
       {"h200-allocated-line-2026-12-01.json", "h200-expandable-segments-2026-12-01.json",
        "h200-fp32-suite-one-step-2026-12-02.json", "h200-fp32-suite-ballast-2026-12-04.json",
        "h200-bf16-suite-ballast-2026-12-04.json", "h100-fp32-suite-2026-12-06.json",
        "h100-bf16-suite-2026-12-06.json"}) {
    for (const auto& m : measured_searches(name)) {
      const SearchRecord r = replay(m, true);
      EXPECT_LE(r.probes.size(), kReplayProbes) << name << " " << m.model << ": " << trace(r);
    }
  }
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
      print_search(fmt::format("gap {} limit {}", gap, limit), r);
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
    print_search(fmt::format("live linear {}", limit), r);
    EXPECT_EQ(r.memory_line, "allocated");
    EXPECT_LE(r.probes.size(), limit <= 3000 ? 10u : 13u) << trace(r);
    worst = std::max(worst, r.probes.size());
  }
  for (int64_t limit : {50, 300, 1312, 2688}) {
    Device d = noisy(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
    expect_exact(r, s, fmt::format("live noisy {}: {}", limit, trace(r)));
    print_search(fmt::format("live noisy {}", limit), r);
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
    print_search(fmt::format("live workspace jump {}", limit), r);
    // 15 at 1312: the line's crossing of the capacity fits with its peak pinned there, and the
    // limit lies 40 batches (3%) above it, where the shrinking workspace made room. The two
    // aimed probes (Search::aim) cost probes here that the gallop alone would not; on every
    // H200 replay they cost none and save one to three.
    EXPECT_LE(r.probes.size(), 15u) << trace(r);
    worst = std::max(worst, r.probes.size());
  }
  for (int64_t limit : {55, 300, 1312, 2688}) {
    Device d = fragmented(limit);
    const SearchSettings s = settings(1, 65536, 1, 16);
    const SearchRecord r = find_max_batch(s, static_cast<int64_t>(d.capacity), std::ref(d), live);
    expect_exact(r, s, fmt::format("live fragmented {}: {}", limit, trace(r)));
    print_search(fmt::format("live fragmented {}", limit), r);
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
    print_search(fmt::format("noisy {}", limit), r);
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
    print_search(fmt::format("workspace jump {}", limit), r);
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
  print_search("saturated 300", r);
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
    EXPECT_EQ(cut.stop.kind, SearchStop::probe_budget);
    EXPECT_EQ(cut.stop.text, fmt::format("probe budget spent (search.max_probes={})",
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
  const std::vector<MeasuredSearch> set = measured_searches("h200-allocated-line-2026-12-01.json");
  const MeasuredSearch* m = nullptr;
  for (const auto& s : set) {
    if (s.model == "transformer-big-amp-bf16") m = &s;
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
  EXPECT_EQ(r.stop.kind, SearchStop::probe_failed);
  EXPECT_EQ(r.stop.text, "the probe at batch 16 failed in two workers: shape mismatch");
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
  std::string model;
  int cap_gib;
  int64_t capacity, headroom, max_batch, peak_at_max, resident_at_max;
  double fixed, per_sample;
  std::size_t h200_probes;
  double resident_gib;
  std::vector<std::tuple<int64_t, double, double>> fits;
};

/// The memory tiers the H200 measured on 2026-12-04, in the order they ran
/// (tests/data/h200-memory-tiers-2026-12-04.json).
std::vector<MeasuredTier> measured_tiers() {
  const nlohmann::json data = read_test_data("h200-memory-tiers-2026-12-04.json");
  std::vector<MeasuredTier> tiers;
  for (const auto& j : data.at("tiers")) {
    MeasuredTier t;
    t.model = j.at("model").get<std::string>();
    t.cap_gib = j.at("cap_gib").get<int>();
    t.capacity = j.at("capacity").get<int64_t>();
    t.headroom = j.at("headroom").get<int64_t>();
    t.max_batch = j.at("max_batch").get<int64_t>();
    t.peak_at_max = j.at("peak_at_max").get<int64_t>();
    t.resident_at_max = j.at("resident_at_max").get<int64_t>();
    t.fixed = j.at("fixed").get<double>();
    t.per_sample = j.at("per_sample").get<double>();
    t.h200_probes = j.at("h200_probes").get<std::size_t>();
    t.resident_gib = j.at("resident_gib").get<double>();
    for (const auto& f : j.at("fits")) {
      t.fits.emplace_back(f.at(0).get<int64_t>(), f.at(1).get<double>(), f.at(2).get<double>());
    }
    tiers.push_back(std::move(t));
  }
  if (tiers.empty()) throw std::runtime_error("no tiers in h200-memory-tiers-2026-12-04.json");
  return tiers;
}

TEST(BatchSearchTest, ReplaysMeasuredMemoryTiersWithTheSuitesHintsInNoMoreProbesThanTheyTook) {
  // Each tier's search replayed against the peaks it measured (interpolated from the resident
  // memory at batch 0 through its fits; out of memory above its answer), hinted as the suite
  // hints it (suite.cpp's hint_for: the answer of the tier below, the line of the first, cold,
  // tier): exact every time, in no more probes than the H200 took. The replay takes 61 probes
  // to the H200's 64 (bert-base at 6 GiB 6 to 8, transformer-big at 24 GiB 7 to 8: the bracket
  // now closes on failures). transformer-big's hints overshoot its limit by 4-7% at 11, 24 and
  // 48 GiB (its bytes per token grow with the token budget), so those searches fall back to a
  // cold scout. A line through the two latest answers in place of the first tier's line was
  // tried on 2026-12-04, against that day's 64: 59 probes, three fewer for transformer-big at 24
  // and at 48 GiB (0.5-2.3 s each), one more for nasnet-large at 11 GiB (about 9 s): no time
  // saved, not kept.
  const std::vector<MeasuredTier> all_tiers = measured_tiers();
  std::map<std::string, std::vector<const MeasuredTier*>> chains;
  for (const auto& t : all_tiers) chains[t.model].push_back(&t);
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
  EXPECT_EQ(r.stop.kind, SearchStop::max_batch_limit);
  EXPECT_EQ(r.stop.text, "limited by search.max_batch=512");
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
  EXPECT_EQ(r.stop.kind, SearchStop::min_batch_no_fit);
  EXPECT_EQ(r.stop.text, "does not fit at search.min_batch=2");
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
  EXPECT_EQ(r.stop.kind, SearchStop::probe_budget);
  EXPECT_EQ(r.stop.text, "probe budget spent (search.max_probes=3)");
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

// ---- Stop reasons (measure/search_stop.h): a kind in the code, the same sentence in the files ----

TEST(SearchStopTest, EachKindWritesItsSentenceAndReadsBackFromIt) {
  const std::vector<std::pair<SearchStopReason, std::string>> reasons = {
      {SearchStopReason{}, ""},
      {SearchStopReason::bracket_closed(), "bracket closed"},
      {SearchStopReason::max_batch_limit(512), "limited by search.max_batch=512"},
      {SearchStopReason::min_batch_no_fit(2), "does not fit at search.min_batch=2"},
      {SearchStopReason::probe_budget(12), "probe budget spent (search.max_probes=12)"},
      {SearchStopReason::probe_unusable(1000, "CUDA error: misaligned address"),
       "the probe at batch 1000 left its worker unusable: CUDA error: misaligned address"},
      {SearchStopReason::probe_failed(16, "shape mismatch"),
       "the probe at batch 16 failed in two workers: shape mismatch"},
      {SearchStopReason::cache_verified(1000, 1008, 65536),
       "cached answer verified: batch 1000 fits and 1008 does not"},
      {SearchStopReason::cache_verified(512, 0, 512),
       "cached answer verified: batch 512 fits (limited by search.max_batch=512)"},
  };
  for (const auto& [reason, text] : reasons) {
    EXPECT_EQ(reason.text, text);
    const auto back = parse_search_stop(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(back->kind, reason.kind) << text;
    EXPECT_EQ(back->text, text);
    // Through a record's JSON: the same sentence, the same kind.
    SearchRecord r;
    r.stop = reason;
    EXPECT_EQ(r.to_json()["stop_reason"], text);
    EXPECT_EQ(SearchRecord::from_json(r.to_json()).stop.kind, reason.kind) << text;
  }
  EXPECT_TRUE(SearchStopReason::probe_budget(3).budget_spent());
  EXPECT_FALSE(SearchStopReason::bracket_closed().budget_spent());
  EXPECT_TRUE(SearchStopReason::probe_unusable(8, "x").probe_broke());
  EXPECT_TRUE(SearchStopReason::probe_failed(8, "x").probe_broke());
  EXPECT_FALSE(SearchStopReason::cache_verified(8, 9, 64).probe_broke());
  EXPECT_FALSE(SearchStopReason{}.stopped());
  EXPECT_EQ(std::string(to_string(SearchStop::max_batch_limit)), "limited by search.max_batch=N");
}

TEST(SearchStopTest, OlderSentencesReadAsTheirKind) {
  // The report golden's inputs (an older gpubench) say this of a search where nothing fits.
  EXPECT_EQ(parse_search_stop("min_batch does not fit")->kind, SearchStop::min_batch_no_fit);
  Json old = SearchRecord().to_json();
  old["stop_reason"] = "min_batch does not fit";
  old.erase("converged");
  const SearchRecord r = SearchRecord::from_json(old);
  EXPECT_EQ(r.stop.kind, SearchStop::min_batch_no_fit);
  EXPECT_TRUE(r.converged);
  EXPECT_EQ(r.to_json()["stop_reason"], "min_batch does not fit");  // written back as it was
}

TEST(SearchStopTest, ASentenceOfNoKindIsRefusedNamingTheFieldTheValueAndTheForms) {
  for (const char* text : {"Bracket closed", "bracket closed ", "the probe at batch x failed",
                           "the probe at batch 16 crashed: x", "limited by max_batch", "done"}) {
    EXPECT_FALSE(parse_search_stop(text).has_value()) << text;
  }
  Json j = SearchRecord().to_json();
  j["stop_reason"] = "done";
  EXPECT_THROWS_WITH(SearchRecord::from_json(j), ConfigError,
                     "stop_reason 'done' is not a search's stop reason; its forms are: 'bracket "
                     "closed', 'limited by search.max_batch=N', 'does not fit at "
                     "search.min_batch=N', 'probe budget spent (search.max_probes=N)'");
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

// Only a typed error is out of memory: the allocator's c10::OutOfMemoryError, or a libtorch
// check's error with a library's allocation status. A message that says so is not enough.
TEST(BatchSearchTest, OnlyTypedErrorsAreOutOfMemory) {
  EXPECT_TRUE(is_out_of_memory(c10::OutOfMemoryError({"f", "file.cpp", 1}, "CUDA out of memory")));
  EXPECT_TRUE(is_out_of_memory(c10::Error({"f", "file.cpp", 1}, "CUBLAS_STATUS_ALLOC_FAILED when "
                                                                   "calling cublasCreate")));
  EXPECT_TRUE(is_out_of_memory(c10::Error({"f", "file.cpp", 1}, "cuDNN error: "
                                                                   "CUDNN_STATUS_ALLOC_FAILED")));
  EXPECT_TRUE(is_out_of_memory(c10::Error({"f", "file.cpp", 1}, "CUDA error: out of memory")));
  EXPECT_FALSE(is_out_of_memory(std::runtime_error("CUDA out of memory")));
  EXPECT_FALSE(is_out_of_memory(std::runtime_error("CUBLAS_STATUS_ALLOC_FAILED")));
  EXPECT_FALSE(is_out_of_memory(c10::Error({"f", "file.cpp", 1}, "the index ran out of memory "
                                                                    "bounds")));
  EXPECT_FALSE(is_out_of_memory(c10::Error({"f", "file.cpp", 1}, "shape mismatch")));
}

/// A step whose failure only says "out of memory" in a plain exception.
class UntypedOomStep final : public TrainStep {
 public:
  explicit UntypedOomStep(int64_t batch) : batch_(batch) {}
  double run() override {
    if (batch_ > 8) throw std::runtime_error("my kernel ran out of memory somehow");
    return static_cast<double>(batch_);
  }
  std::map<std::string, torch::Tensor> losses() const override { return {}; }
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override { return {}; }

 private:
  int64_t batch_;
};

// Any other error fails the probe with its message instead of lowering the max batch.
TEST(BatchSearchTest, AnUntypedErrorIsNotTakenAsOutOfMemory) {
  Architecture arch;
  arch.name = "fake";
  arch.prepare = [](const StepContext& ctx) -> std::unique_ptr<TrainStep> {
    return std::make_unique<UntypedOomStep>(ctx.batch);
  };
  StepContext ctx;
  ctx.device = torch::kCPU;
  ctx.batch = 4;
  EXPECT_TRUE(probe_step(arch, ctx).fits);
  ctx.batch = 16;
  try {
    probe_step(arch, ctx);
    FAIL() << "the probe took an untyped error for out of memory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("my kernel ran out of memory"), std::string::npos);
  }
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
