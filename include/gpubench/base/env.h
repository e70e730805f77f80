// The environment switches: every GPUBENCH_* variable that gpubench itself reads, in one table
// with what it does, whether it changes the computation, and who reads it (docs/environment.md
// says the same for users). Reads go through env::get, so that a new switch is a row here and
// its use; the build's and the test scripts' own variables (GPUBENCH_JOBS, ...) are not here.
#pragma once

#include "gpubench/base/json.h"

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
  kTestRankDelay,      ///< GPUBENCH_TEST_RANK_DELAY_MS
  kCacheDir,           ///< GPUBENCH_CACHE_DIR
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

/// A variable of the platform (CUDA, cuBLAS, cuDNN, PyTorch, NCCL, OpenMP) that changes what a
/// step computes, how fast it runs or how memory is allocated. Each one that is set is written
/// into every job's record (environment.variables), so two records that differ by one can be
/// told apart.
struct PlatformVariable {
  const char* name;  ///< "NVIDIA_TF32_OVERRIDE", or a prefix ending in '_' ("NCCL_")
  /// Set, it makes the job a modified one (environment.modified_by; no 2020 score): it changes
  /// the math (TF32 off, deterministic workspaces), serializes launches, or changes the
  /// allocator and so the max batch. False for those that only tune or select (threads,
  /// communication, which devices are visible): recorded, not marked.
  bool changes_computation;
  const char* effect;  ///< what it does, in a few words
};

/// Every platform variable gpubench records, prefixes last.
const std::vector<PlatformVariable>& platform_variables();

/// Every GPUBENCH_* variable and every platform variable set in this process, {name: value},
/// as this process saw them at its first call (workers call it before they add their own
/// allocator option), so the record holds what the user set.
const Json& recorded_variables();

/// recorded_variables()'s choice among `entries` ("NAME=value" strings, null-terminated, as
/// environ holds them).
Json select_variables(const char* const* entries);

/// The names in `variables` (recorded_variables()'s shape) that make a job modified: the
/// switches with changes_computation and the platform variables with it. An allocator
/// configuration counts once the `expandable_segments` option, which gpubench sets itself from
/// run.expandable_segments and records in the job's runtime, is taken out of it.
std::vector<std::string> modifying_variables(const Json& variables);

/// The options of a caching-allocator configuration (PYTORCH_CUDA_ALLOC_CONF's "key:value" pairs
/// separated by commas), each trimmed, in order, without empty ones and without those whose key
/// is `key`. The one reading of that format: the records' modified mark and the worker's own
/// expandable_segments option (device.h's allocator_options_with) both use it.
std::vector<std::string> allocator_options_without(const std::string& conf,
                                                   const std::string& key);

}  // namespace gpubench::env
