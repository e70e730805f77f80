// gpubench compare: which jobs are the same job, the verdict per job, and what counts as a
// regression.
#include "gpubench/report/compare.h"

#include "gpubench/base/errors.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

namespace gpubench {
namespace {

JobRecord job(const std::string& model, double throughput, JobStatus status = JobStatus::ok) {
  JobRecord r;
  r.model = model;
  r.precision = "fp32";
  r.throughput_unit = "examples/s";
  r.device.type = "cuda";
  r.device.name = "NVIDIA H200";
  r.status = status;
  r.throughput = status == JobStatus::ok ? throughput : 0;
  r.batch = 64;
  r.batch_source = "search";
  return r;
}

JobRecord repeated(const std::string& model, std::vector<double> throughputs) {
  JobRecord r = job(model, 0);
  r.throughput_stats = summarize_sample(throughputs);
  r.throughput = r.throughput_stats->median;
  return r;
}

const JobComparison& find(const CompareResult& result, const std::string& model) {
  for (const auto& c : result.jobs) {
    if (c.model == model) return c;
  }
  throw std::runtime_error("no " + model);
}

std::string printed(const CompareResult& result, const std::string& format) {
  std::ostringstream out;
  print_comparison(out, result, format);
  return out.str();
}

TEST(CompareTest, RepeatsDecideByWelchsTestAndTheNoiseTogether) {
  const auto result =
      compare_results({repeated("a", {100, 101, 102}), repeated("b", {100, 101, 102})},
                      {repeated("a", {110, 111, 112}), repeated("b", {99, 103, 101})}, 0.02);
  EXPECT_EQ(find(result, "a").verdict, "faster");
  EXPECT_EQ(find(result, "a").basis,
            "+9.90% past ±2% (--noise, 2% by default); Welch's t on 3 and 3 repeats: "
            "p = 0.00026, significant at 5%");
  EXPECT_NEAR(*find(result, "a").ratio, 111.0 / 101.0, 1e-12);  // of the means
  EXPECT_EQ(find(result, "b").verdict, "within noise");
  EXPECT_FALSE(result.regression);
  // 10% apart with repeats: slower, a regression.
  const auto worse =
      compare_results({repeated("a", {100, 101, 102})}, {repeated("a", {90, 91, 92})}, 0.02);
  EXPECT_EQ(worse.jobs[0].verdict, "slower");
  EXPECT_TRUE(worse.jobs[0].regressed());
  EXPECT_TRUE(worse.regression);
}

// One sitting's repeats agree to hundredths of a percent while the same job moves by percents
// between machines: two such records 0.3% apart are not a regression, however apart their
// intervals are.
TEST(CompareTest, TightIntervalsAFewTenthsApartAreWithinTheNoise) {
  const auto result = compare_results({repeated("a", {1000.0, 1000.1, 999.9})},
                                      {repeated("a", {997.0, 997.1, 996.9})}, 0.02);
  const JobComparison& c = result.jobs[0];
  ASSERT_TRUE(c.b->throughput_stats->ci95_high < c.a->throughput_stats->ci95_low);
  EXPECT_EQ(c.verdict, "within noise");
  EXPECT_FALSE(result.regression);
  ASSERT_TRUE(c.p_value.has_value());
  EXPECT_NEAR(*c.p_value, 3.2759863859536529e-6, 1e-12);  // Welch: t 36.7 on 4 df (mpmath)
  EXPECT_EQ(c.basis,
            "-0.30% within ±2% (--noise, 2% by default); Welch's t on 3 and 3 repeats: "
            "p < 0.0001, significant at 5%");
  // Below the noise the same pair is slower.
  EXPECT_EQ(compare_results({*c.a}, {*c.b}, 0.001).jobs[0].verdict, "slower");
}

TEST(CompareTest, ADifferencePastTheNoiseThatTheRepeatsDoNotShowIsNoise) {
  const auto result =
      compare_results({repeated("a", {100, 110, 90})}, {repeated("a", {95, 105, 85})}, 0.02);
  const JobComparison& c = result.jobs[0];
  EXPECT_EQ(c.verdict, "within noise");
  EXPECT_NEAR(*c.p_value, 0.5733922538253555, 1e-12);  // Welch (mpmath)
  EXPECT_EQ(c.basis,
            "-5.00% past ±2% (--noise, 2% by default); Welch's t on 3 and 3 repeats: "
            "p = 0.57, not significant at 5%");
  EXPECT_FALSE(result.regression);
}

TEST(CompareTest, WithoutAnIntervalTheNoiseThresholdDecides) {
  const auto result = compare_results({job("a", 100), job("b", 100), job("c", 100)},
                                      {job("a", 101.5), job("b", 103), job("c", 97)}, 0.02);
  EXPECT_EQ(find(result, "a").verdict, "within noise");
  EXPECT_EQ(find(result, "a").basis,
            "no interval (one timed run each): +1.50% within ±2% (--noise, 2% by default)");
  EXPECT_FALSE(find(result, "a").p_value.has_value());
  EXPECT_FALSE(find(result, "a").ratio_ci95_low.has_value());
  EXPECT_EQ(find(result, "b").verdict, "faster");
  EXPECT_EQ(find(result, "c").verdict, "slower");
  EXPECT_TRUE(result.regression);
  // A wider threshold takes 3% as noise.
  EXPECT_FALSE(compare_results({job("c", 100)}, {job("c", 97)}, 0.05).regression);
  // Repeats on one side only: the threshold alone, on its median.
  const auto one_sided = compare_results({repeated("a", {99, 100, 101})}, {job("a", 90)}, 0.02);
  EXPECT_EQ(one_sided.jobs[0].verdict, "slower");
  EXPECT_EQ(one_sided.jobs[0].basis,
            "no interval (one timed run on one side): -10.00% past ±2% (--noise, 2% by default)");
}

TEST(CompareTest, TheRatioHasFiellersIntervalWhereBothSidesRepeat) {
  const auto result = compare_results({repeated("a", {100, 102, 98, 101, 99})},
                                      {repeated("a", {110, 112, 108, 111, 109})}, 0.02);
  const JobComparison& c = result.jobs[0];
  EXPECT_NEAR(*c.ratio, 1.1, 1e-12);
  // mpmath: (110 - rho 100)^2 = t^2 (0.5 + 0.5 rho^2), t at 7.93 degrees of freedom.
  EXPECT_NEAR(*c.ratio_ci95_low, 1.0760098275552122, 1e-10);
  EXPECT_NEAR(*c.ratio_ci95_high, 1.1245771137263622, 1e-10);
  EXPECT_NEAR(*c.p_value, 8.488181527628492e-6, 1e-12);  // t = 10 on 8 degrees of freedom
  EXPECT_NE(printed(result, "table").find("1.100 (1.076-1.125)"), std::string::npos)
      << printed(result, "table");
  // No spread on either side: the ratio is known exactly, and any difference is real.
  const auto exact = compare_results({repeated("a", {100, 100})}, {repeated("a", {90, 90})}, 0.02);
  EXPECT_DOUBLE_EQ(*exact.jobs[0].ratio_ci95_low, 0.9);
  EXPECT_DOUBLE_EQ(*exact.jobs[0].ratio_ci95_high, 0.9);
  EXPECT_EQ(*exact.jobs[0].p_value, 0);
  // A's mean not clear of zero at 95%: the interval is unbounded, so there is none.
  const auto wild = compare_results({repeated("a", {1, 200})}, {repeated("a", {100, 101})}, 0.02);
  EXPECT_TRUE(wild.jobs[0].ratio.has_value());
  EXPECT_FALSE(wild.jobs[0].ratio_ci95_low.has_value());
}

// Repeats drawn at a known ratio of means (1.1, unequal spreads, four a side): the interval
// holds the true ratio about 95% of the time, and with means equal and no noise threshold
// Welch's test calls about 5% of the pairs faster or slower.
TEST(CompareTest, TheIntervalCoversTheTrueRatioAndTheTestKeepsItsLevel) {
  std::mt19937 random(42);
  std::normal_distribution<double> a_draw(1000, 10), b_draw(1100, 30), c_draw(1000, 30);
  auto sample = [&](std::normal_distribution<double>& draw) {
    std::vector<double> out;
    for (int i = 0; i < 4; ++i) out.push_back(draw(random));
    return out;
  };
  constexpr int kTrials = 4000;
  int covered = 0, called = 0;
  for (int i = 0; i < kTrials; ++i) {
    const std::vector<double> a = sample(a_draw);
    const JobComparison c =
        compare_results({repeated("a", a)}, {repeated("a", sample(b_draw))}, 0.0).jobs[0];
    ASSERT_TRUE(c.ratio_ci95_low && c.ratio_ci95_high);
    if (*c.ratio_ci95_low <= 1.1 && 1.1 <= *c.ratio_ci95_high) ++covered;
    const JobComparison same =
        compare_results({repeated("a", a)}, {repeated("a", sample(c_draw))}, 0.0).jobs[0];
    if (same.verdict != "within noise") ++called;
  }
  EXPECT_NEAR(static_cast<double>(covered) / kTrials, 0.95, 0.015);
  EXPECT_NEAR(static_cast<double>(called) / kTrials, 0.05, 0.015);
}

TEST(CompareTest, AnotherBatchIsNotComparableAndNeverARegression) {
  JobRecord two = job("a", 100);
  two.batch = 2;
  JobRecord four = job("a", 50);
  four.batch = 4;
  const auto result = compare_results({two}, {four}, 0.02);
  const JobComparison& c = result.jobs[0];
  EXPECT_EQ(c.verdict, "not comparable");
  EXPECT_EQ(c.not_comparable(), "batch 2 vs 4");
  EXPECT_FALSE(c.ratio.has_value());
  EXPECT_FALSE(c.regressed());
  EXPECT_FALSE(result.regression);
  EXPECT_NE(printed(result, "table").find("not comparable: batch 2 vs 4"), std::string::npos)
      << printed(result, "table");
}

TEST(CompareTest, EveryIdentityFieldIsNamedWithBothValues) {
  JobRecord a = job("bert-base", 100);
  a.config = Json::parse(R"({"name": "bert-base",
      "model": {"hidden": 768, "attention": "stored", "layers": 12},
      "optimizer": {"lr": 1e-4}, "runtime": {"cuda_graphs": false}})");
  // The same config written in another order is the same config.
  JobRecord same = job("bert-base", 100);
  same.config = Json::parse(R"({"runtime": {"cuda_graphs": false},
      "optimizer": {"lr": 1e-4}, "name": "bert-base",
      "model": {"layers": 12, "hidden": 768, "attention": "stored"}})");
  EXPECT_EQ(compare_results({a}, {same}, 0.02).jobs[0].verdict, "within noise");

