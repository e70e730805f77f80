// The command line: subcommands in-process (exit codes and messages), and end to end through
// the real executable with worker processes.
#include "gpubench/base/compat.h"
#include "gpubench/base/json.h"
#include "gpubench/base/strings.h"
#include "gpubench/config/settings.h"
#include "gpubench/device/device.h"
#include "gpubench/records/journal.h"
#include "src/cli/app.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace gpubench {
namespace {

using testing::TempDir;

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

#define EXPECT_ERROR(result, expected_code, text)                            \
  do {                                                                       \
    const CliResult r_ = (result);                                           \
    EXPECT_EQ(r_.code, expected_code) << r_.err;                             \
    EXPECT_NE(r_.err.find(text), std::string::npos) << "stderr: " << r_.err; \
  } while (false)

TEST(CliTest, ListShowsEveryWorkloadWithUnitsAndParameters) {
  const auto r = cli({"list"});
  EXPECT_EQ(r.code, 0);
  // Column widths follow the longest name, so match each row's cells, not its spacing.
  auto row = [&](const std::string& name) {
    const auto start = r.out.find("\n" + name + " ");
    if (start == std::string::npos) return std::string();
    return r.out.substr(start + 1, r.out.find('\n', start + 1) - start - 1);
  };
  for (const auto& [name, cells] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"bert-base", {"language", "sequences", "examples/s", "BERT Base", "110,106,428"}},
           {"transformer-big", {"language", "tokens", "words/s", "Transformer Big"}}}) {
    const std::string line = row(name);
    ASSERT_FALSE(line.empty()) << name << " missing from:\n" << r.out;
    for (const auto& cell : cells) EXPECT_NE(line.find(cell), std::string::npos) << line;
  }
  const Json list = Json::parse(cli({"list", "--format", "json"}).out);
  ASSERT_TRUE(list.is_array());
  Json bert;
  for (const auto& entry : list) {
    if (entry["name"] == "bert-base") bert = entry;
  }
  ASSERT_TRUE(bert.is_object());
  EXPECT_EQ(bert["trainable_params_total"], 110106428);
  EXPECT_EQ(bert["throughput_unit"], "examples/s");
}

TEST(CliTest, ConfigDumpShowsTheResolvedConfig) {
  TempDir dir;
  testing::write_file(dir.file("c.yaml"), "models: {bert-base: {cpu_batch: 5}}\n");
  const auto r = cli({"list", "--config", dir.file("c.yaml"), "--config-dump", "bert-base"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json dump = Json::parse(r.out);
  EXPECT_EQ(dump["cpu_batch"], 5);
  EXPECT_EQ(dump["model"]["hidden_size"], 768);
  // Where the settings came from is said on stderr, so that stdout reads back as a --config.
  EXPECT_EQ(dump.count("sources"), 0u);
  EXPECT_NE(r.err.find(", " + dir.file("c.yaml")), std::string::npos) << r.err;
  EXPECT_ERROR(cli({"list", "--config-dump", "bert-bas"}), 2, "did you mean 'bert-base'?");
}

TEST(CliTest, InfoDescribesDevicesAndVersions) {
  const auto r = cli({"info", "--format", "json"});
  ASSERT_EQ(r.code, 0);
  const Json info = Json::parse(r.out);
  EXPECT_FALSE(info["software"]["libtorch"].get<std::string>().empty());
  EXPECT_EQ(info["devices"].back()["type"], "cpu");
  EXPECT_EQ(static_cast<int>(info["devices"].size()), cuda_device_count() + 1);
  EXPECT_NE(cli({"info"}).out.find("libtorch"), std::string::npos);
}

TEST(CliTest, BadInputIsExitCodeTwoWithAClearMessage) {
  EXPECT_ERROR(cli({"run", "--model", "bert-bsae"}), 2,
               "unknown model 'bert-bsae' (did you mean 'bert-base'?)");
  EXPECT_ERROR(cli({"run"}), 2, "no workload given");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "0"}), 2,
               "--batch: expected a positive integer or MODEL=N (a batch for one workload), got "
               "'0'");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "-4"}), 2, "--batch");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "many"}), 2, "--batch");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--precision", "fp16"}), 2,
               "--precision: unknown precision 'fp16'");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--min-steps", "0"}), 2,
               "--min-steps: expected an integer >= 1, got '0'");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--noise", "0"}), 2,
               "--noise: expected a percentage above 0 and at most 100, got '0'");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--max-seconds", "inf"}), 2,
               "--max-seconds: expected a number >= 0, got 'inf'");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--memory-cap", "0"}), 2, "--memory-cap");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", "/nonexistent/c.yaml"}), 2,
               "config file '/nonexistent/c.yaml' cannot be read");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--device", "gpu"}), 2,
               "--device: unknown device 'gpu' (did you mean 'cpu'?); choose one of cpu, cuda");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--device", "cpu", "--gpu", "0"}), 2,
               "contradict");
  EXPECT_ERROR(cli({"run", "--suite", "imagee"}), 2,
               "unknown suite 'imagee' (did you mean 'image'?)");
  EXPECT_ERROR(cli({"frobnicate"}), 2,
               "unknown command 'frobnicate'; the commands are list, info, run, report, compare");
  EXPECT_ERROR(cli({"runn", "--model", "bert-base"}), 2,
               "unknown command 'runn' (did you mean 'run'?)");
  EXPECT_ERROR(cli({"report", "x.json", "--format", "xml"}), 2, "unknown format 'xml'");
  EXPECT_ERROR(cli({"report", "/nonexistent/r.json"}), 2, "cannot be read");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--same-batch", "--batch", "4"}), 2,
               "--same-batch sets each workload's batch (the RTX 8000's of 2020): it "
               "contradicts --batch");
  EXPECT_ERROR(cli({"run", "--model", "bert-base-mlm", "--same-batch"}), 2,
               "--same-batch: none of bert-base-mlm has a 2020 row");
  // A price is checked before any file is read.
  EXPECT_ERROR(cli({"report", "/nonexistent/r.json", "--price", "H200=-5"}), 2,
               "--price H200: expected a price in USD above 0, got '-5'");
  EXPECT_ERROR(cli({"report", "/nonexistent/r.json", "--price", "H200"}), 2,
               "--price: expected GPU=USD");
}

