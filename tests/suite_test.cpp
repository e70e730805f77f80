// Suites: planning, skipping what a journal already holds, and the whole CLI path through real
// worker processes: a suite killed half-way continues with --resume and repeats nothing; a
// worker that crashes or hangs costs its job only.
#include "gpubench/run/suite.h"

#include "gpubench/base/errors.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/records/journal.h"
#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace gpubench {
namespace {

using testing::TempDir;

const std::vector<std::string> kModels = {"bert-base", "bert-base-mlm", "bert-finetune"};

/// A launcher that records what it was asked and answers from a script.
class ScriptedLauncher : public PhaseLauncher {
 public:
  JobRecord launch(const JobSpec& spec, double) override {
    calls.push_back(spec.model + ":" + to_string(spec.phase));
    hinted.push_back(spec.search_hint.has_value());
    if (spec.phase == WorkerPhase::time) {
      peaks_given.push_back(spec.matmul_peak ? spec.matmul_peak->measured_by : "");
    }
    JobRecord r;
    r.model = spec.model;
    r.device.type = "cuda";
    r.device.name = "NVIDIA H200";
    const ConfigStore store = resolve_store(spec.overlays);
    r.memory_cap_gib = store.run().memory_cap_gib;
    if (spec.model == failing) {
      r.status = JobStatus::crashed;
      r.message = "time worker killed by signal 11";
      return r;
    }
    r.batch = spec.phase == WorkerPhase::search ? 64 : spec.batch;
    if (spec.phase == WorkerPhase::search) {
      SearchRecord s;
      s.max_batch = r.memory_cap_gib ? static_cast<int64_t>(*r.memory_cap_gib) : 64;
      s.fixed_bytes = 1e9;
      s.bytes_per_sample = 1e8;
      r.search = s;
      r.batch = s.max_batch;
    } else {
      r.status = JobStatus::ok;
      r.throughput = 100;
      // As run_phase: the peak the spec brings for this device and kind, else measured.
      const PeakChoice peak = choose_matmul_peak(spec.matmul_peak, spec.device, "fp32",
                                                 [] { return std::optional<double>(51.3); });
      r.compute = compute_with_peak(r.throughput, 1e9, "fp32", peak);
    }
    return r;
  }
  std::vector<std::string> calls;
  std::vector<bool> hinted;  ///< whether each call came with a search hint
  /// Per timed run: the job whose matmul peak its spec brought ("" for none).
  std::vector<std::string> peaks_given;
  std::string failing;
};

SuitePlan gpu_plan(const std::vector<double>& tiers = {}) {
  SuitePlan plan;
  plan.device = "cuda:0";
  plan.jobs = plan_jobs(kModels, tiers);
  return plan;
}

JournalHeader header_of(const SuitePlan& plan) {
  JournalHeader h;
  h.plan = plan.to_json();
  return h;
}

TEST(SuiteTest, PlansOneJobPerModelOrOneSearchPerModelAndTier) {
  const auto plain = plan_jobs({"bert-base", "yolov3"}, {});
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_FALSE(plain[0].search_only);
  EXPECT_FALSE(plain[0].memory_cap_gib.has_value());
  const auto tiers = plan_jobs({"bert-base", "yolov3"}, {6, 24});
  ASSERT_EQ(tiers.size(), 4u);
  EXPECT_EQ(tiers[1].model, "bert-base");
  EXPECT_EQ(tiers[1].memory_cap_gib, 24);
  EXPECT_TRUE(tiers[1].search_only);
  EXPECT_EQ(tiers[1].label(), "bert-base @24GiB (search only)");

  SuitePlan plan = gpu_plan({11});
  plan.fixed_batch = 8;
  plan.overlays.emplace_back("a.yaml", Json{{"run", {{"seed", 3}}}});
  const SuitePlan back = SuitePlan::from_json(plan.to_json(), "j");
  EXPECT_EQ(back.to_json(), plan.to_json());
  EXPECT_THROWS_WITH(SuitePlan::from_json(Json{{"jobs", 3}}, "j.jsonl"), ConfigError,
                     "j.jsonl: the journal's plan cannot be read");
}

// ---- Device references (device/device_ref.h): one parser, one formatter ----

TEST(DeviceRefTest, EachDeviceIsWrittenAsItsTextAndReadBack) {
  const std::vector<std::pair<DeviceRef, std::string>> refs = {
      {DeviceRef::cpu(), "cpu"}, {DeviceRef::cuda(0), "cuda:0"}, {DeviceRef::cuda(7), "cuda:7"},
      {DeviceRef::cuda(12), "cuda:12"}};
  for (const auto& [ref, text] : refs) {
    EXPECT_EQ(ref.str(), text);
    const auto back = parse_device_ref(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_TRUE(*back == ref) << text;
    EXPECT_EQ(require_device_ref(text, "device").str(), text);
  }
  EXPECT_FALSE(DeviceRef::cpu().is_cuda());
  EXPECT_EQ(DeviceRef::cpu().index, -1);
  EXPECT_EQ(parse_device_ref("cuda:3")->index, 3);
  for (const char* text : {"", "cuda", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "cuda: 1",
                           "CPU", "gpu0", "cuda:99999999999", "cpu:0"}) {
    EXPECT_FALSE(parse_device_ref(text).has_value()) << text;
  }
  EXPECT_THROWS_WITH(require_device_ref("cuda", "device"), ConfigError,
                     "device 'cuda' is not a device; it is 'cpu' or 'cuda:N' (N a CUDA ordinal: "
                     "0, 1, ...)");
  // A journal's plan naming no device is refused when read, naming the file and the text.
  Json plan = gpu_plan().to_json();
  plan["device"] = "gpu0";
  EXPECT_THROWS_WITH(SuitePlan::from_json(plan, "j.jsonl"), ConfigError,
                     "j.jsonl: the plan's device 'gpu0' is not a device");
  EXPECT_EQ(SuitePlan::from_json(gpu_plan().to_json(), "j.jsonl").device, "cuda:0");
}

TEST(SuiteTest, RunsOnlyWhatTheJournalDoesNotHoldAsDone) {
  TempDir dir;
  const SuitePlan plan = gpu_plan();
  auto journal = JournalWriter::create(dir.file("j.jsonl"), header_of(plan));
  JobRecord done;
  done.model = "bert-base";
  done.status = JobStatus::ok;
  JobRecord crashed;
  crashed.model = "bert-base-mlm";
  crashed.status = JobStatus::crashed;
  ScriptedLauncher launcher;
  const SuiteOutcome outcome = run_suite(plan, {done, crashed}, launcher, journal, {});
  EXPECT_EQ(outcome.skipped, 1);
  EXPECT_EQ(outcome.ran, 2);
  EXPECT_EQ(outcome.failed, 0);
  EXPECT_EQ(launcher.calls,
            (std::vector<std::string>{"bert-base-mlm:search", "bert-base-mlm:time",
                                      "bert-finetune:search", "bert-finetune:time"}));
  const Journal j = read_journal(dir.file("j.jsonl"));
  ASSERT_EQ(j.jobs.size(), 2u);  // only the new ones are appended
  EXPECT_EQ(j.jobs[0].model, "bert-base-mlm");
  EXPECT_EQ(outcome.records.size(), 4u);  // earlier ones first, then the new ones
}

TEST(SuiteTest, AFailedJobIsJournaledWithItsIdentityAndTheSuiteGoesOn) {
  TempDir dir;
  const SuitePlan plan = gpu_plan();
  auto journal = JournalWriter::create(dir.file("j.jsonl"), header_of(plan));
  ScriptedLauncher launcher;
  launcher.failing = "bert-base-mlm";
  std::vector<std::string> ended;
  SuiteCallbacks callbacks;
  callbacks.job_ended = [&](const JobRecord& r) {
    ended.push_back(r.model + " " + to_string(r.status));
  };
  const SuiteOutcome outcome = run_suite(plan, {}, launcher, journal, callbacks);
  EXPECT_EQ(outcome.failed, 1);
  EXPECT_EQ(ended, (std::vector<std::string>{"bert-base ok", "bert-base-mlm crashed",
                                             "bert-finetune ok"}));
  const Journal j = read_journal(dir.file("j.jsonl"));
  ASSERT_EQ(j.jobs.size(), 3u);
  const JobRecord& failed = j.jobs[1];
  // The worker died before it could describe the job; the parent fills that in.
  EXPECT_EQ(failed.family, "language");
  EXPECT_EQ(failed.precision, "fp32");
  EXPECT_EQ(failed.throughput_unit, "examples/s");
  EXPECT_EQ(failed.device.type, "cuda");
}

// The dense-matmul peak is measured by the suite's first timed run and reused by the others.
TEST(SuiteTest, TheFirstTimedRunMeasuresTheMatmulPeakAndTheOthersReuseIt) {
  TempDir dir;
  SuitePlan plan = gpu_plan();
  auto journal = JournalWriter::create(dir.file("j.jsonl"), header_of(plan));
  ScriptedLauncher launcher;
  const SuiteOutcome outcome = run_suite(plan, {}, launcher, journal, {});
  EXPECT_EQ(launcher.peaks_given, (std::vector<std::string>{"", "bert-base", "bert-base"}));
  ASSERT_EQ(outcome.records.size(), 3u);
  EXPECT_EQ(outcome.records[0].compute.peak_source, std::optional<std::string>("measured"));
  EXPECT_EQ(outcome.records[1].compute.peak_source, std::optional<std::string>("reused"));
  EXPECT_EQ(outcome.records[2].compute.peak_measured_by, std::optional<std::string>("bert-base"));
  EXPECT_DOUBLE_EQ(outcome.records[2].compute.peak_tflops.value_or(0), 51.3);
  // The journal keeps where each peak came from.
  const Journal j = read_journal(dir.file("j.jsonl"));
  EXPECT_EQ(j.jobs[1].compute.peak_measured_by, std::optional<std::string>("bert-base"));

  // A first job that fails measures nothing: the next one measures, the last reuses its peak.
  TempDir dir2;
  auto journal2 = JournalWriter::create(dir2.file("j.jsonl"), header_of(plan));
  ScriptedLauncher failing_first;
  failing_first.failing = "bert-base";
  run_suite(plan, {}, failing_first, journal2, {});
  EXPECT_EQ(failing_first.peaks_given, (std::vector<std::string>{"", "bert-base-mlm"}));

  // Data-parallel timed runs measure on each rank's own device: nothing is passed on.
  TempDir dir3;
  plan.data_parallel = Json{{"devices", {"cuda:0", "cuda:1"}}};
  auto journal3 = JournalWriter::create(dir3.file("j.jsonl"), header_of(plan));
  ScriptedLauncher parallel;
  run_suite(plan, {}, parallel, journal3, {});
  EXPECT_EQ(parallel.peaks_given, (std::vector<std::string>{"", "", ""}));
}

TEST(SuiteTest, PlainJobsMatchTheirRecordsUnderAConfiguredMemoryCap) {
  // --memory-cap 8 (or run.memory_cap_gib in a config): every record carries the cap, and the
  // plain jobs of the plan must still recognise them as theirs.
  TempDir dir;
  SuitePlan plan = gpu_plan();
  plan.overlays.emplace_back("command line", Json{{"run", {{"memory_cap_gib", 8}}}});
  auto journal = JournalWriter::create(dir.file("j.jsonl"), header_of(plan));
  ScriptedLauncher launcher;
  const SuiteOutcome first = run_suite(plan, {}, launcher, journal, {});
  ASSERT_EQ(first.records.size(), 3u);
  EXPECT_EQ(first.records[0].memory_cap_gib, 8);
  for (const auto& job : plan.jobs)
    EXPECT_TRUE(job.matches(first.records[0]) || job.model != "bert-base");
  ScriptedLauncher again;
  const SuiteOutcome second = run_suite(plan, first.records, again, journal, {});
  EXPECT_EQ(second.skipped, 3);
  EXPECT_TRUE(again.calls.empty());
}

TEST(SuiteTest, MemoryTierJobsSearchUnderEachCapAndStop) {
  TempDir dir;
  SuitePlan plan = gpu_plan({6, 24});
  plan.jobs.resize(2);  // bert-base at 6 and 24 GiB
  auto journal = JournalWriter::create(dir.file("j.jsonl"), header_of(plan));
  ScriptedLauncher launcher;
  const SuiteOutcome outcome = run_suite(plan, {}, launcher, journal, {});
  // Each tier's batch is confirmed in a fresh process under its cap; nothing is timed.
  EXPECT_EQ(launcher.calls,
            (std::vector<std::string>{"bert-base:search", "bert-base:confirm", "bert-base:search",
                                      "bert-base:confirm"}));
  // The second tier starts from the memory line the first one measured.
  EXPECT_EQ(launcher.hinted, (std::vector<bool>{false, false, true, true}));
  ASSERT_EQ(outcome.records.size(), 2u);
  for (const auto& r : outcome.records) {
    EXPECT_TRUE(r.search_only);
    EXPECT_TRUE(r.emulated);
    EXPECT_EQ(r.throughput, 0);
  }
  EXPECT_EQ(outcome.records[0].memory_cap_gib, 6);
  EXPECT_EQ(outcome.records[0].batch, 6);  // the scripted search answers with the cap
  EXPECT_EQ(outcome.records[1].batch, 24);
  EXPECT_FALSE(outcome.records[1].normalized.has_value());
}

TEST(SuiteTest, FormatsClockTimes) {
  EXPECT_EQ(format_clock(0), "0:00");
  EXPECT_EQ(format_clock(65.4), "1:05");
  EXPECT_EQ(format_clock(3723), "1:02:03");
}

// ---- Through the CLI and real worker processes, on the CPU ----

std::string run_args(const TempDir& dir) {
  return "run --device cpu --model bert-base --model bert-base-mlm --model bert-finetune "
         "--config '" +
         dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'";
}

TEST(SuiteTest, AKilledSuiteContinuesWithResumeAndRepeatsNothing) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json(kModels));
  const std::string journal = dir.file("j.jsonl");
  // The second job's worker hangs, so the kill lands while it runs however slow the machine.
  const std::string worker = testing::hanging_worker(dir, "bert-base-mlm");
  const std::string command = "exec '" + testing::gpubench_exe() + "' " + run_args(dir) +
                              " --worker-exe '" + worker + "' > '" + dir.file("out.txt") + "' 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill the suite (SIGKILL: no chance to clean up) once its first job is journaled.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  int status = 0;
  bool exited = false;
  while (testing::journal_job_lines(journal) < 1 && std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;  // it must not end by itself: job 2 hangs
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(exited) << testing::read_file(dir.file("out.txt"));
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << testing::read_file(dir.file("out.txt"));
  // The hanging worker dies with its parent (PR_SET_PDEATHSIG): no orphan keeps running.
  bool orphan = true;
  for (int i = 0; i < 100 && orphan; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // "worker.s[h]": a pattern that matches the worker but not the shell running pgrep.
    const std::string pattern = worker.substr(0, worker.size() - 1) + "[h]";
    orphan = std::system(("pgrep -f '" + pattern + "' > /dev/null").c_str()) == 0;
  }
  EXPECT_FALSE(orphan) << "the worker outlived the killed suite";

  const Journal killed = read_journal(journal);  // still valid
  ASSERT_EQ(killed.jobs.size(), 1u);
  EXPECT_EQ(killed.jobs[0].model, "bert-base");
  EXPECT_EQ(killed.jobs[0].status, JobStatus::ok);

  const auto resumed =
      testing::run_gpubench("run --resume '" + journal + "' --json '" + dir.file("r.json") + "'");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("1 of 3 jobs are already in the journal; 2 to run"), std::string::npos)
      << resumed.err;
  EXPECT_NE(resumed.err.find("job 1/2: bert-base-mlm"), std::string::npos) << resumed.err;
  const Journal done = read_journal(journal);
  ASSERT_EQ(done.jobs.size(), 3u);
  EXPECT_EQ(done.jobs[0].created_utc, killed.jobs[0].created_utc);  // untouched
  EXPECT_EQ(done.jobs[1].model, "bert-base-mlm");
  EXPECT_EQ(done.jobs[2].model, "bert-finetune");
  // The result file holds the whole suite, the earlier job included.
  const Json doc = Json::parse(testing::read_file(dir.file("r.json")));
  ASSERT_EQ(doc["jobs"].size(), 3u);
  EXPECT_EQ(doc["jobs"][0]["model"], "bert-base");