  JobRecord b = a;
  b.batch_source = "flag";
  b.data_parallel = DataParallelRecord();
  b.data_parallel->world_size = 4;
  b.config["model"]["attention"] = "fused";
  b.runtime = {{"launch", "cuda-graphs"}};  // how it ran, not the config: not compared
  EXPECT_EQ(compare_results({a}, {b}, 0.02).jobs[0].not_comparable(),
            "batch source search vs flag, world size 1 vs 4, attention stored vs fused");
  JobRecord c = a;
  c.config["model"]["hidden"] = 1024;
  c.config["optimizer"]["lr"] = 2e-4;
  c.config["runtime"]["cuda_graphs"] = true;
  const JobComparison configs = compare_results({a}, {c}, 0.02).jobs[0];
  ASSERT_EQ(configs.differences.size(), 3u);
  EXPECT_EQ(configs.differences[0].field, "model config");
  EXPECT_EQ(configs.differences[1].field, "optimizer config");
  EXPECT_EQ(configs.differences[2].field, "runtime config");
  EXPECT_EQ(configs.differences[0].a.size(), 8u);  // a digest
  EXPECT_NE(configs.differences[0].a, configs.differences[0].b);
  // A key that one record lacks (a gpubench of another version wrote it, before or after a
  // setting was added) is left out of the comparison, and the comparison says so...
  JobRecord newer = a;
  newer.config["runtime"]["fused_loss"] = false;
  newer.config["model"]["new_knob"] = 1;
  const JobComparison grown = compare_results({a}, {newer}, 0.02).jobs[0];
  EXPECT_EQ(grown.verdict, "within noise") << grown.not_comparable();
  EXPECT_NE(
      grown.basis.find("not compared: model new_knob only in B; runtime fused_loss only in B"),
      std::string::npos)
      << grown.basis;
  EXPECT_NE(compare_results({newer}, {a}, 0.02).jobs[0].basis.find("runtime fused_loss only in A"),
            std::string::npos);
  // ...while a key both hold with other values still parts them.
  newer.config["runtime"]["cuda_graphs"] = true;
  const JobComparison changed = compare_results({a}, {newer}, 0.02).jobs[0];
  EXPECT_EQ(changed.verdict, "not comparable");
  ASSERT_EQ(changed.differences.size(), 1u);
  EXPECT_EQ(changed.differences[0].field, "runtime config");
  // A record without the config (written by hand, or cut) is judged on the rest.
  JobRecord bare = a;
  bare.config = Json::object();
  EXPECT_EQ(compare_results({a}, {bare}, 0.02).jobs[0].verdict, "within noise");
  // A job that did not train has no batch of its own: it failed, whatever the batch.
  JobRecord failed = job("bert-base", 0, JobStatus::failed);
  failed.batch = 0;
  failed.config = a.config;
  const auto lost = compare_results({a}, {failed}, 0.02);
  EXPECT_EQ(lost.jobs[0].verdict, "failed in B");
  EXPECT_TRUE(lost.regression);
}