// A message quoting what the user gave (an argument, a config's key or value) prints its control
// bytes escaped: an ANSI escape in a name cannot recolour the terminal or move the cursor.
TEST(CliTest, ControlBytesInWhatAMessageQuotesArePrintedEscaped) {
  // terminal_safe() leaves text without control bytes as it is.
  const auto no_control = [](const std::string& text) { return terminal_safe(text) == text; };
  const auto model = cli({"run", "--model", "\x1b[31mbert", "--device", "cpu"});
  EXPECT_EQ(model.code, 2) << model.err;
  EXPECT_NE(model.err.find("\\x1b[31mbert"), std::string::npos) << model.err;
  EXPECT_TRUE(no_control(model.err)) << model.err;
  const auto command = cli({"fr\x1b]0;title\x07obnicate"});
  EXPECT_EQ(command.code, 2) << command.err;
  EXPECT_NE(command.err.find("unknown command 'fr\\x1b]0;title\\x07obnicate'"), std::string::npos)
      << command.err;
  EXPECT_TRUE(no_control(command.err)) << command.err;
  TempDir dir;
  testing::write_file(dir.file("bad.yaml"), "run:\n  seed: \"\x1b[2J\"\n  s\x1b[2Jeed: 3\n");
  const auto config = cli({"run", "--model", "bert-base", "--config", dir.file("bad.yaml")});
  EXPECT_EQ(config.code, 2) << config.err;
  EXPECT_TRUE(no_control(config.err)) << config.err;
}

