#include "gpubench/distributed/environment.h"

#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

namespace gpubench::distributed {

namespace {

/// A whole number in [low, high] from `value`, or ConfigError naming `what`.
int parse_int(const std::string& value, const std::string& what, int low, int high) {
  const bool digits =
      !value.empty() && value.size() <= 9 &&
      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  GPUBENCH_CHECK(digits, ConfigError, "{}: expected a whole number, got '{}'", what,
                 terminal_safe(value));
  const int n = std::stoi(value);
  GPUBENCH_CHECK(n >= low && n <= high, ConfigError, "{}: expected {} to {}, got {}", what, low,
                 high, n);
  return n;
}

}  // namespace

std::optional<EnvironmentRank> rank_from_environment(
    const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  EnvironmentRank env;
  std::string rank = get("RANK"), world = get("WORLD_SIZE"), local = get("LOCAL_RANK");
  env.source = "torchrun";
  if (rank.empty() && !get("SLURM_PROCID").empty()) {
    rank = get("SLURM_PROCID");
    world = get("SLURM_NTASKS");
    local = get("SLURM_LOCALID");
    env.source = "slurm";
    // Slurm sets these for every task, data-parallel or not: only with MASTER_ADDR exported
    // (what a data-parallel job script does) are its tasks ranks of one job.
    if (get("MASTER_ADDR").empty()) return std::nullopt;
  }
  if (rank.empty()) {
    GPUBENCH_CHECK(world.empty() || world == "1", ConfigError,
                   "WORLD_SIZE={} is set but RANK is not; torchrun sets both (or unset "
                   "WORLD_SIZE)",
                   terminal_safe(world));
    return std::nullopt;
  }
  const std::string rank_name = env.source == "slurm" ? "SLURM_PROCID" : "RANK";
  const std::string world_name = env.source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE";
  GPUBENCH_CHECK(!world.empty(), ConfigError, "{} is set but {} is not", rank_name, world_name);
  env.world_size = parse_int(world, world_name, 1, 65536);
  env.rank = parse_int(rank, rank_name, 0, 65535);
  GPUBENCH_CHECK(env.rank < env.world_size, ConfigError,
                 "{}={} is outside the world of {}={} (ranks are 0 to {})", rank_name, env.rank,
                 world_name, env.world_size, env.world_size - 1);
  env.local_rank = local.empty() ? 0 : parse_int(local, "LOCAL_RANK", 0, 65535);
  env.master_addr = get("MASTER_ADDR");
  const std::string port = get("MASTER_PORT");
  // One rank and nowhere to meet: a plain run (RANK=0 WORLD_SIZE=1 left in the environment).
  if (env.world_size == 1 && env.master_addr.empty()) return std::nullopt;
  GPUBENCH_CHECK(!env.master_addr.empty(), ConfigError,
                 "{}={} of {}: MASTER_ADDR is not set (the host of rank 0, where the ranks meet)",
                 rank_name, env.rank, env.world_size);
  env.master_port = port.empty() ? 29500 : parse_int(port, "MASTER_PORT", 1, 65535);
  env.agent_store = get("TORCHELASTIC_USE_AGENT_STORE") == "True";
  return env;
}

std::vector<int> parse_gpu_list(const std::string& value, int device_count) {
  std::vector<int> gpus;
  if (value == "all") {
    GPUBENCH_CHECK(device_count > 0, DeviceError,
                   "--gpus all: no CUDA device is visible (see 'gpubench info')");
    for (int i = 0; i < device_count; ++i) gpus.push_back(i);
    return gpus;
  }
  std::set<int> seen;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = value.find(',', start);
    const std::string item =
        value.substr(start, comma == std::string::npos ? comma : comma - start);
    GPUBENCH_CHECK(!item.empty(), ConfigError,
                   "--gpus: expected indices like 0,1,2,3 or 'all', got '{}' (an empty entry)",
                   terminal_safe(value));
    const int gpu = parse_int(item, "--gpus", 0, 4096);
    GPUBENCH_CHECK(seen.insert(gpu).second, ConfigError,
                   "--gpus: GPU {} is named twice in '{}'; each GPU runs one rank", gpu,
                   terminal_safe(value));
    gpus.push_back(gpu);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // The whole list is well formed; now whether its GPUs are there.
  for (int gpu : gpus) {
    GPUBENCH_CHECK(gpu < device_count, DeviceError,
                   "--gpus: GPU {} does not exist; {} CUDA device{} visible (see 'gpubench info')",
                   gpu,
                   device_count == 0 ? std::string("no") : fmt::format("only {}", device_count),
                   device_count == 1 ? " is" : "s are");
  }
  return gpus;
}

Json RankSpec::to_json() const {
  return {{"rank", rank},
          {"world_size", world_size},
          {"backend", backend},
          {"master_addr", master_addr},
          {"master_port", master_port},
          {"prefix", prefix},
          {"timeout_s", timeout_s},
          {"devices", devices},
          {"interconnect", interconnect}};
}

RankSpec RankSpec::from_json(const Json& json) {
  RankSpec s;
  s.rank = json.at("rank").get<int>();
  s.world_size = json.at("world_size").get<int>();
  s.backend = json.at("backend").get<std::string>();
  s.master_addr = json.at("master_addr").get<std::string>();
  s.master_port = json.at("master_port").get<int>();
  s.prefix = json.value("prefix", std::string());
  s.timeout_s = json.value("timeout_s", 300.0);
  s.devices = json.value("devices", std::vector<std::string>());
  s.interconnect = json.value("interconnect", std::string("unknown"));
  return s;
}

Json DataParallelPlan::to_json() const {
  Json out = {{"world_size", world_size},
              {"backend", backend},
              {"devices", devices},
              {"rendezvous_timeout_s", rendezvous_timeout_s}};
  if (environment) {
    out["environment"] = {{"rank", environment->rank},
                          {"world_size", environment->world_size},
                          {"local_rank", environment->local_rank},
                          {"master_addr", environment->master_addr},
                          {"master_port", environment->master_port},
                          {"source", environment->source},
                          {"agent_store", environment->agent_store}};
  }
  return out;
}

DataParallelPlan DataParallelPlan::from_json(const Json& json) {
  DataParallelPlan p;
  p.world_size = json.at("world_size").get<int>();
  p.backend = json.at("backend").get<std::string>();
  p.devices = json.value("devices", std::vector<std::string>());
  p.rendezvous_timeout_s = json.value("rendezvous_timeout_s", 300.0);
  if (json.contains("environment")) {
    const Json& e = json["environment"];
    EnvironmentRank env;
    env.rank = e.at("rank").get<int>();
    env.world_size = e.at("world_size").get<int>();
    env.local_rank = e.value("local_rank", 0);
    env.master_addr = e.at("master_addr").get<std::string>();
    env.master_port = e.at("master_port").get<int>();
    env.source = e.value("source", std::string("torchrun"));
    env.agent_store = e.value("agent_store", false);
    p.environment = env;
  }
  return p;
}

void inject_fault_if_asked(int rank) {
  const char* fault = env::get(env::Switch::kFaultRank);
  if (!fault || !*fault) return;
  const std::string value = fault;
  const auto colon = value.find(':');
  if (colon == std::string::npos || value.substr(0, colon) != std::to_string(rank)) return;
  const std::string what = value.substr(colon + 1);
  if (what == "crash") {
    std::fprintf(stderr, "gpubench: GPUBENCH_FAULT_RANK: rank %d kills itself\n", rank);
    raise(SIGKILL);
  } else if (what == "hang") {
    std::fprintf(stderr, "gpubench: GPUBENCH_FAULT_RANK: rank %d stops answering\n", rank);
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void delay_if_asked(int rank) {
  // Read once: this runs at every update.
  static const int delay_ms = [rank] {
    const char* delay = env::get(env::Switch::kTestRankDelay);
    if (!delay || !*delay) return 0;
    const std::string value = delay;
    const auto colon = value.find(':');
    if (colon == std::string::npos || value.substr(0, colon) != std::to_string(rank)) return 0;
    return parse_int(value.substr(colon + 1), "GPUBENCH_TEST_RANK_DELAY_MS", 0, 600000);
  }();
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
}

}  // namespace gpubench::distributed