// --same-batch keeps a 2020-batch run beside the max-batch run of the same job: each pairs with
// its own kind, whatever the order the files list them in.
TEST(CompareTest, RecordsPairWithTheirOwnIdentityFirst) {
  JobRecord searched = job("a", 100);
  JobRecord at_2020 = job("a", 80);
  at_2020.batch = 32;
  at_2020.batch_source = "2020";
  JobRecord searched_b = searched;
  searched_b.batch = 70;
  searched_b.device.name = "NVIDIA H100";
  JobRecord at_2020_b = at_2020;
  at_2020_b.device.name = "NVIDIA H100";
  const auto result = compare_results({searched, at_2020}, {at_2020_b, searched_b}, 0.02);
  ASSERT_EQ(result.jobs.size(), 2u);
  EXPECT_EQ(result.jobs[0].not_comparable(), "batch 64 vs 70");
  EXPECT_EQ(result.jobs[1].verdict, "within noise");
  EXPECT_EQ(result.jobs[1].b->batch_source, "2020");
  // A second record of one job on B (another device) is listed, not dropped.
  JobRecord other = searched;
  other.device.name = "NVIDIA H100";
  const auto two_devices = compare_results({searched}, {searched, other}, 0.02);
  ASSERT_EQ(two_devices.jobs.size(), 2u);
  EXPECT_EQ(two_devices.jobs[1].verdict, "only in B");
}

