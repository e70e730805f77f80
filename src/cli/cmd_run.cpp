// `gpubench run`: the steps of a run (its options are in run_options.cpp): plan the suite
// (run_plan.cpp), start the data-parallel ranks, open or resume the journal, run the jobs, write
// the outputs, and say how it ended.
#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/terminal.h"
#include "gpubench/config/settings.h"
#include "gpubench/device/device.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/distributed/environment.h"
#include "gpubench/distributed/launcher.h"
#include "gpubench/records/journal.h"
#include "gpubench/records/result.h"
#include "gpubench/report/reporter.h"
#include "gpubench/run/process.h"
#include "gpubench/run/job.h"
#include "gpubench/run/job_spec.h"
#include "gpubench/run/launcher.h"
#include "src/cli/internal.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <sstream>

namespace gpubench::cli {

namespace {

/// "SIGINT, Ctrl-C", "SIGTERM", "SIGHUP", or "signal N".
std::string sigabbrev_or_number(int signal_number) {
  switch (signal_number) {
    case SIGINT:
      return "SIGINT, Ctrl-C";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return fmt::format("signal {}", signal_number);
  }
}

/// The result files a run rewrites after each job: --json and --csv, or on a resume given
/// neither, the ones the journal's run named.
struct OutputPaths {
  std::string json, csv;
};

void write_outputs(const OutputPaths& paths, const ResultDocument& document,
                   const ReferenceTable& reference) {
  if (!paths.json.empty())
    write_file_atomically(paths.json, dump_json(document.to_json(), 2) + "\n");
  if (!paths.csv.empty()) {
    std::ostringstream csv;
    make_reporter("csv", csv)->report(document.jobs, reference);
    write_file_atomically(paths.csv, csv.str());
  }
}

/// `path` made absolute, so that a resume from another folder finds it.
std::string absolute_path(const std::string& path) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

/// Where a run without --journal keeps its journal, out of the current folder:
/// $GPUBENCH_JOURNAL_DIR, else $XDG_STATE_HOME/gpubench/journals, else
/// $HOME/.local/state/gpubench/journals (the XDG base directory spec's state folder), else the
/// current folder when there is no home.
std::filesystem::path default_journal_folder() {
  auto set = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char* dir = env::get(env::Switch::kJournalDir); dir && *dir) return dir;
  if (const char* state = set("XDG_STATE_HOME")) {
    return std::filesystem::path(state) / "gpubench" / "journals";
  }
  if (const char* home = set("HOME")) {
    return std::filesystem::path(home) / ".local" / "state" / "gpubench" / "journals";
  }
  return ".";
}

/// A new journal in default_journal_folder(): gpubench-20261130-061502.jsonl, or -2, -3, ...
/// when another run took that name in the same second.
JournalWriter create_default_journal(const JournalHeader& header) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  const std::filesystem::path folder = default_journal_folder();
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  GPUBENCH_CHECK(!ec, ConfigError,
                 "cannot create the journal folder {}: {} (give --journal PATH, or set "
                 "GPUBENCH_JOURNAL_DIR to a folder you can write)",
                 folder.string(), ec.message());
  for (int n = 1;; ++n) {
    const std::string path = (folder / (n == 1 ? fmt::format("gpubench-{}.jsonl", stamp)
                                               : fmt::format("gpubench-{}-{}.jsonl", stamp, n)))
                                 .string();
    if (auto journal = JournalWriter::create_if_absent(path, header)) return std::move(*journal);
  }
}

/// --json or --csv on the journal's own path would replace the journal with another file.
void check_not_journal(const std::string& path, const std::string& flag,
                       const std::string& journal) {
  if (path.empty() || journal.empty()) return;
  namespace fs = std::filesystem;
  std::error_code a, b;
  const auto x = fs::weakly_canonical(path, a);
  const auto y = fs::weakly_canonical(journal, b);
  GPUBENCH_CHECK(a || b || x != y, ConfigError,
                 "{} '{}' is the journal's own path; choose another file for {}", flag, path, flag);
}

/// The last record of each planned job, in plan order: what the run's outputs show.
std::vector<JobRecord> latest_per_job(const SuitePlan& plan, const std::vector<JobRecord>& all) {
  std::vector<JobRecord> latest;
  for (const auto& job : plan.jobs) {
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (job.matches(*it)) {
        latest.push_back(*it);
        break;
      }
    }
  }
  return latest;
}