  // Once everything is done, resuming runs nothing.
  const auto again = testing::run_gpubench("run --resume '" + journal + "'");
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("0 jobs run, 3 skipped"), std::string::npos) << again.err;
  EXPECT_EQ(read_journal(journal).jobs.size(), 3u);
}

TEST(SuiteTest, CrashingAndHangingWorkersFailTheirJobOnlyAndResumeRetriesThem) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json(kModels));
  // A worker that crashes for one model, hangs for another, and is the real one otherwise.
  const std::string worker = dir.file("worker.sh");
  testing::write_file(worker,
                      "#!/bin/sh\n"
                      "spec=$3\n"
                      "if grep -q '\"model\":\"bert-base-mlm\"' \"$spec\"; then kill -SEGV $$; fi\n"
                      "if grep -q '\"model\":\"bert-finetune\"' \"$spec\"; then sleep 60; fi\n"
                      "exec '" +
                          testing::gpubench_exe() + "' \"$@\"\n");
  chmod(worker.c_str(), 0755);
  const auto run =
      testing::run_gpubench(run_args(dir) + " --timeout 20 --worker-exe '" + worker + "'");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("bert-base-mlm crashed: the timed run's worker killed by signal 11"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("bert-finetune timeout: the timed run's worker timed out after"),
            std::string::npos)
      << run.err;
  // Both can pass when run again, and the summary says so.
  EXPECT_NE(run.err.find("2 of 3 jobs failed:\n  bert-base-mlm: crashed: "), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("(may pass when run again)"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("run them again with: gpubench run --resume"), std::string::npos)
      << run.err;
  Journal j = read_journal(dir.file("j.jsonl"));
  ASSERT_EQ(j.jobs.size(), 3u);
  EXPECT_EQ(j.jobs[0].status, JobStatus::ok);
  EXPECT_EQ(j.jobs[1].status, JobStatus::crashed);
  EXPECT_EQ(j.jobs[2].status, JobStatus::timeout);

  // With a healthy worker, --resume runs the two failed jobs and nothing else.
  const auto resumed = testing::run_gpubench("run --resume '" + dir.file("j.jsonl") + "'");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  j = read_journal(dir.file("j.jsonl"));
  ASSERT_EQ(j.jobs.size(), 5u);
  EXPECT_EQ(j.jobs[3].model, "bert-base-mlm");
  EXPECT_EQ(j.jobs[3].status, JobStatus::ok);
  EXPECT_EQ(j.jobs[4].model, "bert-finetune");
  EXPECT_EQ(j.jobs[4].status, JobStatus::ok);
}

