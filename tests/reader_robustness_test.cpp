// The readers and writers under damage (issue 14): result files and journals whose values have
// the wrong types are bad input (ConfigError, exit 2) that names the file and line, never an
// escaped nlohmann exception; output files are written atomically without following a planted
// symlink; a file size limit is a write error (AbortError, exit 4); stale temporary files of
// killed processes are removed; a worker that writes garbage fails only its job.
#include "gpubench/config/config.h"
#include "gpubench/base/errors.h"
#include "gpubench/records/journal.h"
#include "gpubench/report/reporter.h"
#include "gpubench/records/result.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace gpubench {
namespace {

using testing::TempDir;

const std::string kHeader =
    R"({"schema": "gpubench-journal", "schema_version": 1, "created_utc": "2026-12-03T00:00:00Z"})";

Json document_with_job(const Json& job) {
  return {{"schema", "gpubench-result"}, {"schema_version", 1}, {"jobs", Json::array({job})}};
}

TEST(ReaderRobustnessTest, ResultValuesOfTheWrongTypeAreBadInputNamingTheFile) {
  for (const Json& job : {Json{{"model", 5}}, Json{{"batch", "big"}}, Json(7), Json::array(),
                          Json{{"trainable_params", {{"net", "x"}}}},
                          Json{{"step_time_ms", {1, "two"}}}, Json{{"device", "gpu"}},
                          Json{{"timing", {{"steps", "x"}}}}, Json{{"search", {{"probes", 3}}}}}) {
    SCOPED_TRACE(job.dump());
    EXPECT_THROWS_WITH(ResultDocument::from_json(document_with_job(job), "r.json"), ConfigError,
                       "r.json: jobs[0]: not a job record");
  }
  EXPECT_THROWS_WITH(
      ResultDocument::from_json({{"schema", "gpubench-result"}, {"schema_version", "1"}}, "r.json"),
      ConfigError, "r.json");
  EXPECT_THROWS_WITH(
      ResultDocument::from_json({{"schema", "gpubench-result"}, {"schema_version", 1}, {"jobs", 3}},
                                "r.json"),
      ConfigError, "r.json");
  EXPECT_THROWS_WITH(ResultDocument::from_json({{"schema", 1}}, "r.json"), ConfigError, "r.json");
  // A number beyond a double is bad JSON, not an escaped nlohmann out_of_range (found by
  // fuzzing: tests/fuzz/regressions/result/number-beyond-a-double).
  EXPECT_THROWS_WITH(parse_json(R"({"schema_version": 1e3081})", "r.json"), ConfigError,
                     "r.json: not valid JSON");
  // In YAML it reads as infinity (which the typed readers refuse) instead of escaping as
  // std::out_of_range (tests/fuzz/regressions/config/yaml-number-beyond-a-double).
  EXPECT_TRUE(std::isinf(
      parse_yaml("a: 1e999\nb: 123456789012345678901234567890\n", "c.yaml")["a"].get<double>()));
  EXPECT_EQ(parse_yaml("a: 1e-400\n", "c.yaml")["a"].get<double>(), 0.0);
}

TEST(ReaderRobustnessTest, DamagedJournalLinesAreBadInputNamingTheLine) {
  TempDir dir;
  const auto journal = [&](const std::string& text) {
    testing::write_file(dir.file("j.jsonl"), text);
    return dir.file("j.jsonl");
  };
  EXPECT_THROWS_WITH(read_journal(journal(kHeader + "\n{\"job\": {\"batch\": \"x\"}}\n")),
                     ConfigError, "j.jsonl:2: not a job record");
  EXPECT_THROWS_WITH(
      read_journal(journal(R"({"schema": "gpubench-journal", "schema_version": "one"})"
                           "\n")),
      ConfigError, "j.jsonl:1:");
  EXPECT_THROWS_WITH(
      read_journal(journal(R"({"schema": "gpubench-journal", "schema_version": 1e400})"
                           "\n")),
      ConfigError, "j.jsonl:1:");
  EXPECT_THROWS_WITH(read_journal(journal(kHeader + "\n{\"job\": {\"batch\": 1e300}}\n")),
                     ConfigError, "j.jsonl:2: not a job record: the number 1e+300 is out of range");
  EXPECT_THROWS_WITH(read_journal(journal(kHeader + "\n[1, 2]\n")), ConfigError, "j.jsonl:2:");
  // The report reads the same damage as bad input too (exit 2 from the CLI).
  EXPECT_THROWS_WITH(read_result_files({journal(kHeader + "\n{\"job\": {\"model\": []}}\n")}),
                     ConfigError, "j.jsonl:2");
  // Only the last line may be torn; it is left out.
  const Journal torn = read_journal(journal(kHeader + "\n{\"job\": {\"model\": \"a\"}}\n{\"jo"));
  EXPECT_TRUE(torn.torn_tail);
  EXPECT_EQ(torn.jobs.size(), 1u);
}

TEST(ReaderRobustnessTest, AnOutputIsWrittenAtomicallyAndAPlantedSymlinkIsNotFollowed) {
  TempDir dir;
  testing::write_file(dir.file("secret"), "keep me");
  std::filesystem::create_symlink(dir.file("secret"), dir.file("r.json"));
  write_file_atomically(dir.file("r.json"), "new content");
  EXPECT_EQ(testing::read_file(dir.file("secret")), "keep me");   // the link's target untouched
  EXPECT_FALSE(std::filesystem::is_symlink(dir.file("r.json")));  // the link itself replaced
  EXPECT_EQ(testing::read_file(dir.file("r.json")), "new content");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find("gpubench-tmp"), std::string::npos)
        << entry.path();
  }
  // A missing folder is a write error (exit 4), and leaves nothing.
  try {
    write_file_atomically(dir.file("no/such/r.json"), "x");
    ADD_FAILURE() << "expected AbortError";
  } catch (const AbortError& e) {
    EXPECT_EQ(e.exit_code(), kExitAborted);
    EXPECT_NE(std::string(e.what()).find("cannot write '" + dir.file("no/such/r.json")),
              std::string::npos)
        << e.what();
  }
}

