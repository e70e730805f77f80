// Replays every seed of tests/fuzz/corpus/ and every input a fuzz campaign found
// (tests/fuzz/regressions/TARGET/, one file per finding, named for what it found) through the
// fuzz targets' bodies (tests/fuzz/targets.cpp), in the ordinary test suite: a finding that
// came back fails here, not only in the next campaign.
#include "tests/fuzz/targets.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace gpubench {
namespace {

namespace fs = std::filesystem;

fs::path fuzz_dir() {
  const std::string here = __FILE__;  // absolute: CMake passes full source paths
  return fs::path(here).parent_path() / "fuzz";
}

/// Runs every file under corpus/TARGET and regressions/TARGET through `run`; returns how many.
int replay(const std::string& target, int (*run)(const uint8_t*, size_t)) {
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

TEST(FuzzRegressionTest, ConfigInputs) { EXPECT_GT(replay("config", fuzz::run_config), 0); }
TEST(FuzzRegressionTest, ResultInputs) { EXPECT_GT(replay("result", fuzz::run_result), 0); }
TEST(FuzzRegressionTest, JournalInputs) { EXPECT_GT(replay("journal", fuzz::run_journal), 0); }
TEST(FuzzRegressionTest, ReportMergeInputs) {
  EXPECT_GT(replay("report_merge", fuzz::run_report_merge), 0);
}
TEST(FuzzRegressionTest, CommandLineInputs) {
  testing::TempDir scratch;  // what a replayed command writes stays there
  const fs::path before = fs::current_path();
  fs::current_path(scratch.path());
  const int count = replay("cli", fuzz::run_command_line);
  fs::current_path(before);
  EXPECT_GT(count, 0);
}

}  // namespace
}  // namespace gpubench
