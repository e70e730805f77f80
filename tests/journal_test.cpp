// The results journal: appended line by line, read back, and continued after a torn write.
#include "gpubench/records/journal.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/records/enums.h"
#include "gpubench/records/result.h"
#include "gpubench/run/job_spec.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {
namespace {

using testing::TempDir;

JournalHeader header() {
  JournalHeader h;
  h.created_utc = "2026-11-30T00:00:00Z";
  h.command_line = {"gpubench", "run", "--suite", "all"};
  h.plan = {{"models", {"bert-base", "yolov3"}}};
  return h;
}

JobRecord record(const std::string& model, double throughput) {
  JobRecord r;
  r.model = model;
  r.precision = "fp32";
  r.batch = 12;
  r.throughput = throughput;
  return r;
}

TEST(JournalTest, AppendsOneLinePerJobAndReadsThemBack) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  {
    auto writer = JournalWriter::create(path, header());
    writer.append(record("bert-base", 10.5));
    writer.append(record("yolov3", 3.25));
  }
  const std::string text = testing::read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_TRUE(is_journal_file(path));
  const Journal j = read_journal(path);
  EXPECT_EQ(j.header.command_line, header().command_line);
  EXPECT_EQ(j.header.plan, header().plan);
  ASSERT_EQ(j.jobs.size(), 2u);
  EXPECT_EQ(j.jobs[0].model, "bert-base");
  EXPECT_DOUBLE_EQ(j.jobs[1].throughput, 3.25);
  EXPECT_FALSE(j.torn_tail);
}

TEST(JournalTest, NeverOverwritesAnExistingJournal) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalWriter::create(path, header()).append(record("bert-base", 1));
  EXPECT_THROWS_WITH(JournalWriter::create(path, header()), ConfigError, "--resume");
  EXPECT_EQ(read_journal(path).jobs.size(), 1u);
}

TEST(JournalTest, ATornLastLineIsIgnoredAndCutOffWhenContinued) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalWriter::create(path, header()).append(record("bert-base", 1));
  // A kill in the middle of a write leaves half a line without its newline.
  testing::write_file(path, testing::read_file(path) + "{\"job\": {\"model\": \"yol");
  Journal j = read_journal(path);
  EXPECT_TRUE(j.torn_tail);
  ASSERT_EQ(j.jobs.size(), 1u);

  JournalWriter::resume(path).append(record("yolov3", 2));
  j = read_journal(path);
  EXPECT_FALSE(j.torn_tail);
  ASSERT_EQ(j.jobs.size(), 2u);
  EXPECT_EQ(j.jobs[1].model, "yolov3");
}

TEST(JournalTest, AWholeRecordMissingOnlyItsNewlineIsKept) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalWriter::create(path, header()).append(record("bert-base", 1));
  std::string text = testing::read_file(path);
  text.pop_back();  // the kill came between the record and its newline
  testing::write_file(path, text);
  EXPECT_EQ(read_journal(path).jobs.size(), 1u);
  JournalWriter::resume(path).append(record("yolov3", 2));
  const Journal j = read_journal(path);
  ASSERT_EQ(j.jobs.size(), 2u);  // the first record survived the resume
  EXPECT_EQ(j.jobs[0].model, "bert-base");
  EXPECT_EQ(j.jobs[1].model, "yolov3");
}

TEST(JournalTest, OneWriterAtATime) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  auto first = JournalWriter::create(path, header());
  EXPECT_THROWS_WITH(JournalWriter::resume(path), ConfigError, "is in use by another gpubench");
  first.append(record("bert-base", 1));
  EXPECT_EQ(read_journal(path).jobs.size(), 1u);  // reading needs no lock
}

TEST(JournalTest, CreateIfAbsentLeavesAnExistingFileAlone) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  testing::write_file(path, "precious");
  EXPECT_FALSE(JournalWriter::create_if_absent(path, header()).has_value());
  EXPECT_EQ(testing::read_file(path), "precious");
}