TEST(ReaderRobustnessTest, AFileSizeLimitIsAWriteErrorNotASignal) {
  TempDir dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // With SIGXFSZ ignored (as run_cli does) the write fails with EFBIG.
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64, 64};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_file_atomically(dir.file("big.json"), std::string(4096, 'x'));
      _exit(10);
    } catch (const AbortError& e) {
      const bool says = std::string(e.what()).find("File too large") != std::string::npos;
      _exit(says ? e.exit_code() : 11);
    } catch (...) {
      _exit(12);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), kExitAborted);
  EXPECT_FALSE(testing::file_exists(dir.file("big.json")));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ADD_FAILURE() << "left behind: " << entry.path();
  }
}

/// A process id that no process has now (a child that ended and was reaped).
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

TEST(ReaderRobustnessTest, StaleTemporaryAndWorkFilesOfKilledProcessesAreRemoved) {
  TempDir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(getpid());
  for (const std::string& name :
       {".r.json.gpubench-tmp." + dead + ".1.2", ".r.json.gpubench-tmp." + live + ".1.2",
        "gpubench-spec-" + dead + "-abcdef", "gpubench-out-" + live + "-abcdef",
        ".gpubench-out-" + live + "-abcdef.gpubench-tmp." + dead + ".3.4",
        std::string("gpubench-other-1")}) {
    testing::write_file(dir.file(name), "x");
  }
  remove_stale_temp_files(dir.file("r.json"));
  EXPECT_FALSE(testing::file_exists(dir.file(".r.json.gpubench-tmp." + dead + ".1.2")));
  EXPECT_TRUE(testing::file_exists(dir.file(".r.json.gpubench-tmp." + live + ".1.2")));
  EXPECT_EQ(remove_stale_work_files(dir.path()), 2);
  EXPECT_FALSE(testing::file_exists(dir.file("gpubench-spec-" + dead + "-abcdef")));
  EXPECT_TRUE(testing::file_exists(dir.file("gpubench-out-" + live + "-abcdef")));
  EXPECT_FALSE(testing::file_exists(
      dir.file(".gpubench-out-" + live + "-abcdef.gpubench-tmp." + dead + ".3.4")));
  EXPECT_TRUE(testing::file_exists(dir.file("gpubench-other-1")));
}