TEST(CliTest, AnEmptyOrAbsurdValueIsRefusedNotIgnored) {
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--precision", ""}), 2,
               "--precision: expected a value, got an empty string");
  EXPECT_ERROR(cli({"run", "--model", "", "--device", "cpu"}), 2,
               "--model: expected a value, got an empty string");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", ""}), 2, "--config: expected a value");
  // Checked as typed: the conversion would clamp it to the int64 limit.
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "99999999999999999999999"}), 2,
               "--batch: got '99999999999999999999999', more than 1,000,000,000");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "1000000001"}), 2, "more than");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "000"}), 2,
               "--batch: expected a positive integer or MODEL=N (a batch for one workload), got "
               "'000'");
  // One number for workloads that count sequences and tokens would mean different things.
  EXPECT_ERROR(cli({"run", "--suite", "language", "--batch", "1", "--device", "cpu"}), 2,
               "--batch 1: these workloads count their batch in different units: sequences "
               "(bert-base, bert-finetune, mt-dnn); tokens (transformer-big, conv-seq2seq, "
               "unsupmt); give each its own with --batch MODEL=N");
  // MODEL=N: a batch for one workload, which must be one of the run's, once.
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "deeplabv3=4", "--device", "cpu"}), 2,
               "--batch deeplabv3=4: deeplabv3 is not among this run's workloads (bert-base); add "
               "--model deeplabv3 or drop it");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "bert-bsae=4", "--device", "cpu"}), 2,
               "unknown model 'bert-bsae' (did you mean 'bert-base'?)");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "bert-base=2", "--batch",
                    "bert-base=3", "--device", "cpu"}),
               2, "--batch: bert-base has two batches (2 and 3); give one");
  EXPECT_ERROR(
      cli({"run", "--model", "bert-base", "--batch", "2", "--batch", "3", "--device", "cpu"}), 2,
      "--batch: given twice without a workload (2 and 3)");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "bert-base=0"}), 2,
               "got 'bert-base=0'");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--batch", "=4"}), 2, "got '=4'");
  TempDir dir;
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", dir.path()}), 2, "is a folder");
  testing::write_file(dir.file("empty.yaml"), "");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", dir.file("empty.yaml")}), 2,
               "empty.yaml' has no settings in it");
  testing::write_file(dir.file("comments.yaml"), "# run:\n#   seed: 3\n");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", dir.file("comments.yaml")}), 2,
               "has no settings");
  testing::write_file(dir.file("empty.json"), "{}");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", dir.file("empty.json")}), 2,
               "has no settings");
  EXPECT_ERROR(cli({"list", "--config", dir.file("empty.yaml")}), 2, "has no settings");
}

TEST(CliTest, MalformedConfigIsExitCodeTwoNamingTheLine) {
  TempDir dir;
  testing::write_file(dir.file("bad.yaml"), "run:\n  timing: [\n");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", dir.file("bad.yaml")}), 2,
               "bad.yaml:");
  testing::write_file(dir.file("typed.yaml"), "run:\n  timing: {min_steps: lots}\n");
  EXPECT_ERROR(
      cli({"run", "--model", "bert-base", "--config", dir.file("typed.yaml")}), 2,
      "typed.yaml: run.timing.min_steps: expected an integer from 1 to 1000000, got 'lots'");
}

TEST(CliTest, UnwritableOutputFailsBeforeMeasuringAndWritesNothing) {
  TempDir dir;
  const std::string json = dir.file("missing-folder/r.json");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--device", "cpu", "--json", json}), 2,
               "--json '" + json + "': folder '" + dir.file("missing-folder") + "' does not exist");
  EXPECT_FALSE(testing::file_exists(json));
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--device", "cpu", "--csv", dir.path()}), 2,
               "is a folder");
}

// A small result document and a journal with a torn last line, written as JSON by hand.
std::string result_document(const std::string& precision, double throughput) {
  return Json{{"schema", "gpubench-result"},
              {"schema_version", 1},
              {"jobs",
               {{{"model", "bert-base"},
                 {"family", "language"},
                 {"precision", precision},
                 {"throughput_unit", "examples/s"},
                 {"device", {{"type", "cuda"}, {"name", "NVIDIA H200"}}},
                 {"batch", 1312},
                 {"throughput", throughput}}}}}
      .dump();
}