TEST(JournalTest, DamageInTheMiddleIsAnErrorNamingTheLine) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  testing::write_file(path, header().to_json().dump() + "\nnot json\n{\"job\": {}}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError, "j.jsonl:2:");
  testing::write_file(path, "{\"schema\": \"gpubench-result\"}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError, "is a result document");
  testing::write_file(path, "{\"schema\": \"other\"}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError, "not a gpubench journal");
  EXPECT_FALSE(is_journal_file(path));
  EXPECT_THROWS_WITH(read_journal(dir.file("missing.jsonl")), ConfigError, "cannot be read");
}

// ---- Statuses and phases (records/enums.h): enums in the code, the same strings in the files ----

TEST(RecordEnumsTest, EachValueIsWrittenAsItsStringAndReadBack) {
  const std::vector<std::pair<JobStatus, std::string>> statuses = {
      {JobStatus::ok, "ok"},           {JobStatus::no_fit, "no-fit"},
      {JobStatus::diverged, "diverged"}, {JobStatus::failed, "failed"},
      {JobStatus::timeout, "timeout"}, {JobStatus::crashed, "crashed"},
      {JobStatus::oom, "oom"}};
  for (const auto& [status, text] : statuses) {
    EXPECT_EQ(to_string(status), text);
    EXPECT_EQ(parse_job_status(text), status) << text;
  }
  const std::vector<std::pair<WorkerPhase, std::string>> worker_phases = {
      {WorkerPhase::search, "search"}, {WorkerPhase::time, "time"},
      {WorkerPhase::confirm, "confirm"}};
  for (const auto& [phase, text] : worker_phases) {
    EXPECT_EQ(to_string(phase), text);
    EXPECT_EQ(parse_worker_phase(text), phase) << text;
  }
  const std::vector<std::pair<AttemptPhase, std::string>> attempt_phases = {
      {AttemptPhase::confirm, "confirm"}, {AttemptPhase::step_down, "step-down"},
      {AttemptPhase::bisect, "bisect"}};
  for (const auto& [phase, text] : attempt_phases) {
    EXPECT_EQ(to_string(phase), text);
    EXPECT_EQ(parse_attempt_phase(text), phase) << text;
  }
  // Only the exact strings: no other spelling, case or blank is read as one of them.
  for (const char* text : {"", "OK", "no_fit", "nofit", " ok", "skipped", "timed"}) {
    EXPECT_FALSE(parse_job_status(text).has_value()) << text;
    EXPECT_FALSE(parse_worker_phase(text).has_value()) << text;
    EXPECT_FALSE(parse_attempt_phase(text).has_value()) << text;
  }
}

/// Each job line of a journal as its file holds it (the header and a torn last line left out).
std::vector<Json> job_lines(const std::string& path) {
  std::istringstream in(testing::read_file(path));
  std::vector<Json> jobs;
  std::string line;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("job")) jobs.push_back(j["job"]);
  }
  return jobs;
}

TEST(RecordEnumsTest, JournalsOfEarlierRunsReadAndWriteBackTheSameStrings) {
  // A measured journal (memory tiers: confirms that stepped down and bisected, out-of-memory
  // attempts) and the report golden's (failed, timed out and crashed jobs, a torn last line).
  const std::string data = GPUBENCH_TEST_DATA_DIR;
  for (const std::string& path :
       {data + "/../../docs/results/2026-12-04-h200-bf16-suite-tiers-repeats/tiers/tiers.jsonl",
        data + "/../golden/inputs/h200-amp-bf16.jsonl"}) {
    SCOPED_TRACE(path);
    const std::vector<Json> lines = job_lines(path);
    const Journal journal = read_journal(path);
    ASSERT_FALSE(lines.empty());
    ASSERT_EQ(journal.jobs.size(), lines.size());
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const Json& before = lines[i];
      const Json after = journal.jobs[i].to_json();
      EXPECT_EQ(after["status"], before["status"]) << i;
      EXPECT_EQ(after.contains("diverged_throughput"), before.contains("diverged_throughput"));
      EXPECT_EQ(dump_json(after["confirm"]), dump_json(before.value("confirm", Json::array())))
          << i;
      EXPECT_EQ(dump_json(after.value("repeats", Json::array())),
                dump_json(before.value("repeats", Json::array())));
      // The search's stop reason: its kind read from the sentence, the sentence written back.
      if (before.contains("search") && before["search"].is_object()) {
        EXPECT_EQ(after["search"]["stop_reason"], before["search"]["stop_reason"]) << i;
      }
      // Every status and attempt phase written is one the parsers know.
      for (const Json& attempt : before.value("confirm", Json::array())) {
        EXPECT_TRUE(parse_job_status(attempt.value("status", std::string())).has_value())
            << attempt.dump();
        EXPECT_TRUE(parse_attempt_phase(attempt.value("phase", std::string())).has_value())
            << attempt.dump();
      }
    }
  }
}

