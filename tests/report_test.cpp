// Reporters against golden output, from fixed records.
#include "gpubench/config/config.h"
#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"
#include "gpubench/device/device.h"
#include "gpubench/records/journal.h"
#include "gpubench/train/registry.h"
#include "gpubench/report/reporter.h"
#include "gpubench/run/job.h"
#include "gpubench/base/strings.h"
#include "src/report/html_charts.h"
#include "src/report/svg.h"
#include "tests/builtin_store.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

namespace gpubench {
namespace {

using testing::builtin_store;

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
  r.config = builtin_store().model(model).to_json();
  normalize(r, builtin_store().model(model), builtin_store().reference());
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
  make_reporter(format, out)->report(jobs, builtin_store().reference());
  return out.str();
}

TEST(ReportTest, NormalizesEachRunToTheRtx8000) {
  const auto jobs = sample();
  ASSERT_TRUE(jobs[0].normalized.has_value());
  EXPECT_DOUBLE_EQ(jobs[0].normalized->score, 1880.0 / 94.0);
  EXPECT_DOUBLE_EQ(jobs[0].normalized->baseline_max_batch, 128);
  EXPECT_FALSE(jobs[2].normalized.has_value());  // the twin has no 2020 row
  const Comparison c = build_comparison(jobs, builtin_store().reference());
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

Geometric mean of normalized throughput per family (RTX 8000 = 1.00)
family    models  H200 fp32  H200 amp-bf16  H200 fp32 @24GiB  RTX 2060  RTX 2070  RTX 2080  GTX 1080 Ti  RTX 2080 Ti  Titan RTX  RTX 6000  RTX 8000
--------  ------  ---------  -------------  ----------------  --------  --------  --------  -----------  -----------  ---------  --------  --------
language  1 of 1       20.0           50.0              18.1     0.362     0.500     0.617        0.638        0.883       1.09      1.04      1.00

note: a row's means are over the models its runs measured OK ("models"; twins without a 2020 row have no normalized score and are not counted), the 2020 GPUs' over the same models, so a row compares like with like

Max batch: the search's largest fitting batch beside the 2020 max batch
model          batch unit  H200 fp32  H200 amp-bf16  H200 fp32 @24GiB  RTX 2060  RTX 2070  RTX 2080  GTX 1080 Ti  RTX 2080 Ti  Titan RTX  RTX 6000  RTX 8000
-------------  ----------  ---------  -------------  ----------------  --------  --------  --------  -----------  -----------  ---------  --------  --------
bert-base      sequences        1312           1400               300         8        16        16           32           32         64        64       128
bert-base-mlm  sequences        1100

Measured
model          device       precision  status           batch       throughput  vs RTX 8000  step median  SM clock  power  per joule  TFLOP/s  of peak  peak memory            search    wall
-------------  -----------  ---------  ------  --------------  ---------------  -----------  -----------  --------  -----  ---------  -------  -------  -----------  ----------------  ------
bert-base      NVIDIA H200  fp32       ok      1312 sequences  1880 examples/s         20.0       100 ms         -      -          -        -        -    130.0 GiB  5 probes, 21.5 s  40.2 s
bert-base      NVIDIA H200  amp-bf16   ok      1400 sequences  4700 examples/s         50.0       100 ms         -      -          -        -        -    130.0 GiB  5 probes, 21.5 s  40.2 s
bert-base-mlm  NVIDIA H200  fp32       ok      1100 sequences  1500 examples/s            -       100 ms         -      -          -        -        -    130.0 GiB  5 probes, 21.5 s  40.2 s
bert-base      NVIDIA H200  fp32       ok       300 sequences  1700 examples/s         18.1       100 ms         -      -          -        -        -    130.0 GiB  5 probes, 21.5 s  40.2 s

note: @N GiB columns are emulated: the cap limited PyTorch's caching allocator only (records from before the cap took the context off it): the CUDA context and the loaded kernels, about 0.5-0.7 GiB on an H200, came on top, so a real card of that size fits less.
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

### Geometric mean of normalized throughput per family (RTX 8000 = 1.00)

| family   | models | H200 fp32 | RTX 2060 | RTX 2070 | RTX 2080 | GTX 1080 Ti | RTX 2080 Ti | Titan RTX | RTX 6000 | RTX 8000 |
| :------- | :----- | --------: | -------: | -------: | -------: | ----------: | ----------: | --------: | -------: | -------: |
| language | 1 of 1 |      20.0 |    0.362 |    0.500 |    0.617 |       0.638 |       0.883 |      1.09 |     1.04 |     1.00 |

- a row's means are over the models its runs measured OK ("models"; twins without a 2020 row have no normalized score and are not counted), the 2020 GPUs' over the same models, so a row compares like with like

### Max batch: the search's largest fitting batch beside the 2020 max batch

| model     | batch unit | H200 fp32 | RTX 2060 | RTX 2070 | RTX 2080 | GTX 1080 Ti | RTX 2080 Ti | Titan RTX | RTX 6000 | RTX 8000 |
| :-------- | :--------- | --------: | -------: | -------: | -------: | ----------: | ----------: | --------: | -------: | -------: |
| bert-base | sequences  |      1312 |        8 |       16 |       16 |          32 |          32 |        64 |       64 |      128 |

### Measured

| model     | device      | precision | status |          batch |      throughput | vs RTX 8000 | step median | SM clock | power | per joule | TFLOP/s | of peak | peak memory |           search |   wall |
| :-------- | :---------- | :-------- | :----- | -------------: | --------------: | ----------: | ----------: | -------: | ----: | --------: | ------: | ------: | ----------: | ---------------: | -----: |
| bert-base | NVIDIA H200 | fp32      | ok     | 1312 sequences | 1880 examples/s |        20.0 |      100 ms |        - |     - |         - |       - |       - |   130.0 GiB | 5 probes, 21.5 s | 40.2 s |
)");
}

// The CSV's columns as schema 1 shipped them. Columns are only ever appended (docs/output.md,
// "Versioning"): a column inserted or renamed among these breaks every reader that counts
// columns, and fails here.
constexpr const char* kCsvSchema1Columns =
    "model,family,device,device_type,precision,emulated,search_only,memory_cap_gib,status,batch,"
    "batch_unit,batch_source,max_batch,largest_pow2_batch,search_probes,search_seconds,"
    "throughput,throughput_unit,throughput_runs,throughput_ci95_low,throughput_ci95_high,"
    "normalized_score,rtx8000_2020_throughput,rtx8000_2020_max_batch,step_time_ms_median,"
    "step_time_ms_mean,step_time_ms_min,step_time_ms_max,step_time_ms_stddev,timed_steps,"
    "window_seconds,sm_clock_mhz_median,sm_clock_max_mhz,power_w_mean,power_limit_w,throttled,"
    "joules_per_step,units_per_joule,flops_per_unit,tflops,peak_tflops,peak_share,"
    "window_alloc_retries,outside_allocator_bytes,peak_memory_bytes,bytes_per_sample,"
    "fixed_bytes,trainable_params,wall_seconds,gpubench_commit,created_utc,message";

