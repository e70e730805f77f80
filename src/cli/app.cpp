#include "src/cli/app.h"

#include "gpubench/config/config.h"
#include "gpubench/device/device.h"
#include "gpubench/distributed/comm.h"
#include "gpubench/distributed/environment.h"
#include "gpubench/distributed/launcher.h"
#include "gpubench/distributed/rank.h"
#include "gpubench/base/errors.h"
#include "gpubench/records/journal.h"
#include "gpubench/run/process.h"
#include "gpubench/train/registry.h"
#include "gpubench/report/compare.h"
#include "gpubench/report/reporter.h"
#include "gpubench/run/job_spec.h"
#include "gpubench/run/launcher.h"
#include "gpubench/base/strings.h"
#include "gpubench/run/suite.h"
#include "gpubench/base/version.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
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

/// The built-in configs, parsed and validated once per process (they are compiled in); each
/// caller gets its own copy to overlay.
ConfigStore builtin_store() {
  static const ConfigStore builtin = ConfigStore::load_builtin(builtin_registry());
  return builtin;
}

ConfigStore load_store(const std::string& config_file) {
  ConfigStore store = builtin_store();
  if (!config_file.empty()) store.apply_file(config_file);
  return store;
}

int64_t total_target(const ModelConfig& m) {
  int64_t total = 0;
  for (const auto& [network, count] : m.trainable_params) total += count;
  return total;
}

std::string params_text(const ModelConfig& m) {
  if (m.trainable_params.size() == 1) return with_thousands(total_target(m));
  std::vector<std::string> parts;
  for (const auto& [network, count] : m.trainable_params) {
    parts.push_back(fmt::format("{} {}", network, with_thousands(count)));
  }
  return join(parts, " + ");
}

}  // namespace

// ---- list ----

void setup_list(CLI::App& app, ListOptions& o) {
  auto* cmd = app.add_subcommand("list", "List the workloads with units and parameter counts");
  cmd->add_flag("--json", o.json, "Print JSON");
  cmd->add_option("--config", o.config_file, "Overlay a YAML or JSON config first");
  cmd->add_option("--config-dump", o.config_dump,
                  "Print the resolved config of one workload (what a run uses)");
}

int run_list(const ListOptions& o, std::ostream& out, std::ostream& err) {
  const ConfigStore store = load_store(o.config_file);
  if (!o.config_dump.empty()) {
    // The settings alone, so that the dump reads back as a --config (a single workload's keys
    // with `name:` at the top); where they came from goes to stderr.
    Json dump = store.model(o.config_dump).to_json();
    const Json sources = dump.value("sources", Json::array());
    dump.erase("sources");
    dump.erase("modified");
    std::vector<std::string> from;
    for (const auto& s : sources) from.push_back(s.get<std::string>());
    if (!from.empty()) err << "gpubench: " << o.config_dump << " from " << join(from, ", ") << '\n';
    out << dump_json(dump, 2) << '\n';
    return kExitOk;
  }
  if (o.json) {
    Json list = Json::array();
    for (const auto& name : store.model_names()) {
      const ModelConfig& m = store.model(name);
      Json params = Json::object();
      for (const auto& [network, count] : m.trainable_params) params[network] = count;
      list.push_back(
          {{"name", m.name},
           {"family", m.family},
           {"architecture", m.architecture},
           {"batch_unit", m.batch_unit},
           {"throughput_unit", m.throughput_unit},
           {"trainable_params", params},
           {"trainable_params_total", total_target(m)},
           {"reference_2020", m.reference_2020 ? Json(m.reference_2020->row) : Json(nullptr)},
           {"description", m.description}});
    }
    out << dump_json(list, 2) << '\n';
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& name : store.model_names()) {
    const ModelConfig& m = store.model(name);
    rows.push_back({m.name, m.family, m.batch_unit, m.throughput_unit,
                    m.reference_2020 ? m.reference_2020->row : "(peer twin)", params_text(m)});
  }
  render_grid(out,
              {"model", "family", "batch unit", "throughput unit", "2020 row", "trainable params"},
              rows, 5, GridStyle::kPlain);
  return kExitOk;
}

// ---- info ----

void setup_info(CLI::App& app, InfoOptions& o) {
  auto* cmd = app.add_subcommand(
      "info", "Show the devices and the driver, CUDA, cuDNN and libtorch versions");
  cmd->add_flag("--json", o.json, "Print JSON");
  cmd->add_flag("--no-peak", o.no_peak,
                "Skip measuring each GPU's dense-matmul peak (fp32, tf32, bf16, fp16: a few "
                "seconds per GPU)");
}

