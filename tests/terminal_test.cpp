// What goes to a terminal: gpubench run in a real pseudo-terminal (Ctrl-C typed while a worker
// runs, the width of what it prints there, its status line, --progress), the progress printer on
// a pseudo-terminal and elsewhere, and the table format within a terminal's width.
#include "gpubench/records/journal.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/base/terminal.h"
#include "gpubench/report/reporter.h"
#include "tests/builtin_store.h"
#include "tests/testing.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <streambuf>
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

/// What a terminal shows of `screen` as lines: a line ends at a newline, and a carriage return
/// starts it over (a status line rewritten in place); the clear-to-end-of-line sequence takes no
/// room.
std::vector<std::string> shown_lines(const std::string& screen) {
  std::vector<std::string> lines;
  std::string current;
  for (std::size_t i = 0; i < screen.size(); ++i) {
    if (screen.compare(i, 3, "\x1b[K") == 0) {
      i += 2;
    } else if (screen[i] == '\r' || screen[i] == '\n') {
      if (!current.empty()) lines.push_back(current);
      current.clear();
    } else {
      current += screen[i];
    }
  }
  if (!current.empty()) lines.push_back(current);
  return lines;
}

/// The folder of the golden report's inputs (tests/golden/inputs).
std::vector<std::string> golden_inputs() {
  const std::string dir = std::string(GPUBENCH_TEST_SOURCE_DIR) + "/golden/inputs/";
  return {dir + "h200-fp32.json", dir + "h200-amp-bf16.jsonl", dir + "rtx3090-fp32.json",
          dir + "h200-tiers.jsonl"};
}

std::size_t widest(const std::vector<std::string>& lines) {
  std::size_t widest = 0;
  for (const auto& line : lines) widest = std::max(widest, text_columns(line));
  return widest;
}

// What a one-job run prints to a 100-column terminal fits it: the summary on stdout and the
// progress on stderr (the journal's own path aside, which is as long as the user's). The worker's
// status (its phase, how long it has run) is one line rewritten in place, redrawn many times a
// second here (its interval shortened), and never piles up as "still running" lines.
TEST(TerminalTest, ARunsOutputFitsAHundredColumnTerminalWithOneStatusLine) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_configs_json({"bert-finetune"}));
  PtyProcess run({testing::gpubench_exe(), "run", "--device", "cpu", "--model", "bert-finetune",
                  "--config", dir.file("smoke.json"), "--journal", dir.file("j.jsonl")},
                 {"GPUBENCH_HEARTBEAT_S=0.001", "COLUMNS="});
  ASSERT_TRUE(run.started());
  const int status = run.wait(300);
  ASSERT_TRUE(run.exited()) << run.screen();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << run.screen();
  int checked = 0;
  for (const auto& line : shown_lines(run.screen())) {
    if (line.find(dir.file("j.jsonl")) != std::string::npos) continue;
    EXPECT_LE(text_columns(line), 100u) << line;
    ++checked;
  }
  EXPECT_GE(checked, 8) << run.screen();  // progress, the summary's table and its note
  EXPECT_NE(run.screen().find("bert-finetune"), std::string::npos) << run.screen();
  // A status line: from the start of the line, who, the phase and its time, cleared after.
  const std::regex status_line(
      "\r  \\[\\d+:\\d\\d\\] job 1/1 bert-finetune: [^\r\n\x1b]+ \\(\\d+:\\d\\d\\)\x1b\\[K");
  EXPECT_TRUE(std::regex_search(run.screen(), status_line)) << run.screen();
  EXPECT_EQ(run.screen().find("still running after"), std::string::npos) << run.screen();
}

// --progress plain on a terminal prints lines only (no carriage return but the terminal's own
// before each newline), the quiet worker's status among them; --progress none prints no
// progress at all, and the results still. The timed window lasts at least 0.5 s, so the quiet
// worker's heartbeat (every 0.05 s of silence) has a phase to speak in however fast the machine.
TEST(TerminalTest, PlainProgressPrintsLinesOnlyAndNonePrintsNoProgress) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto run_with = [&](const std::string& progress, const std::string& journal) {
    auto run = std::make_unique<PtyProcess>(
        std::vector<std::string>{testing::gpubench_exe(), "run", "--device", "cpu", "--model",
                                 "bert-base", "--config", dir.file("smoke.json"), "--journal",
                                 dir.file(journal), "--progress", progress, "--min-seconds",
                                 "0.5"},
        std::vector<std::string>{"GPUBENCH_HEARTBEAT_S=0.05", "COLUMNS="});
    const int status = run->wait(300);
    EXPECT_TRUE(run->exited() && WIFEXITED(status) && WEXITSTATUS(status) == 0) << run->screen();
    return run->screen();
  };
  const std::string plain = run_with("plain", "plain.jsonl");
  EXPECT_NE(plain.find("job 1/1: bert-base"), std::string::npos) << plain;
  EXPECT_NE(plain.find(": still running after "), std::string::npos) << plain;
  EXPECT_EQ(plain.find("\x1b[K"), std::string::npos) << plain;
  for (std::size_t at = plain.find('\r'); at != std::string::npos; at = plain.find('\r', at + 1)) {
    ASSERT_EQ(plain.compare(at, 2, "\r\n"), 0) << "a carriage return of its own at " << at;
  }

  const std::string none = run_with("none", "none.jsonl");
  EXPECT_EQ(none.find("job 1/1"), std::string::npos) << none;
  EXPECT_EQ(none.find("warm-up"), std::string::npos) << none;
  EXPECT_EQ(none.find("\x1b[K"), std::string::npos) << none;
  EXPECT_NE(none.find("\nbert-base "), std::string::npos) << none;  // the summary's row
}

