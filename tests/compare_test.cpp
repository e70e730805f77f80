// gpubench compare: the verdict per job, and what counts as a regression.
#include "gpubench/report/compare.h"

#include "gpubench/base/errors.h"

#include <gtest/gtest.h>

#include <sstream>

namespace gpubench {
namespace {

JobRecord job(const std::string& model, double throughput, const std::string& status = "ok") {
  JobRecord r;
  r.model = model;
  r.precision = "fp32";
  r.throughput_unit = "examples/s";
  r.device.type = "cuda";
  r.device.name = "NVIDIA H200";
  r.status = status;
  r.throughput = status == "ok" ? throughput : 0;
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

TEST(CompareTest, IntervalsDecideWhereBothSidesHaveThem) {
  const auto result =
      compare_results({repeated("a", {100, 101, 102}), repeated("b", {100, 101, 102})},
                      {repeated("a", {110, 111, 112}), repeated("b", {99, 103, 101})}, 0.02);
  EXPECT_EQ(find(result, "a").verdict, "faster");
  EXPECT_EQ(find(result, "a").basis, "95% intervals apart");
  EXPECT_NEAR(*find(result, "a").ratio, 111.0 / 101.0, 1e-12);
  EXPECT_EQ(find(result, "b").verdict, "within noise");
  EXPECT_EQ(find(result, "b").basis, "95% intervals overlap");
  EXPECT_FALSE(result.regression);
  // Apart and lower: slower, a regression.
  const auto worse =
      compare_results({repeated("a", {100, 101, 102})}, {repeated("a", {90, 91, 92})}, 0.02);
  EXPECT_EQ(worse.jobs[0].verdict, "slower");
  EXPECT_TRUE(worse.regression);
}

TEST(CompareTest, WithoutAnIntervalTheNoiseThresholdDecides) {
  const auto result = compare_results({job("a", 100), job("b", 100), job("c", 100)},
                                      {job("a", 101.5), job("b", 103), job("c", 97)}, 0.02);
  EXPECT_EQ(find(result, "a").verdict, "within noise");
  EXPECT_EQ(find(result, "a").basis,
            "no interval (one timed run each): the difference against ±2%");
  EXPECT_EQ(find(result, "b").verdict, "faster");
  EXPECT_EQ(find(result, "c").verdict, "slower");
  EXPECT_TRUE(result.regression);
  // A wider threshold takes 3% as noise.
  EXPECT_FALSE(compare_results({job("c", 100)}, {job("c", 97)}, 0.05).regression);
}

TEST(CompareTest, FailedJobsAreVerdictsNotRatiosAndOneSidedJobsAreListed) {
  const auto result = compare_results(
      {job("a", 100), job("b", 0, "diverged"), job("c", 100), job("only-a", 1)},
      {job("a", 0, "failed"), job("b", 100), job("c", 100), job("only-b", 1)}, 0.02);
  EXPECT_EQ(find(result, "a").verdict, "failed in B");
  EXPECT_FALSE(find(result, "a").ratio.has_value());
  EXPECT_EQ(find(result, "b").verdict, "failed in A");
  EXPECT_EQ(find(result, "c").verdict, "within noise");
  EXPECT_EQ(find(result, "only-a").verdict, "only in A");
  EXPECT_EQ(find(result, "only-b").verdict, "only in B");
  EXPECT_EQ(result.jobs.back().model, "only-b");  // A's order, then B's own
  EXPECT_TRUE(result.regression);                 // B failed where A trained
  std::ostringstream text;
  print_comparison(text, result, "table");
  EXPECT_NE(text.str().find("failed in B"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("A: NVIDIA H200; B: NVIDIA H200"), std::string::npos) << text.str();
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
