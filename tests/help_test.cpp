// Every command's --help: within 100 columns, its options in groups with type names, its choices
// listed and checked as typed, examples of its own; and --json meaning one thing.
#include "gpubench/base/json.h"
#include "gpubench/base/terminal.h"
#include "src/cli/app.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace gpubench {
namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), "gpubench");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

/// The commands --help lists ("" is gpubench itself).
const std::vector<std::string>& commands() {
  static const std::vector<std::string> names = {"list", "info", "run", "report", "compare"};
  return names;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

CliResult help_of(const std::string& command) {
  return command.empty() ? cli({"--help"}) : cli({command, "--help"});
}

/// Where option `flag`'s own line starts in `help` ("  --config FILE ..." or "  -m,--model
/// NAME ..."), not where a description mentions it; npos when it has none.
std::size_t option_line(const std::string& help, const std::string& flag) {
  for (std::size_t at = help.find(flag + " "); at != std::string::npos;
       at = help.find(flag + " ", at + 1)) {
    const std::size_t start = help.rfind('\n', at) + 1;  // 0 on the first line
    // Before the long name: spaces, and maybe a short name ("-m,"), as CLI11 lays them out.
    std::string before = help.substr(start, at - start);
    before.erase(std::remove(before.begin(), before.end(), ' '), before.end());
    if (before.empty() || (before.size() == 3 && before[0] == '-' && before[2] == ',')) {
      return start;
    }
  }
  return std::string::npos;
}

TEST(HelpTest, EveryCommandsHelpFitsInAHundredColumns) {
  std::vector<std::string> all = commands();
  all.insert(all.begin(), "");
  for (const auto& command : all) {
    const CliResult help = help_of(command);
    ASSERT_EQ(help.code, 0) << command << ": " << help.err;
    const std::vector<std::string> lines = lines_of(help.out);
    EXPECT_GE(lines.size(), 5u) << command << ":\n" << help.out;
    for (const auto& line : lines) {
      EXPECT_LE(text_columns(line), 100u) << "gpubench " << command << " --help:\n" << line;
    }
  }
}

// Options show what their value is (NAME, FILE, GiB, the choices), never CLI11's bare types.
TEST(HelpTest, OptionsShowTypeNamesNotTextOrInt) {
  const std::regex bare_type("(^|[^A-Za-z])(TEXT|INT|UINT|FLOAT)([^A-Za-z]|$)");
  for (const auto& command : commands()) {
    const CliResult help = help_of(command);
    for (const auto& line : lines_of(help.out)) {
      EXPECT_FALSE(std::regex_search(line, bare_type)) << "gpubench " << command << ": " << line;
    }
  }
  const std::string run = help_of("run").out;
  const auto line_with = [&run](const std::string& flag) {
    const std::size_t at = option_line(run, flag);
    return at == std::string::npos ? std::string() : run.substr(at, run.find('\n', at) - at);
  };
  EXPECT_NE(line_with("--model").find(" NAME"), std::string::npos) << run;
  EXPECT_NE(line_with("--config").find(" FILE"), std::string::npos) << run;
  EXPECT_NE(line_with("--json").find(" FILE"), std::string::npos) << run;
  EXPECT_NE(line_with("--memory-cap").find(" GiB"), std::string::npos) << run;
  EXPECT_NE(line_with("--noise").find(" PCT"), std::string::npos) << run;
  EXPECT_NE(line_with("--resume").find(" JOURNAL"), std::string::npos) << run;
}

TEST(HelpTest, RunListsItsOptionsInGroups) {
  const std::string help = help_of("run").out;
  const std::vector<std::string> groups = {"What to run:", "Where to run:", "Search:",
                                           "Timing:",      "Data parallel:", "Output:"};
  std::vector<std::size_t> at;
  for (const auto& group : groups) {
    at.push_back(help.find("\n" + group + "\n"));
    ASSERT_NE(at.back(), std::string::npos) << group << " missing:\n" << help;
  }
  for (std::size_t i = 1; i < at.size(); ++i) EXPECT_LT(at[i - 1], at[i]) << groups[i];
  // Each option under its group: between the group's title and the next one.
  const auto group_of = [&](const std::string& flag) {
    const std::size_t where = option_line(help, flag);
    std::string found;
    for (std::size_t i = 0; i < at.size(); ++i) {
      if (where != std::string::npos && where > at[i]) found = groups[i];
    }
    return found;
  };
  EXPECT_EQ(group_of("--model"), "What to run:");
  EXPECT_EQ(group_of("--precision"), "What to run:");
  EXPECT_EQ(group_of("--device"), "Where to run:");
  EXPECT_EQ(group_of("--memory-tiers"), "Search:");
  EXPECT_EQ(group_of("--memory-cap"), "Search:");
  EXPECT_EQ(group_of("--noise"), "Timing:");
  EXPECT_EQ(group_of("--repeat"), "Timing:");
  EXPECT_EQ(group_of("--gpus"), "Data parallel:");
  EXPECT_EQ(group_of("--progress"), "Output:");
  EXPECT_EQ(group_of("--wide"), "Output:");
}

TEST(HelpTest, EveryCommandsHelpEndsWithExamplesOfItsOwn) {
  for (const auto& command : commands()) {
    const std::string help = help_of(command).out;
    const std::size_t examples = help.find("\nExamples:\n");
    ASSERT_NE(examples, std::string::npos) << command << ":\n" << help;
    int count = 0;
    for (const auto& line : lines_of(help.substr(examples))) {
      if (line.rfind("  gpubench " + command + " ", 0) == 0) ++count;
    }
    EXPECT_GE(count, 2) << command << ":\n" << help;
    EXPECT_LE(count, 4) << command << ":\n" << help;
  }
}

TEST(HelpTest, ChoicesAreListedInTheHelp) {
  const std::string run = help_of("run").out;
  for (const char* choices : {"{fp32,tf32,amp-bf16,amp-fp16}", "{cpu,cuda}",
                              "{summary,table,md,csv,json,html,none}", "{auto,plain,none}"}) {
    EXPECT_NE(run.find(choices), std::string::npos) << choices << " in:\n" << run;
  }
  // report prints a report: none is not one of its formats.
  EXPECT_NE(help_of("report").out.find("{summary,table,md,csv,json,html}"), std::string::npos)
      << help_of("report").out;
  EXPECT_NE(help_of("compare").out.find("{table,md,json}"), std::string::npos);
  EXPECT_NE(help_of("list").out.find("{table,json}"), std::string::npos);
  EXPECT_NE(help_of("info").out.find("{table,json}"), std::string::npos);
}

// A value outside the choices stops the command as it is parsed (exit 2, nothing read or run),
// naming every value it takes.
TEST(HelpTest, AWrongChoiceIsExitCodeTwoNamingEveryAllowedValue) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> said;  ///< each in the message, in this order
  };
  const std::vector<Case> cases = {
      {{"run", "-m", "bert-base", "--precision", "fp16"},
       {"--precision: unknown precision 'fp16'",
        "; choose one of fp32, tf32, amp-bf16, amp-fp16 (run 'gpubench run --help')"}},
      {{"run", "-m", "bert-base", "--format", "xml"},
       {"--format: unknown format 'xml'",
        "; choose one of summary, table, md, csv, json, html, none"}},
      {{"run", "-m", "bert-base", "--device", "gpu"},
       {"--device: unknown device 'gpu' (did you mean 'cpu'?); choose one of cpu, cuda"}},
      {{"run", "-m", "bert-base", "--progress", "fancy"},
       {"--progress: unknown progress mode 'fancy'; choose one of auto, plain, none"}},
      {{"report", "/nonexistent/r.json", "--format", "none"},
       {"--format: unknown format 'none'",
        "; choose one of summary, table, md, csv, json, html (run 'gpubench report --help')"}},
      {{"compare", "/nonexistent/a.json", "/nonexistent/b.json", "-f", "html"},
       {"--format: unknown format 'html'", "; choose one of table, md, json"}},
      {{"list", "--format", "yaml"},
       {"--format: unknown format 'yaml'", "; choose one of table, json"}},
      {{"info", "--format", "text"},
       {"--format: unknown format 'text'", "; choose one of table, json"}},
  };
  for (const Case& c : cases) {
    const CliResult r = cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args[0] << " " << c.said[0] << "\n" << r.err;
    std::size_t at = 0;
    for (const auto& text : c.said) {
      at = r.err.find(text, at);
      EXPECT_NE(at, std::string::npos) << text << "\nstderr: " << r.err;
      if (at == std::string::npos) break;
    }
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// --json FILE is where `run` writes its results; list and info print JSON with --format json,
// and their old --json flag still works, saying so.
TEST(HelpTest, JsonIsRunsResultFileAndListAndInfoTakeFormatJson) {
  const CliResult list = cli({"list", "--format", "json"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_TRUE(Json::parse(list.out).is_array());
  EXPECT_EQ(list.err, "");
  const CliResult old = cli({"list", "--json"});
  ASSERT_EQ(old.code, 0) << old.err;
  EXPECT_EQ(old.out, list.out);
  EXPECT_NE(old.err.find("'list --json' is deprecated; use 'list --format json'"),
            std::string::npos)
      << old.err;
  const CliResult info = cli({"info", "--format", "json", "--no-peak"});
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_TRUE(Json::parse(info.out).contains("devices"));
  EXPECT_NE(cli({"info", "--no-peak"}).out.find("libtorch"), std::string::npos);
  const CliResult both = cli({"list", "--json", "--format", "table"});
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("list --json and --format table contradict each other"),
            std::string::npos)
      << both.err;
  // The help names --json only where it means a file.
  EXPECT_EQ(help_of("list").out.find("--json"), std::string::npos);
  EXPECT_EQ(help_of("info").out.find("--json"), std::string::npos);
  EXPECT_NE(help_of("run").out.find("--json FILE"), std::string::npos);
}

TEST(HelpTest, QuietAndAnotherProgressModeContradictEachOther) {
  const CliResult r = cli({"run", "-m", "bert-base", "--device", "cpu", "--quiet", "--progress",
                           "plain"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--quiet and --progress plain contradict each other"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace gpubench
