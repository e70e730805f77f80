// `gpubench worker`: the internal command `run` starts for one phase of one job (its options;
// run_cli calls worker_main).
#include "src/cli/app.h"

#include <CLI/CLI.hpp>

namespace gpubench::cli {

void setup_worker(CLI::App& app, WorkerOptions& o) {
  auto* cmd = app.add_subcommand("worker", "Run one phase of one job (started by 'run')");
  cmd->group("");  // internal: not in --help
  auto* spec = cmd->add_option("--spec", o.spec, "Job spec (JSON)");
  auto* out = cmd->add_option("--out", o.out, "Where to write the job record");
  auto* wait = cmd->add_flag("--wait", o.wait,
                             "Pre-started: wait for the spec's and the record's paths on "
                             "standard input (run/launcher.h)");
  spec->needs(out);
  out->needs(spec);
  wait->excludes(spec)->excludes(out);
  cmd->add_option("--nice", o.nice, "With --wait: the nice value to run the phase at")
      ->needs(wait);
  cmd->add_flag("--sched-other", o.sched_other, "With --wait: run the phase under SCHED_OTHER")
      ->needs(wait);
  // One of the two ways: --spec and --out, or --wait.
  cmd->callback([spec, wait] {
    if (spec->count() == 0 && wait->count() == 0) {
      throw CLI::RequiredError("--spec and --out, or --wait,");
    }
  });
}

}  // namespace gpubench::cli