TEST(ReportTest, CsvColumnsAreOnlyAppendedAndTheSchemaVersionNamesTheRow) {
  const std::string csv = render("csv", {sample()[0]});
  const std::string header = csv.substr(0, csv.find('\n'));
  const std::string schema1 = kCsvSchema1Columns;
  ASSERT_EQ(header.substr(0, schema1.size()), schema1)
      << "a CSV column was inserted, renamed or moved among schema 1's: append new columns at "
         "the end and raise kCsvSchemaVersion";
  // The sample's cells hold no quoted commas: a plain split reads them.
  auto cells = [](const std::string& line) {
    std::vector<std::string> out(1);
    for (char ch : line) {
      if (ch == ',') {
        out.emplace_back();
      } else {
        out.back().push_back(ch);
      }
    }
    return out;
  };
  const std::size_t row_start = header.size() + 1;
  const auto columns = cells(header);
  const auto values = cells(csv.substr(row_start, csv.find('\n', row_start) - row_start));
  ASSERT_EQ(columns.size(), values.size());
  const auto at = std::find(columns.begin(), columns.end(), "schema_version");
  ASSERT_NE(at, columns.end());
  EXPECT_EQ(values[static_cast<std::size_t>(at - columns.begin())],
            std::to_string(kCsvSchemaVersion));
}

TEST(ReportTest, CsvGolden) {
  std::vector<JobRecord> jobs = {sample()[0]};
  jobs[0].message = "warning: a \"quoted\", message";
  const std::string csv = render("csv", jobs);
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_EQ(header,
            "model,family,device,device_type,precision,emulated,search_only,memory_cap_gib,status,"
            "batch,"
            "batch_unit,batch_source,max_batch,largest_pow2_batch,search_probes,search_seconds,"
            "throughput,throughput_unit,throughput_runs,throughput_ci95_low,throughput_ci95_high,"
            "normalized_score,rtx8000_2020_throughput,"
            "rtx8000_2020_max_batch,step_time_ms_median,step_time_ms_mean,step_time_ms_min,"
            "step_time_ms_max,step_time_ms_stddev,timed_steps,window_seconds,"
            "sm_clock_mhz_median,sm_clock_max_mhz,power_w_mean,power_limit_w,throttled,"
            "joules_per_step,units_per_joule,flops_per_unit,tflops,peak_tflops,peak_share,"
            "window_alloc_retries,outside_allocator_bytes,peak_memory_bytes,"
            "bytes_per_sample,fixed_bytes,trainable_params,wall_seconds,gpubench_commit,"
            "created_utc,message,schema_version,host,os,driver,cuda_runtime,cudnn,libtorch,"
            "usd_per_hour,price_source,usd_per_million_units,units_per_usd,joules_per_unit,"
            "units_per_kwh,throttle_note");
  EXPECT_EQ(csv.substr(header.size() + 1),
            "bert-base,language,NVIDIA H200,cuda,fp32,false,false,,ok,1312,sequences,search,1312,"
            "1024,5,"
            "21.5,1880,examples/s,,,,20,94,128,100,100,99,101,1,3,0.3,,,,,,,,,,,,,,139586437120,"
            "100000000,"
            "2000000000,0,40.25,,2026-11-30T00:00:00Z,\"warning: a \"\"quoted\"\", message\","
            "3,,,,,,,,,,,,,\n");
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
  jobs[0].status = JobStatus::no_fit;
  jobs[0].normalized.reset();
  jobs[1].status = JobStatus::timeout;
  jobs[1].message = "time worker timed out after 1800 s";
  jobs[1].normalized.reset();
  const std::string table = render("table", jobs);
  const std::string row = table.substr(table.find("\nbert-base ") + 1);
  EXPECT_EQ(row.rfind("bert-base  examples/s        OOM        timeout  0.362 (8)", 0), 0u)
      << table;
  EXPECT_NE(table.find("note: bert-base: time worker timed out after 1800 s"), std::string::npos);
}

TEST(ReportTest, ADivergedJobIsAFailedRowNeverAThroughput) {
  std::vector<JobRecord> jobs = sample();
  jobs.resize(2);
  jobs[1].status = JobStatus::diverged;
  jobs[1].message = "loss 'mlm' is NaN at the end of the timed window";
  jobs[1].diverged_throughput = jobs[1].throughput;
  jobs[1].throughput = 0;
  jobs[1].normalized.reset();
  const std::string table = render("table", jobs);
  const std::string row = table.substr(table.find("\nbert-base ") + 1);
  EXPECT_EQ(row.rfind("bert-base  examples/s  20.0 (1312)       diverged", 0), 0u) << table;
  EXPECT_NE(table.find("note: bert-base: loss 'mlm' is NaN"), std::string::npos) << table;
  // No 4700 anywhere: the diverged job's timing is not a result.
  EXPECT_EQ(table.find("4700"), std::string::npos) << table;
  const std::string csv = render("csv", jobs);
  EXPECT_EQ(csv.find("4700"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",diverged,"), std::string::npos) << csv;
  // The family mean leaves it out: only the fp32 run has a score.
  const Comparison c = build_comparison(jobs, builtin_store().reference());
  const auto families = summarize_families(c, builtin_store().reference());
  ASSERT_FALSE(families.empty());
  int counted = 0;
  for (const auto& family : families) {
    for (const auto& run : family.runs) {
      if (!run || !run->value) continue;
      ++counted;
      EXPECT_NEAR(*run->value, 1880.0 / 94.0, 1e-9);
      EXPECT_EQ(run->counted, std::vector<std::string>{"bert-base"});
    }
  }
  EXPECT_EQ(counted, 1);
}