TEST(CliTest, ReportReadsDocumentsAndJournalsAndWritesOutputAtomically) {
  TempDir dir;
  testing::write_file(dir.file("fp32.json"), result_document("fp32", 1880));
  testing::write_file(
      dir.file("bf16.jsonl"),
      R"({"schema": "gpubench-journal", "schema_version": 1, "created_utc": "2026-12-01T00:00:00Z"})"
      "\n{\"job\": " +
          Json::parse(result_document("amp-bf16", 4700))["jobs"][0].dump() + "}\n{\"job\": {\"mod");
  const auto r = cli({"report", dir.file("fp32.json"), dir.file("bf16.jsonl"), "--format", "html",
                      "--output", dir.file("report.html")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpubench: " + dir.file("bf16.jsonl") +
                       ": the last line was cut short (a run killed while writing it) and is "
                       "left out\n");
  const std::string html = testing::read_file(dir.file("report.html"));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("H200 fp32"), std::string::npos);
  EXPECT_NE(html.find("H200 amp-bf16"), std::string::npos);
  // Every format writes to --output; nothing is left beside it.
  for (const char* format : {"table", "md", "csv", "json"}) {
    const auto again = cli({"report", dir.file("fp32.json"), "--format", format, "--output",
                            dir.file(std::string("report.") + format)});
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_EQ(testing::read_file(dir.file(std::string("report.") + format)),
              cli({"report", dir.file("fp32.json"), "--format", format}).out);
  }
  // A price for a GPU no record ran on is refused, naming the GPUs measured; a known one adds
  // the per-dollar table.
  EXPECT_ERROR(cli({"report", dir.file("fp32.json"), "--price", "A100=10000"}), 2,
               "--price A100: no record in these files ran on a GPU of that name (measured: "
               "NVIDIA H200)");
  Json scored = Json::parse(result_document("fp32", 1880));
  scored["jobs"][0]["config"] = {{"reference_2020", {{"row", "BERT Base"}}}};
  scored["jobs"][0]["normalized"] = {{"reference_row", "BERT Base"},
                                     {"baseline_gpu", "quadro-rtx-8000"},
                                     {"baseline_throughput", 94},
                                     {"baseline_max_batch", 128},
                                     {"score", 20}};
  testing::write_file(dir.file("scored.json"), scored.dump());
  const auto priced = cli({"report", dir.file("scored.json"), "--price", "h200=30000"});
  ASSERT_EQ(priced.code, 0) << priced.err;
  EXPECT_NE(priced.out.find("Performance per dollar"), std::string::npos) << priced.out;
  EXPECT_EQ(cli({"report", dir.file("fp32.json")}).out.find("Performance per dollar"),
            std::string::npos);
  // The real executable, short flags.
  const auto real = testing::run_gpubench("report '" + dir.file("fp32.json") + "' -f md -o '" +
                                          dir.file("cli.md") + "'");
  EXPECT_EQ(real.exit_code, 0) << real.err;
  EXPECT_EQ(testing::read_file(dir.file("cli.md")),
            cli({"report", dir.file("fp32.json"), "-f", "md"}).out);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST(CliTest, ReportBadInputIsExitCodeTwoAndWritesNothing) {
  TempDir dir;
  testing::write_file(dir.file("r.json"), result_document("fp32", 1880));
  EXPECT_ERROR(cli({"report", dir.file("r.json"), "--format", "htlm"}), 2,
               "--format: unknown format 'htlm' (did you mean 'html'?)");
  // The output path is checked before any input is read.
  const std::string out = dir.file("missing-folder/report.html");
  EXPECT_ERROR(
      cli({"report", "/nonexistent/r.json", "--format", "html", "--output", out}), 2,
      "--output '" + out + "': folder '" + dir.file("missing-folder") + "' does not exist");
  EXPECT_ERROR(cli({"report", dir.file("r.json"), "--output", dir.path()}), 2, "is a folder");
  // A bad input leaves an existing output alone.
  testing::write_file(dir.file("keep.md"), "old report\n");
  EXPECT_ERROR(
      cli({"report", dir.file("r.json"), dir.file("nope.json"), "--output", dir.file("keep.md")}),
      2, "result file '" + dir.file("nope.json") + "' cannot be read");
  EXPECT_EQ(testing::read_file(dir.file("keep.md")), "old report\n");
}

TEST(CliTest, GpuPastTheDeviceCountIsExitCodeThree) {
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--gpu", "64"}), 3, "--gpu 64");
  // The message names what was typed: --device cuda asks for the first GPU.
  if (cuda_device_count() == 0) {
    EXPECT_ERROR(cli({"run", "--model", "bert-base", "--device", "cuda"}), 3, "--device cuda: ");
  }
}

TEST(CliTest, AParseErrorPointsAtTheHelpOfItsCommand) {
  EXPECT_ERROR(cli({"run", "--frob"}), 2, "--frob (run 'gpubench run --help')");
  EXPECT_ERROR(cli({"report", "--frob", "x.json"}), 2, "(run 'gpubench report --help')");
  EXPECT_ERROR(cli({"--frob"}), 2, "(run 'gpubench --help')");
  // The run's help shows its defaults, examples and exit codes.
  const auto help = cli({"run", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("Minimum timed steps (default: 2 on a GPU, 2 on the CPU)"),
            std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("Examples:"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("Exit codes: 0 every job ran; 1 a job failed"), std::string::npos)
      << help.out;
}

// Every flag of the run settings' table is an option of `run`, with its help and defaults.
TEST(CliTest, EveryRunSettingFlagIsARunOption) {
  const auto help = cli({"run", "--help"});
  ASSERT_EQ(help.code, 0);
  for (const settings::Setting* s : settings::flags()) {
    EXPECT_NE(help.out.find(std::string(s->flag.name) + " "), std::string::npos) << s->flag.name;
    // CLI11 wraps long help text, so only its opening words are looked for.
    EXPECT_NE(help.out.find(s->help().substr(0, 20)), std::string::npos) << s->flag.name;
  }
}

TEST(CliTest, ModelsTakeACommaListAndAConfigValueThatIsNotANumberIsNamed) {
  // Split at the comma: the second name is checked on its own.
  EXPECT_ERROR(cli({"run", "--model", "bert-base,bert-bsae", "--device", "cpu"}), 2,
               "unknown model 'bert-bsae' (did you mean 'bert-base'?)");
  TempDir dir;
  testing::write_file(dir.file("nan.yaml"), "models:\n  bert-base:\n    optimizer: {lr: .nan}\n");
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--config", dir.file("nan.yaml")}), 2,
               "models.bert-base.optimizer.lr: expected a number >= 0, got .nan (not a number)");
}

// list --config-dump prints settings a --config takes back as they are: the same resolved config,
// not modified.
TEST(CliTest, AConfigDumpReadsBackAsAConfigThatChangesNothing) {
  TempDir dir;
  const auto dump = cli({"list", "--config-dump", "bert-base"});
  ASSERT_EQ(dump.code, 0) << dump.err;
  EXPECT_NE(dump.err.find("bert-base from configs/models/bert-base.yaml (built in)"),
            std::string::npos)
      << dump.err;
  testing::write_file(dir.file("dump.json"), dump.out);
  const auto again = cli({"list", "--config", dir.file("dump.json"), "--config-dump", "bert-base"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, dump.out);
  EXPECT_EQ(Json::parse(dump.out).count("modified"), 0u);
}

// ---- End to end through the real executable (worker processes) ----

TEST(CliTest, RunOnTheCpuWritesJsonAndCsvAndTheReportReadsThemBack) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto run = testing::run_gpubench("run --model bert-base --device cpu --config '" +
                                         dir.file("smoke.json") + "' --json '" +
                                         dir.file("r.json") + "' --csv '" + dir.file("r.csv") +
                                         "' --journal '" + dir.file("j.jsonl") + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // The default stdout is the summary: the device and precision once, a line per job, within
  // 100 columns; stderr names the command for the whole comparison with 2020.
  EXPECT_NE(run.out.find(", fp32\nmodel      batch"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("examples/s           -"), std::string::npos) << run.out;  // no score
  EXPECT_EQ(run.out.find("RTX 2060"), std::string::npos) << run.out;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_NE(run.err.find("job 1/1: bert-base (cpu, fp32)"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("beside the eight 2020 GPUs, with max batches: gpubench report " +
                         dir.file("j.jsonl")),
            std::string::npos)
      << run.err;

  const Json doc = Json::parse(testing::read_file(dir.file("r.json")));
  EXPECT_EQ(doc["schema"], "gpubench-result");
  EXPECT_EQ(doc["schema_version"], 1);
  EXPECT_EQ(doc["command_line"][1], "run");
  ASSERT_EQ(doc["jobs"].size(), 1u);
  const Json& job = doc["jobs"][0];
  EXPECT_EQ(job["status"], "ok");
  EXPECT_EQ(job["device"]["type"], "cpu");
  EXPECT_EQ(job["batch_source"], "cpu");
  EXPECT_GT(job["throughput"].get<double>(), 0);
  EXPECT_TRUE(job["normalized"].is_null());  // a reduced model is not the 2020 workload
  EXPECT_FALSE(doc["environment"]["software"]["libtorch"].get<std::string>().empty());

  const std::string csv = testing::read_file(dir.file("r.csv"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 2);
  const auto report = testing::run_gpubench("report '" + dir.file("r.json") + "' --format md");
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("| bert-base"), std::string::npos) << report.out;
  // No temporary files are left beside the outputs.
  const auto listing = testing::run_gpubench("report '" + dir.file("r.json") + "' --format csv");
  EXPECT_EQ(listing.out, csv);
}

// --batch MODEL=N fixes one workload's batch; a resume without --json rewrites the first run's.
TEST(CliTest, APerModelBatchIsTimedAsGivenAndAResumeKeepsTheFirstRunsJsonUpToDate) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto run = testing::run_gpubench(
      "run --model bert-base --device cpu --batch bert-base=1 --format none --config '" +
      dir.file("smoke.json") + "' --json '" + dir.file("r.json") + "' --journal '" +
      dir.file("j.jsonl") + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json first = Json::parse(testing::read_file(dir.file("r.json")));
  EXPECT_EQ(first["jobs"][0]["batch"], 1);
  EXPECT_EQ(first["jobs"][0]["batch_source"], "flag");
  std::filesystem::remove(dir.file("r.json"));
  const auto resumed = testing::run_gpubench("run --resume '" + dir.file("j.jsonl") + "'",
                                             dir.file(""));  // from another folder: absolute
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(
      resumed.err.find("rewriting the first run's results as jobs end: " + dir.file("r.json")),
      std::string::npos)
      << resumed.err;
  ASSERT_TRUE(std::filesystem::exists(dir.file("r.json")));
  EXPECT_EQ(Json::parse(testing::read_file(dir.file("r.json")))["jobs"][0]["batch"], 1);
}

TEST(CliTest, RunPrintsTheFormatAskedForAndQuietKeepsStderrForWhatMatters) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto run = testing::run_gpubench("run --model bert-base --device cpu --config '" +
                                         dir.file("smoke.json") + "' --format csv --quiet " +
                                         "--journal '" + dir.file("j.jsonl") + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("model,family,device,", 0), 0u) << run.out;
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 2) << run.out;
  // Neither the parent's progress nor the worker's.
  EXPECT_EQ(run.err.find("job 1/1"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("warm-up"), std::string::npos) << run.err;
  EXPECT_EQ(read_journal(dir.file("j.jsonl")).jobs.size(), 1u);

  const auto none = testing::run_gpubench("run --model bert-base --device cpu --config '" +
                                          dir.file("smoke.json") + "' --format none " +
                                          "--journal '" + dir.file("j2.jsonl") + "'");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(none.out.empty()) << none.out;
  EXPECT_NE(none.err.find("job 1/1"), std::string::npos) << none.err;

  // A format that does not exist is refused before anything runs.
  EXPECT_ERROR(cli({"run", "--model", "bert-base", "--device", "cpu", "--format", "xml",
                    "--journal", dir.file("j3.jsonl")}),
               2, "--format: unknown format 'xml'");
  EXPECT_FALSE(std::filesystem::exists(dir.file("j3.jsonl")));
}

TEST(CliTest, AmpBf16OnACpuWhoseAutocastCannotRunTheModelSaysWhatToDo) {
  if (compat::kCpuAutocastLayerNorm) {
    GTEST_SKIP() << "libtorch " << TORCH_VERSION << " runs bf16 layer_norm under CPU autocast";
  }
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto run = testing::run_gpubench(
      "run --model bert-base --device cpu --precision amp-bf16 --config '" +
      dir.file("smoke.json") + "' --format none --json '" + dir.file("r.json") + "' --journal '" +
      dir.file("j.jsonl") + "'");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const Json doc = Json::parse(testing::read_file(dir.file("r.json")));
  const std::string message = doc["jobs"][0]["message"].get<std::string>();
  EXPECT_EQ(message.rfind("amp-bf16 does not run this model on the CPU with libtorch", 0), 0u)
      << message;
  EXPECT_NE(message.find("use --precision fp32 on the CPU, or amp-bf16 on a GPU"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("(libtorch: expected scalar type BFloat16"), std::string::npos) << message;
}

TEST(CliTest, AFailingJobIsExitCodeOneAndStillRecorded) {
  TempDir dir;
  Json config = Json::parse(testing::smoke_config_json("bert-base"));
  config["models"]["bert-base"]["model"]["heads"] = 3;  // 64 is not divisible by 3
  testing::write_file(dir.file("broken.json"), config.dump());
  const auto run = testing::run_gpubench(
      "run --model bert-base --device cpu --config '" + dir.file("broken.json") + "' --json '" +
      dir.file("r.json") + "' --journal '" + dir.file("j.jsonl") + "'");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  // The same config fails the same way: no advice to run it again unchanged.
  EXPECT_NE(run.err.find("1 of 1 jobs failed:\n  bert-base: failed: "), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("runs the same way again: change what this names"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("would run them as they were; fix the cause first"), std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("run them again with"), std::string::npos) << run.err;
  const Json doc = Json::parse(testing::read_file(dir.file("r.json")));
  EXPECT_EQ(doc["jobs"][0]["status"], "failed");
  EXPECT_NE(doc["jobs"][0]["message"].get<std::string>().find("multiple of heads"),
            std::string::npos);
}

TEST(CliTest, WithoutAGpuRunSaysSoAndUsesTheCpu) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  // As the README's main command runs: no flags but the model, in the current folder, for a
  // user whose environment names no state folder.
  std::filesystem::create_directories(dir.file("work"));
  const auto run = testing::run_gpubench(
      "run --model bert-base --config '" + dir.file("smoke.json") + "'", dir.file("work"),
      "-u GPUBENCH_JOURNAL_DIR -u XDG_STATE_HOME HOME='" + dir.file("home") + "'");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("no CUDA device found; running on the CPU"), std::string::npos);
  EXPECT_NE(run.out.find(", fp32\n"), std::string::npos) << run.out;  // the summary's device line
  EXPECT_NE(run.out.find("\nbert-base "), std::string::npos) << run.out;
  // The journal goes to a new file in the XDG state folder under the home, not into the current
  // folder, and the run says where and how to continue it.
  const std::string folder = dir.file("home") + "/.local/state/gpubench/journals/";
  const auto at = run.err.find("journal: " + folder + "gpubench-");
  ASSERT_NE(at, std::string::npos) << run.err;
  const std::string path = run.err.substr(at + 9, run.err.find(' ', at + 9) - at - 9);
  EXPECT_EQ(read_journal(path).jobs.size(), 1u) << path;
  EXPECT_NE(run.err.find("gpubench run --resume " + path), std::string::npos) << run.err;
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("work")));
}

// Progress never goes quiet: a phase that says nothing for GPUBENCH_HEARTBEAT_S (10 s unless set)
// gets a line naming it and how long it has run.
TEST(CliTest, AWorkerThatIsQuietForTooLongSaysWhatItIsDoing) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const std::string run =
      "run --model bert-base --device cpu --format none --config '" + dir.file("smoke.json") + "'";
  const auto chatty = testing::run_gpubench(run, "", "GPUBENCH_HEARTBEAT_S=0.001");
  EXPECT_EQ(chatty.exit_code, 0) << chatty.err;
  // Building the step, a warm-up step or the timing window, whichever was long enough.
  EXPECT_NE(chatty.err.find(" at batch 2: still running after "), std::string::npos)
      << chatty.err.substr(0, 4000);
  const auto calm = testing::run_gpubench(run, "", "GPUBENCH_HEARTBEAT_S=3600");
  EXPECT_EQ(calm.exit_code, 0) << calm.err;
  EXPECT_EQ(calm.err.find("still running"), std::string::npos) << calm.err;
}

TEST(CliTest, TheJournalFolderFollowsTheEnvironmentAndAnUnusableOneIsExitCodeTwo) {
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const std::string run =
      "run --model bert-base --device cpu --format none --config '" + dir.file("smoke.json") + "'";
  const auto xdg = testing::run_gpubench(
      run, "", "-u GPUBENCH_JOURNAL_DIR XDG_STATE_HOME='" + dir.file("state") + "'");
  EXPECT_EQ(xdg.exit_code, 0) << xdg.err;
  EXPECT_NE(xdg.err.find("journal: " + dir.file("state") + "/gpubench/journals/gpubench-"),
            std::string::npos)
      << xdg.err;
  const auto own =
      testing::run_gpubench(run, "", "GPUBENCH_JOURNAL_DIR='" + dir.file("mine") + "'");
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NE(own.err.find("journal: " + dir.file("mine") + "/gpubench-"), std::string::npos)
      << own.err;
  // A folder that cannot be made (its parent is a file) stops the run before any work.
  testing::write_file(dir.file("file"), "x");
  const auto bad =
      testing::run_gpubench(run, "", "GPUBENCH_JOURNAL_DIR='" + dir.file("file") + "/sub'");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("cannot create the journal folder " + dir.file("file") + "/sub"),
            std::string::npos)
      << bad.err;
  EXPECT_NE(bad.err.find("GPUBENCH_JOURNAL_DIR"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace gpubench