// ---- Progress, one printer at a time ----

/// An output stream that writes straight to a file descriptor (a pseudo-terminal's side).
class FdStream : public std::ostream {
 public:
  explicit FdStream(int fd) : std::ostream(&buffer_), buffer_(fd) {}

 private:
  struct Buffer : std::streambuf {
    explicit Buffer(int fd) : fd(fd) {}
    int_type overflow(int_type c) override {
      if (c == traits_type::eof()) return traits_type::not_eof(c);
      const char byte = traits_type::to_char_type(c);
      return ::write(fd, &byte, 1) == 1 ? c : traits_type::eof();
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override {
      return ::write(fd, s, static_cast<std::size_t>(n));
    }
    int fd;
  };
  Buffer buffer_;
};

/// What can be read from `fd` now.
std::string read_available(int fd) {
  std::string text;
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 200) > 0) {
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

/// COLUMNS unset for a scope (a test of the terminal's own width).
class NoColumnsVariable {
 public:
  NoColumnsVariable() {
    if (const char* value = std::getenv("COLUMNS")) saved_ = value;
    unsetenv("COLUMNS");
  }
  ~NoColumnsVariable() {
    if (saved_) setenv("COLUMNS", saved_->c_str(), 1);
  }

 private:
  std::optional<std::string> saved_;
};

// On a pseudo-terminal, auto means a status line: rewritten in place (a carriage return, the
// text cut to the terminal's width less one, clear to the end of the line), only when it
// changed, drawn again under a line that stays, and cleared at the end.
TEST(ProgressTest, OnAPseudoTerminalAutoRewritesOneStatusLine) {
  const NoColumnsVariable no_columns;
  int master = -1, slave = -1;
  winsize size{};
  size.ws_row = 24;
  size.ws_col = 40;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, &size), 0);
  EXPECT_TRUE(is_terminal(slave));
  EXPECT_EQ(terminal_columns(slave), 40u);
  const ProgressMode mode = progress_mode("auto", is_terminal(slave));
  EXPECT_EQ(mode, ProgressMode::kTerminal);
  {
    FdStream out(slave);
    ProgressPrinter progress(out, mode, terminal_columns(slave));
    progress.status("search probe 1 at batch 512 (0:01); about 1:05:00 left in the suite");
    progress.status("search probe 1 at batch 512 (0:01); about 1:05:00 left in the suite");
    progress.status("search probe 2 at batch 768 (0:00)");
    progress.line("search probe 2: batch 768 fits");
    progress.clear_status();
  }
  const std::string screen = read_available(master);
  close(slave);
  close(master);
  // The long status cut to 39 columns, drawn once though given twice.
  const std::string cut = "search probe 1 at batch 512 (0:01); abo";
  EXPECT_NE(screen.find("\r" + cut + "\x1b[K"), std::string::npos) << screen;
  EXPECT_EQ(screen.find(cut + "u"), std::string::npos) << screen;
  EXPECT_EQ(screen.find(cut, screen.find(cut) + 1), std::string::npos) << screen;
  // The next one over it; the line that stays on a line of its own (the terminal's CR LF), the
  // status drawn again under it, then cleared.
  EXPECT_EQ(screen,
            "\r" + cut + "\x1b[K" + "\rsearch probe 2 at batch 768 (0:00)\x1b[K" +
                "\r\x1b[Ksearch probe 2: batch 768 fits\r\n" +
                "search probe 2 at batch 768 (0:00)\x1b[K" + "\r\x1b[K");
}

TEST(ProgressTest, AutoIsPlainInAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_FALSE(is_terminal(fds[1]));
  EXPECT_EQ(terminal_columns(fds[1]), 0u);  // no terminal, no limit
  EXPECT_EQ(progress_mode("auto", is_terminal(fds[1])), ProgressMode::kPlain);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(progress_mode("none", true), ProgressMode::kNone);
  EXPECT_EQ(progress_mode("plain", true), ProgressMode::kPlain);
  EXPECT_THROWS_WITH(progress_mode("fancy", true), ConfigError, "choose one of auto, plain, none");
  for (const ProgressMode m :
       {ProgressMode::kTerminal, ProgressMode::kPlain, ProgressMode::kNone}) {
    EXPECT_EQ(parse_progress_mode(to_string(m)), m);
  }
  EXPECT_FALSE(parse_progress_mode("auto").has_value());
}

