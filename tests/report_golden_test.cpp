// Every report format against golden files, from fixed records read back from disk the way
// `gpubench report` reads them: two GPUs (H200, RTX 3090), two precisions (fp32, amp-bf16), a
// journal with a torn last line and a failed job that was retried OK later, a job that stays
// failed, a no-fit, twins without a 2020 row, and memory-tier records.
//
// The inputs are tests/golden/inputs/ (written from the builders below) and the expected
// outputs tests/golden/report.{txt,md,csv,json,html}. After an intended change of the output
// (or of the builders), rewrite them all and review the diff:
//
//   GPUBENCH_UPDATE_GOLDEN=1 build/gpubench_tests --gtest_filter='ReportGoldenTest.*'
//
// scripts/dev/check_html.sh renders the same inputs in headless Chromium (ctest
// HtmlReportRendersInChromium).
#include "gpubench/config/config.h"
#include "gpubench/records/journal.h"
#include "gpubench/device/nvml.h"
#include "gpubench/measure/search_stop.h"
#include "gpubench/train/registry.h"
#include "gpubench/report/reporter.h"
#include "gpubench/run/job.h"
#include "tests/builtin_store.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

namespace gpubench {
namespace {

using testing::builtin_store;

// ---- Where the golden files live ----

std::string golden_dir() {
  return std::string(GPUBENCH_TEST_SOURCE_DIR) + "/golden";
}

bool updating() {
  const char* value = std::getenv("GPUBENCH_UPDATE_GOLDEN");
  return value && std::string(value) == "1";
}

const std::vector<std::string>& input_names() {
  static const std::vector<std::string> names = {"h200-fp32.json", "h200-amp-bf16.jsonl",
                                                 "rtx3090-fp32.json", "h200-tiers.jsonl"};
  return names;
}

std::vector<std::string> input_paths() {
  std::vector<std::string> paths;
  for (const auto& name : input_names()) paths.push_back(golden_dir() + "/inputs/" + name);
  return paths;
}

// ---- The fixed records ----

Json environment(const std::string& gpu) {
  const bool h200 = gpu == "NVIDIA H200";
  return {{"host", h200 ? "h200-box" : "workstation"},
          {"os", "Linux 6.8"},
          {"cpu", "Intel(R) Xeon(R) Processor"},
          {"cpu_threads", 16},
          {"device",
           {{"type", "cuda"},
            {"index", 0},
            {"name", gpu},
            {"memory_bytes", h200 ? int64_t{150109880320} : int64_t{25438126080}},
            {"multiprocessors", h200 ? 132 : 82},
            {"compute_capability", h200 ? "9.0" : "8.6"},
            {"pci_bus_id", "0000:00:06.0"}}},
          {"software",
           {{"libtorch", h200 ? "2.11.0" : "2.4.0"},
            {"built_with_cuda", true},
            {"cuda_runtime", h200 ? "13.0" : "12.4"},
            {"cuda_driver_api", h200 ? "13.0" : "12.4"},
            {"cudnn", h200 ? "9.19.0" : "9.1.0"},
            {"driver", h200 ? "580.159.04" : "550.54.14"}}},
          {"gpubench", {{"version", "0.1.0"}, {"git_commit", "0147e79a1b2c"}}}};
}

struct Spec {
  std::string model;
  std::string gpu = "NVIDIA H200";
  std::string precision = "fp32";
  JobStatus status = JobStatus::ok;
  int64_t batch = 0;
  double throughput = 0;
  std::string message;
  std::optional<double> cap_gib;      ///< a memory-tier record (search only)
  std::optional<int64_t> max_batch;  ///< the search's answer; default: 2% over the batch
  std::string date = "2026-11-30";
};

JobRecord record(const Spec& spec) {
  const ModelConfig& config = builtin_store().model(spec.model);
  JobRecord r;
  r.model = spec.model;
  r.family = config.family;
  r.precision = spec.precision;
  r.batch_unit = config.batch_unit;
  r.throughput_unit = config.throughput_unit;
  r.device = DeviceInfo::from_json(environment(spec.gpu)["device"]);
  r.status = spec.status;
  r.message = spec.message;
  r.created_utc = spec.date + "T01:02:03Z";
  r.environment = environment(spec.gpu);
  // Only what the reporters read of the config: the 2020 row.
  r.config = {{"name", config.name}};
  if (config.reference_2020) r.config["reference_2020"] = {{"row", config.reference_2020->row}};
  r.batch_source = "search";
  if (spec.status != JobStatus::crashed) {  // a crashed search leaves no record of its probes
    SearchRecord s;
    s.max_batch = spec.status == JobStatus::no_fit
                      ? 0
                      : spec.max_batch.value_or(spec.batch + spec.batch / 50);
    s.largest_pow2 = largest_power_of_two_at_most(s.max_batch);
    s.probes.resize(spec.status == JobStatus::no_fit ? 1 : 5);
    // An older gpubench's sentence for a search where not even min_batch fits.
    s.stop = spec.status == JobStatus::no_fit
                 ? SearchStopReason{SearchStop::min_batch_no_fit, "min_batch does not fit"}
                 : SearchStopReason::bracket_closed();
    s.converged = true;
    s.seconds = 12.5;
    s.bytes_per_sample = 5.5e7;
    s.fixed_bytes = 1.5e9;
    r.search = s;
  }
  if (spec.cap_gib) {
    r.memory_cap_gib = spec.cap_gib;
    r.emulated = true;
    r.search_only = true;
    r.batch = r.search ? r.search->max_batch : 0;
    r.wall_seconds = 9.5;
    // The cap stands for the whole card: the context and kernels came off it.
    const auto cap = static_cast<int64_t>(*spec.cap_gib * double(int64_t{1} << 30));
    const int64_t outside = int64_t{600} << 20;
    r.memory.cap = MemoryCap{cap, outside, allocator_cap_bytes(cap, outside), std::nullopt};
    return r;
  }
  if (spec.status == JobStatus::ok) {
    r.batch = spec.batch;
    r.throughput = spec.throughput;
    r.timing = summarize_steps({100, 102, 98, 100}, 0.4);
    r.step_time_ms = {100, 102, 98, 100};
    r.peak_memory_bytes = int64_t{120} << 30;
    normalize(r, config, builtin_store().reference());
    if (spec.gpu == "NVIDIA H200" && spec.precision == "fp32") {
      // NVML's window and the FLOPs arithmetic (the other runs had neither: a dash).
      const double power_w = 600 + static_cast<double>(spec.batch % 97);
      r.clocks.samples = 40;
      r.clocks.sm_clock_max_mhz = 1980;
      r.clocks.power_limit_w = 700.0;
      r.clocks.sm_clock_mhz = ClockRange{1950, 1980, 1980};
      r.clocks.power_w = PowerRange{power_w, 700.0};
      r.clocks.throttled = false;
      r.clocks.energy = WindowEnergy::from_json(
          energy_summary(power_w * 0.4, spec.throughput * 0.4, 4, 0.4), "clocks.energy");
      r.compute = compute_summary(spec.throughput, config.flops_per_unit, "fp32", 51.3);
    }
  }
  r.wall_seconds = 41.25;
  return r;
}

JobRecord h200(const std::string& model, int64_t batch, double throughput) {
  Spec s;
  s.model = model;
  s.batch = batch;
  s.throughput = throughput;
  return record(s);
}

JobRecord bf16(const std::string& model, int64_t batch, double throughput) {
  Spec s;
  s.model = model;
  s.precision = "amp-bf16";
  s.batch = batch;
  s.throughput = throughput;
  s.date = "2026-12-01";
  return record(s);
}

JobRecord rtx3090(const std::string& model, int64_t batch, double throughput) {
  Spec s;
  s.model = model;
  s.gpu = "NVIDIA GeForce RTX 3090";
  s.batch = batch;
  s.throughput = throughput;
  s.date = "2026-12-02";
  return record(s);
}

JobRecord tier(const std::string& model, double cap, int64_t max_batch) {
  Spec s;
  s.model = model;
  s.cap_gib = cap;
  s.max_batch = max_batch;
  s.status = max_batch > 0 ? JobStatus::ok : JobStatus::no_fit;
  s.date = "2026-12-03";
  return record(s);
}

JournalHeader journal_header(const std::vector<std::string>& command) {
  JournalHeader h;
  h.created_utc = "2026-12-01T00:00:00Z";
  h.command_line = command;
  h.plan = {{"models", Json::array()}};
  return h;
}

void write_document(const std::string& path, std::vector<JobRecord> jobs,
                    const std::string& created) {
  ResultDocument doc;
  doc.created_utc = created;
  doc.command_line = {"gpubench", "run", "--suite", "all"};
  doc.environment = jobs.front().environment;
  for (auto& job : jobs) job.environment = Json::object();  // as a run writes them: once
  doc.jobs = std::move(jobs);
  write_file_atomically(path, doc.to_json().dump(2) + "\n");
}

/// Writes the four input files from the builders.
void write_inputs(const std::string& dir) {
  write_document(dir + "/h200-fp32.json",
                 {h200("nasnet-large", 412, 310.5), h200("deeplabv3", 130, 181.2),
                  h200("pix2pixhd", 23, 14.6), h200("deeplabv3-resnet101", 150, 204.0),
                  h200("bert-base", 1669, 630.5), h200("transformer-big", 262000, 192000),
                  h200("bert-base-mlm", 1750, 642.0)},
                 "2026-11-30T01:00:00Z");

  // amp-bf16 as a suite journal: bert-base failed and was retried OK at the end (the retry
  // wins), deeplabv3 timed out and pix2pixhd crashed for good, and the run was killed while
  // writing a line.
  const std::string journal = dir + "/h200-amp-bf16.jsonl";
  std::remove(journal.c_str());
  {
    auto writer = JournalWriter::create(
        journal, journal_header({"gpubench", "run", "--suite", "all", "--precision", "amp-bf16"}));
    auto failure = [](const std::string& model, JobStatus status, const std::string& message) {
      Spec s;
      s.model = model;
      s.precision = "amp-bf16";
      s.status = status;
      s.message = message;
      s.date = "2026-12-01";
      return record(s);
    };
    writer.append(bf16("nasnet-large", 640, 820.0));
    writer.append(failure("bert-base", JobStatus::failed,
                          "timed run out of memory at batch 2741, then at 2713, 2686 and 2659"));
    writer.append(failure("deeplabv3", JobStatus::timeout, "time worker timed out after 1800 s"));
    writer.append(failure("pix2pixhd", JobStatus::crashed,
                          "search worker died of signal 11 <SIGSEGV> & left no record"));
    writer.append(bf16("transformer-big", 520000, 611000));
    writer.append(bf16("bert-base", 2688, 3484.0));
  }
  testing::write_file(journal, testing::read_file(journal) + "{\"job\": {\"model\": \"pix2p");

  Spec no_fit;
  no_fit.model = "pix2pixhd";
  no_fit.gpu = "NVIDIA GeForce RTX 3090";
  no_fit.status = JobStatus::no_fit;
  no_fit.date = "2026-12-02";
  write_document(dir + "/rtx3090-fp32.json",
                 {rtx3090("nasnet-large", 30, 26.4), record(no_fit),
                  rtx3090("bert-base", 96, 121.0), rtx3090("transformer-big", 12000, 13400)},
                 "2026-12-02T01:00:00Z");

  const std::string tiers = dir + "/h200-tiers.jsonl";
  std::remove(tiers.c_str());
  auto writer = JournalWriter::create(
      tiers, journal_header({"gpubench", "run", "--model", "bert-base", "nasnet-large",
                             "transformer-big", "--memory-tiers", "6,8,11,24,48"}));
  const std::vector<double> caps = {48, 6, 8, 11, 24};  // out of order: the table sorts them
  const std::vector<std::pair<std::string, std::vector<int64_t>>> limits = {
      {"bert-base", {520, 30, 49, 80, 233}},
      {"nasnet-large", {132, 8, 13, 21, 63}},
      {"transformer-big", {83000, 0, 4300, 9800, 36500}}};
  for (const auto& [model, batches] : limits) {
    for (std::size_t i = 0; i < caps.size(); ++i) writer.append(tier(model, caps[i], batches[i]));
  }
}

// ---- The tests ----

class ReportGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (updating()) write_inputs(golden_dir() + "/inputs");
  }

