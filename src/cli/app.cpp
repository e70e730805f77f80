// The command line's dispatcher: the CLI11 app with every command's options, and the command
// the words name. Each command lives in its own file (cmd_*.cpp).
#include "src/cli/app.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/version.h"
#include "gpubench/distributed/rank.h"
#include "gpubench/run/process.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <ostream>

namespace gpubench::cli {

namespace {

int run_cli_mode(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                 bool check_only) {
  // A file size limit (ulimit -f) then fails a write with EFBIG, which gpubench reports (exit
  // 4, the journal kept), instead of SIGXFSZ killing the process mid-write. Workers inherit it.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"gpubench: GPU training benchmark of the 2020 Lambda workloads, rebuilt in C++"};
  app.formatter(help_formatter(out));  // before the commands, which take the app's formatter
  app.require_subcommand(1);
  app.footer("Each command's options and examples: gpubench COMMAND --help");
  app.set_version_flag("--version", fmt::format("gpubench {} ({})", version_info::kVersion,
                                                version_info::kGitCommit));
  ListOptions list;
  InfoOptions info;
  RunOptions run;
  run.check_only = check_only;
  ReportOptions report;
  CompareOptions compare;
  WorkerOptions worker;
  setup_list(app, list);
  setup_info(app, info);
  setup_run(app, run);
  setup_report(app, report);
  setup_compare(app, compare);
  setup_worker(app, worker);

  // A first word that is no command: say which word, and what the commands are (those --help
  // shows; the internal worker is in no group).
  std::vector<std::string> commands, every;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    every.push_back(sub->get_name());
    if (!sub->get_group().empty()) commands.push_back(sub->get_name());
  }
  if (argc > 1 && argv[1][0] != '-' &&
      std::find(every.begin(), every.end(), argv[1]) == every.end()) {
    err << "error: unknown command '" << terminal_safe(argv[1]) << "'"
        << terminal_safe(did_you_mean(argv[1], commands)) << "; the commands are "
        << join(commands, ", ") << " (run 'gpubench --help')\n";
    return kExitBadInput;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    // Point at the help of the command being parsed: its options are what went wrong.
    const bool command =
        argc > 1 && std::find(commands.begin(), commands.end(), argv[1]) != commands.end();
    err << "error: " << terminal_text(e.what()) << " (run 'gpubench "
        << (command ? std::string(argv[1]) + " " : std::string()) << "--help')\n";
    return kExitBadInput;
  }

  try {
    const std::vector<std::string> args(argv, argv + argc);
    if (app.got_subcommand("list")) return run_list(list, out, err);
    if (check_only && (app.got_subcommand("info") || app.got_subcommand("worker"))) return kExitOk;
    if (app.got_subcommand("info")) return run_info(info, out, err);
    if (app.got_subcommand("run")) return run_run(run, args, out, err);
    if (app.got_subcommand("report")) return run_report(report, out, err);
    if (app.got_subcommand("compare")) return run_compare(compare, out, err);
    if (app.got_subcommand("worker")) {
      if (worker.wait) return waiting_worker_main(Priority{worker.nice, worker.sched_other});
      return worker_main(worker.spec, worker.out);
    }
  } catch (const Interrupted& e) {
    // End as the signal would have ended us (the shell then knows it was stopped), once the
    // message is out; a signal that is blocked here still gives its exit code.
    out.flush();
    err.flush();
    std::signal(e.signal_number(), SIG_DFL);
    std::raise(e.signal_number());
    return e.exit_code();
  } catch (const Error& e) {
    err << "error: " << terminal_text(e.what()) << '\n';
    return e.exit_code();
  } catch (const std::exception& e) {
    err << "error: " << terminal_text(e.what()) << '\n';
    return kExitJobFailed;
  }
  return kExitBadInput;
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  return run_cli_mode(argc, argv, out, err, /*check_only=*/false);
}

int run_cli_check_only(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  return run_cli_mode(argc, argv, out, err, /*check_only=*/true);
}

}  // namespace gpubench::cli
