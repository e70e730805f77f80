// gpubench run in a real pseudo-terminal: Ctrl-C typed at the terminal while a worker runs, and
// the width of what it prints there.
#include "gpubench/records/journal.h"
#include "gpubench/base/json.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpubench {
namespace {

using testing::TempDir;

/// A child process on the slave side of a pseudo-terminal of 100 columns; the test reads and
/// types on the master side, as a user at a terminal would.
class PtyProcess {
 public:
  PtyProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    winsize size{};
    size.ws_row = 40;
    size.ws_col = 100;
    pid_ = forkpty(&master_, nullptr, nullptr, &size);
    if (pid_ == 0) {
      for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~PtyProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool started() const { return pid_ > 0; }

  /// Reads what the terminal shows until `done()` holds or `seconds` pass; false on timeout.
  template <typename Done>
  bool read_until(Done done, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      drain(100);
      if (!exited_ && waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
      if (exited_ && !done()) {
        drain(100);
        return done();
      }
    }
    return true;
  }
  /// Types `text` at the terminal (the line discipline turns "\x03" into SIGINT).
  void type(const std::string& text) {
    ASSERT_EQ(write(master_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  /// Waits for the process to end; its wait status.
  int wait(double seconds) {
    read_until([&] { return exited_; }, seconds);
    drain(100);
    return status_;
  }
  bool exited() const { return exited_; }
  const std::string& screen() const { return screen_; }

 private:
  void drain(int timeout_ms) {
    pollfd p{master_, POLLIN, 0};
    while (poll(&p, 1, timeout_ms) > 0) {
      char buffer[4096];
      const ssize_t n = read(master_, buffer, sizeof buffer);
      if (n <= 0) break;  // EIO once the child side has closed
      screen_.append(buffer, static_cast<std::size_t>(n));
      timeout_ms = 0;
    }
  }

  pid_t pid_ = -1;
  int master_ = -1;
  int status_ = 0;
  bool exited_ = false;
  std::string screen_;
};

// Ctrl-C at the terminal while the second job's worker runs: the run says what it kept and how
// to go on, ends as SIGINT ends a program (the shell sees 130), stops its worker, and leaves no
// work file; the journal holds the first job and resumes.
TEST(TerminalTest, CtrlCStopsTheRunSaysWhatWasKeptAndLeavesNoWorkFiles) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json({"bert-base", "bert-base-mlm"}));
  // The second job's worker hangs, so the Ctrl-C lands while a worker runs.
  const std::string worker = testing::hanging_worker(dir, "bert-base-mlm");
  const std::string tmp = dir.file("tmp");
  std::filesystem::create_directories(tmp);
  const std::string journal = dir.file("j.jsonl");
  PtyProcess run(
      {testing::gpubench_exe(), "run", "--device", "cpu", "--model", "bert-base,bert-base-mlm",
       "--config", dir.file("smoke.json"), "--journal", journal, "--worker-exe", worker},
      {"TMPDIR=" + tmp});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.read_until(
      [&] { return testing::journal_job_lines(journal) == 1 && run.screen().find("job 2/2") != std::string::npos; },
      300))
      << run.screen();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the worker is started
  run.type("\x03");
  const int status = run.wait(60);
  ASSERT_TRUE(run.exited()) << run.screen();
  ASSERT_TRUE(WIFSIGNALED(status)) << run.screen();
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  EXPECT_NE(run.screen().find("gpubench: stopped (SIGINT, Ctrl-C); the running job was stopped "
                              "and left no record; 1 of 2 jobs are done in the journal; "
                              "continue with: gpubench run --resume " +
                              journal),
            std::string::npos)
      << run.screen();
  // No work file of the stopped worker is left behind.
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(tmp)) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_TRUE(left.empty()) << left.front();
  // The hanging worker was stopped with the run.
  bool worker_alive = true;
  for (int i = 0; i < 100 && worker_alive; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string pattern = worker.substr(0, worker.size() - 1) + "[h]";
    worker_alive = std::system(("pgrep -f '" + pattern + "' > /dev/null").c_str()) == 0;
  }
  EXPECT_FALSE(worker_alive);
  const Journal kept = read_journal(journal);
  ASSERT_EQ(kept.jobs.size(), 1u);
  EXPECT_EQ(kept.jobs[0].model, "bert-base");
}

// What a one-job run prints to a 100-column terminal fits it: the summary on stdout and the
// progress lines on stderr (the journal's own path aside, which is as long as the user's), the
// heartbeat of a phase that has said nothing for a while among them (its silence shortened).
TEST(TerminalTest, ARunsOutputFitsAHundredColumnTerminal) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json({"bert-finetune"}));
  PtyProcess run({testing::gpubench_exe(), "run", "--device", "cpu", "--model", "bert-finetune",
                  "--config", dir.file("smoke.json"), "--journal", dir.file("j.jsonl")},
                 {"GPUBENCH_HEARTBEAT_S=0.001"});
  ASSERT_TRUE(run.started());
  const int status = run.wait(300);
  ASSERT_TRUE(run.exited()) << run.screen();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << run.screen();
  std::istringstream lines(run.screen());
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // the terminal's CR LF
    if (line.find(dir.file("j.jsonl")) != std::string::npos) continue;
    EXPECT_LE(line.size(), 100u) << line;
    ++checked;
  }
  EXPECT_GE(checked, 8) << run.screen();  // progress, the summary's table and its note
  EXPECT_NE(run.screen().find("bert-finetune"), std::string::npos) << run.screen();
  EXPECT_NE(run.screen().find(": still running after "), std::string::npos) << run.screen();
}

}  // namespace
}  // namespace gpubench
