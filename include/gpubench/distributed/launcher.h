// The parent side of a data-parallel run: how a suite's phases are spread over ranks. Two ways
// to get ranks:
// - one host, `run --gpus 0,1,2,3` or `--device cpu --world-size N`: the parent starts a
//   TCPStore on the loopback and one worker per rank for each timed run;
// - many hosts, torchrun or srun: each `gpubench run` is one rank (RANK, WORLD_SIZE,
//   LOCAL_RANK, MASTER_ADDR, MASTER_PORT); rank 0's holds the TCPStore, every rank's workers
//   meet there.
// Each worker is a `gpubench worker` of the one worker protocol (run/launcher.h).
#pragma once

#include "gpubench/distributed/environment.h"
#include "gpubench/records/result.h"
#include "gpubench/run/job_spec.h"
#include "gpubench/run/launcher.h"

#include <memory>
#include <string>
#include <vector>

namespace gpubench::distributed {

/// The interconnect between `gpus` as NVML sees it: "NVLink" when each has an active NVLink,
/// "PCIe" when none has, "unknown" without NVML.
std::string interconnect_of(const std::vector<int>& gpus);

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

}  // namespace gpubench::distributed
