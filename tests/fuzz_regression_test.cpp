// Replays every seed of tests/fuzz/corpus/ and every input a fuzz campaign found
// (tests/fuzz/regressions/TARGET/, one file per finding, named for what it found) through the
// fuzz targets' bodies (tests/fuzz/targets.cpp), in the ordinary test suite: a finding that
// came back fails here, not only in the next campaign.
#include "gpubench/base/errors.h"
#include "gpubench/records/journal.h"
#include "gpubench/base/json_int.h"
#include "gpubench/records/result.h"
#include "gpubench/report/reporter.h"
#include "src/cli/app.h"
#include "tests/fuzz/targets.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace gpubench {
namespace {

namespace fs = std::filesystem;

fs::path fuzz_dir() {
  return fs::path(GPUBENCH_TEST_SOURCE_DIR) / "fuzz";
}

/// Runs every file under corpus/TARGET and regressions/TARGET through `run`; returns how many.
template <typename Run>
int replay(const std::string& target, Run run) {
  int count = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fuzz_dir() / kind / target;
    if (!fs::exists(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string data((std::istreambuf_iterator<char>(in)), {});
      SCOPED_TRACE(entry.path().string());
      try {
        run(reinterpret_cast<const uint8_t*>(data.data()), data.size());
      } catch (const std::exception& e) {
        ADD_FAILURE() << entry.path() << ": " << e.what();
      }
      ++count;
    }
  }
  return count;
}

// The fuzz targets let the input pick one of several things to do (which built-in config, which
// journal operation, which report format); here every input is replayed with every choice, as
// well as with the one the fuzzer made.
TEST(FuzzRegressionTest, ConfigInputs) {
  const int count = replay("config", [](const uint8_t* data, size_t size) {
    fuzz::run_config(data, size);
    if (size == 0) return 0;
    std::string each(reinterpret_cast<const char*>(data), size);
    for (int choice = 0; choice < fuzz::config_choices(); ++choice) {
      each[0] = static_cast<char>((choice << 1) | (data[0] & 1));
      fuzz::run_config(reinterpret_cast<const uint8_t*>(each.data()), each.size());
    }
    return 0;
  });
  EXPECT_GT(count, 0);
}
TEST(FuzzRegressionTest, ResultInputs) { EXPECT_GT(replay("result", fuzz::run_result), 0); }
TEST(FuzzRegressionTest, JournalInputs) {
  const int count = replay("journal", [](const uint8_t* data, size_t size) {
    fuzz::run_journal(data, size);
    for (int op = 0; op < fuzz::kJournalOperations; ++op) fuzz::run_journal(data, size, op);
    return 0;
  });
  EXPECT_GT(count, 0);
}
TEST(FuzzRegressionTest, ReportMergeInputs) {
  const int count = replay("report_merge", [](const uint8_t* data, size_t size) {
    fuzz::run_report_merge(data, size);
    for (int c = 0; c < fuzz::report_merge_choices(); ++c) fuzz::run_report_merge(data, size, c);
    return 0;
  });
  EXPECT_GT(count, 0);
}
TEST(FuzzRegressionTest, CommandLineInputs) {
  testing::TempDir scratch;  // what a replayed command writes stays there
  const fs::path before = fs::current_path();
  fs::current_path(scratch.path());
  const int count = replay("cli", fuzz::run_command_line);
  fs::current_path(before);
  EXPECT_GT(count, 0);
}

// Found by fuzz_report_merge: a first line whose "schema" is no string made is_journal_file
// throw nlohmann's type_error, so `gpubench report` exited 1 (an internal error) instead of 2.
TEST(FuzzRegressionTest, AFileWhoseSchemaIsNoStringIsBadInput) {
  testing::TempDir scratch;
  for (const char* first : {R"({"schema": []})", R"({"schema": 1})", R"({"schema": {"a": 1}})",
                            R"({"schema": null, "jobs": []})"}) {
    const std::string path = scratch.file("r.json");
    testing::write_file(path, std::string(first) + "\n");
    SCOPED_TRACE(first);
    EXPECT_FALSE(is_journal_file(path));
    EXPECT_THROW(read_result_files({path}), Error);
    const char* argv[] = {"gpubench", "report", path.c_str()};
    std::ostringstream out, err;
    EXPECT_EQ(cli::run_cli(3, argv, out, err), kExitBadInput) << err.str();
  }
}

// Found by fuzz_journal: a float beyond int's range where a record holds an int
// ("multiprocessors": 1.3e12) went through nlohmann's float-to-int cast, undefined behaviour
// (UBSan). Now bad input, as a value of the wrong type is.
TEST(FuzzRegressionTest, AFloatBeyondAnIntFieldIsBadInput) {
  for (const char* record :
       {R"({"model": "m", "device": {"type": "cuda", "multiprocessors": 1.3215e12}})",
        R"({"model": "m", "device": {"type": "cuda", "index": -1e10}})",
        R"({"model": "m", "timing": {"steps": 4e9}})"}) {
    SCOPED_TRACE(record);
    EXPECT_THROW(JobRecord::from_json(Json::parse(record)), ConfigError);
  }
  const JobRecord fine = JobRecord::from_json(
      Json::parse(R"({"model": "m", "device": {"type": "cuda", "multiprocessors": 132.0}})"));
  EXPECT_EQ(fine.device.multiprocessors, 132);
  EXPECT_EQ(value_int(Json::parse(R"({"n": 7})"), "n", 0), 7);
  EXPECT_EQ(value_int(Json::parse(R"({})"), "n", 3), 3);
}

// The cli target's seam: run_cli_check_only checks a run as run_cli does, and stops before it
// writes a journal or an output, or starts a job.
TEST(FuzzRegressionTest, CheckOnlyChecksARunWithoutRunningIt) {
  testing::TempDir scratch;
  auto check = [](std::vector<std::string> args, std::string* err_text = nullptr) {
    args.insert(args.begin(), "gpubench");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = cli::run_cli_check_only(static_cast<int>(argv.size()), argv.data(), out, err);
    if (err_text) *err_text = err.str();
    return code;
  };
  const std::string journal = scratch.file("j.jsonl"), json = scratch.file("r.json");
  EXPECT_EQ(check({"run", "--model", "bert-base", "--device", "cpu", "--journal", journal, "--json",
                   json, "--quiet"}),
            kExitOk);
  EXPECT_FALSE(testing::file_exists(journal));
  EXPECT_FALSE(testing::file_exists(json));
  std::string err;
  EXPECT_EQ(check({"run", "--model", "bert-bse", "--device", "cpu", "--journal", journal}, &err),
            kExitBadInput);
  EXPECT_NE(err.find("bert-base"), std::string::npos) << err;  // the did-you-mean
  EXPECT_EQ(check({"run", "--model", "bert-base", "--device", "cpu", "--world-size", "0"}),
            kExitBadInput);
  EXPECT_EQ(check({"run", "--model", "bert-base", "--device", "cpu", "--journal", journal, "--json",
                   journal}),
            kExitBadInput);  // --json on the journal's own path
  EXPECT_EQ(check({"worker", "--spec", "s.json", "--out", "o.json"}), kExitOk);
  EXPECT_EQ(check({"worker", "--spec", "s.json"}), kExitBadInput);
  EXPECT_FALSE(testing::file_exists(journal));
}

}  // namespace
}  // namespace gpubench
