// What the command files of src/cli share, and the steps of `run` that plan a suite (in
// run_plan.cpp) for cmd_run.cpp. Not part of the CLI's interface (app.h).
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/run/suite.h"
#include "src/cli/app.h"

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class FormatterBase;
class Option;
}  // namespace CLI

namespace gpubench::cli {

/// The built-in configs, parsed and validated once per process (they are compiled in); each
/// caller gets its own copy to overlay.
ConfigStore builtin_store();

/// The built-in configs with `config_file` (if any) over them.
ConfigStore load_store(const std::string& config_file);

// ---- Help and what goes to a terminal (help.cpp) ----

/// The formatter of every command's --help (set on the app before its commands are added):
/// CLI11's, every line within the terminal's width when `out` is the process's stdout and a
/// terminal, else within 100 columns, and each command's footer (its examples) as written.
std::shared_ptr<CLI::FormatterBase> help_formatter(const std::ostream& out);

/// `option` takes one of `values` (each of them, for a list): --help shows them as {a,b,c}, and
/// anything else is refused as typed (exit 2) with "unknown NOUN 'x' (did you mean 'y'?);
/// choose one of a, b, c".
CLI::Option* with_choices(CLI::Option* option, const std::vector<std::string>& values,
                          const std::string& noun);

/// The width the table format prints in on `out`: the terminal's (terminal_columns) when `out`
/// is the process's stdout and that is a terminal; 0, no limit, with `wide` and off a terminal
/// (a pipe, a file, a string stream), so that what scripts and files get never changes.
std::size_t report_columns(const std::ostream& out, bool wide);

/// Whether `err` is the process's stderr and that is a terminal.
bool progress_on_terminal(const std::ostream& err);

/// Whether `command` (list, info) prints JSON: --format json, or the deprecated --json flag
/// (said on `err`: `--json FILE` is where `run` writes its results). ConfigError when --json
/// comes with another --format.
bool wants_json(const std::string& command, const std::string& format, bool json_flag,
                std::ostream& err);

// ---- run: planning a suite (run_plan.cpp) ----

/// The --batch values split: a bare N for every workload without its own, MODEL=N for one.
struct FixedBatches {
  std::optional<int64_t> all;
  std::map<std::string, int64_t> by_model;
};

/// Splits the --batch values (checked as typed by setup_run); ConfigError for one given twice.
FixedBatches split_batches(const std::vector<std::string>& values);

/// The data-parallel plan the flags and the environment (torchrun, srun) ask for, or null for
/// one device. Bad combinations are ConfigError; GPUs that are not there DeviceError.
Json data_parallel_plan(const RunOptions& o);

/// "cpu" or "cuda:N", or DeviceError/ConfigError.
std::string select_device(const RunOptions& o, std::ostream& err);

/// The workloads of --suite and --model, in order, each once.
std::vector<std::string> expand_models(const RunOptions& o, const ConfigStore& store);

/// The device a plan names: "NVIDIA H200", or "cpu".
std::string device_name_of(const std::string& device);

/// Memory tiers can only emulate smaller cards than the one they run on.
void check_tier_caps(const std::vector<double>& tiers, const std::string& device,
                     const char* what = "--memory-tiers");

/// --memory-tiers: sorted, distinct, each a sensible cap, and only where a search can run.
std::vector<double> checked_tiers(const RunOptions& o, const std::string& device);

/// The options a journal fixes: with --resume they come from the journal, not the command line.
void check_resume_options(const RunOptions& o);

/// --same-batch: each workload's batch is the baseline GPU's of 2020 (into `batches`); the
/// workloads without one are left out of `models`, and said so on `err`.
void apply_same_batch(const ConfigStore& store, std::vector<std::string>& models,
                      FixedBatches& batches, std::ostream& err);

/// Every --batch MODEL=N names a workload of the run, and a bare --batch N is given only to
/// workloads that count their batch in one unit.
void check_batches(const ConfigStore& store, const std::vector<std::string>& models,
                   const FixedBatches& batches);

}  // namespace gpubench::cli