// A 2020 row that was probably fp16 (conv-seq2seq) is marked, and the like-for-like table
// scores it by the amp-fp16 run, the fp32 rows by the fp32 run.
TEST(ReportTest, A2020RowOfAnotherPrecisionIsMarkedAndScoredAtThatPrecision) {
  const ReferenceRow* row = builtin_store().reference().find_row("Conv. Seq2Seq");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->precision, "amp-fp16");
  EXPECT_FALSE(row->precision_evidence.empty());
  EXPECT_EQ(builtin_store().reference().find_row("BERT Base")->precision, "fp32");
  const std::vector<JobRecord> jobs = {
      h200("bert-base", "fp32", 1312, 1880), h200("conv-seq2seq", "fp32", 150000, 90000),
      h200("conv-seq2seq", "amp-fp16", 200000, 224500), h200("bert-base", "amp-fp16", 1500, 4230)};
  const std::string table = render("table", jobs);
  EXPECT_NE(table.find("conv-seq2seq (!)"), std::string::npos);
  const auto at = table.find("Like-for-like precision");
  ASSERT_NE(at, std::string::npos);
  const std::string like = table.substr(at, table.find("\n\n", at) - at);
  auto line_of = [&](const std::string& model) {
    const auto start = like.find("\n" + model + " ");
    return start == std::string::npos ? std::string()
                                      : like.substr(start + 1, like.find('\n', start + 1) - start);
  };
  // conv-seq2seq: 224500 / 22450 = 10.0 from the amp-fp16 run; bert-base 1880 / 94 = 20.0 fp32.
  const std::string conv = line_of("conv-seq2seq");
  EXPECT_NE(conv.find("amp-fp16"), std::string::npos) << like;
  EXPECT_NE(conv.find("10.0 (200000)"), std::string::npos) << like;
  const std::string bert = line_of("bert-base");
  EXPECT_NE(bert.find("20.0 (1312)"), std::string::npos) << like;
  EXPECT_EQ(bert.find("45.0"), std::string::npos) << like;  // not the amp-fp16 run's 4230 / 94
  // Without such a row, no table.
  EXPECT_EQ(render("table", sample()).find("Like-for-like"), std::string::npos);
}

// A run at the RTX 8000's 2020 batch (--same-batch) is its own column beside the max-batch run
// of the same job, not a retry that replaces it.
TEST(ReportTest, ASameBatchRunIsAColumnBesideTheMaxBatchRun) {
  JobRecord same = h200("bert-base", "fp32", 128, 1100);
  same.batch_source = "2020";
  same.search.reset();
  const std::vector<JobRecord> jobs = {h200("bert-base", "fp32", 1312, 1880), same};
  EXPECT_NE(job_key(jobs[0]), job_key(jobs[1]));
  const Comparison c = build_comparison(jobs, builtin_store().reference());
  ASSERT_EQ(c.runs.size(), 2u);
  EXPECT_EQ(c.runs[1].label, "H200 fp32 @2020 batch");
  EXPECT_DOUBLE_EQ(*c.cells[0][0].normalized, 1880.0 / 94);
  EXPECT_DOUBLE_EQ(*c.cells[0][1].normalized, 1100.0 / 94);
  EXPECT_NE(render("table", jobs).find("11.7 (128)"), std::string::npos);
}

TEST(ReportTest, PricesAreCheckedAndGiveScorePerThousandDollars) {
  EXPECT_THROW(parse_prices({"H200=-1"}), ConfigError);
  EXPECT_THROW(parse_prices({"H200=0"}), ConfigError);
  EXPECT_THROW(parse_prices({"H200=abc"}), ConfigError);
  EXPECT_THROW(parse_prices({"H200=30000$"}), ConfigError);
  EXPECT_THROW(parse_prices({"=30000"}), ConfigError);
  EXPECT_THROW(parse_prices({"H200=1", "h200=2"}), ConfigError);
  const auto prices = parse_prices({"H200=30000"});
  ASSERT_EQ(prices.size(), 1u);
  EXPECT_DOUBLE_EQ(prices[0].usd, 30000);
  ReferenceTable reference = builtin_store().reference();
  const auto jobs = sample();
  EXPECT_THROW(apply_prices(reference, parse_prices({"A100=1"}), jobs), ConfigError);
  apply_prices(reference, prices, jobs);
  ASSERT_TRUE(reference.measured_price("NVIDIA H200").has_value());
  std::ostringstream out;
  make_reporter("table", out)->report(jobs, reference);
  const std::string text = out.str();
  const auto at = text.find("Performance per dollar");
  ASSERT_NE(at, std::string::npos);
  const std::string section = text.substr(at, text.find("\nnote:", at) - at);
  // bert-base fp32 scored 20.0: per $1000 at $30000, 0.667; the RTX 8000's 1.00 at $5500, 0.182.
  EXPECT_NE(section.find("H200 fp32 ($30000)"), std::string::npos) << section;
  EXPECT_NE(section.find("0.667"), std::string::npos) << section;
  EXPECT_NE(section.find("0.182"), std::string::npos) << section;
}

// ---- What a record must say of how it ran ----