int run_info(const InfoOptions& o, std::ostream& out, std::ostream& /*err*/) {
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(cuda_device_info(i));
  // The peaks a utilisation is a share of, measured rather than read off a datasheet.
  std::vector<Json> peaks;
  for (const auto& d : devices) {
    Json peak = Json::object();
    if (!o.no_peak) {
      const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index));
      for (const auto& kind : matmul_peak_kinds()) {
        const auto tflops = measure_matmul_peak_tflops(device, kind);
        peak[kind] = tflops ? Json(*tflops) : Json(nullptr);
      }
    }
    peaks.push_back(peak);
  }
  devices.push_back(cpu_device_info());
  peaks.push_back(Json::object());
  const Json software = software_versions();
  const Json gpubench = {{"version", version_info::kVersion},
                         {"git_commit", version_info::kGitCommit}};
  if (o.json) {
    Json list = Json::array();
    for (std::size_t i = 0; i < devices.size(); ++i) {
      Json d = devices[i].to_json();
      if (!peaks[i].empty()) d["matmul_peak_tflops"] = peaks[i];
      list.push_back(d);
    }
    out << dump_json(Json{{"gpubench", gpubench}, {"software", software}, {"devices", list}}, 2)
        << '\n';
    return kExitOk;
  }
  auto text = [](const Json& v) { return v.is_string() ? v.get<std::string>() : std::string("-"); };
  out << fmt::format("gpubench {} (commit {})\n", version_info::kVersion, version_info::kGitCommit);
  out << fmt::format("libtorch {}, CUDA runtime {}, cuDNN {}, driver {}{}\n\n",
                     text(software["libtorch"]), text(software["cuda_runtime"]),
                     text(software["cudnn"]), text(software["driver"]),
                     built_with_cuda() ? "" : " (CPU-only build)");
  out << fmt::format("data-parallel backends: {}\n", distributed::backend_support());
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : devices) {
    rows.push_back({d.type == "cuda" ? fmt::format("cuda:{}", d.index) : "cpu", d.name,
                    format_bytes(static_cast<double>(d.memory_bytes)),
                    std::to_string(d.multiprocessors),
                    d.compute_capability.empty() ? "-" : d.compute_capability});
  }
  render_grid(out, {"device", "name", "memory", "SMs / threads", "compute capability"}, rows, 2,
              GridStyle::kPlain);
  std::vector<std::vector<std::string>> peak_rows;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (peaks[i].empty()) continue;
    std::vector<std::string> row = {fmt::format("cuda:{}", devices[i].index)};
    for (const auto& kind : matmul_peak_kinds()) {
      row.push_back(peaks[i][kind].is_number() ? format_significant(peaks[i][kind].get<double>(), 3)
                                               : std::string("-"));
    }
    peak_rows.push_back(row);
  }
  if (!peak_rows.empty()) {
    out << "\nDense matmul peak, TFLOP/s (8192 x 8192 x 8192, best of five rounds):\n";
    std::vector<std::string> headers = {"device"};
    for (const auto& kind : matmul_peak_kinds()) headers.push_back(kind);
    render_grid(out, headers, peak_rows, 1, GridStyle::kPlain);
  }
  return kExitOk;
}

// ---- run ----

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

/// The --batch values split: a bare N for every workload without its own, MODEL=N for one.
struct FixedBatches {
  std::optional<int64_t> all;
  std::map<std::string, int64_t> by_model;
};

FixedBatches split_batches(const std::vector<std::string>& values) {
  FixedBatches out;
  for (const auto& value : values) {
    const std::size_t eq = value.find('=');
    if (eq == std::string::npos) {
      GPUBENCH_CHECK(!out.all, ConfigError,
                     "--batch: given twice without a workload ({} and {}); give one number, or "
                     "MODEL=N for each workload",
                     *out.all, value);
      out.all = std::stoll(value);
      continue;
    }
    const std::string model = value.substr(0, eq);
    GPUBENCH_CHECK(!out.by_model.count(model), ConfigError,
                   "--batch: {} has two batches ({} and {}); give one", terminal_safe(model),
                   out.by_model[model], value.substr(eq + 1));
    out.by_model[model] = std::stoll(value.substr(eq + 1));
  }
  return out;
}

}  // namespace

