// Data-parallel training's communication on PyTorch's distributed engine (c10d): the TCPStore
// where ranks meet, a process group over NCCL (GPUs) or Gloo (the CPU), and a bucketed gradient
// all-reduce that overlaps the backward pass as DistributedDataParallel's reducer does
// (docs/internals.md, "Data-parallel training"). src/distributed/comm.cpp is the only file
// that includes c10d.
#pragma once

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/distributed/environment.h"
#include "gpubench/records/window_fields.h"
#include "gpubench/train/runtime.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
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

/// A TCPStore, where ranks meet: the server, or a client of one.
class Store {
 public:
  /// The server at `addr`:`port` (`is_server`; port 0: a free one) or a client of it.
  /// RendezvousError when it cannot be opened or reached within `timeout_s`.
  Store(const std::string& addr, int port, bool is_server, double timeout_s);
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int port() const;
  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);
  /// Whether `key` is set, without waiting.
  bool check(const std::string& key);
  /// Waits up to `timeout_s` for `keys`; RendezvousError naming `what` past it.
  void wait(const std::vector<std::string>& keys, double timeout_s, const std::string& what);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A TCPStore server on the loopback at a free port, where one host's ranks meet (the
/// launcher holds one; tests too).
class StoreServer final : public Store {
 public:
  explicit StoreServer(double timeout_s = 300);
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
  /// Rank 0's `value` under `key`, on every rank (rank 0 sets it, the others wait for it). Keys
  /// are used once.
  virtual std::string from_rank_zero(const std::string& key, const std::string& value) {
    return exchange(key, value).front();
  }
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
  /// From this call on, a backward starts all-reduces only for `updater`'s buckets; a gradient
  /// that reaches another network's parameter is reduced at that network's own backward or
  /// update (or, when that network's bucket is already in flight, again at its update). Until
  /// it is first called, every network's buckets start in any backward.
  void backward_for(const std::string& updater) override;
  std::string name() const override;
  std::string capture_problem() const override;

  /// For the record (data_parallel.gradient_sync): buckets per network, their sizes,
  /// all-reduces started during backward and at the update, those repeated, gradients left from
  /// another network's backward, updates synchronized.
  GradientSyncRecord info() const;
  /// Updates synchronize() has made, over all networks.
  int64_t updates() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace distributed
}  // namespace gpubench
