#include "gpubench/base/env.h"

#include <cstdlib>
#include <stdexcept>

namespace gpubench::env {

const std::vector<SwitchInfo>& switches() {
  static const std::vector<SwitchInfo> table = {
      {Switch::kQuiet, "GPUBENCH_QUIET",
       "1: workers print no progress lines (set for a data-parallel run's ranks but rank 0)",
       false, "src/run/worker_progress.cpp (set by src/distributed/launcher.cpp)"},
      {Switch::kHeartbeatSeconds, "GPUBENCH_HEARTBEAT_S",
       "seconds of silence after which a worker that prints plain lines says what it is doing "
       "(default 10); on a terminal its status line is redrawn every second, or twice in this "
       "many seconds when that is sooner",
       false, "src/run/worker_progress.cpp"},
      {Switch::kProgress, "GPUBENCH_PROGRESS",
       "terminal, plain or none: how workers print their progress (set by run --progress for "
       "its workers; unset: a status line when stderr is a terminal, else plain lines)",
       false, "src/run/worker_progress.cpp (set by src/cli/cmd_run.cpp)"},
      {Switch::kJournalDir, "GPUBENCH_JOURNAL_DIR",
       "the folder of the journal a run without --journal creates (before $XDG_STATE_HOME)", false,
       "src/cli/cmd_run.cpp"},
      {Switch::kProfileTrace, "GPUBENCH_PROFILE_TRACE",
       "PATH: profile extra steps after the warm-up, outside the timed window, into a Chrome "
       "trace (CUDA builds)",
       true, "src/device/profile.cpp"},
      {Switch::kProfileSteps, "GPUBENCH_PROFILE_STEPS",
       "how many steps GPUBENCH_PROFILE_TRACE profiles (default 2)", true,
       "src/device/profile.cpp"},
      {Switch::kTraceOverflow, "GPUBENCH_TRACE_OVERFLOW",
       "1: before each fp16 unscale, print which gradients hold inf or NaN (reads every "
       "gradient on the host)",
       true, "src/train/update.cpp"},
      {Switch::kDetectAnomaly, "GPUBENCH_DETECT_ANOMALY",
       "K: from the K-th backward of the process on, backward runs under autograd's anomaly "
       "mode, so the first node that makes a NaN throws, naming itself",
       true, "src/train/runtime.cpp"},
      {Switch::kTraceActivations, "GPUBENCH_TRACE_ACTIVATIONS",
       "1 or N: stylegan prints its activations' statistics for the first 6 (or N) step "
       "iterations",
       true, "models/activation_trace.cpp"},
      {Switch::kConvSplitElements, "GPUBENCH_CONV_SPLIT_ELEMENTS",
       "N: the operand size in elements past which gradfix_conv2d splits a convolution's batch "
       "(default 2^31 - 1; 0 never splits)",
       true, "models/conv_gradfix.cpp"},
      {Switch::kFaultRank, "GPUBENCH_FAULT_RANK",
       "R:crash or R:hang: data-parallel rank R fails at its second update (the tests' hook)", true,
       "src/distributed/environment.cpp"},
  };
  return table;
}

const SwitchInfo& info(Switch id) {
  for (const SwitchInfo& row : switches()) {
    if (row.id == id) return row;
  }
  throw std::logic_error("env::info: a Switch without a row in env::switches()");
}

const char* get(Switch id) { return std::getenv(info(id).name); }

void set(Switch id, const std::string& value) { setenv(info(id).name, value.c_str(), 1); }

}  // namespace gpubench::env