void setup_run(CLI::App& app, RunOptions& o) {
  auto* cmd = app.add_subcommand(
      "run", "Find the largest batch that trains, time it, and compare with the 2020 GPUs");
  cmd->add_option("--model,-m", o.models,
                  "Workloads to run, repeated or comma-separated (see 'gpubench list')")
      ->delimiter(',')
      ->check(kNonEmpty);
  cmd->add_option("--suite", o.suites, "Named lists of workloads: all, image, language, twins")
      ->delimiter(',')
      ->check(kNonEmpty);
  cmd->add_option("--gpu", o.gpu, "CUDA device index (default: 0 when a GPU is present)");
  cmd->add_option("--gpus", o.gpus,
                  "Data-parallel: one rank per GPU, e.g. 0,1,2,3 or all (NCCL); each rank at "
                  "the one-GPU max batch, throughput summed")
      ->check(kNonEmpty);
  cmd->add_option("--world-size", o.world_size,
                  "Data-parallel ranks: with --device cpu, N ranks over Gloo; under torchrun or "
                  "srun, must match WORLD_SIZE");
  cmd->add_option("--rendezvous-timeout", o.rendezvous_timeout_s,
                  "Seconds to wait for every rank to meet (torchrun/srun; default: 300); past "
                  "it the run exits with code 3");
  cmd->add_option("--device", o.device, "cpu or cuda (default: cuda when present, else cpu)")
      ->check(kNonEmpty);
  cmd->add_option("--config", o.config_file, "YAML or JSON config over the built-in defaults")
      ->check(kNonEmpty);
  cmd->add_option("--batch", o.batches,
                  "Fixed batch in the workload's unit, no search: N for every workload, or "
                  "MODEL=N for one (repeatable)")
      ->check(kBatchValue);
  cmd->add_flag("--same-batch", o.same_batch,
                "Time each workload at the RTX 8000's 2020 batch (no search): a same-batch score "
                "beside the max-batch one; workloads without a 2020 row are left out");
  cmd->add_option("--precision", o.precision, "fp32 (default, strict), tf32, amp-bf16, amp-fp16")
      ->check(kNonEmpty);
  cmd->add_option("--memory-cap", o.memory_cap_gib,
                  "Cap the caching allocator at this many GiB to emulate a smaller card");
  const RunSettings defaults;
  cmd->add_option("--warmup-steps", o.warmup_steps,
                  fmt::format("Minimum warm-up steps (default: {} on a GPU, {} on the CPU; the "
                              "warm-up also waits for steady step times)",
                              defaults.timing.warmup_steps, defaults.cpu_timing.warmup_steps));
  cmd->add_option("--min-steps", o.min_steps,
                  fmt::format("Minimum timed steps (default: {} on a GPU, {} on the CPU)",
                              defaults.timing.min_steps, defaults.cpu_timing.min_steps));
  cmd->add_option("--min-seconds", o.min_seconds,
                  fmt::format("Minimum timed seconds (default: {} on a GPU, {} on the CPU)",
                              format_number(defaults.timing.min_seconds),
                              format_number(defaults.cpu_timing.min_seconds)));
  cmd->add_option("--max-seconds", o.max_seconds,
                  fmt::format("Past its minimum, the timed window goes on while its noise is above "
                              "--noise, up to this many seconds, and stops sooner when its noise "
                              "projects past them; at or below --min-seconds it stops at its "
                              "minimum (default: {} on a GPU, {} on the CPU)",
                              format_number(defaults.timing.max_seconds),
                              format_number(defaults.cpu_timing.max_seconds)));
  cmd->add_option("--noise", o.noise_percent,
                  fmt::format("Noise at which the timed window may stop: the 95% interval of the "
                              "mean step time, +- this many percent of it (default: {})",
                              format_number(100 * defaults.timing.noise_target)));
  cmd->add_option("--repeat", o.repeat,
                  fmt::format("Timed runs per job, each in a fresh process; from 2 on, the "
                              "throughput is their median with a 95% interval (default: {})",
                              defaults.repeat));
  cmd->add_option("--timeout", o.timeout_s,
                  fmt::format("Seconds before a worker process is killed, per phase (default: {})",
                              format_number(defaults.job_timeout_s)));
  cmd->add_option("--memory-tiers", o.memory_tiers_gib,
                  "Search the max batch under each of these caps in GiB (6,8,11,24,48) to "
                  "emulate smaller cards; search only, no timed run")
      ->delimiter(',');
  cmd->add_option("--json", o.json_path, "Write the results as JSON (rewritten after each job)")
      ->check(kNonEmpty);
  cmd->add_option("--csv", o.csv_path, "Write the results as CSV (rewritten after each job)")
      ->check(kNonEmpty);
  cmd->add_option("--journal", o.journal_path,
                  "Append each finished job to this journal (default: a new "
                  "gpubench-DATE-TIME.jsonl in $GPUBENCH_JOURNAL_DIR, else "
                  "$XDG_STATE_HOME/gpubench/journals, else ~/.local/state/gpubench/journals)");
  cmd->add_option("--resume", o.resume_path,
                  "Continue the suite of this journal, running only what it does not have");
  cmd->add_option("--format,-f", o.format,
                  "The report printed on stdout at the end: summary (default: a line per job), "
                  "table (beside the eight 2020 GPUs), md, csv, json, html, or none")
      ->check(kNonEmpty);
  cmd->add_flag("--quiet,-q", o.quiet,
                "No progress lines on stderr; warnings, errors and what failed are still said");
  cmd->footer(
      "Examples:\n"
      "  gpubench run --gpu 0 --model bert-base             search, time, compare with 2020\n"
      "  gpubench run --suite all --precision amp-bf16      every workload, mixed precision\n"
      "  gpubench run -m bert-base,mt-dnn --batch 8         a fixed batch, no search\n"
      "  gpubench run -m nasnet-large,deeplabv3 --batch nasnet-large=16 --batch deeplabv3=4\n"
      "                                                     a batch per workload\n"
      "  gpubench run --model bert-base --memory-tiers 6,8,11,24   emulated smaller cards\n"
      "  gpubench run --resume JOURNAL                      continue a stopped run\n"
      "  gpubench run -m bert-base --gpus 0,1,2,3           data-parallel on 4 GPUs (NCCL)\n"
      "  gpubench run -m bert-base --device cpu --world-size 2   2 CPU ranks over Gloo\n"
      "  torchrun --nnodes 2 --nproc-per-node 8 ... gpubench run -m bert-base\n"
      "                                                     many hosts: one rank per process\n"
      "\n"
      "Exit codes: 0 every job ran; 1 a job failed (the others ran and are in the journal);\n"
      "2 bad input, before anything ran; 3 no usable device; 4 the run stopped early (the\n"
      "journal or a work file could not be written); 128+N stopped by signal N (Ctrl-C: 130),\n"
      "the finished jobs kept in the journal.");
  cmd->add_flag("--in-process", o.in_process, "Run jobs in this process (debugging)")
      ->group("");  // hidden
  cmd->add_option("--worker-exe", o.worker_exe, "Worker executable (testing)")->group("");
}