/// What the end of a run says about its failed jobs: each with its status and message, and
/// whether running it again can help.
std::string failure_summary(const std::vector<JobRecord>& records, std::ptrdiff_t failed,
                            std::size_t planned, const std::string& journal) {
  // A timeout, a crash or a job that never ended can pass when run again; a job that failed in
  // its own code, diverged or ran out of memory at a fixed batch fails the same way again.
  std::string lines;
  std::ptrdiff_t same_again = 0;
  for (const auto& r : records) {
    if (job_is_done(r)) continue;
    const bool transient = r.status == JobStatus::timeout || r.status == JobStatus::crashed;
    if (!transient) ++same_again;
    std::string message = r.message.substr(0, 160);
    std::replace(message.begin(), message.end(), '\n', ' ');
    lines +=
        fmt::format("\n  {}{}: {}{}{}", r.model,
                    r.memory_cap_gib ? fmt::format(" at {} GiB", format_number(*r.memory_cap_gib))
                                     : std::string(),
                    to_string(r.status), message.empty() ? "" : ": " + message,
                    transient ? " (may pass when run again)"
                              : " (runs the same way again: change what this names, or "
                                "leave the job out)");
  }
  const std::ptrdiff_t retryable = failed - same_again;
  std::string out = fmt::format("{} of {} jobs failed:{}", failed, planned, lines);
  if (retryable > 0) {
    out += fmt::format("\nrun {} again with: gpubench run --resume {}",
                       retryable == failed ? "them" : "the others", journal);
  } else {
    out += fmt::format("\n--resume {} would run them as they were; fix the cause first", journal);
  }
  return out;
}

/// What a run settles before its first job: the suite, the records a resumed journal already
/// has, the run settings it was planned with, and the result files to rewrite.
struct RunPlan {
  SuitePlan suite;
  std::vector<JobRecord> earlier;
  Json run_settings;
  OutputPaths outputs;
};

/// --resume: the journal's suite, checked against this gpubench and this device.
RunPlan plan_resume(const RunOptions& o, std::ostream& err) {
  check_resume_options(o);
  RunPlan run;
  SuitePlan& plan = run.suite;
  const Journal old = read_journal(o.resume_path);
  run.outputs = {o.json_path, o.csv_path};
  // Without --json/--csv, a resume keeps the files the first run named up to date, as it did.
  if (o.json_path.empty() && o.csv_path.empty()) {
    run.outputs.json = old.header.outputs.value("json", std::string());
    run.outputs.csv = old.header.outputs.value("csv", std::string());
  }
  plan = SuitePlan::from_json(old.header.plan, o.resume_path);
  run.earlier = old.jobs;
  run.run_settings = old.header.run_settings;
  if (!plan.data_parallel.is_null()) {
    // The ranks' devices are the plan's: checked when the launcher starts them.
    GPUBENCH_CHECK(!o.gpu && o.device.empty(), ConfigError,
                   "--resume of a data-parallel suite runs on its ranks' devices; drop --gpu "
                   "and --device");
  } else if (o.gpu || !o.device.empty()) {
    plan.device = select_device(o, err);
  } else if (const DeviceRef ref = require_device_ref(plan.device, "device"); ref.is_cuda()) {
    GPUBENCH_CHECK(ref.index < cuda_device_count(), DeviceError,
                   "{}: the journal's suite ran on {}, which is not visible here; choose a "
                   "device with --gpu N",
                   o.resume_path, plan.device);
  }
  // One journal, one kind of device: results of two cards must not mix in one suite.
  const std::string here = device_name_of(plan.device);
  GPUBENCH_CHECK(plan.device_name.empty() || plan.device_name == here, DeviceError,
                 "{}: its suite ran on {}, and {} here is {}; resume it on the same kind of "
                 "device, or start a new journal for this one",
                 o.resume_path, plan.device_name, plan.device, here);
  const Json changes = settings::flag_overlay(o.settings, /*resume_only=*/true);
  if (!changes.empty()) plan.overlays.emplace_back("command line", changes);
  // Everything the plan needs still holds with this gpubench and this device, before any job.
  const ConfigStore resolved = resolve_store(plan.overlays);
  std::vector<double> tiers;
  for (const auto& job : plan.jobs) {
    resolved.model(job.model);  // throws with a did-you-mean for a workload that is gone
    if (job.search_only && job.memory_cap_gib) tiers.push_back(*job.memory_cap_gib);
  }
  check_tier_caps(tiers, plan.device);
  // Built-in defaults can change between gpubench versions: say so rather than mix silently.
  Json now = resolved.run().to_json(), then = run.run_settings;
  for (Json* settings : {&now, &then}) {
    if (!settings->is_object()) continue;
    // --timeout, --no-cache, the price and --no-prestart may change; none changes what a job
    // measures.
    settings->erase("job_timeout_s");
    settings->erase("search_cache");
    settings->erase("price_per_hour_usd");
    settings->erase("prestart_workers");
  }
  if (now != then) {
    err << "gpubench: warning: " << o.resume_path
        << ": this gpubench resolves the run settings differently from the one that started "
           "the journal; the jobs run now use the current ones (start a new journal to keep "
           "one set)\n";
  }
  return run;
}

