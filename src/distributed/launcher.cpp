#include "gpubench/distributed/launcher.h"

#include "gpubench/base/errors.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/device/nvml.h"
#include "gpubench/distributed/comm.h"
#include "gpubench/run/process.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <functional>
#include <optional>
#include <thread>

namespace gpubench::distributed {

std::string interconnect_of(const std::vector<int>& gpus) {
  if (gpus.empty()) return "unknown";
  if (gpus.size() == 1) return "none (one GPU)";
  int with_nvlink = 0;
  for (int gpu : gpus) {
    const auto active = nvml_has_active_nvlink(gpu);
    if (!active) return "unknown";
    with_nvlink += *active ? 1 : 0;
  }
  if (with_nvlink == static_cast<int>(gpus.size())) return "NVLink";
  if (with_nvlink == 0) return "PCIe";
  return "mixed (NVLink on some GPUs, PCIe on others)";
}

namespace {

/// One rank's worker as the launcher watches it.
struct RankProcess {
  int rank = 0;
  std::string device;
  std::unique_ptr<WorkerFiles> files;
  pid_t pid = -1;
  bool running = false;
  bool stopped_by_us = false;
  int exit_code = -1;
  int signal = 0;
  std::optional<JobRecord> record;

  /// Whether it ended by itself with a record of a phase that trained.
  bool healthy() const { return exit_code == 0 && record && record->ok(); }
  /// "rank 1 (cuda:1)".
  std::string describe() const { return fmt::format("rank {} ({})", rank, device); }
};

/// The record a rank's worker wrote; none when it wrote none, or one that cannot be read.
std::optional<JobRecord> read_record(const WorkerFiles& files) {
  const std::optional<std::string> output = files.output();
  if (!output || output->empty()) return std::nullopt;
  try {
    return JobRecord::from_json(Json::parse(*output));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// Kills and reaps the ranks' workers that still run, however the launch ends (the ranks' files
/// go after it).
struct KillOnExit {
  std::vector<RankProcess>& ranks;
  ~KillOnExit() {
    for (auto& p : ranks) {
      if (p.running) signal_process_group(p.pid, SIGKILL), reap_process(p.pid);
    }
  }
};

/// How the watch over a timed run's ranks ended.
struct Watch {
  bool timed_out = false;
  double seconds = 0;
  /// Why the ranks were stopped from outside (another host's rank failed), or "".
  std::string stopped_for;
};

/// Watches the ranks' workers until all ended: one that ends badly (or the timeout) stops the
/// others, which would wait for it in a collective (SIGTERM, then SIGKILL after 10 s). A stop
/// signal for this process kills them all and propagates (Interrupted).
///
/// `stop_reason`, when given, is asked about once a second: a non-empty answer (another host's
/// rank failed) stops the ranks as a failure here would, and the watch keeps the reason.
Watch watch_ranks(std::vector<RankProcess>& ranks, double timeout_s,
                  const std::function<std::string()>& stop_reason = nullptr) {
  const auto started = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  Watch watch;
  double stop_at = -1;     // when the others were asked to stop (SIGTERM)
  bool escalated = false;  // and then killed (SIGKILL)
  double next_question = 0;  // when to ask stop_reason next
  auto signal_running = [&](int signal_number) {
    for (auto& q : ranks) {
      if (q.running) signal_process_group(q.pid, signal_number);
    }
  };
  auto stop_all = [&](double now) {
    if (stop_at >= 0) return;
    stop_at = now;
    signal_running(SIGTERM);
  };
  while (std::any_of(ranks.begin(), ranks.end(), [](const RankProcess& p) { return p.running; })) {
    try {
      stop_if_asked();
    } catch (const Interrupted&) {
      signal_running(SIGKILL);
      throw;  // KillOnExit reaps them
    }
    const double now = elapsed();
    for (auto& p : ranks) {
      if (!p.running) continue;
      const std::optional<ProcessResult> end = poll_process(p.pid);
      if (!end) continue;
      p.running = false;
      signal_process_group(p.pid, SIGKILL);  // anything the worker left in its group
      p.exit_code = end->exit_code;
      p.signal = end->signal;
      // Ended by our stop, or by itself (a crash, or a kill from outside: the cause).
      p.stopped_by_us = stop_at >= 0 && (p.signal == SIGTERM || (p.signal == SIGKILL && escalated));
      p.record = read_record(*p.files);
      // A rank that ended badly leaves the others waiting in a collective: stop them now.
      if (!p.healthy()) stop_all(now);
    }
    if (stop_reason && stop_at < 0 && now >= next_question) {
      next_question = now + 1;
      watch.stopped_for = stop_reason();
      if (!watch.stopped_for.empty()) stop_all(now);
    }
    if (!watch.timed_out && timeout_s > 0 && now > timeout_s) {
      watch.timed_out = true;
      stop_all(now);
    }
    if (stop_at >= 0 && now > stop_at + 10 && !escalated) {
      escalated = true;
      signal_running(SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  watch.seconds = elapsed();
  return watch;
}

/// The timed run's record from its ranks: rank 0's (it holds every rank's numbers) when all
/// trained; otherwise the cause: a rank that died on its own, else one whose record says why
/// (an out-of-memory first: the step-down reads it), else the timeout.
JobRecord ranks_record(const std::vector<RankProcess>& ranks, const Watch& watch,
                       const JobSpec& spec) {
  const bool all_ok =
      std::all_of(ranks.begin(), ranks.end(), [](const RankProcess& p) { return p.healthy(); });
  if (all_ok && !watch.timed_out) return *ranks.front().record;
  JobRecord record;
  record.model = spec.model;
  for (const auto& p : ranks) {
    if (p.stopped_by_us) continue;
    if (p.signal != 0 || (p.exit_code != 0 && p.exit_code != -1)) {
      ProcessResult end;
      end.exit_code = p.exit_code;
      end.signal = p.signal;
      record.status = p.signal ? JobStatus::crashed : JobStatus::failed;
      record.message =
          fmt::format("data-parallel timed run: {} worker {}; the other ranks were stopped",
                      p.describe(), end.describe());
      return record;
    }
  }
  const RankProcess* cause = nullptr;
  for (const auto& p : ranks) {
    if (p.record && !p.record->ok() && (!cause || p.record->status == JobStatus::oom)) cause = &p;
  }
  if (!watch.stopped_for.empty() && !watch.timed_out) {
    record.status = JobStatus::failed;
    record.message = fmt::format(
        "data-parallel timed run: {}; this host's ranks were stopped", watch.stopped_for);
    return record;
  }
  if (cause && !watch.timed_out) {
    record = *cause->record;
    record.message = fmt::format("{}: {}", cause->describe(), record.message);
    return record;
  }
  record.status = JobStatus::timeout;
  record.message = fmt::format(
      "data-parallel timed run: timed out after {:.0f} s on {} ranks (a rank that hangs holds "
      "the others in their all-reduce); every rank was stopped",
      watch.seconds, ranks.size());
  return record;
}

/// What a rank of a many-host job was asked, as every rank must be asked it: the workload, the
/// phase, the timed batch and the config over the shipped one (its documents merged; their
/// file names may differ between hosts). The device is left out: it is each rank's own.
Json asked_of_rank(const JobSpec& spec) {
  Json config = Json::object();
  for (const auto& [label, document] : spec.overlays) config.merge_patch(document);
  if (config.contains("run") && config["run"].is_object()) {
    // Settings that change no measurement may differ (as they may on --resume).
    for (const char* key :
         {"job_timeout_s", "search_cache", "price_per_hour_usd", "prestart_workers"}) {
      config["run"].erase(key);
    }
  }
  return {{"model", spec.model},
          {"phase", to_string(spec.phase)},
          {"batch", spec.phase == WorkerPhase::search ? 0 : spec.batch},
          {"search_only", spec.search_only},
          {"config", config}};
}

/// Where two ranks' jobs first differ: the field's path and each side's value ("not set" for
/// none).
struct Difference {
  std::string path, a, b;
};

/// The first place where `a` and `b` differ; none when they are equal.
std::optional<Difference> first_difference(const Json& a, const Json& b,
                                           const std::string& path) {
  if (a == b) return std::nullopt;
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string at = path.empty() ? key : path + "." + key;
      if (!b.contains(key)) return Difference{at, value.dump(), "not set"};
      if (auto d = first_difference(value, b.at(key), at)) return d;
    }
    for (const auto& [key, value] : b.items()) {
      if (!a.contains(key)) {
        return Difference{path.empty() ? key : path + "." + key, "not set", value.dump()};
      }
    }
  }
  return Difference{path, a.dump(), b.dump()};
}

}  // namespace

struct DataParallelLauncher::Impl {
  DataParallelPlan plan;
  int agreements = 0;

  /// Every rank writes what it was asked under this call's key and reads every other rank's
  /// (waiting at most the rendezvous timeout: RendezvousError for a rank that never comes).
  /// "" when all match rank 0's, else the first difference, naming the rank ("rank 1 was given
  /// batch 3, rank 0 2").
  std::string ranks_disagree(const JobSpec& spec) {
    const EnvironmentRank& env = *plan.environment;
    const std::string prefix = fmt::format("agree-{}/rank-", ++agreements);
    const Json mine = asked_of_rank(spec);
    store->set(prefix + std::to_string(env.rank), mine.dump());
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(prefix + std::to_string(r));
    store->wait(keys, plan.rendezvous_timeout_s, "every rank's job");
    std::vector<Json> asked;
    for (const std::string& key : keys) asked.push_back(Json::parse(store->get(key)));
    // Rank 0's process holds the store: once every rank has read the jobs, it may end (a
    // disagreement ends the job at once) without the others losing the store mid-read, which
    // left them with no record but "Connection reset by peer".
    store->set(fmt::format("agree-{}/read-{}", agreements, env.rank), "1");
    if (env.rank == 0) {
      std::vector<std::string> read;
      for (int r = 0; r < env.world_size; ++r) {
        read.push_back(fmt::format("agree-{}/read-{}", agreements, r));
      }
      try {
        store->wait(read, plan.rendezvous_timeout_s, "every rank's reading of the jobs");
      } catch (const RendezvousError&) {
        // A rank that died after sending its job: its own launcher or the timed run says so.
      }
    }
    for (int r = 1; r < env.world_size; ++r) {
      if (const auto d = first_difference(asked[static_cast<std::size_t>(r)], asked.front(), "")) {
        return fmt::format("rank {} was given {} {}, rank 0 {}", r, d->path, d->a, d->b);
      }
    }
    return {};
  }
  std::string executable;
  WorkerLauncher single;  // the search, on one GPU
  std::unique_ptr<Store> store;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int timed_runs = 0;
  int searches = 0;

  /// Fills `p` for rank `rank` of `world_size`: its device, and the worker files of `spec` on
  /// that device with the rank's part of the rendezvous (RankSpec). One host's launcher
  /// prepares every rank this way, a torchrun or Slurm host its own. `devices` is recorded
  /// only where this launcher knows every rank's (one host).
  void prepare_rank(RankProcess& p, const JobSpec& spec, int rank, int world_size,
                    const std::string& device, const std::string& addr, int port,
                    const std::string& prefix, double timeout_s, const std::string& interconnect) {
    p.rank = rank;
    p.device = device;
    JobSpec rank_spec = spec;
    rank_spec.device = device;
    RankSpec rs;
    rs.rank = rank;
    rs.world_size = world_size;
    rs.backend = plan.backend;
    rs.master_addr = addr;
    rs.master_port = port;
    rs.prefix = prefix;
    rs.timeout_s = timeout_s;
    if (!plan.environment) rs.devices = plan.devices;
    rs.interconnect = interconnect;
    rank_spec.distributed = rs.to_json();
    p.files = std::make_unique<WorkerFiles>(rank_spec);
  }

  /// Starts every rank's worker, watches them, stops all when one fails or the time is up.
  JobRecord launch_local(const JobSpec& spec, double timeout_s) {
    const std::string prefix = fmt::format("run-{}/", ++timed_runs);
    std::vector<RankProcess> ranks(static_cast<std::size_t>(plan.world_size));
    std::vector<int> gpus;
    for (const auto& d : plan.devices) {
      const DeviceRef ref = require_device_ref(d, "device");
      if (ref.is_cuda()) gpus.push_back(ref.index);
    }
    const std::string interconnect =
        plan.backend == "gloo" && gpus.empty() ? "loopback (CPU ranks)" : interconnect_of(gpus);
    const KillOnExit kill_on_exit{ranks};
    for (int r = 0; r < plan.world_size; ++r) {
      prepare_rank(ranks[static_cast<std::size_t>(r)], spec, r, plan.world_size,
                   plan.devices.at(static_cast<std::size_t>(r)), master_addr, master_port,
                   prefix, timeout_s, interconnect);
    }
    for (auto& p : ranks) {
      // The non-zero ranks' progress lines off: rank 0 speaks for all.
      p.pid = start_process(
          p.files->command(executable),
          p.rank != 0 ? std::vector<std::string>{"GPUBENCH_QUIET=1"} : std::vector<std::string>{});
      p.running = true;
    }
    const Watch watch = watch_ranks(ranks, timeout_s);
    return ranks_record(ranks, watch, spec);
  }

  /// Many hosts: this rank's worker; the search runs on rank 0 and the others read its record.
  /// First every rank checks that all were asked the same (ranks_disagree): a rank given
  /// another workload would otherwise take rank 0's search for its own, or wait in an
  /// all-reduce that no partner joins.
  JobRecord launch_environment(const JobSpec& spec, double timeout_s) {
    const EnvironmentRank& env = *plan.environment;
    if (const std::string differs = ranks_disagree(spec); !differs.empty()) {
      JobRecord record;
      record.model = spec.model;
      record.status = JobStatus::failed;
      record.message = fmt::format(
          "data-parallel {}: the ranks were not asked the same job: {}; every rank must run "
          "the same command (models, batches, precision, config)",
          spec.phase == WorkerPhase::search ? "search" : "timed run", differs);
      return record;
    }
    if (spec.phase == WorkerPhase::search) {
      const std::string key = fmt::format("search-{}", ++searches);
      if (env.rank == 0) {
        JobRecord record = single.launch(spec, timeout_s);
        store->set(key, record.to_json().dump());
        return record;
      }
      store->wait({key}, timeout_s + plan.rendezvous_timeout_s, "rank 0's search");
      return JobRecord::from_json(Json::parse(store->get(key)));
    }
    const std::string prefix = fmt::format("run-{}/", ++timed_runs);
    const auto nvlink =
        plan.backend == "nccl" ? nvml_has_active_nvlink(env.local_rank) : std::nullopt;
    const std::string interconnect =
        plan.backend != "nccl" ? "the network (Gloo over TCP)"
        : !nvlink              ? "unknown within a host; the network between hosts"
        : *nvlink              ? "NVLink within a host; the network between hosts"
                               : "PCIe within a host; the network between hosts";
    // This rank's worker, watched like one host's ranks, and stopped when another rank
    // reports a failure under this run's key: a rank that died leaves the others in an
    // all-reduce without a partner until the job's timeout otherwise.
    const std::string failed_key = prefix + "failed";
    std::vector<RankProcess> ranks(1);
    RankProcess& p = ranks.front();
    prepare_rank(p, spec, env.rank, env.world_size, spec.device, env.master_addr,
                 env.master_port, prefix, timeout_s, interconnect);
    const KillOnExit kill_on_exit{ranks};
    p.pid = start_process(p.files->command(executable), {});
    p.running = true;
    const Watch watch = watch_ranks(ranks, timeout_s, [&] {
      return store->check(failed_key) ? store->get(failed_key) : std::string();
    });
    if (!p.healthy() && !p.stopped_by_us) {
      std::string own = p.record && !p.record->ok()
                            ? fmt::format("{} {}: {}", p.describe(), to_string(p.record->status),
                                          p.record->message)
                            : fmt::format("{} worker {}", p.describe(),
                                          ProcessResult{p.exit_code, p.signal}.describe());
      if (watch.timed_out) {
        own = fmt::format("{} timed out after {:.0f} s", p.describe(), watch.seconds);
      }
      // A rank whose peer died often fails on its own first (Gloo: "Connection closed by
      // peer"), before the dead rank's launcher has said why: wait a little for that cause, so
      // that every journal names the rank that failed first rather than its echo.
      if (const std::string first = reported_failure(failed_key, 5.0); !first.empty()) {
        JobRecord record;
        record.model = spec.model;
        record.status = JobStatus::failed;
        record.message = fmt::format("data-parallel timed run: {}; then on this host: {}",
                                     first, own);
        return record;
      }
      store->set(failed_key, own);  // the first to fail: the others stop on it
    }
    return ranks_record(ranks, watch, spec);
  }

  /// Another rank's failure under `key`, waiting up to `wait_s` for one; "" when none came.
  std::string reported_failure(const std::string& key, double wait_s) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(wait_s));
    while (true) {
      if (store->check(key)) return store->get(key);
      if (std::chrono::steady_clock::now() >= until) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
};

DataParallelLauncher::DataParallelLauncher(DataParallelPlan plan, std::string executable)
    : impl_(std::make_unique<Impl>()) {
  Impl& i = *impl_;
  i.plan = std::move(plan);
  i.executable = executable.empty() ? current_executable() : executable;
  i.single = WorkerLauncher(i.executable);
  if (i.plan.backend == "nccl" && !nccl_compiled()) {
    throw DeviceError(fmt::format(
        "data-parallel training on GPUs needs NCCL, which this gpubench was built without: {}",
        backend_support()));
  }
  if (i.plan.backend == "gloo" && !gloo_compiled()) {
    throw DeviceError(
        fmt::format("data-parallel training on the CPU needs Gloo: {}", backend_support()));
  }
  if (i.plan.environment) {
    const EnvironmentRank& env = *i.plan.environment;
    i.master_addr = env.master_addr;
    i.master_port = env.master_port;
    // Rank 0 holds the suite's store, unless torchrun's agent already serves it there; every
    // rank checks in and waits for the others.
    i.store =
        std::make_unique<Store>(env.master_addr, env.master_port, env.rank == 0 && !env.agent_store,
                                i.plan.rendezvous_timeout_s);
    i.store->set(fmt::format("gpubench/rank/{}", env.rank), std::to_string(env.world_size));
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(fmt::format("gpubench/rank/{}", r));
    i.store->wait(keys, i.plan.rendezvous_timeout_s,
                  fmt::format("rank {} of {} waited for every rank at {}:{}; the rendezvous",
                              env.rank, env.world_size, env.master_addr, env.master_port));
    for (int r = 0; r < env.world_size; ++r) {
      const std::string theirs = i.store->get(keys[static_cast<std::size_t>(r)]);
      GPUBENCH_CHECK(theirs == std::to_string(env.world_size), ConfigError,
                     "rendezvous: rank {} has world size {}, rank {} has {}; start every rank "
                     "with the same WORLD_SIZE",
                     r, theirs, env.rank, env.world_size);
    }
    return;
  }
  // One host: a store on the loopback at a free port, which the workers reach.
  i.store = std::make_unique<StoreServer>(i.plan.rendezvous_timeout_s);
  i.master_port = i.store->port();
}

DataParallelLauncher::~DataParallelLauncher() = default;

JobRecord DataParallelLauncher::launch(const JobSpec& spec, double timeout_s) {
  if (impl_->plan.environment) return impl_->launch_environment(spec, timeout_s);
  if (spec.phase == WorkerPhase::search)
    return impl_->single.launch(spec, timeout_s);  // once, one GPU
  return impl_->launch_local(spec, timeout_s);
}

}  // namespace gpubench::distributed