namespace {

/// The command-line flags as a config overlay, each checked with a message naming the flag.
Json flag_overlay(const RunOptions& o) {
  Json run = Json::object();
  Json timing = Json::object();
  if (!o.precision.empty())
    run["precision"] = to_string(parse_precision(o.precision, "--precision"));
  if (o.memory_cap_gib) {
    GPUBENCH_CHECK(*o.memory_cap_gib >= 0.25, ConfigError,
                   "--memory-cap: expected a size in GiB of at least 0.25, got '{}'",
                   format_number(*o.memory_cap_gib));
    run["memory_cap_gib"] = *o.memory_cap_gib;
  }
  if (o.warmup_steps) {
    GPUBENCH_CHECK(*o.warmup_steps >= 0, ConfigError,
                   "--warmup-steps: expected an integer >= 0, got '{}'", *o.warmup_steps);
    timing["warmup_steps"] = *o.warmup_steps;
  }
  if (o.min_steps) {
    GPUBENCH_CHECK(*o.min_steps >= 1, ConfigError,
                   "--min-steps: expected an integer >= 1, got '{}'", *o.min_steps);
    timing["min_steps"] = *o.min_steps;
  }
  if (o.min_seconds) {
    GPUBENCH_CHECK(*o.min_seconds >= 0, ConfigError,
                   "--min-seconds: expected a number >= 0, got '{}'",
                   format_number(*o.min_seconds));
    timing["min_seconds"] = *o.min_seconds;
  }
  if (o.max_seconds) {
    GPUBENCH_CHECK(std::isfinite(*o.max_seconds) && *o.max_seconds >= 0, ConfigError,
                   "--max-seconds: expected a number >= 0, got '{}'",
                   format_number(*o.max_seconds));
    timing["max_seconds"] = *o.max_seconds;
  }
  if (o.noise_percent) {
    GPUBENCH_CHECK(*o.noise_percent > 0 && *o.noise_percent <= 100, ConfigError,
                   "--noise: expected a percentage above 0 and at most 100, got '{}' (0.5 stops "
                   "once the mean step time is known to +-0.5%)",
                   format_number(*o.noise_percent));
    timing["noise_target"] = *o.noise_percent / 100.0;
  }
  if (o.timeout_s) {
    GPUBENCH_CHECK(*o.timeout_s >= 1, ConfigError, "--timeout: expected seconds >= 1, got '{}'",
                   format_number(*o.timeout_s));
    run["job_timeout_s"] = *o.timeout_s;
  }
  if (o.repeat) {
    GPUBENCH_CHECK(*o.repeat >= 1 && *o.repeat <= 100, ConfigError,
                   "--repeat: expected a number of timed runs from 1 to 100, got '{}' (1 times "
                   "each job once; 3 gives a median and an interval)",
                   *o.repeat);
    run["repeat"] = *o.repeat;
  }
  if (!timing.empty()) {
    // A flag means what it says on either device.
    run["timing"] = timing;
    run["cpu_timing"] = timing;
  }
  return run.empty() ? Json::object() : Json{{"run", run}};
}

/// The data-parallel plan the flags and the environment (torchrun, srun) ask for, or null for
/// one device. Bad combinations are ConfigError; GPUs that are not there DeviceError.
Json data_parallel_plan(const RunOptions& o) {
  const auto env = distributed::rank_from_environment();
  GPUBENCH_CHECK(!o.world_size || *o.world_size >= 1, ConfigError,
                 "--world-size: expected a number of ranks >= 1, got '{}'", o.world_size.value_or(0));
  GPUBENCH_CHECK(!o.rendezvous_timeout_s || *o.rendezvous_timeout_s > 0, ConfigError,
                 "--rendezvous-timeout: expected seconds > 0, got '{}'",
                 format_number(o.rendezvous_timeout_s.value_or(0)));
  distributed::DataParallelPlan dp;
  dp.rendezvous_timeout_s = o.rendezvous_timeout_s.value_or(300);
  if (!o.gpus.empty()) {
    GPUBENCH_CHECK(!o.gpu, ConfigError,
                   "--gpus and --gpu contradict each other: --gpus {} runs one rank per GPU, "
                   "--gpu {} one GPU; give one",
                   o.gpus, *o.gpu);
    GPUBENCH_CHECK(o.device != "cpu", ConfigError,
                   "--gpus and --device cpu contradict each other; for ranks on the CPU give "
                   "--device cpu --world-size N");
    GPUBENCH_CHECK(!env, ConfigError,
                   "--gpus under {} (RANK={}, WORLD_SIZE={}): each process is already one rank "
                   "on GPU LOCAL_RANK={}; drop --gpus",
                   env ? env->source : "", env ? env->rank : 0, env ? env->world_size : 0,
                   env ? env->local_rank : 0);
    const std::vector<int> gpus = distributed::parse_gpu_list(o.gpus, cuda_device_count());
    GPUBENCH_CHECK(built_with_cuda(), DeviceError,
                   "--gpus: this gpubench was built against a CPU-only libtorch (no CUDA, no "
                   "NCCL); use --device cpu --world-size N for ranks on the CPU");
    GPUBENCH_CHECK(!o.world_size || *o.world_size == static_cast<int>(gpus.size()), ConfigError,
                   "--world-size {} does not match --gpus {} ({} GPU{}); drop --world-size",
                   o.world_size.value_or(0), o.gpus, gpus.size(), gpus.size() == 1 ? "" : "s");
    dp.world_size = static_cast<int>(gpus.size());
    dp.backend = "nccl";
    for (int g : gpus) dp.devices.push_back(fmt::format("cuda:{}", g));
    return dp.to_json();
  }
  if (env) {
    GPUBENCH_CHECK(!o.world_size || *o.world_size == env->world_size, ConfigError,
                   "--world-size {} does not match the environment's world of {} ranks ({}: "
                   "{}={}); drop --world-size or start as many ranks",
                   *o.world_size, env->world_size, env->source,
                   env->source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE", env->world_size);
    GPUBENCH_CHECK(!o.gpu, ConfigError,
                   "--gpu under {}: each rank runs on GPU LOCAL_RANK ({} here); drop --gpu",
                   env->source, env->local_rank);
    dp.world_size = env->world_size;
    dp.environment = env;
    if (o.device == "cpu") {
      dp.backend = "gloo";
      dp.devices = {"cpu"};
    } else {
      const int count = cuda_device_count();
      // A process that sees one GPU (Slurm's --gpus-per-task 1 sets CUDA_VISIBLE_DEVICES) runs
      // on it whatever its LOCAL_RANK; one that sees several takes GPU LOCAL_RANK.
      const int gpu = count == 1 ? 0 : env->local_rank;
      GPUBENCH_CHECK(built_with_cuda() && gpu < count, DeviceError,
                     "{} rank {} runs on GPU LOCAL_RANK={}, and {} CUDA device{} visible here "
                     "(give --device cpu for ranks on the CPU)",
                     env->source, env->rank, env->local_rank,
                     count == 0 ? std::string("no") : fmt::format("only {}", count),
                     count == 1 ? " is" : "s are");
      dp.backend = "nccl";
      dp.devices = {fmt::format("cuda:{}", gpu)};
    }
    return dp.to_json();
  }
  if (!o.world_size) return Json();
  GPUBENCH_CHECK(o.device == "cpu", ConfigError,
                 "--world-size {} without --device cpu: ranks on GPUs are chosen with --gpus "
                 "(0,1,... or all); --world-size alone runs CPU ranks with --device cpu",
                 *o.world_size);
  GPUBENCH_CHECK(!o.gpu, ConfigError, "--gpu and --device cpu contradict each other; give one");
  GPUBENCH_CHECK(*o.world_size <= 64, ConfigError,
                 "--world-size {}: at most 64 CPU ranks on one host", *o.world_size);
  dp.world_size = *o.world_size;
  dp.backend = "gloo";
  dp.devices.assign(static_cast<std::size_t>(dp.world_size), "cpu");
  return dp.to_json();
}

/// "cpu" or "cuda:N", or DeviceError/ConfigError.
std::string select_device(const RunOptions& o, std::ostream& err) {
  if (!o.device.empty() && o.device != "cpu" && o.device != "cuda") {
    throw ConfigError(fmt::format("--device: expected cpu or cuda, got '{}'{}", o.device,
                                  did_you_mean(o.device, {"cpu", "cuda"})));
  }
  if (o.device == "cpu") {
    GPUBENCH_CHECK(!o.gpu, ConfigError, "--gpu and --device cpu contradict each other; give one");
    return "cpu";
  }
  GPUBENCH_CHECK(!o.gpu || *o.gpu >= 0, ConfigError, "--gpu: expected an index >= 0, got '{}'",
                 o.gpu.value_or(0));
  const int count = cuda_device_count();
  if (o.gpu || o.device == "cuda") {
    const int index = o.gpu.value_or(0);
    // Name what the user typed: --gpu N, or --device cuda (which means the first GPU).
    const std::string asked = o.gpu ? fmt::format("--gpu {}", index) : "--device cuda";
    GPUBENCH_CHECK(built_with_cuda(), DeviceError,
                   "{}: this gpubench was built against a CPU-only libtorch; build it against a "
                   "CUDA libtorch (README: Build against CUDA) or use --device cpu",
                   asked);
    GPUBENCH_CHECK(index < count, DeviceError, "{}: {} CUDA device{} visible (see 'gpubench info')",
                   asked, count == 0 ? std::string("no") : fmt::format("only {}", count),
                   count == 1 ? " is" : "s are");
    return fmt::format("cuda:{}", index);
  }
  if (count > 0) return "cuda:0";
  err << "gpubench: no CUDA device found; running on the CPU at each model's small fixed batch "
         "(no max-batch search). Results are marked cpu.\n";
  return "cpu";
}

std::vector<std::string> expand_models(const RunOptions& o, const ConfigStore& store) {
  std::vector<std::string> models;
  auto add = [&](const std::string& name) {
    store.model(name);  // throws UnknownWorkloadError with a did-you-mean
    if (std::find(models.begin(), models.end(), name) == models.end()) models.push_back(name);
  };
  std::vector<std::string> suite_names;
  for (const auto& [name, list] : store.suites()) suite_names.push_back(name);
  for (const auto& suite : o.suites) {
    auto found = store.suites().find(suite);
    if (found == store.suites().end()) {
      throw ConfigError(fmt::format("--suite: unknown suite '{}'{}; choose one of {}", suite,
                                    did_you_mean(suite, suite_names), join(suite_names, ", ")));
    }
    for (const auto& name : found->second) add(name);
  }
  for (const auto& name : o.models) add(name);
  GPUBENCH_CHECK(!models.empty(), ConfigError,
                 "no workload given: use --model NAME (see 'gpubench list') or --suite all");
  return models;
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
  if (const char* dir = set("GPUBENCH_JOURNAL_DIR")) return dir;
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

/// The device a plan names: "NVIDIA H200", or "cpu".
std::string device_name_of(const std::string& device) {
  if (device == "cpu") return "cpu";
  return cuda_device_info(std::stoi(device.substr(5))).name;
}

/// Memory tiers can only emulate smaller cards than the one they run on.
void check_tier_caps(const std::vector<double>& tiers, const std::string& device,
                     const char* what = "--memory-tiers") {
  if (tiers.empty()) return;
  GPUBENCH_CHECK(device != "cpu", DeviceError,
                 "--memory-tiers emulates smaller GPUs by capping a CUDA device's memory; no "
                 "CUDA device is in use (see 'gpubench info'; to continue a tier journal, give "
                 "--gpu N)");
  const DeviceInfo info = cuda_device_info(std::stoi(device.substr(5)));
  const double device_gib = static_cast<double>(info.memory_bytes) / double(int64_t{1} << 30);
  const double largest = *std::max_element(tiers.begin(), tiers.end());
  GPUBENCH_CHECK(largest < device_gib, ConfigError,
                 "{}: {} GiB is not below the {:.1f} GiB of {}; a cap can only "
                 "emulate a smaller card",
                 what, format_number(largest), device_gib, info.name);
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

/// --memory-tiers: sorted, distinct, each a sensible cap, and only where a search can run.
std::vector<double> checked_tiers(const RunOptions& o, const std::string& device) {
  if (o.memory_tiers_gib.empty()) return {};
  GPUBENCH_CHECK(!o.memory_cap_gib, ConfigError,
                 "--memory-tiers and --memory-cap contradict each other; give one");
  GPUBENCH_CHECK(o.batches.empty(), ConfigError,
                 "--memory-tiers searches the max batch under each cap; it cannot take --batch");
  std::vector<double> tiers = o.memory_tiers_gib;
  for (double gib : tiers) {
    GPUBENCH_CHECK(gib >= 0.25, ConfigError,
                   "--memory-tiers: expected sizes in GiB of at least 0.25, got '{}'",
                   format_number(gib));
  }
  std::sort(tiers.begin(), tiers.end());
  tiers.erase(std::unique(tiers.begin(), tiers.end()), tiers.end());
  check_tier_caps(tiers, device);
  return tiers;
}

/// The options a journal fixes: with --resume they come from the journal, not the command line.
void check_resume_options(const RunOptions& o) {
  std::vector<std::string> given;
  if (!o.models.empty()) given.push_back("--model");
  if (!o.suites.empty()) given.push_back("--suite");
  if (!o.config_file.empty()) given.push_back("--config");
  if (!o.batches.empty()) given.push_back("--batch");
  if (o.same_batch) given.push_back("--same-batch");
  if (!o.precision.empty()) given.push_back("--precision");
  if (o.memory_cap_gib) given.push_back("--memory-cap");
  if (!o.memory_tiers_gib.empty()) given.push_back("--memory-tiers");
  if (o.warmup_steps) given.push_back("--warmup-steps");
  if (o.min_steps) given.push_back("--min-steps");
  if (o.min_seconds) given.push_back("--min-seconds");
  if (o.max_seconds) given.push_back("--max-seconds");
  if (o.noise_percent) given.push_back("--noise");
  if (o.repeat) given.push_back("--repeat");
  if (!o.gpus.empty()) given.push_back("--gpus");
  if (o.world_size) given.push_back("--world-size");
  if (!o.journal_path.empty()) given.push_back("--journal");
  GPUBENCH_CHECK(given.empty(), ConfigError,
                 "--resume continues the suite exactly as its journal planned it; drop {} (only "
                 "--gpu, --device, --timeout, --json and --csv may change)",
                 join(given, ", "));
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
    const bool transient = r.status == "timeout" || r.status == "crashed";
    if (!transient) ++same_again;
    std::string message = r.message.substr(0, 160);
    std::replace(message.begin(), message.end(), '\n', ' ');
    lines += fmt::format("\n  {}{}: {}{}{}", r.model,
                         r.memory_cap_gib ? fmt::format(" at {} GiB", format_number(*r.memory_cap_gib))
                                          : std::string(),
                         r.status, message.empty() ? "" : ": " + message,
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

}  // namespace

int run_run(const RunOptions& o, const std::vector<std::string>& argv, std::ostream& out,
            std::ostream& err) {
  // Everything that can be wrong with the input is found before anything is measured.
  const std::unique_ptr<Reporter> reporter =
      o.format == "none" ? nullptr : make_reporter(o.format, out);
  if (o.quiet) setenv("GPUBENCH_QUIET", "1", 1);  // the workers' progress lines too
  SuitePlan plan;
  std::vector<JobRecord> earlier;
  std::optional<JournalWriter> journal;
  Json run_settings;
  OutputPaths outputs{o.json_path, o.csv_path};
  if (!o.resume_path.empty()) {
    check_resume_options(o);
    const Journal old = read_journal(o.resume_path);
    // Without --json/--csv, a resume keeps the files the first run named up to date, as it did.
    if (o.json_path.empty() && o.csv_path.empty()) {
      outputs.json = old.header.outputs.value("json", std::string());
      outputs.csv = old.header.outputs.value("csv", std::string());
    }
    plan = SuitePlan::from_json(old.header.plan, o.resume_path);
    earlier = old.jobs;
    run_settings = old.header.run_settings;
    if (!plan.data_parallel.is_null()) {
      // The ranks' devices are the plan's: checked when the launcher starts them.
      GPUBENCH_CHECK(!o.gpu && o.device.empty(), ConfigError,
                     "--resume of a data-parallel suite runs on its ranks' devices; drop --gpu "
                     "and --device");
    } else if (o.gpu || !o.device.empty()) {
      plan.device = select_device(o, err);
    } else if (plan.device != "cpu") {
      const int index = std::stoi(plan.device.substr(5));
      GPUBENCH_CHECK(index < cuda_device_count(), DeviceError,
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
    if (o.timeout_s) {
      RunOptions timeout_only;
      timeout_only.timeout_s = o.timeout_s;
      plan.overlays.emplace_back("command line", flag_overlay(timeout_only));
    }
    // Everything the plan needs still holds with this gpubench and this device, before any job.
    const ConfigStore resolved = resolve_store(plan.overlays);
    std::vector<double> tiers;
    for (const auto& job : plan.jobs) {
      resolved.model(job.model);  // throws with a did-you-mean for a workload that is gone
      if (job.search_only && job.memory_cap_gib) tiers.push_back(*job.memory_cap_gib);
    }
    check_tier_caps(tiers, plan.device);
    // Built-in defaults can change between gpubench versions: say so rather than mix silently.
    Json now = resolved.run().to_json(), then = run_settings;
    for (Json* settings : {&now, &then}) {
      if (settings->is_object()) settings->erase("job_timeout_s");  // --timeout may change
    }
    if (now != then) {
      err << "gpubench: warning: " << o.resume_path
          << ": this gpubench resolves the run settings differently from the one that started "
             "the journal; the jobs run now use the current ones (start a new journal to keep "
             "one set)\n";
    }
  } else {
    ConfigStore store = builtin_store();
    if (!o.config_file.empty()) {
      Json document = load_config_file(o.config_file);
      store.apply_document(document, o.config_file);
      plan.overlays.emplace_back(o.config_file, std::move(document));
    }
    const Json flags = flag_overlay(o);
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
      // The baseline's 2020 batch, in the workload's unit; twins without a 2020 row have none.
      const std::string baseline = store.reference().baseline().id;
      std::vector<std::string> kept, left_out;
      for (const auto& m : models) {
        const auto& reference = store.model(m).reference_2020;
        const double batch = reference ? reference->max_batch.at(baseline) : 0;
        if (batch >= 1) {
          batches.by_model[m] = static_cast<int64_t>(batch);
          kept.push_back(m);
        } else {
          left_out.push_back(m);
        }
      }
      GPUBENCH_CHECK(!kept.empty(), ConfigError,
                     "--same-batch: none of {} has a 2020 row, so none has a 2020 batch",
                     join(models, ", "));
      if (!left_out.empty()) {
        err << "gpubench: --same-batch leaves out " << join(left_out, ", ")
            << " (no 2020 row, so no 2020 batch)\n";
      }
      models = kept;
    }
    for (const auto& [model, batch] : batches.by_model) {
      if (std::find(models.begin(), models.end(), model) != models.end()) continue;
      store.model(model);  // an unknown name: say so, with a did-you-mean
      throw ConfigError(fmt::format(
          "--batch {}={}: {} is not among this run's workloads ({}); add --model {} or drop it",
          model, batch, model, join(models, ", "), model));
    }
    if (batches.all) {
      // One number cannot be the batch of workloads that count it in different units.
      std::map<std::string, std::vector<std::string>> by_unit;
      for (const auto& m : models) {
        if (!batches.by_model.count(m)) by_unit[store.model(m).batch_unit].push_back(m);
      }
      if (by_unit.size() > 1) {
        std::vector<std::string> parts;
        for (const auto& [unit, names] : by_unit) {
          parts.push_back(fmt::format("{} ({})", unit, join(names, ", ")));
        }
        throw ConfigError(fmt::format(
            "--batch {}: these workloads count their batch in different units: {}; give each "
            "its own with --batch MODEL=N (e.g. --batch {}={}), or run each unit on its own",
            *batches.all, join(parts, "; "), by_unit.begin()->second.front(), *batches.all));
      }
    }
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
    run_settings = store.run().to_json();
    if (plan.device == "cpu" && store.run().memory_cap_gib) {
      err << "gpubench: --memory-cap applies to a CUDA device; ignored on the CPU\n";
    } else if (store.run().memory_cap_gib) {
      // Before any job: a cap the card cannot enforce would label its result as a smaller one's.
      check_tier_caps({*store.run().memory_cap_gib}, plan.device, "memory cap");
    }
  }
  // Data-parallel: the ranks meet (under torchrun/srun: every rank's gpubench, up to
  // --rendezvous-timeout, exit 3 past it) before any journal is written.
  std::unique_ptr<distributed::DataParallelLauncher> data_parallel;
  std::string journal_flag = o.journal_path;
  GPUBENCH_CHECK(plan.data_parallel.is_null() || !o.in_process, ConfigError,
                 "--in-process runs one process; a data-parallel run needs a worker per rank");
  if (!plan.data_parallel.is_null()) {
    const auto dp = distributed::DataParallelPlan::from_json(plan.data_parallel);
    if (dp.environment && dp.environment->rank > 0) {
      // Rank 0 writes the results; the others keep a journal of their own (the same records).
      outputs = {};
      if (!journal_flag.empty()) journal_flag += fmt::format(".rank{}", dp.environment->rank);
    }
    if (!o.quiet) {
      err << fmt::format("gpubench: data-parallel: {} rank{} over {} ({}){}\n", dp.world_size,
                         dp.world_size == 1 ? "" : "s", dp.backend,
                         dp.environment ? fmt::format("{} rank {}, MASTER {}:{}",
                                                      dp.environment->source, dp.environment->rank,
                                                      dp.environment->master_addr,
                                                      dp.environment->master_port)
                                        : join(dp.devices, ", "),
                         dp.environment ? "; waiting for every rank" : "")
          << std::flush;
    }
    data_parallel = std::make_unique<distributed::DataParallelLauncher>(dp, o.worker_exe);
  }
  if (!outputs.json.empty()) check_writable(outputs.json, "--json");
  if (!outputs.csv.empty()) check_writable(outputs.csv, "--csv");
  const std::string journal_path = !o.resume_path.empty() ? o.resume_path : journal_flag;
  check_not_journal(outputs.json, "--json", journal_path);
  check_not_journal(outputs.csv, "--csv", journal_path);
  // Every check is done (the overlays were applied above; resolve_store applies them again).
  if (o.check_only) return kExitOk;
  const ConfigStore store = resolve_store(plan.overlays);

  // The journal exists before the first job starts, so even the first one cannot be lost.
  if (!o.resume_path.empty()) {
    journal.emplace(JournalWriter::resume(o.resume_path));
  } else {
    JournalHeader header;
    header.created_utc = utc_now();
    header.command_line = argv;
    header.plan = plan.to_json();
    header.run_settings = run_settings;
    if (!outputs.json.empty()) header.outputs["json"] = absolute_path(outputs.json);
    if (!outputs.csv.empty()) header.outputs["csv"] = absolute_path(outputs.csv);
    journal.emplace(journal_flag.empty() ? create_default_journal(header)
                                         : JournalWriter::create(journal_flag, header));
  }
  auto log = [&err, quiet = o.quiet](const std::string& line) {
    if (!quiet) err << "gpubench: " << terminal_text(line) << '\n' << std::flush;
  };
  log(fmt::format("journal: {} (if this run is interrupted: gpubench run --resume {})",
                  journal->path(), journal->path()));
  if (!o.resume_path.empty() && o.json_path.empty() && o.csv_path.empty() &&
      (!outputs.json.empty() || !outputs.csv.empty())) {
    std::vector<std::string> files;
    for (const auto* f : {&outputs.json, &outputs.csv}) {
      if (!f->empty()) files.push_back(*f);
    }
    log(fmt::format("rewriting the first run's results as jobs end: {}", join(files, ", ")));
  }

  ResultDocument document;
  document.created_utc = utc_now();
  document.command_line = argv;
  document.run_settings = run_settings;
  std::vector<JobRecord> all = earlier;
  auto refresh = [&]() {
    document.jobs = latest_per_job(plan, all);
    for (const auto& job : document.jobs) {
      if (document.environment.empty() && !job.environment.empty()) {
        document.environment = job.environment;
      }
    }
    try {
      write_outputs(outputs, document,
                    store.reference());  // nothing measured is lost to a later crash
    } catch (const AbortError& e) {
      // The journal already holds the job (run_suite appends before it calls back): say so.
      throw AbortError(fmt::format(
          "{}; the journal {} keeps every finished job: fix that, then continue with: gpubench "
          "run --resume {}",
          e.what(), journal->path(), journal->path()));
    }
  };

  // Work files of runs and workers killed before they could remove them (kill -9, a reboot).
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string work_folder = tmpdir && *tmpdir ? tmpdir : "/tmp";
  remove_stale_work_files(work_folder);
  for (const auto* f : {&outputs.json, &outputs.csv}) {
    if (!f->empty()) remove_stale_temp_files(*f);
  }

  WorkerLauncher workers(o.worker_exe);
  InProcessLauncher in_process;
  PhaseLauncher& launcher = o.in_process      ? static_cast<PhaseLauncher&>(in_process)
                            : data_parallel ? static_cast<PhaseLauncher&>(*data_parallel)
                                            : workers;
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
    run_suite(plan, earlier, launcher, *journal, callbacks);
    remove_stale_work_files(work_folder);  // a worker killed mid-write leaves its temp file
    stop_if_asked();
  } catch (const Interrupted& e) {
    // Said even with --quiet: the user stopped it and should know what was kept.
    const std::vector<JobRecord> latest = latest_per_job(plan, all);
    const auto kept = std::count_if(latest.begin(), latest.end(), job_is_done);
    err << fmt::format(
               "gpubench: stopped ({}); the running job was stopped and left no record; "
               "{} of {} jobs are done in the journal; continue with: gpubench run "
               "--resume {}\n",
               sigabbrev_or_number(e.signal_number()), kept, plan.jobs.size(), journal->path())
        << std::flush;
    throw;
  }
  refresh();

  if (reporter) reporter->report(document.jobs, store.reference());
  if (o.format == "summary" && !document.jobs.empty()) {
    log(fmt::format("beside the eight 2020 GPUs, with max batches: gpubench report {}",
                    journal->path()));
  }
  // A planned job without a done record failed, whatever records the others left.
  const auto done = std::count_if(document.jobs.begin(), document.jobs.end(),
                                  [](const JobRecord& r) { return job_is_done(r); });
  const auto failed = static_cast<std::ptrdiff_t>(plan.jobs.size()) - done;
  if (failed) {
    err << "gpubench: "
        << terminal_text(failure_summary(document.jobs, failed, plan.jobs.size(), journal->path()))
        << '\n'
        << std::flush;
  }
  return failed ? kExitJobFailed : kExitOk;
}

// ---- report ----

void setup_report(CLI::App& app, ReportOptions& o) {
  auto* cmd = app.add_subcommand("report", "Print result files beside the 2020 GPUs");
  cmd->add_option("files", o.files,
                  "Result files of 'gpubench run --json' and journals of 'gpubench run "
                  "--journal', in any mix; the last record of a job wins")
      ->required();
  cmd->add_option("--format,-f", o.format,
                  "table (default: beside the eight 2020 GPUs), summary (a line per job), md, csv, "
                  "json, html");
  cmd->add_option("--output,-o", o.output, "Write the report to PATH instead of stdout");
  cmd->add_option("--price", o.prices,
                  "GPU=USD: a measured GPU's price (say, H200=30000; repeatable), for a "
                  "performance-per-dollar table beside the 2020 GPUs' prices");
}

int run_report(const ReportOptions& o, std::ostream& out, std::ostream& err) {
  // All bad input fails before anything is read or written: the format, the prices, then the
  // output path.
  std::ostringstream text;
  auto reporter = make_reporter(o.format, text);
  const std::vector<PriceSpec> prices = parse_prices(o.prices);
  if (!o.output.empty()) check_writable(o.output, "--output");
  const ConfigStore store = builtin_store();
  const ResultFiles files = read_result_files(o.files);
  for (const auto& note : files.notes) err << "gpubench: " << terminal_text(note) << '\n';
  ReferenceTable reference = store.reference();
  apply_prices(reference, prices, files.jobs);  // a GPU no record ran on fails here
  reporter->report(files.jobs, reference);
  if (o.output.empty()) {
    out << text.str();
  } else {
    write_file_atomically(o.output, text.str());  // never half a report
  }
  return kExitOk;
}

// ---- compare ----

void setup_compare(CLI::App& app, CompareOptions& o) {
  auto* cmd = app.add_subcommand(
      "compare", "Compare two result files job by job: faster, slower or within noise");
  cmd->add_option("files", o.files,
                  "A (the baseline) and B (the candidate): result files or journals")
      ->required()
      ->expected(2);
  cmd->add_option("--noise", o.noise_pct,
                  "Percent difference taken as noise where a job has no interval (one timed "
                  "run; --repeat 3 gives one) (default: 2)");
  cmd->add_option("--format,-f", o.format, "table (default), md, json");
  cmd->footer(
      "Jobs are matched by model, precision and memory cap; the devices may differ. With a 95%\n"
      "interval on both sides (run --repeat 2 or more) B is faster or slower when the intervals\n"
      "do not overlap; otherwise when the difference passes --noise.\n"
      "Exit codes: 0 no regression; 1 B is slower than A on some job, or failed where A\n"
      "trained; 2 bad input (a file, or two files that share no job).");
}

int run_compare(const CompareOptions& o, std::ostream& out, std::ostream& err) {
  GPUBENCH_CHECK(o.noise_pct >= 0 && o.noise_pct < 100, ConfigError,
                 "--noise: expected a percentage from 0 to 100, got '{}'",
                 format_number(o.noise_pct));
  const ResultFiles a = read_result_files({o.files.at(0)});
  const ResultFiles b = read_result_files({o.files.at(1)});
  for (const auto* files : {&a, &b}) {
    for (const auto& note : files->notes) err << "gpubench: " << terminal_text(note) << '\n';
  }
  std::ostringstream text;  // nothing is printed unless the whole comparison can be
  const CompareResult result = compare_results(a.jobs, b.jobs, o.noise_pct / 100.0);
  print_comparison(text, result, o.format);
  out << text.str();
  if (!result.regression) return kExitOk;
  std::vector<std::string> worse;
  for (const auto& c : result.jobs) {
    if (c.regressed()) {
      worse.push_back(fmt::format("{} {} ({})", c.model, c.precision, c.verdict));
    }
  }
  err << "gpubench: B regressed against A: " << terminal_text(join(worse, ", ")) << '\n';
  return kExitJobFailed;
}

// ---- worker ----

void setup_worker(CLI::App& app, WorkerOptions& o) {
  auto* cmd = app.add_subcommand("worker", "Run one phase of one job (started by 'run')");
  cmd->group("");  // internal: not in --help
  cmd->add_option("--spec", o.spec, "Job spec (JSON)")->required();
  cmd->add_option("--out", o.out, "Where to write the job record")->required();
}

// ---- dispatch ----

namespace {

int run_cli_mode(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                 bool check_only) {
  // A file size limit (ulimit -f) then fails a write with EFBIG, which gpubench reports (exit
  // 4, the journal kept), instead of SIGXFSZ killing the process mid-write. Workers inherit it.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"gpubench: GPU training benchmark of the 2020 Lambda workloads, rebuilt in C++"};
  app.require_subcommand(1);
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
    if (app.got_subcommand("worker")) return worker_main(worker.spec, worker.out);
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