/// Every job record inside `json` (a journal line's job, a result document's jobs, a worker's
/// record): objects with a model and a timed run's fields.
void collect_records(const Json& json, std::vector<Json>& out) {
  if (json.is_object()) {
    if (json.contains("model") &&
        (json.contains("confirm") || json.contains("warmup") || json.contains("timing"))) {
      out.push_back(json);
    }
    for (const auto& item : json.items()) collect_records(item.value(), out);
  } else if (json.is_array()) {
    for (const Json& item : json) collect_records(item, out);
  }
}

/// A typed field of `before` (a record as a file holds it) and of the record read from it and
/// written again: the same bytes. Absent fields are written with their defaults, as before.
void expect_field_written_back(const Json& before, const Json& after, const char* field,
                               const std::string& where) {
  if (!before.contains(field)) return;
  ASSERT_TRUE(after.contains(field)) << where << ": " << field;
  EXPECT_EQ(dump_json(after[field]), dump_json(before[field])) << where << ": " << field;
}

TEST(RecordFieldsTest, EveryStoredRecordWritesItsTypedFieldsBackByteForByte) {
  // The records of earlier runs (docs/results: every shape an older gpubench wrote) and the
  // tests' own (tests/data, and the golden report's inputs): each reads, and writes its typed
  // fields back as it holds them.
  const std::filesystem::path data = GPUBENCH_TEST_DATA_DIR;
  int records = 0;
  for (const auto& root :
       {data, data / ".." / "golden" / "inputs", data / ".." / ".." / "docs" / "results"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      const std::string path = entry.path().string();
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".json" && ext != ".jsonl")) continue;
      std::vector<std::pair<std::string, Json>> documents;  // where, parsed JSON
      if (ext == ".json") {
        documents.emplace_back(path, Json::parse(testing::read_file(path), nullptr, false));
      } else {
        std::istringstream in(testing::read_file(path));
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
          documents.emplace_back(path + ":" + std::to_string(n),
                                 Json::parse(line, nullptr, /*allow_exceptions=*/false));
        }
      }
      for (const auto& [where, document] : documents) {
        std::vector<Json> found;
        collect_records(document, found);
        for (const Json& before : found) {
          ++records;
          Json after;
          try {
            after = JobRecord::from_json(before).to_json();
          } catch (const std::exception& e) {
            ADD_FAILURE() << where << ": " << e.what();
            continue;
          }
          expect_field_written_back(before, after, "confirm", where);
          expect_field_written_back(before, after, "warmup", where);
          expect_field_written_back(before, after, "repeats", where);
          expect_field_written_back(before, after, "repeat_summary", where);
          expect_field_written_back(before, after, "memory", where);
          expect_field_written_back(before, after, "compute", where);
          expect_field_written_back(before, after, "clocks", where);
          expect_field_written_back(before, after, "data_parallel", where);
          if (before.contains("timing") && before["timing"].contains("stop")) {
            EXPECT_EQ(after["timing"]["stop"], before["timing"]["stop"]) << where;
          }
        }
      }
    }
  }
  EXPECT_GT(records, 500);  // the survey found about 690
}

