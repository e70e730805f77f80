// `gpubench run`'s options: its own, and the run settings' flags (config/settings.h), in the
// groups its --help lists them in, each value checked as typed.
#include "gpubench/base/precision.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/terminal.h"
#include "gpubench/config/settings.h"
#include "gpubench/report/reporter.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace gpubench::cli {

namespace {

/// A value that is given must say something: `--precision ""` is refused, not read as "not
/// given".
const CLI::Validator kNonEmpty(
    [](std::string& value) {
      return value.empty() ? std::string("expected a value, got an empty string") : std::string();
    },
    "", "non-empty");

/// The largest --batch accepted: far above any batch a GPU trains (the H200's largest is
/// 191,488 tokens), far below where a tensor's element count overflows.
constexpr int64_t kMaxFixedBatch = 1'000'000'000;

/// A batch as typed: a whole number from 1 to kMaxFixedBatch, checked on the text, before the
/// conversion that would clamp 99999999999999999999999 to the int64 limit. "" when it is one.
std::string batch_number_problem(const std::string& number, const std::string& value) {
  const bool digits = !number.empty() && std::all_of(number.begin(), number.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
  const std::string expected = fmt::format(
      "expected a positive integer or MODEL=N (a batch for one workload), got '{}'", value);
  if (!digits) return expected;
  const std::size_t first = number.find_first_not_of('0');
  if (first == std::string::npos) return expected;  // zero
  if (number.size() - first > 10 || std::stoll(number.substr(first)) > kMaxFixedBatch) {
    return fmt::format(
        "got '{}', more than {} (the largest batch gpubench accepts; a "
        "workload's batch is in its unit: images, sequences or tokens)",
        value, with_thousands(kMaxFixedBatch));
  }
  return std::string();
}

/// --batch N or --batch MODEL=N as typed.
const CLI::Validator kBatchValue(
    [](std::string& value) {
      const std::size_t eq = value.find('=');
      if (eq == 0) return batch_number_problem("", value);
      return batch_number_problem(eq == std::string::npos ? value : value.substr(eq + 1), value);
    },
    "", "batch");

/// A number flag's value must read as a number, or the message says what the flag expects
/// (CLI11's own says only that it "could not convert"); its range is checked with the rest
/// (settings::flag_overlay).
CLI::Validator number_text(const settings::Setting& setting) {
  const settings::Flag* flag = &setting.flag;  // the settings table is static
  return CLI::Validator(
      [flag](std::string& value) {
        const char* begin = value.c_str();
        char* end = nullptr;
        std::strtod(begin, &end);
        if (!value.empty() && end == begin + value.size()) return std::string();
        return fmt::format("expected {}, got '{}'{}", flag->expected, value, flag->hint);
      },
      "", "number");
}

/// A run setting's flag (settings::flags()), stored in RunOptions::settings by its name, in the
/// help group the table gives it.
void add_setting_flag(CLI::App& cmd, RunOptions& o, const settings::Setting& setting) {
  const std::string name(setting.flag.name);
  const auto keep = [&o, name](Json value) { o.settings[name] = std::move(value); };
  CLI::Option* option = nullptr;
  switch (setting.type) {
    case settings::Type::kInt:
      option = cmd.add_option_function<int>(
          name, [keep](const int& value) { keep(value); }, setting.help());
      break;
    case settings::Type::kPrecision:
      option = cmd.add_option_function<std::string>(
                      name, [keep](const std::string& value) { keep(value); }, setting.help())
                   ->check(kNonEmpty);
      with_choices(option, precision_names(), "precision");
      break;
    case settings::Type::kBool:  // a flag without a value (--no-cache): Flag::sets
      option = cmd.add_flag_function(
          name, [keep](std::int64_t) { keep(true); }, setting.help());
      break;
    case settings::Type::kNumber:
    case settings::Type::kOptionalNumber:
      option = cmd.add_option_function<double>(
                      name, [keep](const double& value) { keep(value); }, setting.help())
                   ->check(number_text(setting));
      break;
  }
  if (!setting.flag.value_name.empty()) option->type_name(std::string(setting.flag.value_name));
  // An empty group would hide the flag from --help: CLI11's own group then.
  option->group(setting.flag.group.empty() ? "Options" : std::string(setting.flag.group));
}

/// The formats `run --format` takes: a report's, or none.
std::vector<std::string> run_formats() {
  std::vector<std::string> formats = report_formats();
  formats.push_back("none");
  return formats;
}

/// The options of `run` in their --help groups, the run settings' flags among them.
void add_run_options(CLI::App& cmd, RunOptions& o) {
  namespace group = settings::group;
  std::vector<const settings::Setting*> pending = settings::flags();
  const auto add_settings = [&](std::string_view in) {
    for (auto it = pending.begin(); it != pending.end();) {
      if ((*it)->flag.group != in) {
        ++it;
        continue;
      }
      add_setting_flag(cmd, o, **it);
      it = pending.erase(it);
    }
  };
  const auto in = [](CLI::Option* option, std::string_view name) {
    return option->group(std::string(name));
  };
  in(cmd.add_option("--model,-m", o.models,
                    "Workloads to run, repeated or comma-separated (see 'gpubench list')"),
     group::kWhat)
      ->delimiter(',')
      ->check(kNonEmpty)
      ->type_name("NAME");
  in(cmd.add_option("--suite", o.suites, "Named lists of workloads: all, image, language, twins"),
     group::kWhat)
      ->delimiter(',')
      ->check(kNonEmpty)
      ->type_name("SUITE");
  in(cmd.add_option("--config", o.config_file, "YAML or JSON config over the built-in defaults"),
     group::kWhat)
      ->check(kNonEmpty)
      ->type_name("FILE");
  add_settings(group::kWhat);
  in(cmd.add_option("--resume", o.resume_path,
                    "Continue the suite of this journal, running only what it does not have"),
     group::kWhat)
      ->type_name("JOURNAL");

  in(cmd.add_option("--gpu", o.gpu, "CUDA device index (default: 0 when a GPU is present)"),
     group::kWhere)
      ->type_name("N");
  with_choices(in(cmd.add_option("--device", o.device,
                                 "Where to train (default: cuda when present, else cpu)"),
                  group::kWhere)
                   ->check(kNonEmpty),
               {"cpu", "cuda"}, "device");
  add_settings(group::kWhere);

  in(cmd.add_option("--batch", o.batches,
                    "Fixed batch in the workload's unit, no search: N for every workload, or "
                    "MODEL=N for one (repeatable)"),
     group::kSearch)
      ->check(kBatchValue)
      ->type_name("N|MODEL=N");
  in(cmd.add_flag("--same-batch", o.same_batch,
                  "Time each workload at the RTX 8000's 2020 batch (no search): a same-batch "
                  "score beside the max-batch one; workloads without a 2020 row are left out"),
     group::kSearch);
  add_settings(group::kSearch);
  in(cmd.add_option("--memory-tiers", o.memory_tiers_gib,
                    "Search the max batch under each of these caps (6,8,11,24,48) to emulate "
                    "smaller cards; search only, no timed run"),
     group::kSearch)
      ->delimiter(',')
      ->type_name("GiB");
  add_settings(group::kTiming);

  in(cmd.add_option("--gpus", o.gpus,
                    "One rank per GPU, e.g. 0,1,2,3 or all (NCCL); each rank at the one-GPU max "
                    "batch, throughput summed"),
     group::kDataParallel)
      ->check(kNonEmpty)
      ->type_name("LIST");
  in(cmd.add_option("--world-size", o.world_size,
                    "Ranks: with --device cpu, N ranks over Gloo; under torchrun or srun, must "
                    "match WORLD_SIZE"),
     group::kDataParallel)
      ->type_name("N");
  in(cmd.add_option("--rendezvous-timeout", o.rendezvous_timeout_s,
                    "Seconds to wait for every rank to meet (torchrun/srun; default: 300); past "
                    "it the run exits with code 3"),
     group::kDataParallel)
      ->type_name("S");
  add_settings(group::kDataParallel);

  in(cmd.add_option("--json", o.json_path,
                    "Write the results as JSON to FILE (rewritten after each job)"),
     group::kOutput)
      ->check(kNonEmpty)
      ->type_name("FILE");
  in(cmd.add_option("--csv", o.csv_path,
                    "Write the results as CSV to FILE (rewritten after each job)"),
     group::kOutput)
      ->check(kNonEmpty)
      ->type_name("FILE");
  in(cmd.add_option("--journal", o.journal_path,
                    "Append each finished job to this journal (default: a new "
                    "gpubench-DATE-TIME.jsonl in $GPUBENCH_JOURNAL_DIR, else "
                    "$XDG_STATE_HOME/gpubench/journals, else ~/.local/state/gpubench/journals)"),
     group::kOutput)
      ->type_name("FILE");
  with_choices(in(cmd.add_option("--format,-f", o.format,
                                 "The report printed on stdout at the end: summary (default: a "
                                 "line per job), table (beside the eight 2020 GPUs), md, csv, "
                                 "json, html, or none"),
                  group::kOutput)
                   ->check(kNonEmpty),
               run_formats(), "format");
  in(cmd.add_flag("--wide", o.wide,
                  "--format table: every column, however wide; on a terminal a wider section is "
                  "otherwise printed in blocks of columns that fit it"),
     group::kOutput);
  with_choices(in(cmd.add_option("--progress", o.progress,
                                 "Progress on stderr. auto (default): on a terminal one status "
                                 "line rewritten in place, else plain lines (a status at most "
                                 "every 10 s); plain: lines only; none: no progress (the results "
                                 "still print)"),
                  group::kOutput),
               progress_choices(), "progress mode");
  in(cmd.add_flag("--quiet,-q", o.quiet,
                  "--progress none: warnings, errors and what failed are still said"),
     group::kOutput);
  add_settings(group::kOutput);
  // A setting in a group of its own (none of the above) still gets its flag.
  while (!pending.empty()) add_settings(pending.front()->flag.group);
}

}  // namespace

void setup_run(CLI::App& app, RunOptions& o) {
  auto* cmd = app.add_subcommand(
      "run", "Find the largest batch that trains, time it, and compare with the 2020 GPUs");
  add_run_options(*cmd, o);
  cmd->footer(
      "Examples:\n"
      "  gpubench run --gpu 0 --model bert-base --json bert.json   search, time, compare\n"
      "  gpubench run --suite all --precision amp-bf16 --journal all.jsonl\n"
      "  gpubench run --resume all.jsonl                           continue a stopped run\n"
      "  gpubench run -m nasnet-large,deeplabv3 --batch nasnet-large=16 --batch deeplabv3=4\n"
      "More in docs/usage.md (suites, memory tiers, repeats) and docs/distributed.md (GPUs).\n"
      "\n"
      "Exit codes: 0 every job ran; 1 a job failed (the others ran and are in the journal);\n"
      "2 bad input, before anything ran; 3 no usable device; 4 the run stopped early (the\n"
      "journal or a work file could not be written); 128+N stopped by signal N (Ctrl-C: 130),\n"
      "the finished jobs kept in the journal.");
  cmd->add_flag("--in-process", o.in_process, "Run jobs in this process (debugging)")
      ->group("");  // hidden
  cmd->add_option("--worker-exe", o.worker_exe, "Worker executable (testing)")->group("");
}

}  // namespace gpubench::cli