/// A new suite: the config file and the flags over the built-in configs, the workloads and
/// their batches, and the device or the data-parallel ranks.
RunPlan plan_new(const RunOptions& o, std::ostream& err) {
  RunPlan run;
  SuitePlan& plan = run.suite;
  run.outputs = {o.json_path, o.csv_path};
  ConfigStore store = builtin_store();
  if (!o.config_file.empty()) {
    Json document = load_config_file(o.config_file);
    store.apply_document(document, o.config_file);
    plan.overlays.emplace_back(o.config_file, std::move(document));
  }
  const Json flags = settings::flag_overlay(o.settings);
  if (!flags.empty()) {
    store.apply_document(flags, "command line");
    plan.overlays.emplace_back("command line", flags);
  }
  std::vector<std::string> models = expand_models(o, store);
  FixedBatches batches = split_batches(o.batches);
  if (o.same_batch) {
    GPUBENCH_CHECK(o.batches.empty() && o.memory_tiers_gib.empty(), ConfigError,
                   "--same-batch sets each workload's batch (the RTX 8000's of 2020): it "
                   "contradicts {}; give one",
                   o.batches.empty() ? "--memory-tiers" : "--batch");
    apply_same_batch(store, models, batches, err);
  }
  check_batches(store, models, batches);
  plan.data_parallel = data_parallel_plan(o);
  if (plan.data_parallel.is_null()) {
    plan.device = select_device(o, err);
  } else {
    // The search runs once, on the first rank's device; the timed runs on all.
    plan.device = plan.data_parallel["devices"][0].get<std::string>();
    GPUBENCH_CHECK(o.memory_tiers_gib.empty(), ConfigError,
                   "--memory-tiers searches on one device; it cannot run data-parallel");
  }
  plan.fixed_batch = batches.all;
  plan.model_batches = batches.by_model;
  plan.same_batch = o.same_batch;
  plan.jobs = plan_jobs(models, checked_tiers(o, plan.device));
  plan.device_name = device_name_of(plan.device);
  run.run_settings = store.run().to_json();
  if (plan.device == "cpu" && store.run().memory_cap_gib) {
    err << "gpubench: --memory-cap applies to a CUDA device; ignored on the CPU\n";
  } else if (store.run().memory_cap_gib) {
    // Before any job: a cap the card cannot enforce would label its result as a smaller one's.
    check_tier_caps({*store.run().memory_cap_gib}, plan.device, "memory cap");
  }
  return run;
}

/// Data-parallel: the ranks meet (under torchrun/srun: every rank's gpubench, up to
/// --rendezvous-timeout, exit 3 past it) before any journal is written. Null on one device. A
/// rank other than 0 writes no result files and keeps a journal of its own.
std::unique_ptr<distributed::DataParallelLauncher> start_data_parallel(const RunOptions& o,
                                                                       RunPlan& run,
                                                                       std::string& journal_flag,
                                                                       bool quiet,
                                                                       std::ostream& err) {
  GPUBENCH_CHECK(run.suite.data_parallel.is_null() || !o.in_process, ConfigError,
                 "--in-process runs one process; a data-parallel run needs a worker per rank");
  if (run.suite.data_parallel.is_null()) return nullptr;
  const auto dp = distributed::DataParallelPlan::from_json(run.suite.data_parallel);
  if (dp.environment && dp.environment->rank > 0) {
    // Rank 0 writes the results; the others keep a journal of their own (the same records).
    run.outputs = {};
    if (!journal_flag.empty()) journal_flag += fmt::format(".rank{}", dp.environment->rank);
  }
  if (!quiet) {
    err << fmt::format("gpubench: data-parallel: {} rank{} over {} ({}){}\n", dp.world_size,
                       dp.world_size == 1 ? "" : "s", dp.backend,
                       dp.environment
                           ? fmt::format("{} rank {}, MASTER {}:{}", dp.environment->source,
                                         dp.environment->rank, dp.environment->master_addr,
                                         dp.environment->master_port)
                           : join(dp.devices, ", "),
                       dp.environment ? "; waiting for every rank" : "")
        << std::flush;
  }
  return std::make_unique<distributed::DataParallelLauncher>(dp, o.worker_exe);
}

