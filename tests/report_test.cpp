// Reporters against golden output, from fixed records.
#include "gpubench/config.h"
#include "gpubench/errors.h"
#include "gpubench/registry.h"
#include "gpubench/report/reporter.h"
#include "gpubench/runner.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <sstream>

namespace gpubench {
namespace {

const ConfigStore& store() {
  static const ConfigStore s = ConfigStore::load_builtin(builtin_registry());
  return s;
}

JobRecord h200(const std::string& model, const std::string& precision, int64_t batch,
               double throughput) {
  JobRecord r;
  r.model = model;
  r.family = "language";
  r.precision = precision;
  r.batch_unit = "sequences";
  r.throughput_unit = "examples/s";
  r.device.type = "cuda";
  r.device.index = 0;
  r.device.name = "NVIDIA H200";
  r.batch = batch;
  r.batch_source = "search";
  r.throughput = throughput;
  r.timing = summarize_steps({100, 101, 99}, 0.3);
  r.peak_memory_bytes = int64_t{130} << 30;
  SearchRecord s;
  s.max_batch = batch;
  s.largest_pow2 = largest_power_of_two_at_most(batch);
  s.probes.resize(5);
  s.seconds = 21.5;
  s.bytes_per_sample = 1e8;
  s.fixed_bytes = 2e9;
  r.search = s;
  r.wall_seconds = 40.25;
  r.created_utc = "2026-11-30T00:00:00Z";
  r.config = store().model(model).to_json();
  normalize(r, store().model(model), store().reference());
  return r;
}

std::vector<JobRecord> sample() {
  std::vector<JobRecord> jobs = {h200("bert-base", "fp32", 1312, 1880),
                                 h200("bert-base", "amp-bf16", 1400, 4700),
                                 h200("bert-base-mlm", "fp32", 1100, 1500)};
  JobRecord capped = h200("bert-base", "fp32", 300, 1700);
  capped.memory_cap_gib = 24;
  capped.emulated = true;
  jobs.push_back(capped);
  return jobs;
}

std::string render(const std::string& format, const std::vector<JobRecord>& jobs) {
  std::ostringstream out;
  make_reporter(format, out)->report(jobs, store().reference());
  return out.str();
}

TEST(ReportTest, NormalizesEachRunToTheRtx8000) {
  const auto jobs = sample();
  ASSERT_TRUE(jobs[0].normalized.has_value());
  EXPECT_DOUBLE_EQ(jobs[0].normalized->score, 1880.0 / 94.0);
  EXPECT_DOUBLE_EQ(jobs[0].normalized->baseline_max_batch, 128);
  EXPECT_FALSE(jobs[2].normalized.has_value());  // the twin has no 2020 row
  const Comparison c = build_comparison(jobs, store().reference());
  ASSERT_EQ(c.models, (std::vector<std::string>{"bert-base", "bert-base-mlm"}));
  ASSERT_EQ(c.runs.size(), 3u);
  EXPECT_EQ(c.runs[0].label, "H200 fp32");
  EXPECT_EQ(c.runs[1].label, "H200 amp-bf16");
  EXPECT_EQ(c.runs[2].label, "H200 fp32 @24GiB");
  EXPECT_DOUBLE_EQ(*c.cells[0][1].normalized, 50.0);
  EXPECT_FALSE(c.cells[1][1].present);
}

TEST(ReportTest, TableGolden) {
  EXPECT_EQ(
      render("table", sample()),
      R"(Training throughput normalized to the RTX 8000 (Lambda 2020); max batch in parentheses
model          unit          H200 fp32  H200 amp-bf16  H200 fp32 @24GiB   RTX 2060    RTX 2070    RTX 2080  GTX 1080 Ti  RTX 2080 Ti  Titan RTX   RTX 6000    RTX 8000
-------------  ----------  -----------  -------------  ----------------  ---------  ----------  ----------  -----------  -----------  ---------  ---------  ----------
bert-base      examples/s  20.0 (1312)    50.0 (1400)        18.1 (300)  0.362 (8)  0.500 (16)  0.617 (16)   0.638 (32)   0.883 (32)  1.09 (64)  1.04 (64)  1.00 (128)
bert-base-mlm  examples/s          n/a

Measured
model          device       precision  status           batch       throughput  vs RTX 8000  step median  peak memory            search    wall
-------------  -----------  ---------  ------  --------------  ---------------  -----------  -----------  -----------  ----------------  ------
bert-base      NVIDIA H200  fp32       ok      1312 sequences  1880 examples/s         20.0       100 ms    130.0 GiB  5 probes, 21.5 s  40.2 s
bert-base      NVIDIA H200  amp-bf16   ok      1400 sequences  4700 examples/s         50.0       100 ms    130.0 GiB  5 probes, 21.5 s  40.2 s
bert-base-mlm  NVIDIA H200  fp32       ok      1100 sequences  1500 examples/s            -       100 ms    130.0 GiB  5 probes, 21.5 s  40.2 s
bert-base      NVIDIA H200  fp32       ok       300 sequences  1700 examples/s         18.1       100 ms    130.0 GiB  5 probes, 21.5 s  40.2 s

note: @N GiB columns are emulated: the caching allocator was capped at N GiB; the CUDA context and library workspaces outside the allocator are not capped, so a real card of that size fits somewhat less.
)");
}

TEST(ReportTest, MarkdownGolden) {
  std::vector<JobRecord> jobs = {sample()[0]};
  EXPECT_EQ(
      render("md", jobs),
      R"(### Training throughput normalized to the RTX 8000 (Lambda 2020); max batch in parentheses

| model     | unit       |   H200 fp32 |  RTX 2060 |   RTX 2070 |   RTX 2080 | GTX 1080 Ti | RTX 2080 Ti | Titan RTX |  RTX 6000 |   RTX 8000 |
| :-------- | :--------- | ----------: | --------: | ---------: | ---------: | ----------: | ----------: | --------: | --------: | ---------: |
| bert-base | examples/s | 20.0 (1312) | 0.362 (8) | 0.500 (16) | 0.617 (16) |  0.638 (32) |  0.883 (32) | 1.09 (64) | 1.04 (64) | 1.00 (128) |

### Measured

| model     | device      | precision | status |          batch |      throughput | vs RTX 8000 | step median | peak memory |           search |   wall |
| :-------- | :---------- | :-------- | :----- | -------------: | --------------: | ----------: | ----------: | ----------: | ---------------: | -----: |
| bert-base | NVIDIA H200 | fp32      | ok     | 1312 sequences | 1880 examples/s |        20.0 |      100 ms |   130.0 GiB | 5 probes, 21.5 s | 40.2 s |
)");
}

TEST(ReportTest, CsvGolden) {
  std::vector<JobRecord> jobs = {sample()[0]};
  jobs[0].message = "warning: a \"quoted\", message";
  const std::string csv = render("csv", jobs);
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_EQ(header,
            "model,family,device,device_type,precision,emulated,memory_cap_gib,status,batch,"
            "batch_unit,batch_source,max_batch,largest_pow2_batch,search_probes,search_seconds,"
            "throughput,throughput_unit,normalized_score,rtx8000_2020_throughput,"
            "rtx8000_2020_max_batch,step_time_ms_median,step_time_ms_mean,step_time_ms_min,"
            "step_time_ms_max,step_time_ms_stddev,timed_steps,window_seconds,peak_memory_bytes,"
            "bytes_per_sample,fixed_bytes,trainable_params,wall_seconds,gpubench_commit,"
            "created_utc,message");
  EXPECT_EQ(csv.substr(header.size() + 1),
            "bert-base,language,NVIDIA H200,cuda,fp32,false,,ok,1312,sequences,search,1312,1024,5,"
            "21.5,1880,examples/s,20,94,128,100,100,99,101,1,3,0.3,139586437120,100000000,"
            "2000000000,0,40.25,,2026-11-30T00:00:00Z,\"warning: a \"\"quoted\"\", message\"\n");
}

TEST(ReportTest, JsonHasTheComparisonAndTheJobs) {
  const Json doc = Json::parse(render("json", sample()));
  EXPECT_EQ(doc["schema"], "gpubench-report");
  EXPECT_EQ(doc["schema_version"], kResultSchemaVersion);
  EXPECT_EQ(doc["baseline_gpu"], "quadro-rtx-8000");
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][2]["memory_cap_gib"], 24.0);
  const Json& bert = doc["rows"][0];
  EXPECT_EQ(bert["model"], "bert-base");
  EXPECT_DOUBLE_EQ(bert["measured"][0]["normalized"].get<double>(), 20.0);
  EXPECT_EQ(bert["reference_2020"]["row"], "BERT Base");
  EXPECT_DOUBLE_EQ(bert["reference_2020"]["rtx-2060"]["normalized"].get<double>(), 34.0 / 94.0);
  EXPECT_TRUE(doc["rows"][1]["reference_2020"].is_null());
  EXPECT_TRUE(doc["rows"][1]["measured"][1].is_null());
  EXPECT_EQ(doc["jobs"].size(), 4u);
}