// Every GPUBENCH_* variable and every platform variable that changes the computation or the
// allocator is recorded; those that change what a step computes mark the job modified.
TEST(ReportTest, VariablesThatChangeTheComputationAreRecordedAndMarkTheJob) {
  const char* entries[] = {"HOME=/root",
                           "GPUBENCH_QUIET=1",
                           "GPUBENCH_DETECT_ANOMALY=1",
                           "NVIDIA_TF32_OVERRIDE=0",
                           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                           "NCCL_DEBUG=INFO",
                           "CUDA_LAUNCH_BLOCKING=",
                           "NOT_A_VARIABLE",
                           nullptr};
  const Json v = env::select_variables(entries);
  EXPECT_EQ(v, (Json{{"GPUBENCH_QUIET", "1"},
                     {"GPUBENCH_DETECT_ANOMALY", "1"},
                     {"NVIDIA_TF32_OVERRIDE", "0"},
                     {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
                     {"NCCL_DEBUG", "INFO"},
                     {"CUDA_LAUNCH_BLOCKING", ""}}));
  // gpubench's own allocator option, a quiet switch, NCCL's logging and a variable set to
  // nothing change nothing; a diagnostic switch and TF32 turned off do.
  std::vector<std::string> modifying = env::modifying_variables(v);
  std::sort(modifying.begin(), modifying.end());
  EXPECT_EQ(modifying, (std::vector<std::string>{"GPUBENCH_DETECT_ANOMALY", "NVIDIA_TF32_OVERRIDE"}));
  EXPECT_EQ(env::modifying_variables(
                Json{{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True, max_split_size_mb:128"}}),
            (std::vector<std::string>{"PYTORCH_CUDA_ALLOC_CONF"}));
  // This process's own choice is what every worker's record holds.
  EXPECT_TRUE(environment_json(cpu_device_info()).contains("variables"));
  EXPECT_TRUE(environment_json(cpu_device_info()).contains("modified_by"));
}

// A modified job, or one on the CPU, gets no 2020 score, and every table says why; a record
// written with a score before this rule is read without it.
TEST(ReportTest, ModifiedAndCpuJobsAreNotScoredAndTheTablesSaySo) {
  const ModelConfig& config = builtin_store().model("bert-base");
  JobRecord tf32_off = h200("bert-base", "fp32", 1312, 1880);
  ASSERT_TRUE(tf32_off.normalized.has_value());
  tf32_off.environment = {{"variables", {{"NVIDIA_TF32_OVERRIDE", "0"}}},
                          {"modified_by", {"NVIDIA_TF32_OVERRIDE"}}};
  EXPECT_EQ(tf32_off.modifications(), (std::vector<std::string>{"NVIDIA_TF32_OVERRIDE"}));
  JobRecord stale = tf32_off;  // as a run before the rule wrote it: scored
  normalize(tf32_off, config, builtin_store().reference());
  EXPECT_FALSE(tf32_off.normalized.has_value());
  const std::string table = render("table", {tf32_off});
  EXPECT_NE(table.find("modified"), std::string::npos) << table;
  EXPECT_NE(table.find("bert-base: modified (NVIDIA_TF32_OVERRIDE=0), so it is not compared "
                       "with 2020"),
            std::string::npos)
      << table;
  const std::string summary = render("summary", {tf32_off});
  EXPECT_NE(summary.find("modified"), std::string::npos) << summary;
  EXPECT_NE(summary.find("NVIDIA_TF32_OVERRIDE=0"), std::string::npos) << summary;

  JobRecord cpu = h200("bert-base", "fp32", 2, 3.5);
  cpu.device = cpu_device_info();
  JobRecord stale_cpu = cpu;
  normalize(cpu, config, builtin_store().reference());
  EXPECT_FALSE(cpu.normalized.has_value());

  testing::TempDir dir;
  ResultDocument doc;
  doc.created_utc = "2026-11-30T00:00:00Z";
  doc.jobs = {stale, stale_cpu};
  ASSERT_TRUE(doc.jobs[0].normalized && doc.jobs[1].normalized);
  write_file_atomically(dir.file("old.json"), doc.to_json().dump());
  const auto read = read_results({dir.file("old.json")});
  ASSERT_EQ(read.size(), 2u);
  EXPECT_FALSE(read[0].normalized.has_value());
  EXPECT_FALSE(read[1].normalized.has_value());
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


// ---- Merging, journals ----

JournalHeader suite_header() {
  JournalHeader h;
  h.created_utc = "2026-11-30T00:00:00Z";
  h.command_line = {"gpubench", "run", "--suite", "language"};
  return h;
}

TEST(ReportTest, TheLastRecordOfAJobWinsAndKeepsItsPlace) {
  testing::TempDir dir;
  JobRecord failed = h200("bert-base", "fp32", 0, 0);
  failed.status = JobStatus::crashed;
  failed.message = "worker died of signal 9";
  failed.normalized.reset();
  {
    auto writer = JournalWriter::create(dir.file("suite.jsonl"), suite_header());
    writer.append(failed);
    writer.append(h200("bert-base-mlm", "fp32", 1100, 1500));
    writer.append(h200("bert-base", "fp32", 1312, 1880));  // the retry
  }
  const auto jobs = read_results({dir.file("suite.jsonl")});
  ASSERT_EQ(jobs.size(), 3u);
  const auto merged = latest_records(jobs);
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].model, "bert-base");
  EXPECT_EQ(merged[0].status, JobStatus::ok);
  EXPECT_EQ(merged[1].model, "bert-base-mlm");

  const Comparison c = build_comparison(jobs, builtin_store().reference());
  ASSERT_EQ(c.runs.size(), 1u);
  EXPECT_EQ(c.cells[0][0].status, JobStatus::ok);
  EXPECT_DOUBLE_EQ(*c.cells[0][0].normalized, 20.0);

  const std::string table = render("table", jobs);
  EXPECT_NE(table.find("note: 1 earlier record was replaced by a later one of the same job"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("signal 9"), std::string::npos) << "the failed try was replaced";
  const std::string csv = render("csv", jobs);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);  // header + two jobs

  // Different precision, cap or search-only are different jobs.
  JobRecord tier = h200("bert-base", "fp32", 200, 0);
  tier.search_only = true;
  tier.memory_cap_gib = 24;
  JobRecord capped = h200("bert-base", "fp32", 210, 900);
  capped.memory_cap_gib = 24;
  EXPECT_EQ(latest_records({jobs[2], tier, capped, h200("bert-base", "amp-bf16", 1, 1)}).size(),
            4u);
}

TEST(ReportTest, ReadsDocumentsAndJournalsByContentNotByName) {
  testing::TempDir dir;
  ResultDocument doc;
  doc.jobs = {h200("bert-base", "fp32", 1312, 1880)};
  doc.environment = {{"host", "box"}};
  doc.jobs[0].environment = Json::object();
  // Names that lie about the content.
  write_file_atomically(dir.file("run.jsonl"), doc.to_json().dump());
  JournalWriter::create(dir.file("suite.json"), suite_header())
      .append(h200("bert-base", "amp-bf16", 1400, 4700));
  const ResultFiles files = read_result_files({dir.file("run.jsonl"), dir.file("suite.json")});
  ASSERT_EQ(files.jobs.size(), 2u);
  EXPECT_TRUE(files.notes.empty());
  EXPECT_EQ(files.jobs[0].environment["host"], "box");  // the document's, given to its jobs
  EXPECT_EQ(files.jobs[1].precision, "amp-bf16");
  EXPECT_EQ(build_comparison(files.jobs, builtin_store().reference()).runs.size(), 2u);
}

TEST(ReportTest, AJournalTornAtItsLastLineReadsWithANote) {
  testing::TempDir dir;
  const std::string path = dir.file("suite.jsonl");
  JournalWriter::create(path, suite_header()).append(h200("bert-base", "fp32", 1312, 1880));
  testing::write_file(path, testing::read_file(path) + "{\"job\": {\"model\": \"tra");
  const ResultFiles files = read_result_files({path});
  ASSERT_EQ(files.jobs.size(), 1u);
  ASSERT_EQ(files.notes.size(), 1u);
  EXPECT_EQ(files.notes[0], path +
                                ": the last line was cut short (a run killed while writing it) "
                                "and is left out");
}

TEST(ReportTest, UnreadableInputIsAnErrorNamingTheFile) {
  testing::TempDir dir;
  EXPECT_THROWS_WITH(read_results({dir.path()}), ConfigError,
                     "result file '" + dir.path() + "' is a folder");
  testing::write_file(dir.file("empty.json"), "");
  EXPECT_THROWS_WITH(read_results({dir.file("empty.json")}), ConfigError,
                     "result file '" + dir.file("empty.json") + "' is empty");
  testing::write_file(dir.file("broken.json"), "{\"schema\": ");
  EXPECT_THROWS_WITH(read_results({dir.file("broken.json")}), ConfigError,
                     dir.file("broken.json"));
  testing::write_file(dir.file("damaged.jsonl"),
                      suite_header().to_json().dump() + "\nnot json\n{\"job\": {}}\n");
  EXPECT_THROWS_WITH(read_results({dir.file("damaged.jsonl")}), ConfigError,
                     dir.file("damaged.jsonl") + ":2:");
}

// ---- Geometric means ----

TEST(ReportTest, GeometricMeanPerFamilyComparesLikeWithLike) {
  JobRecord transformer = h200("transformer-big", "fp32", 262000, 15014);  // 2.0x RTX 8000
  transformer.batch_unit = "tokens";
  const std::vector<JobRecord> jobs = {h200("bert-base", "fp32", 1312, 1880),  // 20.0x
                                       transformer, h200("bert-base-mlm", "fp32", 1100, 1500)};
  const Comparison c = build_comparison(jobs, builtin_store().reference());
  const auto summaries = summarize_families(c, builtin_store().reference());
  ASSERT_EQ(summaries.size(), 1u);  // no image model
  const FamilySummary& s = summaries[0];
  EXPECT_EQ(s.family, "language");
  EXPECT_EQ(s.models, (std::vector<std::string>{"bert-base", "transformer-big"}));  // no twin
  EXPECT_TRUE(s.missing.empty());
  ASSERT_TRUE(s.runs[0].has_value());
  EXPECT_NEAR(*s.runs[0]->value, std::sqrt(20.0 * 2.0), 1e-12);
  EXPECT_EQ(s.runs[0]->counted.size(), 2u);
  EXPECT_EQ(s.runs[0]->of, 2u);
  const auto& reference = builtin_store().reference();
  // RTX 2080 Ti: both models.
  const std::size_t ti = *reference.gpu_index("rtx-2080-ti");
  EXPECT_NEAR(*s.reference[ti].value, std::sqrt(83.0 / 94.0 * 7780.0 / 7507.0), 1e-12);
  // RTX 2060 could not train Transformer Big (0 in 2020): left out, and the count says so.
  const std::size_t r2060 = *reference.gpu_index("rtx-2060");
  EXPECT_NEAR(*s.reference[r2060].value, 34.0 / 94.0, 1e-12);
  EXPECT_EQ(s.reference[r2060].counted, (std::vector<std::string>{"bert-base"}));
  EXPECT_EQ(s.reference[r2060].of, 2u);

  const std::string table = render("table", jobs);
  EXPECT_NE(table.find("language  2 of 2       6.32  0.362 (1 of 2)     0.553"), std::string::npos)
      << table;
}

TEST(ReportTest, RunsThatMeasuredDifferentModelsGetTheirOwnSummary) {
  JobRecord transformer = h200("transformer-big", "fp32", 262000, 15014);
  JobRecord failed = h200("transformer-big", "amp-bf16", 0, 0);
  failed.status = JobStatus::failed;
  failed.normalized.reset();
  const std::vector<JobRecord> jobs = {h200("bert-base", "fp32", 1312, 1880), transformer,
                                       h200("bert-base", "amp-bf16", 1400, 4700), failed};
  const Comparison c = build_comparison(jobs, builtin_store().reference());
  const auto summaries = summarize_families(c, builtin_store().reference());
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].models.size(), 2u);
  EXPECT_TRUE(summaries[0].runs[0].has_value());
  EXPECT_FALSE(summaries[0].runs[1].has_value());
  EXPECT_EQ(summaries[1].models, (std::vector<std::string>{"bert-base"}));
  EXPECT_EQ(summaries[1].missing, (std::vector<std::string>{"transformer-big"}));
  EXPECT_NEAR(*summaries[1].runs[1]->value, 50.0, 1e-12);
  EXPECT_EQ(summaries[1].runs[1]->of, 2u);
  // The 2020 means of the second row are over bert-base alone.
  EXPECT_NEAR(*summaries[1].reference[0].value, 34.0 / 94.0, 1e-12);
  EXPECT_NE(render("table", jobs).find("1 of 2 (not transformer-big)"), std::string::npos);
}

// ---- Memory tiers ----

JobRecord tier_record(const std::string& model, double cap, int64_t max_batch) {
  JobRecord r = h200(model, "fp32", max_batch, 0);
  r.normalized.reset();
  r.throughput = 0;
  r.search_only = true;
  r.emulated = true;
  r.memory_cap_gib = cap;
  r.search->max_batch = max_batch;
  if (max_batch == 0) r.status = JobStatus::no_fit;
  return r;
}

TEST(ReportTest, MemoryTierRecordsMakeTheirOwnTableNotThroughputColumns) {
  const std::vector<JobRecord> jobs = {
      tier_record("bert-base", 24, 233), tier_record("bert-base", 8, 49),
      tier_record("bert-base", 6, 0),    h200("bert-base", "fp32", 1312, 1880),
      tier_record("bert-base", 11, 80),  tier_record("bert-base-mlm", 11, 81)};
  const Comparison c = build_comparison(jobs, builtin_store().reference());
  ASSERT_EQ(c.runs.size(), 1u);  // the tier jobs (throughput 0) are no columns
  EXPECT_EQ(c.runs[0].label, "H200 fp32");

  const auto tables = build_memory_tiers(jobs, builtin_store().reference());
  ASSERT_EQ(tables.size(), 1u);
  const MemoryTierTable& t = tables[0];
  EXPECT_EQ(t.label, "H200 fp32");
  EXPECT_EQ(t.caps_gib, (std::vector<double>{6, 8, 11, 24}));
  EXPECT_TRUE(t.has_uncapped);
  ASSERT_EQ(t.models, (std::vector<std::string>{"bert-base", "bert-base-mlm"}));
  ASSERT_EQ(t.cells[0].size(), 5u);
  EXPECT_EQ(t.cells[0][0].status, JobStatus::no_fit);
  EXPECT_FALSE(t.cells[0][0].max_batch.has_value());
  EXPECT_EQ(*t.cells[0][1].max_batch, 49);
  EXPECT_EQ(*t.cells[0][4].max_batch, 1312);  // uncapped: the full run's search
  EXPECT_FALSE(t.cells[1][0].present);
  EXPECT_EQ(t.reference[1], nullptr);  // a twin has no 2020 row
  ASSERT_EQ(t.reference_tiers.size(), 4u);

  const std::string table = render("table", jobs);
  EXPECT_NE(table.find("Memory tiers, H200 fp32: max batch under an emulated memory cap"),
            std::string::npos);
  EXPECT_NE(table.find("bert-base      sequences     OOM     49      80     233      1312          8"),
            std::string::npos)
      << table;
  // Records without memory.cap capped the allocator alone, and the note says so.
  EXPECT_NE(table.find("note: emulated: the cap limited PyTorch's caching allocator only"),
            std::string::npos);
  EXPECT_EQ(table.find("the cap stands for the whole card"), std::string::npos);
  EXPECT_EQ(table.find("@N GiB columns are emulated"), std::string::npos);
  // Records that took the context off the cap get the whole-card note instead.
  std::vector<JobRecord> whole = jobs;
  for (auto& job : whole) {
    if (job.memory_cap_gib) job.memory.cap = MemoryCap{0, 600 << 20, 0, std::nullopt};
  }
  const std::string whole_table = render("table", whole);
  EXPECT_NE(whole_table.find("note: emulated: the cap stands for the whole card"),
            std::string::npos);
  EXPECT_EQ(whole_table.find("caching allocator only"), std::string::npos);
}

TEST(ReportTest, EachCapIsMatchedWithTheClosest2020MemorySize) {
  const auto& reference = builtin_store().reference();
  auto names = [&](double cap) {
    std::vector<std::string> out;
    for (std::size_t g : closest_reference_tier(cap, reference).gpus) {
      out.push_back(reference.gpus()[g].name);
    }
    return join(out, ", ");
  };
  EXPECT_EQ(names(6), "RTX 2060");
  EXPECT_EQ(names(8), "RTX 2070, RTX 2080");
  EXPECT_EQ(names(11), "GTX 1080 Ti, RTX 2080 Ti");
  EXPECT_EQ(names(24), "Titan RTX, RTX 6000");
  EXPECT_EQ(names(48), "RTX 8000");
  EXPECT_EQ(names(2), "RTX 2060");
  EXPECT_EQ(names(9.5), "RTX 2070, RTX 2080");  // a tie goes to the smaller card
  EXPECT_EQ(names(36), "Titan RTX, RTX 6000");
  EXPECT_EQ(names(80), "RTX 8000");
  EXPECT_DOUBLE_EQ(closest_reference_tier(11, reference).memory_gb, 11);
}

// ---- HTML ----

TEST(ReportTest, HtmlEscapesRecordTextAndLoadsNothingFromOutside) {
  std::vector<JobRecord> jobs = sample();
  jobs[1].status = JobStatus::failed;
  jobs[1].normalized.reset();
  jobs[1].message = "<script>alert('x')</script> & \"more\"";
  jobs[2].model = "bert<b>";
  const std::string html = render("html", jobs);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>\n", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;more&quot;"),
            std::string::npos);
  EXPECT_EQ(html.find("bert<b>"), std::string::npos);
  EXPECT_NE(html.find("bert&lt;b&gt;"), std::string::npos);
  // Self-contained: no links, scripts, fonts or images from anywhere else.
  for (const char* outside : {"src=", "https:", "@import", "url(", "<link", "<img"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
  auto count = [&](const std::string& text) {
    std::size_t n = 0;
    for (auto at = html.find(text); at != std::string::npos; at = html.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("http:"), count("xmlns=\"http://www.w3.org/2000/svg\""));  // a name, not a load
  // Charts carry accessible text.
  EXPECT_NE(html.find("role=\"img\" aria-labelledby=\"chart-language-bert-base-title "
                      "chart-language-bert-base-desc\""),
            std::string::npos);
  EXPECT_NE(html.find("<title id=\"chart-language-bert-base-title\">bert-base (2020: BERT Base): "
                      "throughput normalized to the RTX 8000</title>"),
            std::string::npos);
  EXPECT_NE(html.find("<td class=\"fail\">failed</td>"), std::string::npos);
}

// ---- HTML charts (issue 43 item 6, issue 46 item 5) ----

JobRecord on_device(JobRecord job, const std::string& device) {
  job.device.name = device;
  return job;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportTest, HtmlDrawsOneChartPerWorkloadWithEveryRunBesideThe2020Gpus) {
  const auto& reference = builtin_store().reference();
  const report::ReportView view = report::make_view(sample(), reference);
  const auto families = report::workload_charts(view, reference);
  ASSERT_EQ(families.size(), 1u);  // bert-base-mlm has no 2020 row, so no chart
  EXPECT_EQ(families[0].family, "language");
  ASSERT_EQ(families[0].charts.size(), 1u);
  const report::BarChart& chart = families[0].charts[0];
  EXPECT_EQ(chart.id, "chart-language-bert-base");
  EXPECT_EQ(chart.marker, 1.0);
  ASSERT_EQ(chart.groups.size(), 2u);
  std::vector<std::string> measured;
  for (const auto& bar : chart.groups[0].bars) measured.push_back(bar.label);
  EXPECT_EQ(measured, (std::vector<std::string>{"H200 fp32", "H200 amp-bf16", "H200 fp32 @24GiB"}));
  EXPECT_DOUBLE_EQ(*chart.groups[0].bars[1].value, 50.0);
  ASSERT_EQ(chart.groups[1].bars.size(), reference.gpus().size());
  EXPECT_EQ(chart.groups[1].bars.back().label, "RTX 8000");
  EXPECT_DOUBLE_EQ(*chart.groups[1].bars.back().value, 1.0);
  EXPECT_TRUE(chart.groups[1].bars.back().muted);

  const std::string html = render("html", sample());
  EXPECT_NE(html.find("<h3 id=\"charts-language\">Language models</h3>"), std::string::npos);
  EXPECT_EQ(occurrences(html, "<title id=\"chart-language-bert-base-title\">"), 1u);
  EXPECT_NE(html.find("<desc id=\"chart-language-bert-base-desc\">"), std::string::npos);
  EXPECT_NE(html.find("throughput / the RTX 8000&#39;s 2020 throughput on BERT Base (ratio, linear)"),
            std::string::npos);
}

TEST(ReportTest, HtmlChartsThePrecisionGainPerCard) {
  const auto& reference = builtin_store().reference();
  const std::vector<JobRecord> jobs = {
      h200("bert-base", "fp32", 1312, 1880),
      h200("bert-base", "amp-bf16", 1400, 4700),
      on_device(h200("bert-base", "fp32", 1000, 1000), "NVIDIA H100"),
      on_device(h200("bert-base", "amp-bf16", 1200, 2000), "NVIDIA H100"),
      h200("bert-base-mlm", "fp32", 1100, 1500),
      h200("bert-base-mlm", "amp-bf16", 1200, 3000)};
  const auto chart = report::precision_gain_chart(report::make_view(jobs, reference));
  ASSERT_TRUE(chart.has_value());
  EXPECT_EQ(chart->id, "chart-precision-gain");
  EXPECT_EQ(chart->marker, 1.0);
  // bert-base on both cards, bert-base-mlm (no 2020 row, still a gain) on the H200, the means.
  ASSERT_EQ(chart->groups.size(), 3u);
  EXPECT_EQ(chart->groups[0].label, "bert-base (examples/s)");
  ASSERT_EQ(chart->groups[0].bars.size(), 2u);
  EXPECT_EQ(chart->groups[0].bars[0].label, "H200 amp-bf16");
  EXPECT_DOUBLE_EQ(*chart->groups[0].bars[0].value, 4700.0 / 1880.0);
  EXPECT_EQ(chart->groups[0].bars[0].text, "2.50x");
  EXPECT_EQ(chart->groups[0].bars[1].label, "H100 amp-bf16");
  EXPECT_DOUBLE_EQ(*chart->groups[0].bars[1].value, 2.0);
  ASSERT_EQ(chart->groups[1].bars.size(), 1u);
  EXPECT_DOUBLE_EQ(*chart->groups[1].bars[0].value, 2.0);
  const auto& means = chart->groups[2].bars;
  ASSERT_EQ(means.size(), 2u);
  EXPECT_NEAR(*means[0].value, std::sqrt(2.5 * 2.0), 1e-12);
  EXPECT_EQ(means[0].text, "2.24x (2 workloads)");
  EXPECT_EQ(means[1].text, "2.00x (1 workload)");

  const std::string html = render("html", jobs);
  EXPECT_NE(html.find("<title id=\"chart-precision-gain-title\">Precision gain per card"),
            std::string::npos);
  EXPECT_NE(html.find(">2.50x</text>"), std::string::npos);
  EXPECT_EQ(html.find("No device has an fp32 run and a run at another precision"),
            std::string::npos);
}

TEST(ReportTest, HtmlSaysWhyThereIsNoPrecisionGainChart) {
  const auto& reference = builtin_store().reference();
  // One precision only; and a failed amp-bf16 run gives a bar without a ratio, not a number.
  std::vector<JobRecord> jobs = {h200("bert-base", "fp32", 1312, 1880)};
  EXPECT_FALSE(report::precision_gain_chart(report::make_view(jobs, reference)));
  EXPECT_NE(render("html", jobs).find("<p class=\"note\">No device has an fp32 run and a run at "
                                      "another precision"),
            std::string::npos);
  JobRecord failed = h200("bert-base", "amp-bf16", 1400, 0);
  failed.status = JobStatus::failed;
  jobs.push_back(failed);
  const auto chart = report::precision_gain_chart(report::make_view(jobs, reference));
  ASSERT_TRUE(chart.has_value());
  ASSERT_EQ(chart->groups.size(), 1u);
  EXPECT_FALSE(chart->groups[0].bars[0].value.has_value());
  EXPECT_EQ(chart->groups[0].bars[0].text, "no ratio: amp-bf16 failed");
}

TEST(ReportTest, HtmlChartsThroughputPerDollarAndPerJouleOrSaysWhyNot) {
  const auto& reference = builtin_store().reference();
  std::vector<JobRecord> jobs = sample();
  std::string html = render("html", jobs);
  EXPECT_NE(html.find("<p class=\"note\">No record has a price per hour or an energy reading, so "
                      "there is no per-dollar or per-joule chart"),
            std::string::npos);
  EXPECT_EQ(html.find("chart-per-dollar"), std::string::npos);
  EXPECT_EQ(html.find("chart-per-joule"), std::string::npos);

  // Energy on two runs, no price: the per-joule chart, and a note for the per-dollar one.
  jobs[0].clocks.energy = WindowEnergy{100.0, 0, 2.5, std::nullopt, std::nullopt};
  jobs[1].clocks.energy = WindowEnergy{100.0, 0, 5.0, std::nullopt, std::nullopt};
  auto view = report::make_view(jobs, reference);
  EXPECT_FALSE(report::per_dollar_chart(view));
  auto joule = report::per_joule_chart(view);
  ASSERT_TRUE(joule.has_value());
  ASSERT_EQ(joule->groups.size(), 1u);
  ASSERT_EQ(joule->groups[0].bars.size(), 2u);
  EXPECT_DOUBLE_EQ(*joule->groups[0].bars[0].value, 0.5);  // scaled to the workload's best
  EXPECT_DOUBLE_EQ(*joule->groups[0].bars[1].value, 1.0);
  EXPECT_EQ(joule->groups[0].bars[0].text, "2.50 examples/J");
  html = render("html", jobs);
  EXPECT_NE(html.find("<title id=\"chart-per-joule-title\">"), std::string::npos);
  EXPECT_NE(html.find("<p class=\"note\">No record has a price per hour, so there is no "
                      "per-dollar chart"),
            std::string::npos);

  // A price on the fp32 run: units per dollar = throughput x 3600 / price per hour.
  jobs[0].cost = JobCost{2.5, "report --price-per-hour"};
  view = report::make_view(jobs, reference);
  const auto dollar = report::per_dollar_chart(view);
  ASSERT_TRUE(dollar.has_value());
  ASSERT_EQ(dollar->groups.size(), 1u);
  EXPECT_EQ(dollar->groups[0].label, "bert-base (examples per dollar)");
  ASSERT_EQ(dollar->groups[0].bars.size(), 1u);
  EXPECT_EQ(dollar->groups[0].bars[0].label, "H200 fp32");
  EXPECT_EQ(dollar->groups[0].bars[0].text, "2.71 M examples/$");  // 1880 x 3600 / 2.5
  html = render("html", jobs);
  EXPECT_NE(html.find("<title id=\"chart-per-dollar-title\">"), std::string::npos);
  EXPECT_EQ(html.find("No record has a price per hour"), std::string::npos);
}

TEST(ReportTest, HtmlChartsMemoryTiersAsMaxBatchPerCap) {
  const auto& reference = builtin_store().reference();
  const std::vector<JobRecord> jobs = {
      tier_record("bert-base", 24, 233), tier_record("bert-base", 8, 49),
      tier_record("bert-base", 6, 0), h200("bert-base", "fp32", 1312, 1880),
      tier_record("bert-base", 11, 80)};
  const auto view = report::make_view(jobs, reference);
  ASSERT_EQ(view.tiers.size(), 1u);
  const report::BarChart chart = report::memory_tier_chart(view, 0, reference);
  EXPECT_EQ(chart.id, "chart-memory-tiers-1");
  ASSERT_EQ(chart.groups.size(), 1u);
  EXPECT_EQ(chart.groups[0].label, "bert-base (batch in sequences)");
  const auto& bars = chart.groups[0].bars;
  ASSERT_GE(bars.size(), 5u);
  EXPECT_EQ(bars[0].label, "6 GiB cap");
  EXPECT_EQ(bars[0].text, "OOM");
  EXPECT_FALSE(bars[0].value.has_value());
  EXPECT_EQ(bars[1].label, "8 GiB cap");
  EXPECT_EQ(bars[1].text, "49");
  EXPECT_DOUBLE_EQ(*bars[1].value, 49.0 / 1312.0);  // scaled to the model's largest batch
  EXPECT_EQ(bars[4].label, "uncapped");
  EXPECT_DOUBLE_EQ(*bars[4].value, 1.0);
  // Then the 2020 cards of the closest memory sizes, muted.
  ASSERT_EQ(bars.size(), 5u + view.tiers[0].reference_tiers.size());
  EXPECT_TRUE(bars[5].muted);
  EXPECT_EQ(bars[5].label, "2020 6 GB");
  EXPECT_EQ(bars[5].text, "8");

  const std::string html = render("html", jobs);
  const auto chart_at = html.find("<title id=\"chart-memory-tiers-1-title\">");
  const auto table_at = html.find("<h2 id=\"memory-tiers-1\">");
  ASSERT_NE(chart_at, std::string::npos);
  ASSERT_NE(table_at, std::string::npos);
  EXPECT_LT(table_at, chart_at);  // under the table's heading, above the table
  EXPECT_EQ(render("html", sample()).find("chart-memory-tiers"), std::string::npos);
}

TEST(ReportTest, HtmlChartsDataParallelScalingEfficiency) {
  const auto& reference = builtin_store().reference();
  JobRecord two = h200("bert-base", "fp32", 32, 190);
  two.data_parallel = DataParallelRecord();
  two.data_parallel->world_size = 2;
  two.data_parallel->backend = "nccl";
  const std::vector<JobRecord> jobs = {h200("bert-base", "fp32", 32, 100), two};
  const auto chart = report::scaling_chart(report::make_view(jobs, reference));
  ASSERT_TRUE(chart.has_value());
  EXPECT_EQ(chart->marker, 100.0);
  ASSERT_EQ(chart->groups.size(), 1u);
  EXPECT_EQ(chart->groups[0].label, "bert-base, fp32, NVIDIA H200");
  ASSERT_EQ(chart->groups[0].bars.size(), 2u);
  EXPECT_EQ(chart->groups[0].bars[0].label, "1 device (baseline)");
  EXPECT_DOUBLE_EQ(*chart->groups[0].bars[0].value, 100.0);
  EXPECT_EQ(chart->groups[0].bars[1].label, "2 ranks (nccl)");
  EXPECT_NEAR(*chart->groups[0].bars[1].value, 95.0, 1e-9);
  EXPECT_EQ(chart->groups[0].bars[1].text.rfind("95.0% (190.0 examples/s in total)", 0), 0u)
      << chart->groups[0].bars[1].text;

  const std::string html = render("html", jobs);
  EXPECT_NE(html.find("<title id=\"chart-scaling-title\">"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"#scaling\">Scaling</a>"), std::string::npos);
  EXPECT_FALSE(report::scaling_chart(report::make_view(sample(), reference)));
  EXPECT_EQ(render("html", sample()).find("chart-scaling"), std::string::npos);
}

// The scaling table and chart name each data-parallel record's backend, as its data_parallel
// holds it: the stored runs (NCCL under the one-host launcher on an H200, under torchrun on an
// H100) read from docs/results, and a Gloo run beside its one-device baseline.
TEST(ReportTest, ScalingTableAndChartShowTheRecordsBackend) {
  const auto& reference = builtin_store().reference();
  const std::string results = std::string(GPUBENCH_TEST_DATA_DIR) + "/../../docs/results/";
  std::vector<JobRecord> jobs =
      read_results({results + "2026-12-03-h200-rois-signals-ddp/ddp/ddp-fp32.json",
                    results + "2026-12-07-h100-torchrun/torchrun/torchrun.json"});
  ASSERT_EQ(jobs.size(), 2u);
  JobRecord gloo = h200("bert-base", "fp32", 32, 190);
  gloo.device.name = "CPU";
  gloo.data_parallel = DataParallelRecord();
  gloo.data_parallel->world_size = 2;
  gloo.data_parallel->backend = "gloo";
  JobRecord one = h200("bert-base", "fp32", 32, 100);
  one.device.name = "CPU";
  jobs.push_back(one);
  jobs.push_back(gloo);
  const report::ReportView view = report::make_view(jobs, reference);

  const auto table = report::scaling_section(view);
  ASSERT_TRUE(table);
  const auto ranks_column =
      std::find(table->headers.begin(), table->headers.end(), "ranks") - table->headers.begin();
  std::vector<std::string> ranks;
  for (const auto& row : table->rows) ranks.push_back(row.at(ranks_column));
  // Sorted by precision, then device: the H100's amp-bf16, the CPU's pair, the H200's fp32.
  EXPECT_EQ(ranks, (std::vector<std::string>{"1 (nccl)", "1", "2 (gloo)", "1 (nccl)"}));

  const auto chart = report::scaling_chart(view);
  ASSERT_TRUE(chart);
  std::vector<std::string> labels;
  for (const auto& group : chart->groups) {
    for (const auto& bar : group.bars) labels.push_back(bar.label);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"1 rank (nccl)", "1 device (baseline)",
                                              "2 ranks (gloo)", "1 rank (nccl)"}));
  // A record that names none (written by hand) shows "?".
  jobs.back().data_parallel->backend.clear();
  EXPECT_EQ(
      report::scaling_section(report::make_view(jobs, reference))->rows.at(2).at(ranks_column),
      "2 (?)");
}