/// The journal, before the first job starts, so that even the first one cannot be lost: the
/// resumed one, --journal, or a new one in default_journal_folder().
JournalWriter open_journal(const RunOptions& o, const RunPlan& run,
                           const std::vector<std::string>& argv, const std::string& journal_flag) {
  if (!o.resume_path.empty()) return JournalWriter::resume(o.resume_path);
  JournalHeader header;
  header.created_utc = utc_now();
  header.command_line = argv;
  header.plan = run.suite.to_json();
  header.run_settings = run.run_settings;
  if (!run.outputs.json.empty()) header.outputs["json"] = absolute_path(run.outputs.json);
  if (!run.outputs.csv.empty()) header.outputs["csv"] = absolute_path(run.outputs.csv);
  return journal_flag.empty() ? create_default_journal(header)
                              : JournalWriter::create(journal_flag, header);
}

/// Runs the suite's jobs that the journal lacks, rewriting the result files after each; returns
/// the document of the latest record of each job. `line_start` begins what is said on `err`
/// when a stop ends the run: on a terminal, it clears a status line a stopped worker left.
ResultDocument run_jobs(const RunPlan& run, const ConfigStore& store, JournalWriter& journal,
                        PhaseLauncher& launcher, const std::vector<std::string>& argv,
                        const std::function<void(const std::string&)>& log,
                        const std::string& line_start, std::ostream& err) {
  const SuitePlan& plan = run.suite;
  ResultDocument document;
  document.created_utc = utc_now();
  document.command_line = argv;
  document.run_settings = run.run_settings;
  std::vector<JobRecord> all = run.earlier;
  auto refresh = [&]() {
    document.jobs = latest_per_job(plan, all);
    for (const auto& job : document.jobs) {
      if (document.environment.empty() && !job.environment.empty()) {
        document.environment = job.environment;
      }
    }
    try {
      write_outputs(run.outputs, document,
                    store.reference());  // nothing measured is lost to a later crash
    } catch (const AbortError& e) {
      // The journal already holds the job (run_suite appends before it calls back): say so.
      throw AbortError(fmt::format(
          "{}; the journal {} keeps every finished job: fix that, then continue with: gpubench "
          "run --resume {}",
          e.what(), journal.path(), journal.path()));
    }
  };

  // Work files of runs and workers killed before they could remove them (kill -9, a reboot).
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string work_folder = tmpdir && *tmpdir ? tmpdir : "/tmp";
  remove_stale_work_files(work_folder);
  for (const auto* f : {&run.outputs.json, &run.outputs.csv}) {
    if (!f->empty()) remove_stale_temp_files(*f);
  }

  SuiteCallbacks callbacks;
  callbacks.log = log;
  callbacks.job_ended = [&](const JobRecord& record) {
    all.push_back(record);
    refresh();
  };
  try {
    // A stop signal is remembered for the whole suite: one between two jobs ends the run
    // before the next starts, one during a job stops its worker (run_process).
    const StopSignals stop_signals;
    run_suite(plan, run.earlier, launcher, journal, callbacks);
    remove_stale_work_files(work_folder);  // a worker killed mid-write leaves its temp file
    stop_if_asked();
  } catch (const Interrupted& e) {
    // Said even with --quiet: the user stopped it and should know what was kept.
    const std::vector<JobRecord> latest = latest_per_job(plan, all);
    const auto kept = std::count_if(latest.begin(), latest.end(), job_is_done);
    err << line_start
        << fmt::format(
               "gpubench: stopped ({}); the running job was stopped and left no record; "
               "{} of {} jobs are done in the journal; continue with: gpubench run "
               "--resume {}\n",
               sigabbrev_or_number(e.signal_number()), kept, plan.jobs.size(), journal.path())
        << std::flush;
    throw;
  }
  refresh();
  return document;
}

