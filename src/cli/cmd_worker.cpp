// `gpubench worker`: the internal command `run` starts for one phase of one job (its options;
// run_cli calls worker_main).
#include "src/cli/app.h"

#include <CLI/CLI.hpp>

namespace gpubench::cli {

void setup_worker(CLI::App& app, WorkerOptions& o) {
  auto* cmd = app.add_subcommand("worker", "Run one phase of one job (started by 'run')");
  cmd->group("");  // internal: not in --help
  cmd->add_option("--spec", o.spec, "Job spec (JSON)")->required();
  cmd->add_option("--out", o.out, "Where to write the job record")->required();
}

}  // namespace gpubench::cli
