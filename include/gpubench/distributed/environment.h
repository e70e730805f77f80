// Where a data-parallel run's ranks come from, and what each is told: the environment of a job
// that torchrun or srun launched (one `gpubench run` per rank), `--gpus` on one host, a rank's
// place as its worker's spec carries it (RankSpec) and a suite's plan of ranks
// (DataParallelPlan), with their JSON. No c10d here: see distributed/comm.h.
#pragma once

#include "gpubench/base/json.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpubench::distributed {

/// What the environment says of this process's place in a job launched by torchrun or srun.
struct EnvironmentRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string source;  ///< "torchrun" (RANK, WORLD_SIZE, ...) or "slurm" (SLURM_PROCID, ...)
  /// TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves the store at MASTER_PORT, so
  /// rank 0 joins it as a client instead of opening its own.
  bool agent_store = false;
};

/// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun's, which Slurm users export
/// too); else SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID when MASTER_ADDR is exported (Slurm sets
/// its variables for every task; MASTER_ADDR says the tasks are ranks of one job). None when
/// neither applies. ConfigError for a malformed or inconsistent value (a rank outside the world, a
/// port that is no port, RANK without MASTER_ADDR). `getenv` is replaceable for tests.
std::optional<EnvironmentRank> rank_from_environment(
    const std::function<const char*(const char*)>& getenv = nullptr);

/// `--gpus 0,1,3` or `--gpus all` against `device_count` visible CUDA devices. ConfigError for
/// an empty entry, a non-number or a GPU named twice; DeviceError for a GPU that does not exist.
std::vector<int> parse_gpu_list(const std::string& text, int device_count);

/// One worker's place in a data-parallel timed run (JobSpec::distributed).
struct RankSpec {
  int rank = 0;
  int world_size = 1;
  std::string backend = "gloo";  ///< "nccl" | "gloo"
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  /// Keys of this run's rendezvous on the shared store ("run-3/"): every timed run meets anew.
  std::string prefix;
  double timeout_s = 300;  ///< rendezvous and every collective
  /// Every rank's device for the record ("cuda:0", ...), in rank order; may be empty (hosts).
  std::vector<std::string> devices;
  std::string interconnect = "unknown";  ///< "NVLink", "PCIe", "loopback (CPU)", "unknown"

  Json to_json() const;
  static RankSpec from_json(const Json& json);
};

/// How a suite's timed runs are spread over ranks (SuitePlan::data_parallel).
struct DataParallelPlan {
  int world_size = 1;
  std::string backend = "gloo";
  std::vector<std::string> devices;  ///< one host: each local rank's device, in rank order
  double rendezvous_timeout_s = 300;
  /// Many hosts (torchrun/srun): this process's rank; none on one host.
  std::optional<EnvironmentRank> environment;

  Json to_json() const;
  static DataParallelPlan from_json(const Json& json);
};

/// Test hook: GPUBENCH_FAULT_RANK=R:crash|hang makes rank R's worker kill itself or stop
/// answering at its second update (BucketedGradientSync, comm.cpp: in the timed run's warm-up,
/// not mid-window; how the failure tests make a rank fail).
void inject_fault_if_asked(int rank);

/// Test hook: GPUBENCH_TEST_RANK_DELAY_MS=R:MS makes rank R sleep MS milliseconds at every
/// update (how the agreement tests make one rank slower). Test-only; not for measurements.
void delay_if_asked(int rank);

}  // namespace gpubench::distributed