TEST(RecordFieldsTest, TimedAttemptsOfOldAndNewRecordsWriteBackTheSameBytes) {
  // An older gpubench's attempts (docs/results/2026-12-01-h200-health), and today's.
  const std::string old_shape = R"([{"batch":16,"status":"ok","message":""}])";
  const std::string new_shape =
      R"([{"batch":1000,"status":"oom","message":"CUDA out of memory","seconds":41.25,)"
      R"("phase":"confirm"},{"batch":990,"status":"ok","message":"","seconds":40.5,)"
      R"("phase":"step-down"},{"batch":995,"status":"oom","message":"","seconds":39.0,)"
      R"("phase":"bisect"}])";
  for (const std::string& text : {old_shape, new_shape}) {
    Json before = JobRecord().to_json();
    before["confirm"] = Json::parse(text);
    EXPECT_EQ(dump_json(JobRecord::from_json(before).to_json()["confirm"]), text);
  }
  Json before = JobRecord().to_json();
  before["confirm"] = Json::parse(old_shape);
  const JobRecord old_record = JobRecord::from_json(before);
  ASSERT_EQ(old_record.confirm.size(), 1u);
  EXPECT_EQ(old_record.confirm[0].batch, 16);
  EXPECT_EQ(old_record.confirm[0].status, JobStatus::ok);
  EXPECT_FALSE(old_record.confirm[0].seconds.has_value());
  EXPECT_FALSE(old_record.confirm[0].phase.has_value());
  before["confirm"] = Json::parse(new_shape);
  const JobRecord new_record = JobRecord::from_json(before);
  ASSERT_EQ(new_record.confirm.size(), 3u);
  EXPECT_EQ(new_record.confirm[0].status, JobStatus::oom);
  EXPECT_EQ(new_record.confirm[1].phase, AttemptPhase::step_down);
  EXPECT_EQ(new_record.confirm[2].seconds.value_or(0), 39.0);
  // A record without attempts writes an empty list, as before.
  EXPECT_EQ(dump_json(JobRecord::from_json({{"model", "bert-base"}}).to_json()["confirm"]), "[]");
  // A status or phase outside its set is refused, naming where it is.
  before["confirm"][1]["phase"] = "step_down";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "confirm[1].phase 'step_down' is not an attempt phase (did you mean "
                     "'step-down'?); the allowed values are: confirm, step-down, bisect");
  before["confirm"][1]["phase"] = "step-down";
  before["confirm"][2]["status"] = "OOM";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "confirm[2].status 'OOM' is not a job status");
  before["confirm"] = Json::object();
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError, "confirm: expected an array");
}

TEST(RecordFieldsTest, WarmUpsOfOldAndNewRecordsWriteBackTheSameBytes) {
  const std::vector<std::string> shapes = {
      // No warm-up ran (a memory tier's record).
      R"({})",
      // An older gpubench's (docs/results/2026-12-01-h200-health), its reason included.
      R"({"steps":5,"reason":"warm-up steps ran","step_time_ms":[812.5,90.25,90.0,90.5,90.0]})",
      // Today's, with and without every_shape and host_bound.
      R"({"steps":3,"reason":"steady","detail":"","seconds":4.5,"autotune_steps":2,)"
      R"("step_time_ms":[900.0,100.0,100.5]})",
      R"({"steps":4,"reason":"nothing left to build","detail":"4 steps: nothing builds per batch )"
      R"(shape","seconds":2.25,"autotune_steps":2,"step_time_ms":[9.0,1.0,2.0,1.5],)"
      R"("every_shape":false,"host_bound":{"steps":3,"host_ms":4.5,"device_ms":4.75,)"
      R"("share":0.95,"threshold":0.9,"host_bound":true,"graphs":"on",)"
      R"("capture_steps":4}})"};
  for (const std::string& text : shapes) {
    Json before = JobRecord().to_json();
    before["warmup"] = Json::parse(text);
    EXPECT_EQ(dump_json(JobRecord::from_json(before).to_json()["warmup"]), text);
  }
  Json before = JobRecord().to_json();
  before["warmup"] = Json::parse(shapes[1]);
  const JobRecord old_record = JobRecord::from_json(before);
  ASSERT_TRUE(old_record.warmup.has_value());
  EXPECT_EQ(old_record.warmup->reason, WarmupEnd::steps_ran);
  EXPECT_FALSE(old_record.warmup->detail.has_value());
  EXPECT_FALSE(old_record.warmup->every_shape.has_value());
  before["warmup"] = Json::parse(shapes[3]);
  const JobRecord new_record = JobRecord::from_json(before);
  ASSERT_TRUE(new_record.warmup.has_value());
  EXPECT_EQ(new_record.warmup->reason, WarmupEnd::nothing_to_build);
  EXPECT_EQ(new_record.warmup->every_shape, std::optional<bool>(false));
  EXPECT_EQ(new_record.warmup->step_time_ms.size(), 4u);
  EXPECT_FALSE(JobRecord::from_json({{"model", "bert-base"}}).warmup.has_value());
  // A reason outside the set is refused, naming the field.
  before["warmup"]["reason"] = "steady state";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "warmup.reason 'steady state' is not a warm-up's end");
  before["warmup"] = "steady";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError, "warmup: expected an object");
}

