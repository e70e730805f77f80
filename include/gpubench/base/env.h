// The environment switches: every GPUBENCH_* variable that gpubench itself reads, in one table
// with what it does, whether it changes the computation, and who reads it (docs/environment.md
// says the same for users). Reads go through env::get, so that a new switch is a row here and
// its use; the build's and the test scripts' own variables (GPUBENCH_JOBS, ...) are not here.
#pragma once

#include <string>
#include <vector>

namespace gpubench::env {

/// One GPUBENCH_* variable.
enum class Switch {
  kQuiet,              ///< GPUBENCH_QUIET
  kHeartbeatSeconds,   ///< GPUBENCH_HEARTBEAT_S
  kProgress,           ///< GPUBENCH_PROGRESS
  kJournalDir,         ///< GPUBENCH_JOURNAL_DIR
  kProfileTrace,       ///< GPUBENCH_PROFILE_TRACE
  kProfileSteps,       ///< GPUBENCH_PROFILE_STEPS
  kTraceOverflow,      ///< GPUBENCH_TRACE_OVERFLOW
  kDetectAnomaly,      ///< GPUBENCH_DETECT_ANOMALY
  kTraceActivations,   ///< GPUBENCH_TRACE_ACTIVATIONS
  kConvSplitElements,  ///< GPUBENCH_CONV_SPLIT_ELEMENTS
  kFaultRank,          ///< GPUBENCH_FAULT_RANK
};

/// A row of the table.
struct SwitchInfo {
  Switch id;
  const char* name;    ///< "GPUBENCH_QUIET"
  const char* effect;  ///< what setting it does, and its values
  /// A diagnostic that changes what a step computes or how long it takes (anomaly mode, host
  /// reads of every gradient, another convolution split, an injected fault): never set it for a
  /// result that is to be compared.
  bool changes_computation;
  const char* read_by;  ///< the file that reads it
};

/// Every switch, in the order of Switch.
const std::vector<SwitchInfo>& switches();

/// The row of `id`.
const SwitchInfo& info(Switch id);

/// The variable's value, as std::getenv gives it: null when it is not set.
const char* get(Switch id);

/// Sets the variable for this process and the workers it starts (`run --progress` tells them
/// where their progress goes).
void set(Switch id, const std::string& value);

}  // namespace gpubench::env