// Plain lines: no carriage return, no escape; every line that stays is printed, and a status
// only once the interval (10 s) has passed since anything was printed: at most one per interval.
TEST(ProgressTest, PlainModePrintsNoCarriageReturnAndRateLimitsTheStatus) {
  double now = 0;
  std::ostringstream out;
  ProgressPrinter progress(out, ProgressMode::kPlain, 80, 10, [&now] { return now; });
  for (now = 0.5; now < 10; now += 0.5) progress.status(fmt::format("probe at {:.1f} s", now));
  EXPECT_EQ(out.str(), "");  // quiet for less than 10 s: no status yet
  now = 10;
  progress.status("probe at 10 s");
  now = 12;
  progress.line("probe 1: batch 8 fits");
  for (now = 12.5; now < 40; now += 0.5) progress.status(fmt::format("warm-up at {:.1f} s", now));
  EXPECT_EQ(out.str(),
            "probe at 10 s\n"
            "probe 1: batch 8 fits\n"
            "warm-up at 22.0 s\n"
            "warm-up at 32.0 s\n");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
  EXPECT_EQ(out.str().find('\x1b'), std::string::npos);
}

TEST(ProgressTest, NoneModePrintsNothing) {
  std::ostringstream out;
  ProgressPrinter progress(out, ProgressMode::kNone, 80, 0.001);
  progress.line("job 1/1: bert-base");
  progress.status("warm-up at batch 2");
  progress.clear_status();
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressTest, WrapWordsKeepsEveryLineWithinTheWidth) {
  const std::string note =
      "note: a row's means are over the models its runs measured OK, the 2020 GPUs' over the "
      "same models, so a row compares like with like";
  const std::vector<std::string> lines = wrap_words(note, 40, 6);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("note: a row's", 0), 0u);
  std::string words;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_LE(text_columns(lines[i]), 40u) << lines[i];
    if (i > 0) {
      EXPECT_EQ(lines[i].rfind("      ", 0), 0u) << lines[i];
    }
    words += (i > 0 ? " " : "") + lines[i].substr(lines[i].find_first_not_of(' '));
  }
  EXPECT_EQ(words, note);  // nothing lost, nothing added
  EXPECT_EQ(wrap_words("averyveryverylongword and more", 8),
            (std::vector<std::string>{"averyveryverylongword", "and more"}));
}

// ---- The table format on a terminal ----

// Given a width, each section of the table that is wider prints its columns in blocks that fit,
// each block with the row labels, and notes wrap; without one (a pipe, a file, --wide) nothing
// changes.
TEST(ReportWidthTest, ATableWiderThanTheTerminalPrintsInBlocksThatFit) {
  const std::vector<JobRecord> jobs = read_results(golden_inputs());
  const auto table = [&](std::size_t width) {
    std::ostringstream out;
    make_reporter("table", out, width)->report(jobs, testing::builtin_store().reference());
    return out.str();
  };
  const std::string wide = table(0);
  ASSERT_GT(widest(shown_lines(wide)), 100u);  // else this test would test nothing
  EXPECT_EQ(wide.find("(continued)"), std::string::npos);
  const std::string narrow = table(100);
  EXPECT_LE(widest(shown_lines(narrow)), 100u) << narrow;
  EXPECT_NE(narrow.find("Training throughput normalized to the RTX 8000 (Lambda 2020); max batch "
                        "in parentheses (continued)\nmodel  "),
            std::string::npos)
      << narrow;
  // Every column is still there: each 2020 GPU's header, and each model on every block.
  for (const char* header : {"H200 fp32", "GeForce RTX 3090 fp32", "RTX 2060", "RTX 8000"}) {
    EXPECT_NE(narrow.find(header), std::string::npos) << header;
  }
  const auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_GT(count(narrow, "\ntransformer-big "), count(wide, "\ntransformer-big "));
  EXPECT_EQ(table(100), narrow);  // the same every time
  EXPECT_EQ(wide, table(0));
}

// `gpubench report` on a 100-column terminal fits it; --wide prints every column however wide;
// into a pipe it prints every column too.
TEST(ReportWidthTest, ReportFitsTheTerminalUnlessWide) {
  std::vector<std::string> args = {testing::gpubench_exe(), "report"};
  for (const auto& input : golden_inputs()) args.push_back(input);
  const auto screen_of = [&](const std::vector<std::string>& argv) {
    PtyProcess report(argv, {"COLUMNS="});
    const int status = report.wait(60);
    EXPECT_TRUE(report.exited() && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << report.screen();
    return report.screen();
  };
  const std::string fitted = screen_of(args);
  EXPECT_LE(widest(shown_lines(fitted)), 100u) << fitted;
  EXPECT_NE(fitted.find("(continued)"), std::string::npos) << fitted;
  args.push_back("--wide");
  const std::string wide = screen_of(args);
  EXPECT_GT(widest(shown_lines(wide)), 100u) << wide;
  EXPECT_EQ(wide.find("(continued)"), std::string::npos);
  std::string files;
  for (const auto& input : golden_inputs()) files += " '" + input + "'";
  const auto piped = testing::run_gpubench("report" + files);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_GT(widest(shown_lines(piped.out)), 100u);
  EXPECT_EQ(piped.out.find("(continued)"), std::string::npos);
}

}  // namespace
}  // namespace gpubench
