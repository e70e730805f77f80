// A developer's window into a step: with GPUBENCH_PROFILE_TRACE=PATH set, the timed phase
// profiles a few extra steps after its warm-up with libtorch's Kineto profiler (CPU operators
// and CUDA kernels) and saves a Chrome trace to PATH, before the timed window (so the numbers
// of the record are not touched). scripts/dev/gpu/trace_summary.py turns the trace into a table of
// where the device time goes. CUDA builds only: the CPU libtorch has no CUDA activity to trace.
#pragma once

#include <functional>
#include <string>

namespace gpubench {

/// The profiling request from the environment: GPUBENCH_PROFILE_TRACE (the trace's path) and
/// GPUBENCH_PROFILE_STEPS (how many steps, default 2). Empty path: no profiling.
struct ProfileRequest {
  std::string trace_path;
  int steps = 2;
  static ProfileRequest from_environment();
};

/// Runs `steps` calls of `run_step` under the Kineto profiler, synchronizes, and saves the trace
/// to `trace_path`. Returns "" on success or why nothing was written (a CPU-only build, a
/// profiler error); never throws, since profiling must not fail the job it watches.
std::string profile_steps(const ProfileRequest& request, const std::function<void()>& run_step,
                          const std::function<void()>& synchronize);

}  // namespace gpubench
