// Data-parallel training on PyTorch's distributed engine (c10d): one worker process per rank, a
// process group over NCCL (GPUs) or Gloo (the CPU), and a bucketed gradient all-reduce that
// overlaps the backward pass as DistributedDataParallel's reducer does (docs/ARCHITECTURE.md,
// "Data-parallel training"). src/distributed/distributed.cpp is the only file that includes c10d.
//
// Two ways to get ranks:
// - one host, `run --gpus 0,1,2,3` or `--device cpu --world-size N`: the parent starts a
//   TCPStore on the loopback and one worker per rank for each timed run (DataParallelLauncher);
// - many hosts, torchrun or srun: each `gpubench run` is one rank (RANK, WORLD_SIZE,
//   LOCAL_RANK, MASTER_ADDR, MASTER_PORT); rank 0's holds the TCPStore, every rank's workers
//   meet there.
#pragma once

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/run/runner.h"
#include "gpubench/train/runtime.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// The ranks never all met: a rendezvous past --rendezvous-timeout, or a master that cannot be
/// reached. Exit code 3 (no usable device: the job's devices are the other ranks' too).
class RendezvousError : public Error {
 public:
  explicit RendezvousError(const std::string& message) : Error(message, kExitNoDevice) {}
};

namespace distributed {

/// Whether this gpubench was compiled with libtorch's ProcessGroupNCCL / ProcessGroupGloo.
bool nccl_compiled();
bool gloo_compiled();
/// One line for `gpubench info` and for errors: "NCCL: yes; Gloo: yes", with why one is absent.
std::string backend_support();

/// What the environment says of this process's place in a job launched by torchrun or srun.
struct EnvironmentRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string source;  ///< "torchrun" (RANK, WORLD_SIZE, ...) or "slurm" (SLURM_PROCID, ...)
};

/// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun's, which Slurm users export
/// too); else SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID when MASTER_ADDR is exported (Slurm sets
/// its variables for every task; MASTER_ADDR says the tasks are ranks of one job). None when
/// neither applies. ConfigError for a malformed or inconsistent value (a rank outside the world, a port
/// that is no port, RANK without MASTER_ADDR). `getenv` is replaceable for tests.
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

/// A TCPStore server on the loopback at a free port, where one host's ranks meet (the
/// launcher holds one; tests too).
class StoreServer {
 public:
  explicit StoreServer(double timeout_s = 300);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A process group as the gradient sync uses it. The c10d one comes from connect(); tests may
/// give a fake.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;
  /// Starts an in-place sum of `tensor` over the ranks; the returned function waits for it (on
  /// CUDA it makes the current stream wait, as DDP does; on the CPU it blocks).
  virtual std::function<void()> allreduce_sum(torch::Tensor tensor) = 0;
  /// Every rank's `value` under `key`, in rank order (through the store; waits for all).
  virtual std::vector<std::string> exchange(const std::string& key, const std::string& value) = 0;
};

/// Joins the process group `spec` describes: a TCPStore client at master_addr:master_port under
/// spec.prefix, then ProcessGroupNCCL or ProcessGroupGloo. RendezvousError when the others do
/// not come within spec.timeout_s; JobError when the backend is not compiled in.
std::shared_ptr<Communicator> connect(const RankSpec& spec, const torch::Device& device);

/// DDP's reducer, rebuilt on the runtime's GradientSync seam: each network's parameters in
/// buckets of up to `bucket_bytes` (25 MiB, DDP's bucket_cap_mb) in reverse registration order
/// (the order backward produces gradients); a hook on each parameter's gradient accumulator
/// copies its gradient into its bucket and, when the bucket's last one arrived, starts the
/// bucket's all-reduce while backward goes on; synchronize() (between backward and the update)
/// starts what backward did not complete, waits for every bucket and writes the averages back.
class BucketedGradientSync final : public train::GradientSync {
 public:
  static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

  explicit BucketedGradientSync(std::shared_ptr<Communicator> communicator,
                                int64_t bucket_bytes = kDefaultBucketBytes);
  ~BucketedGradientSync() override;

  void attach(const std::string& updater, const std::vector<torch::Tensor>& parameters) override;
  void synchronize(const std::string& updater, std::vector<torch::Tensor>& gradients) override;
  std::string name() const override;
  std::string capture_problem() const override;

  /// For the record: buckets per network, their sizes, all-reduces started during backward
  /// and at the update, updates synchronized.
  Json info() const;
  /// Updates synchronize() has made, over all networks.
  int64_t updates() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// After a rank's timed phase: every rank's result through the store, and the record's
/// `data_parallel` field (world size, backend, per-rank step times, interconnect, the gradient
/// sync's buckets). The throughput becomes the sum over ranks (weak scaling); a rank that did
/// not train makes the job fail with its message.
void finish_timed_phase(JobRecord& record, Communicator& communicator, const RankSpec& spec,
                        const BucketedGradientSync& sync);

/// The interconnect between `gpus` as NVML sees it: "NVLink" when each has an active NVLink,
/// "PCIe" when none has, "unknown" without NVML.
std::string interconnect_of(const std::vector<int>& gpus);

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

/// Runs the search on one GPU (the first rank's, once) and every timed run on all ranks: on one
/// host a worker per rank, started together and stopped together (one that crashes or hangs
/// fails the job on all within the timeout); under torchrun/srun this process's rank alone.
class DataParallelLauncher final : public PhaseLauncher {
 public:
  /// Holds the store of the suite (rank 0, or one host) or connects to it; waits up to the
  /// rendezvous timeout for every rank (RendezvousError past it).
  DataParallelLauncher(DataParallelPlan plan, std::string executable = "");
  ~DataParallelLauncher() override;
  JobRecord launch(const JobSpec& spec, double timeout_s) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Test hook: GPUBENCH_FAULT_RANK=R:crash|hang makes rank R's worker kill itself or stop
/// answering after its first timed-phase step (how the failure tests make a rank fail).
void inject_fault_if_asked(int rank);

}  // namespace distributed
}  // namespace gpubench