TEST(SuiteTest, ResumeWarnsWhenTheRunSettingsResolveDifferently) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json({"bert-base"}));
  const std::string journal = dir.file("j.jsonl");
  auto r = testing::run_gpubench("run --device cpu --model bert-base --config '" +
                                 dir.file("smoke.json") + "' --journal '" + journal + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_gpubench("run --resume '" + journal + "' --timeout 99");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;  // same settings: no warning
  // As if an older gpubench, with another default seed, had started the journal.
  std::string text = testing::read_file(journal);
  const auto at = text.find("\"seed\":0");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 8, "\"seed\":7");
  testing::write_file(journal, text);
  r = testing::run_gpubench("run --resume '" + journal + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resolves the run settings differently"), std::string::npos) << r.err;
}

TEST(SuiteTest, AResultFileOnTheJournalsPathIsRefused) {
  TempDir dir;
  const auto r =
      testing::run_gpubench("run --device cpu --model bert-base --journal '" + dir.file("x.json") +
                            "' --json '" + dir.file("x.json") + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is the journal's own path"), std::string::npos) << r.err;
  EXPECT_FALSE(testing::file_exists(dir.file("x.json")));
}

TEST(SuiteTest, ResumeAndTierMistakesAreClearErrors) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json({"bert-base"}));
  testing::write_file(dir.file("j.jsonl"), "");
  auto r = testing::run_gpubench("run --resume '" + dir.file("j.jsonl") +
                                 "' --model bert-base --precision amp-bf16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("drop --model, --precision"), std::string::npos) << r.err;
  r = testing::run_gpubench("run --resume '" + dir.file("j.jsonl") + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("empty journal"), std::string::npos) << r.err;
  r = testing::run_gpubench("run --resume '" + dir.file("none.jsonl") + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot be read"), std::string::npos) << r.err;
  // An existing journal is never overwritten.
  r = testing::run_gpubench("run --device cpu --model bert-base --journal '" + dir.file("j.jsonl") +
                            "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already exists; continue it with --resume"), std::string::npos) << r.err;
  r = testing::run_gpubench("run --model bert-base --memory-tiers 6,0.1 --journal '" +
                            dir.file("k.jsonl") + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--memory-tiers: expected sizes in GiB of at least 0.25, got '0.1'"),
            std::string::npos)
      << r.err;
  r = testing::run_gpubench("run --model bert-base --memory-tiers 6 --memory-cap 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("contradict"), std::string::npos) << r.err;
  if (cuda_device_count() == 0) {
    r = testing::run_gpubench("run --model bert-base --memory-tiers 6,8 --journal '" +
                              dir.file("k.jsonl") + "'");
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("--memory-tiers emulates smaller GPUs"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(testing::file_exists(dir.file("k.jsonl")));  // nothing started, nothing written
}

// ---- Pre-started workers, through the CLI ----

/// The processes with `word` as one of their arguments and `variable` ("NAME=value") in their
/// environment: a run's workers, told apart from other tests' by a TMPDIR of the test's own.
std::vector<pid_t> processes_with(const std::string& word, const std::string& variable) {
  namespace fs = std::filesystem;
  auto has = [](const std::string& nul_separated, const std::string& item) {
    std::size_t start = 0;
    while (start < nul_separated.size()) {
      std::size_t end = nul_separated.find('\0', start);
      if (end == std::string::npos) end = nul_separated.size();
      if (nul_separated.compare(start, end - start, item) == 0) return true;
      start = end + 1;
    }
    return false;
  };
  std::vector<pid_t> found;
  std::error_code error;
  for (fs::directory_iterator it("/proc", error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    // A process that ended meanwhile reads as empty.
    if (has(testing::read_file((it->path() / "cmdline").string()), word) &&
        has(testing::read_file((it->path() / "environ").string()), variable)) {
      found.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  return found;
}

std::string prestart_args(const TempDir& dir, const std::string& journal) {
  return "run --device cpu --model bert-base,bert-base-mlm --format none --config '" +
         dir.file("smoke.json") + "' --journal '" + dir.file(journal) + "'";
}

TEST(SuiteTest, EachRecordSaysWhetherItsWorkersWerePrestarted) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json(kModels));
  // By default: the first job's worker starts as it comes, the second's was waiting.
  const auto on = testing::run_gpubench(prestart_args(dir, "on.jsonl"));
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_EQ(on.err.find("error:"), std::string::npos) << on.err;
  const Journal with = read_journal(dir.file("on.jsonl"));
  ASSERT_EQ(with.jobs.size(), 2u);
  EXPECT_EQ(with.jobs[0].runtime["workers"],
            Json({{"prestart", true}, {"processes", 1}, {"prestarted", 0}}));
  EXPECT_EQ(with.jobs[1].runtime["workers"],
            Json({{"prestart", true}, {"processes", 1}, {"prestarted", 1}}));
  EXPECT_EQ(with.jobs[1].status, JobStatus::ok) << with.jobs[1].message;
  EXPECT_EQ(with.header.run_settings["prestart_workers"], true);
  // --no-prestart: every worker starts as its phase comes.
  const auto off = testing::run_gpubench(prestart_args(dir, "off.jsonl") + " --no-prestart");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  const Journal without = read_journal(dir.file("off.jsonl"));
  ASSERT_EQ(without.jobs.size(), 2u);
  for (const JobRecord& r : without.jobs) {
    EXPECT_EQ(r.runtime["workers"],
              Json({{"prestart", false}, {"processes", 1}, {"prestarted", 0}}));
  }
  EXPECT_EQ(without.header.run_settings["prestart_workers"], false);
}

TEST(SuiteTest, AKilledRunLeavesNoWaitingWorkerBehind) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json(kModels));
  const std::string tmp = dir.file("tmp");
  std::filesystem::create_directories(tmp);
  const std::string marker = "TMPDIR=" + tmp;
  // A timed window of ten minutes: the kill lands while the first worker runs and the next
  // one waits.
  const std::string command = "TMPDIR='" + tmp + "' exec '" + testing::gpubench_exe() + "' " +
                              prestart_args(dir, "j.jsonl") +
                              " --min-seconds 600 --timeout 900 > '" + dir.file("out.txt") +
                              "' 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  bool both = false;
  while (!both && std::chrono::steady_clock::now() < deadline) {
    both = !processes_with("--wait", marker).empty() && !processes_with("--spec", marker).empty();
    int status = 0;
    if (!both && waitpid(pid, &status, WNOHANG) == pid) break;  // it must not end by itself
    if (!both) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!both) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    FAIL() << "no waiting worker beside the running one: "
           << testing::read_file(dir.file("out.txt"));
  }
  kill(pid, SIGKILL);  // no chance to clean up
  waitpid(pid, nullptr, 0);
  // Both workers die with their parent (PR_SET_PDEATHSIG; the waiting one would also read end
  // of file).
  bool left = true;
  for (int i = 0; i < 250 && left; ++i) {
    left = !processes_with("worker", marker).empty();
    if (left) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(left) << "a worker outlived the killed run";
}

}  // namespace
}  // namespace gpubench