TEST(RecordFieldsTest, RepeatsOfOldAndNewRecordsWriteBackTheSameBytes) {
  // Without NVML's power, clock and energy (docs/results/2026-12-03-h200-rois-signals-ddp), and
  // with them.
  const std::string without =
      R"([{"throughput":1500.25,"step_time_ms_median":42.5,"steps":120,"window_seconds":5.125,)"
      R"("status":"ok","message":"","seconds":61.5}])";
  const std::string with =
      R"([{"throughput":1500.25,"step_time_ms_median":42.5,"steps":120,"window_seconds":5.125,)"
      R"("status":"ok","message":"","seconds":61.5,"power_w_mean":612.5,)"
      R"("sm_clock_mhz_median":1980,"units_per_joule":2.5,"throttled":false},)"
      R"({"throughput":0.0,"step_time_ms_median":0.0,"steps":0,"window_seconds":0.0,)"
      R"("status":"oom","message":"CUDA out of memory","seconds":12.0}])";
  for (const std::string& text : {without, with}) {
    Json before = JobRecord().to_json();
    before["repeats"] = Json::parse(text);
    EXPECT_EQ(dump_json(JobRecord::from_json(before).to_json()["repeats"]), text);
  }
  Json before = JobRecord().to_json();
  before["repeats"] = Json::parse(with);
  const JobRecord r = JobRecord::from_json(before);
  ASSERT_EQ(r.repeats.size(), 2u);
  EXPECT_EQ(r.repeats[0].sm_clock_mhz_median, std::optional<int64_t>(1980));
  EXPECT_EQ(r.repeats[0].throttled, std::optional<bool>(false));
  EXPECT_EQ(r.repeats[1].status, JobStatus::oom);
  EXPECT_FALSE(r.repeats[1].power_w_mean.has_value());
  // No repeats: none written, as before.
  EXPECT_FALSE(JobRecord::from_json({{"model", "bert-base"}}).to_json().contains("repeats"));
  before["repeats"][1]["status"] = "out of memory";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "repeats[1].status 'out of memory' is not a job status");
}

TEST(RecordFieldsTest, RepeatSummariesOfOldAndNewRecordsWriteBackTheSameBytes) {
  // Without NVML's power, clock and energy (the step time alone), and with them
  // (docs/results/2026-12-06-h100-cache-ddp).
  const std::string without =
      R"({"runs":2,"throttled_runs":0,"step_time_ms_median":{"median":42.5,"min":42.0,)"
      R"("max":43.0}})";
  const std::string with =
      R"({"runs":3,"throttled_runs":1,"step_time_ms_median":{"median":42.5,"min":42.0,)"
      R"("max":43.0},"power_w_mean":{"median":612.5,"min":600.0,"max":650.25},)"
      R"("sm_clock_mhz_median":{"median":1980.0,"min":1965.0,"max":1980.0},)"
      R"("units_per_joule":{"median":2.5,"min":2.25,"max":2.75}})";
  for (const std::string& text : {without, with}) {
    Json before = JobRecord().to_json();
    before["repeat_summary"] = Json::parse(text);
    EXPECT_EQ(dump_json(JobRecord::from_json(before).to_json()["repeat_summary"]), text);
  }
  Json before = JobRecord().to_json();
  before["repeat_summary"] = Json::parse(without);
  const JobRecord old_record = JobRecord::from_json(before);
  ASSERT_TRUE(old_record.repeat_summary.has_value());
  EXPECT_EQ(old_record.repeat_summary->runs, 2);
  EXPECT_FALSE(old_record.repeat_summary->power_w_mean.has_value());
  before["repeat_summary"] = Json::parse(with);
  const JobRecord new_record = JobRecord::from_json(before);
  ASSERT_TRUE(new_record.repeat_summary && new_record.repeat_summary->sm_clock_mhz_median &&
              new_record.repeat_summary->units_per_joule);
  EXPECT_EQ(new_record.repeat_summary->throttled_runs, 1);
  EXPECT_EQ(new_record.repeat_summary->sm_clock_mhz_median->median, 1980.0);
  EXPECT_EQ(new_record.repeat_summary->units_per_joule->max, 2.75);
  // One timed run: none, and none written, as before ({} reads the same).
  EXPECT_FALSE(JobRecord::from_json({{"model", "bert-base"}}).repeat_summary.has_value());
  EXPECT_FALSE(JobRecord::from_json({{"model", "bert-base"}, {"repeat_summary", Json::object()}})
                   .to_json()
                   .contains("repeat_summary"));
  // A value of the wrong type is refused, naming where it is.
  before["repeat_summary"]["power_w_mean"]["median"] = "612 W";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "repeat_summary.power_w_mean.median: expected a number, got '612 W'");
  before["repeat_summary"] = Json::parse(with);
  before["repeat_summary"]["runs"] = 2.5;
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "repeat_summary.runs: expected an integer, got 2.5");
  before["repeat_summary"] = Json::parse(with);
  before["repeat_summary"]["units_per_joule"] = Json::array({2.5});
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "repeat_summary.units_per_joule: expected an object, got array");
  before["repeat_summary"] = 3;
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "repeat_summary: expected an object, got number");
}