  static std::string render(const std::string& format) {
    std::ostringstream out;
    make_reporter(format, out)->report(read_results(input_paths()), builtin_store().reference());
    return out.str();
  }

  /// Compares with tests/golden/report.<ext>, or rewrites it under GPUBENCH_UPDATE_GOLDEN=1.
  static void expect_golden(const std::string& format, const std::string& ext) {
    const std::string path = golden_dir() + "/report." + ext;
    const std::string actual = render(format);
    if (updating()) {
      write_file_atomically(path, actual);
      return;
    }
    ASSERT_TRUE(testing::file_exists(path)) << path << " is missing; write it with "
                                            << "GPUBENCH_UPDATE_GOLDEN=1";
    const std::string expected = testing::read_file(path);
    if (actual == expected) return;
    std::istringstream a(actual), e(expected);
    std::string line_a, line_e;
    int line = 0;
    while (true) {
      ++line;
      const bool more_a = static_cast<bool>(std::getline(a, line_a));
      const bool more_e = static_cast<bool>(std::getline(e, line_e));
      if (!more_a && !more_e) break;
      if (line_a != line_e || more_a != more_e) {
        ADD_FAILURE() << format << " output differs from " << path << " at line " << line
                      << "\n  expected: " << (more_e ? line_e : "(end)")
                      << "\n  actual:   " << (more_a ? line_a : "(end)")
                      << "\nif the change is intended: GPUBENCH_UPDATE_GOLDEN=1 "
                         "build/gpubench_tests --gtest_filter='ReportGoldenTest.*'";
        return;
      }
    }
    ADD_FAILURE() << format << " output differs from " << path << " (line endings?)";
  }
};