// A work file's name carries its run's PID; a name whose random part merely starts with digits
// is nobody's PID. CI once lost a live data-parallel rank's spec this way: another run's clean-up
// read "gpubench-spec-4821Qz" as PID 4821, found it gone and removed the file mid-run.
TEST(ReaderRobustnessTest, CleanUpLeavesWorkFilesWhoseNameHoldsNoPidAndLiveRunsFilesAlone) {
  TempDir dir;
  const std::string dead = std::to_string(dead_pid());
  for (const std::string& name : {"gpubench-spec-" + dead + "Qz7a1", "gpubench-out-" + dead,
                                  "gpubench-spec--" + dead + "-abcdef",
                                  ".r.json.gpubench-tmp." + dead + "x"}) {
    testing::write_file(dir.file(name), "x");
  }
  // TMPDIR is where make_work_file puts them, this test's folder until it ends.
  struct TmpdirFor {
    std::optional<std::string> before;
    explicit TmpdirFor(const std::string& path) {
      if (const char* old = std::getenv("TMPDIR")) before = old;
      ::setenv("TMPDIR", path.c_str(), 1);
    }
    ~TmpdirFor() {
      if (before) {
        ::setenv("TMPDIR", before->c_str(), 1);
      } else {
        ::unsetenv("TMPDIR");
      }
    }
  } tmpdir(dir.path());
  const std::string spec = make_work_file("spec");
  const std::string out = make_work_file("out");
  EXPECT_EQ(spec.rfind(dir.file("gpubench-spec-" + std::to_string(getpid()) + "-"), 0), 0u)
      << spec;
  EXPECT_EQ(out.rfind(dir.file("gpubench-out-" + std::to_string(getpid()) + "-"), 0), 0u) << out;
  EXPECT_NE(spec, out);
  EXPECT_EQ(remove_stale_work_files(dir.path()), 0);
  EXPECT_TRUE(testing::file_exists(spec));
  EXPECT_TRUE(testing::file_exists(out));
  EXPECT_TRUE(testing::file_exists(dir.file("gpubench-spec-" + dead + "Qz7a1")));
  EXPECT_TRUE(testing::file_exists(dir.file("gpubench-out-" + dead)));
  EXPECT_TRUE(testing::file_exists(dir.file(".r.json.gpubench-tmp." + dead + "x")));
}

TEST(ReaderRobustnessTest, AWorkerThatWritesGarbageFailsOnlyItsJob) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"),
                      testing::smoke_configs_json({"bert-base", "bert-base-mlm"}));
  // The worker of bert-base writes garbage as its record and exits 0; bert-base-mlm's runs for
  // real.
  const std::string worker = dir.file("worker.sh");
  testing::write_file(worker,
                      "#!/bin/sh\n"
                      "case \"$(cat \"$3\")\" in '{\"model\":\"bert-base\",'*)\n"
                      "  printf '\\377garbage{' > \"$5\"; exit 0;;\n"
                      "esac\n"
                      "exec '" +
                          testing::gpubench_exe() + "' \"$@\"\n");
  chmod(worker.c_str(), 0755);
  const auto run = testing::run_gpubench(
      "run --model bert-base,bert-base-mlm --device cpu --format none --config '" +
      dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "' --worker-exe '" + worker +
      "'");
  EXPECT_EQ(run.exit_code, kExitJobFailed) << run.err;
  const Journal journal = read_journal(dir.file("j.jsonl"));
  ASSERT_EQ(journal.jobs.size(), 2u) << run.err;
  EXPECT_EQ(journal.jobs[0].model, "bert-base");
  EXPECT_EQ(journal.jobs[0].status, JobStatus::failed);
  EXPECT_NE(journal.jobs[0].message.find("record cannot be read"), std::string::npos)
      << journal.jobs[0].message;
  EXPECT_EQ(journal.jobs[1].model, "bert-base-mlm");
  EXPECT_EQ(journal.jobs[1].status, JobStatus::ok) << journal.jobs[1].message;
}

}  // namespace
}  // namespace gpubench