TEST(RecordFieldsTest, MemoryOfOldAndNewRecordsWritesBackTheSameBytes) {
  const std::vector<std::string> shapes = {
      // Nothing measured (a failed job).
      R"({})",
      // An older gpubench's timed run (docs/results/2026-12-01-h200-fp32-suite-partial): no
      // allocator, no counters.
      R"({"autotune_peak_allocated_bytes":1000,"autotune_peak_reserved_bytes":2000,)"
      R"("cudnn":{"benchmark":true,"benchmark_limit":10,"empty_cache_after_benchmark":false},)"
      R"("resident_bytes":500,"window_peak_allocated_bytes":900,"window_peak_reserved_bytes":)"
      R"(1900})",
      // Today's, on the CPU (the allocator's options unknown) and on a capped CUDA device with
      // a cuDNN workspace variable set.
      R"({"autotune_peak_allocated_bytes":0,"autotune_peak_reserved_bytes":0,"cudnn":)"
      R"({"benchmark":false,"benchmark_limit":10,"empty_cache_after_benchmark":false},)"
      R"("allocator":{"conf":null,"expandable_segments":null},"allocator_counters_warmup":)"
      R"({"alloc_retries":0,"ooms":0,"device_allocations":0,"device_frees":0},)"
      R"("resident_bytes":0,"window_peak_allocated_bytes":0,"window_peak_reserved_bytes":0,)"
      R"("allocator_counters_window":{"alloc_retries":0,"ooms":0,"device_allocations":0,)"
      R"("device_frees":0}})",
      R"({"autotune_peak_allocated_bytes":1000,"autotune_peak_reserved_bytes":2000,"cudnn":)"
      R"({"benchmark":true,"benchmark_limit":10,"empty_cache_after_benchmark":true,)"
      R"("CUDNN_CONV_WSCAP_DBG":"4096"},"allocator":{"conf":"expandable_segments:True",)"
      R"("expandable_segments":true},"allocator_counters_warmup":{"alloc_retries":1,"ooms":0,)"
      R"("device_allocations":7,"device_frees":2},"resident_bytes":500,)"
      R"("window_peak_allocated_bytes":900,"window_peak_reserved_bytes":1900,)"
      R"("outside_allocator_bytes":600,"allocator_counters_window":{"alloc_retries":0,)"
      R"("ooms":0,"device_allocations":0,"device_frees":0},"cap":{"cap_bytes":8000,)"
      R"("outside_allocator_bytes":600,"allocator_cap_bytes":7400,"nvml_process_bytes":650}})",
      // A memory tier's search and its confirm (docs/results/2026-12-04-...-tiers-repeats).
      R"({"cap":{"cap_bytes":8000,"outside_allocator_bytes":600,"allocator_cap_bytes":7400}})",
      R"({"confirm_steps":3})"};
  for (const std::string& text : shapes) {
    Json before = JobRecord().to_json();
    before["memory"] = Json::parse(text);
    EXPECT_EQ(dump_json(JobRecord::from_json(before).to_json()["memory"]), text);
  }
  Json before = JobRecord().to_json();
  before["memory"] = Json::parse(shapes[1]);
  const JobRecord old_record = JobRecord::from_json(before);
  EXPECT_EQ(old_record.memory.resident_bytes, std::optional<int64_t>(500));
  EXPECT_FALSE(old_record.memory.allocator.has_value());
  EXPECT_FALSE(old_record.memory.allocator_counters_window.has_value());
  EXPECT_FALSE(old_record.memory.cap.has_value());
  before["memory"] = Json::parse(shapes[3]);
  const JobRecord new_record = JobRecord::from_json(before);
  ASSERT_TRUE(new_record.memory.allocator_counters_warmup && new_record.memory.cap);
  EXPECT_EQ(new_record.memory.allocator_counters_warmup->device_allocations, 7);
  EXPECT_EQ(new_record.memory.cap->allocator_cap_bytes, 7400);
  EXPECT_EQ(new_record.memory.cap->nvml_process_bytes, std::optional<int64_t>(650));
  EXPECT_EQ(new_record.memory.outside_allocator_bytes, std::optional<int64_t>(600));
  // The oldest records have no memory: read as empty, written as {}.
  EXPECT_EQ(dump_json(JobRecord::from_json({{"model", "bert-base"}}).to_json()["memory"]), "{}");
  // A value of the wrong type is refused, naming where it is.
  before["memory"]["resident_bytes"] = "500 MB";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "memory.resident_bytes: expected an integer, got '500 MB'");
  before["memory"] = Json::parse(shapes[3]);
  before["memory"]["cap"]["cap_bytes"] = 8.5;
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "memory.cap.cap_bytes: expected an integer, got 8.5");
  before["memory"] = Json::parse(shapes[3]);
  before["memory"]["allocator_counters_window"]["ooms"] = true;
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "memory.allocator_counters_window.ooms: expected an integer, got true");
  before["memory"] = Json::parse(shapes[3]);
  before["memory"]["cudnn"] = "on";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "memory.cudnn: expected an object, got string");
  before["memory"] = Json::array();
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "memory: expected an object, got array");
}