/// The exit status of a finished suite: a planned job without a done record failed, whatever
/// records the others left; the failures are summed up on `err`.
int exit_status(const SuitePlan& plan, const ResultDocument& document,
                const std::string& journal_path, std::ostream& err) {
  const auto done = std::count_if(document.jobs.begin(), document.jobs.end(),
                                  [](const JobRecord& r) { return job_is_done(r); });
  const auto failed = static_cast<std::ptrdiff_t>(plan.jobs.size()) - done;
  if (failed) {
    err << "gpubench: "
        << terminal_text(failure_summary(document.jobs, failed, plan.jobs.size(), journal_path))
        << '\n'
        << std::flush;
  }
  return failed ? kExitJobFailed : kExitOk;
}

}  // namespace

int run_run(const RunOptions& o, const std::vector<std::string>& argv, std::ostream& out,
            std::ostream& err) {
  // Everything that can be wrong with the input is found before anything is measured.
  const std::unique_ptr<Reporter> reporter =
      o.format == "none" ? nullptr : make_reporter(o.format, out, report_columns(out, o.wide));
  GPUBENCH_CHECK(!o.quiet || o.progress == "auto" || o.progress == "none", ConfigError,
                 "--quiet and --progress {} contradict each other; give one", o.progress);
  const ProgressMode progress =
      o.quiet ? ProgressMode::kNone : progress_mode(o.progress, progress_on_terminal(err));
  RunPlan run = o.resume_path.empty() ? plan_new(o, err) : plan_resume(o, err);
  std::string journal_flag = o.journal_path;
  const std::unique_ptr<distributed::DataParallelLauncher> data_parallel =
      start_data_parallel(o, run, journal_flag, progress == ProgressMode::kNone, err);
  const OutputPaths& outputs = run.outputs;
  if (!outputs.json.empty()) check_writable(outputs.json, "--json");
  if (!outputs.csv.empty()) check_writable(outputs.csv, "--csv");
  const std::string journal_path = !o.resume_path.empty() ? o.resume_path : journal_flag;
  check_not_journal(outputs.json, "--json", journal_path);
  check_not_journal(outputs.csv, "--csv", journal_path);
  // Every check is done (the overlays were applied above; resolve_store applies them again).
  if (o.check_only) return kExitOk;
  const ConfigStore store = resolve_store(run.suite.overlays);

  JournalWriter journal = open_journal(o, run, argv, journal_flag);
  // The workers print as the run does (they inherit the variable); the run's own lines stay.
  env::set(env::Switch::kProgress, std::string(to_string(progress)));
  ProgressPrinter printer(err, progress);
  auto log = [&printer](const std::string& line) {
    printer.line("gpubench: " + terminal_text(line));
  };
  log(fmt::format("journal: {} (if this run is interrupted: gpubench run --resume {})",
                  journal.path(), journal.path()));
  if (!o.resume_path.empty() && o.json_path.empty() && o.csv_path.empty() &&
      (!outputs.json.empty() || !outputs.csv.empty())) {
    std::vector<std::string> files;
    for (const auto* f : {&outputs.json, &outputs.csv}) {
      if (!f->empty()) files.push_back(*f);
    }
    log(fmt::format("rewriting the first run's results as jobs end: {}", join(files, ", ")));
  }

  // Pre-started workers are gpubench's own: a --worker-exe (a test's wrapper) sees each phase's
  // --spec and --out on its command line, as it always did.
  WorkerLauncher workers(o.worker_exe, store.run().prestart_workers && o.worker_exe.empty());
  InProcessLauncher in_process;
  PhaseLauncher& launcher = o.in_process    ? static_cast<PhaseLauncher&>(in_process)
                            : data_parallel ? static_cast<PhaseLauncher&>(*data_parallel)
                                            : workers;
  const ResultDocument document =
      run_jobs(run, store, journal, launcher, argv, log,
               progress == ProgressMode::kTerminal ? "\r\x1b[K" : "", err);

  if (reporter) {
    // With gpubench's recorded numbers for the card; `gpubench compare` can take the journal.
    ReferenceTable reference = store.reference();
    reference.set_card_numbers(store.card_numbers(), journal.path());
    reporter->report(document.jobs, reference);
  }
  if (o.format == "summary" && !document.jobs.empty()) {
    log(fmt::format("beside the eight 2020 GPUs, with max batches: gpubench report {}",
                    journal.path()));
  }
  return exit_status(run.suite, document, journal.path(), err);
}

}  // namespace gpubench::cli