TEST(ReportTest, FailedAndNoFitRunsShowTheirStatus) {
  std::vector<JobRecord> jobs = sample();
  jobs.resize(2);
  jobs[0].status = "no-fit";
  jobs[0].normalized.reset();
  jobs[1].status = "timeout";
  jobs[1].message = "time worker timed out after 1800 s";
  jobs[1].normalized.reset();
  const std::string table = render("table", jobs);
  const std::string row = table.substr(table.find("\nbert-base ") + 1);
  EXPECT_EQ(row.rfind("bert-base  examples/s        OOM        timeout  0.362 (8)", 0), 0u)
      << table;
  EXPECT_NE(table.find("note: bert-base: time worker timed out after 1800 s"), std::string::npos);
}

TEST(ReportTest, UnknownFormatIsABadInput) {
  std::ostringstream out;
  EXPECT_THROWS_WITH(make_reporter("htlm", out), ConfigError, "--format: unknown format 'htlm'");
}

TEST(ReportTest, ResultFilesRoundTrip) {
  testing::TempDir dir;
  ResultDocument doc;
  doc.created_utc = "2026-11-30T00:00:00Z";
  doc.command_line = {"gpubench", "run"};
  doc.jobs = sample();
  write_file_atomically(dir.file("r.json"), doc.to_json().dump());
  const auto jobs = read_results({dir.file("r.json")});
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(render("csv", jobs), render("csv", doc.jobs));
  EXPECT_EQ(jobs[3].memory_cap_gib, 24.0);
  EXPECT_EQ(jobs[0].search->max_batch, 1312);

  testing::write_file(dir.file("other.json"), R"({"schema": "something-else"})");
  EXPECT_THROWS_WITH(read_results({dir.file("other.json")}), ConfigError,
                     "not a gpubench result file");
  testing::write_file(dir.file("future.json"),
                      R"({"schema": "gpubench-result", "schema_version": 99})");
  EXPECT_THROWS_WITH(read_results({dir.file("future.json")}), ConfigError,
                     "result schema version 99 is not supported");
  EXPECT_THROWS_WITH(read_results({dir.file("nope.json")}), ConfigError, "cannot be read");
}

}  // namespace
}  // namespace gpubench