TEST(RecordFieldsTest, ComputeOfOldAndNewRecordsWritesBackTheSameBytes) {
  const std::vector<std::string> shapes = {
      // A CPU run (docs/results/2026-12-06-cpu-readme-sample): no peak.
      R"({"flops_per_unit":69900000000.0,"tflops":0.01883650250844286})",
      // An older gpubench's: the peak without its source (2026-12-03-h200-stylegan-large-
      // tensors), and a peak alone where the FLOPs were not derived (...-rois-signals-ddp).
      R"({"flops_per_unit":324000000000.0,"tflops":51.25,"peak_kind":"bf16",)"
      R"("peak_tflops":739.5,"peak_share":0.0693})",
      R"({"peak_kind":"fp32","peak_tflops":51.5})",
      // A measured peak, and a reused one (2026-12-03-h200-headroom-attention-limit10).
      R"({"flops_per_unit":116300000000.0,"tflops":25.319641593550998,"peak_kind":"fp32",)"
      R"("peak_tflops":51.20386620149801,"peak_share":0.49448691030307884,)"
      R"("peak_source":"measured"})",
      R"({"flops_per_unit":324000000000.0,"tflops":51.27931862288258,"peak_kind":"bf16",)"
      R"("peak_tflops":739.7291443100487,"peak_share":0.06932174974762041,)"
      R"("peak_source":"reused","peak_measured_by":"nasnet-large"})",
      // Today's, with the FLOPs' derivation (2026-12-07-h100-fast-paths), and a data-parallel
      // run's total beside them.
      R"({"flops_per_unit":1195130684205.1765,"tflops":21.843171973579803,"peak_kind":"fp32",)"
      R"("peak_tflops":51.60341012922927,"peak_share":0.42328931206054865,)"
      R"("peak_source":"reused","peak_measured_by":"nasnet-large","flops_source":)"
      R"("step shapes","flops_per_step":101586108157440.0})",
      R"({"flops_per_unit":142800000000.0,"tflops":12.5,"peak_kind":"fp32",)"
      R"("peak_tflops":51.5,"peak_share":0.25,"peak_source":"measured","flops_source":)"
      R"("config","tflops_total":50.0})"};
  for (const std::string& text : shapes) {
    Json before = JobRecord().to_json();
    before["compute"] = Json::parse(text);
    EXPECT_EQ(dump_json(JobRecord::from_json(before).to_json()["compute"]), text);
  }
  Json before = JobRecord().to_json();
  before["compute"] = Json::parse(shapes[1]);
  const JobRecord old_record = JobRecord::from_json(before);
  EXPECT_EQ(old_record.compute.peak_kind, std::optional<std::string>("bf16"));
  EXPECT_FALSE(old_record.compute.peak_source.has_value());
  EXPECT_FALSE(old_record.compute.flops_source.has_value());
  EXPECT_FALSE(old_record.compute.tflops_total.has_value());
  before["compute"] = Json::parse(shapes[5]);
  const JobRecord new_record = JobRecord::from_json(before);
  EXPECT_EQ(new_record.compute.peak_measured_by, std::optional<std::string>("nasnet-large"));
  EXPECT_EQ(new_record.compute.flops_source, std::optional<std::string>("step shapes"));
  EXPECT_EQ(new_record.compute.flops_per_step, std::optional<double>(101586108157440.0));
  const FlopsPerUnit flops = FlopsPerUnit::from_compute(new_record.compute);
  EXPECT_EQ(flops.value, std::optional<double>(1195130684205.1765));
  EXPECT_EQ(flops.source, "step shapes");
  // A record without one (search-only, failed, on the CPU, the oldest) reads as empty and is
  // written without it, as before.
  const JobRecord none = JobRecord::from_json({{"model", "bert-base"}});
  EXPECT_TRUE(none.compute.empty());
  EXPECT_FALSE(none.to_json().contains("compute"));
  // A value of the wrong type is refused, naming where it is.
  before["compute"]["tflops"] = "21.8";
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "compute.tflops: expected a number, got '21.8'");
  before["compute"] = Json::parse(shapes[5]);
  before["compute"]["peak_source"] = true;
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "compute.peak_source: expected a string, got true");
  before["compute"] = Json::array();
  EXPECT_THROWS_WITH(JobRecord::from_json(before), ConfigError,
                     "compute: expected an object, got array");
}