TEST(ReportTest, ChartIdsAreSlugsUniqueInThePage) {
  EXPECT_EQ(report::id_slug("bert-base"), "bert-base");
  EXPECT_EQ(report::id_slug("Bert <b> \"x\""), "bert-b-x");
  EXPECT_EQ(report::id_slug("<>"), "x");
  std::vector<JobRecord> jobs = sample();
  jobs.push_back(h200("bert-base", "fp32", 1312, 1880));
  jobs.back().model = "bert base";  // slugs to "bert-base" as well; its 2020 row is BERT Base
  const std::string html = render("html", jobs);
  EXPECT_EQ(occurrences(html, "<title id=\"chart-language-bert-base-title\">"), 1u);
  EXPECT_EQ(occurrences(html, "<title id=\"chart-language-bert-base-2-title\">"), 1u);
}

TEST(ReportTest, BarChartScalesLinearlyFromZero) {
  report::BarChart chart;
  chart.id = "c";
  chart.title = "t";
  chart.groups = {{"g", {{"a", 40.0, "40.0", "#000", "a: 40", false},
                         {"b", 0.001, "0.001", "#111", "b", true},
                         {"c", std::nullopt, "OOM", "#222", "", true}}}};
  const std::string svg = report::render_bar_chart(chart);
  EXPECT_NE(svg.find("<rect x=\"200.0\" y=\"46.0\" width=\"620.0\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("width=\"1.0\""), std::string::npos) << "tiny bars stay visible";
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 0, true);
  EXPECT_NE(svg.find(">OOM</text>"), std::string::npos);
  EXPECT_DOUBLE_EQ(report::nice_step(40, 5), 10);
  EXPECT_DOUBLE_EQ(report::nice_step(1.3, 5), 0.5);
  EXPECT_DOUBLE_EQ(report::nice_step(0.9, 5), 0.2);
}

}  // namespace
}  // namespace gpubench