TEST_F(ReportGoldenTest, InputsReadBackWithTheTornLineLeftOut) {
  const ResultFiles files = read_result_files(input_paths());
  EXPECT_EQ(files.jobs.size(), 7u + 6u + 4u + 15u);
  ASSERT_EQ(files.notes.size(), 1u);
  EXPECT_NE(files.notes[0].find("h200-amp-bf16.jsonl: the last line was cut short"),
            std::string::npos)
      << files.notes[0];
}

TEST_F(ReportGoldenTest, Table) { expect_golden("table", "txt"); }
TEST_F(ReportGoldenTest, Markdown) { expect_golden("md", "md"); }
TEST_F(ReportGoldenTest, Csv) { expect_golden("csv", "csv"); }
TEST_F(ReportGoldenTest, Json) { expect_golden("json", "json"); }
TEST_F(ReportGoldenTest, Html) { expect_golden("html", "html"); }

TEST_F(ReportGoldenTest, OutputIsTheSameFromRecordsInMemory) {
  // The files are only a carrier: the builders' records render the same report (the torn line
  // is not a record), so the golden files follow the builders.
  testing::TempDir dir;
  write_inputs(dir.path());
  std::vector<std::string> paths;
  for (const auto& name : input_names()) paths.push_back(dir.file(name));
  std::ostringstream fresh;
  make_reporter("md", fresh)->report(read_results(paths), builtin_store().reference());
  EXPECT_EQ(fresh.str(), render("md"));
}

}  // namespace
}  // namespace gpubench