TEST(RecordEnumsTest, AnUnknownStatusIsRefusedNamingTheFieldTheValueAndTheAllowedOnes) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  testing::write_file(path, header().to_json().dump() + "\n" +
                                Json{{"job", record("bert-base", 1).to_json()}}.dump() + "\n" +
                                "{\"job\": {\"model\": \"yolov3\", \"status\": \"skipped\"}}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError,
                     "j.jsonl:3: status 'skipped' is not a job status; the allowed values are: ok, "
                     "no-fit, diverged, failed, timeout, crashed, oom");
  Json document = ResultDocument().to_json();
  document["jobs"] = Json::array({{{"model", "yolov3"}, {"status", "no_fit"}}});
  EXPECT_THROWS_WITH(ResultDocument::from_json(document, "r.json"), ConfigError,
                     "r.json: jobs[0]: status 'no_fit' is not a job status (did you mean "
                     "'no-fit'?)");
  // A status that is not a string stays a record of the wrong type.
  EXPECT_THROWS_WITH(JobRecord::from_json({{"status", 3}}), ConfigError, "not a job record");
  // A record without a status is "ok", as it always was.
  EXPECT_EQ(JobRecord::from_json({{"model", "yolov3"}}).status, JobStatus::ok);
}

TEST(RecordEnumsTest, AJobSpecWritesItsPhaseAsBeforeAndRefusesAnUnknownOne) {
  JobSpec spec;
  spec.model = "bert-base";
  spec.phase = WorkerPhase::confirm;
  Json j = spec.to_json();
  EXPECT_EQ(j["phase"], "confirm");
  EXPECT_EQ(JobSpec::from_json(j).phase, WorkerPhase::confirm);
  j["phase"] = "timed";
  EXPECT_THROWS_WITH(JobSpec::from_json(j), ConfigError,
                     "phase 'timed' is not a worker phase (did you mean 'time'?); the allowed "
                     "values are: search, time, confirm");
}

}  // namespace
}  // namespace gpubench
