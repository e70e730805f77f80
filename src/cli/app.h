// The command line: one options struct and one setup/run pair per subcommand (CLI11 style), each
// pair in its own file (src/cli/cmd_*.cpp), parsed and dispatched by run_cli (app.cpp), so that
// tests can drive it in-process.
#pragma once

#include "gpubench/base/json.h"

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gpubench::cli {

/// `gpubench list`
struct ListOptions {
  std::string format;       ///< --format table|json ("": table)
  bool json = false;        ///< --json: --format json, deprecated (--json FILE is run's output)
  std::string config_file;  ///< --config: overlay before listing
  std::string config_dump;  ///< --config-dump NAME: print one resolved config
};

/// `gpubench info`
struct InfoOptions {
  std::string format;    ///< --format table|json ("": table)
  bool json = false;     ///< --json: --format json, deprecated (--json FILE is run's output)
  bool no_peak = false;  ///< --no-peak: skip the dense-matmul peak probe of each CUDA device
};

/// `gpubench run`
struct RunOptions {
  std::vector<std::string> models;       ///< --model NAME...
  std::vector<std::string> suites;       ///< --suite NAME...
  std::optional<int> gpu;                ///< --gpu N
  /// Data-parallel training (issue 15): --gpus 0,1,2,3 or all (one rank per GPU), or
  /// --world-size N (N ranks on the CPU over Gloo; under torchrun/srun, the environment's).
  std::string gpus;
  std::optional<int> world_size;
  std::optional<double> rendezvous_timeout_s;  ///< --rendezvous-timeout S
  std::string device;                    ///< --device cpu|cuda
  std::string config_file;               ///< --config FILE
  /// --batch N (every workload of the run) or --batch MODEL=N (that one), repeatable: a fixed
  /// batch, no search. Checked as typed; run_run splits them.
  std::vector<std::string> batches;
  /// The run settings given as flags (--precision, --noise, ...: the flags of
  /// gpubench/config/settings.h), by flag name, as typed: checked when they become the
  /// command line's config overlay.
  std::map<std::string, Json> settings;
  std::string json_path;                 ///< --json PATH
  std::string csv_path;                  ///< --csv PATH
  std::string journal_path;              ///< --journal PATH (default: a new file here)
  std::string resume_path;               ///< --resume JOURNAL: continue that suite
  std::vector<double> memory_tiers_gib;  ///< --memory-tiers 6,8,11: search under each cap
  bool same_batch = false;  ///< --same-batch: each workload at the RTX 8000's 2020 batch
  std::string format = "summary";        ///< --format: the report printed on stdout at the end
  bool wide = false;                     ///< --wide: the table format's every column at once
  std::string progress = "auto";         ///< --progress auto|plain|none (on stderr)
  bool quiet = false;                    ///< --quiet: --progress none
  bool in_process = false;               ///< --in-process: no worker processes (debugging)
  std::string worker_exe;                ///< --worker-exe PATH: another worker binary (tests)
  /// No flag: set by run_cli's check-only mode. run_run returns 0 once everything it checks
  /// before the first job holds (the plan, the device, the outputs' paths), before it writes a
  /// journal or starts a worker.
  bool check_only = false;
};

/// `gpubench report`
struct ReportOptions {
  std::vector<std::string> files;  ///< result documents and journals, in any mix
  std::string format = "table";    ///< --format summary|table|md|csv|json|html
  std::string output;              ///< --output PATH (written atomically); default stdout
  bool wide = false;               ///< --wide: the table's every column, whatever the terminal
  std::vector<std::string> prices;  ///< --price GPU=USD: a measured GPU's price, per $ section
  /// --price-per-hour GPU=USD (repeatable) or USD (every record, all of one device): the cost
  /// per unit of work (issue 46); replaces a price the records carry from their run.
  std::vector<std::string> hourly_prices;
};

/// `gpubench compare A B`
struct CompareOptions {
  std::vector<std::string> files;  ///< A and B: a result document or a journal each
  double noise_pct = 2.0;          ///< --noise: a difference taken as noise without intervals
  std::string format = "table";    ///< --format table|md|json
};

/// `gpubench worker` (internal: one phase of one job, started by `run`)
struct WorkerOptions {
  std::string spec;
  std::string out;
  /// --wait: a pre-started worker, given its phase on standard input (run/launcher.h), with
  /// --nice N and --sched-other: the priority to run it at (the parent's)
  bool wait = false;
  int nice = 0;
  bool sched_other = false;
};

void setup_list(CLI::App& app, ListOptions& options);
void setup_info(CLI::App& app, InfoOptions& options);
void setup_run(CLI::App& app, RunOptions& options);
void setup_report(CLI::App& app, ReportOptions& options);
void setup_compare(CLI::App& app, CompareOptions& options);
void setup_worker(CLI::App& app, WorkerOptions& options);

int run_list(const ListOptions& options, std::ostream& out, std::ostream& err);
int run_info(const InfoOptions& options, std::ostream& out, std::ostream& err);
int run_run(const RunOptions& options, const std::vector<std::string>& argv, std::ostream& out,
            std::ostream& err);
int run_report(const ReportOptions& options, std::ostream& out, std::ostream& err);
/// Exit 1 when B regressed against A (slower, or failed where A trained), else 0.
int run_compare(const CompareOptions& options, std::ostream& out, std::ostream& err);

/// Parses the command line and runs the subcommand. Returns the process exit code (errors.h):
/// tables to `out`, progress, warnings and errors to `err`.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

/// run_cli that parses and checks the whole command line but runs nothing: `run` stops before
/// its journal and its first job (RunOptions::check_only), `worker` and `info` (which reads only
/// the machine) once parsed; `list`, `report` and `compare` run as usual. For the command line's
/// fuzz target (tests/fuzz), where a started worker or a training step would cost seconds.
int run_cli_check_only(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace gpubench::cli