TEST(CompareTest, TheJsonKeepsItsKeysAndGainsTheIntervalAndTheReason) {
  JobRecord four = job("b", 100);
  four.batch = 4;
  const auto result = compare_results({repeated("a", {100, 102, 98, 101, 99}), job("b", 100)},
                                      {repeated("a", {110, 112, 108, 111, 109}), four}, 0.02);
  const Json json = Json::parse(printed(result, "json"));
  EXPECT_EQ(json["regression"], false);
  const Json& a = json["jobs"][0];
  for (const char* key : {"model", "precision", "memory_cap_gib", "a_throughput", "b_throughput",
                          "ratio", "verdict", "basis"}) {
    EXPECT_TRUE(a.contains(key)) << key;
  }
  EXPECT_NEAR(a["ratio"].get<double>(), 1.1, 1e-12);
  EXPECT_NEAR(a["ratio_ci95_low"].get<double>(), 1.0760098275552122, 1e-10);
  EXPECT_NEAR(a["ratio_ci95_high"].get<double>(), 1.1245771137263622, 1e-10);
  EXPECT_NEAR(a["p_value"].get<double>(), 8.488181527628492e-6, 1e-12);
  EXPECT_TRUE(a["not_comparable"].is_null());
  EXPECT_EQ(a["differences"], Json::array());
  const Json& b = json["jobs"][1];
  EXPECT_EQ(b["verdict"], "not comparable");
  EXPECT_EQ(b["not_comparable"], "batch 64 vs 4");
  EXPECT_EQ(b["differences"][0], (Json{{"field", "batch"}, {"a", "64"}, {"b", "4"}}));
  EXPECT_TRUE(b["ratio"].is_null());
  EXPECT_TRUE(b["ratio_ci95_low"].is_null());
}

TEST(CompareTest, FailedJobsAreVerdictsNotRatiosAndOneSidedJobsAreListed) {
  const auto result = compare_results(
      {job("a", 100), job("b", 0, JobStatus::diverged), job("c", 100), job("only-a", 1)},
      {job("a", 0, JobStatus::failed), job("b", 100), job("c", 100), job("only-b", 1)}, 0.02);
  EXPECT_EQ(find(result, "a").verdict, "failed in B");
  EXPECT_FALSE(find(result, "a").ratio.has_value());
  EXPECT_EQ(find(result, "b").verdict, "failed in A");
  EXPECT_EQ(find(result, "c").verdict, "within noise");
  EXPECT_EQ(find(result, "only-a").verdict, "only in A");
  EXPECT_EQ(find(result, "only-b").verdict, "only in B");
  EXPECT_EQ(result.jobs.back().model, "only-b");  // A's order, then B's own
  EXPECT_TRUE(result.regression);                 // B failed where A trained
  const std::string text = printed(result, "table");
  EXPECT_NE(text.find("failed in B"), std::string::npos) << text;
  EXPECT_NE(text.find("A: NVIDIA H200; B: NVIDIA H200"), std::string::npos) << text;
}

TEST(CompareTest, FilesThatShareNoJobAreBadInput) {
  JobRecord bf16 = job("a", 100);
  bf16.precision = "amp-bf16";
  try {
    compare_results({job("a", 100)}, {bf16}, 0.02);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("A and B share no job (A: a fp32; B: a amp-bf16)"),
              std::string::npos)
        << e.what();
  }
  // Memory-tier records have no throughput: they are not compared.
  JobRecord tier = job("a", 0);
  tier.search_only = true;
  EXPECT_THROW(compare_results({tier}, {tier}, 0.02), ConfigError);
  EXPECT_THROW(compare_results({job("a", 1)}, {job("a", 1)}, 1.5), ConfigError);
  std::ostringstream out;
  EXPECT_THROW(print_comparison(out, compare_results({job("a", 1)}, {job("a", 1)}, 0.02), "xml"),
               ConfigError);
}

}  // namespace
}  // namespace gpubench
