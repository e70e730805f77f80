#include "gpubench/base/env.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern char** environ;  // POSIX: this process's variables

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
      {Switch::kTestRankDelay, "GPUBENCH_TEST_RANK_DELAY_MS",
       "R:MS: data-parallel rank R sleeps MS milliseconds at every update (the tests' hook for a "
       "slow rank)",
       true, "src/distributed/environment.cpp"},
      {Switch::kCacheDir, "GPUBENCH_CACHE_DIR",
       "the folder of the cache of search answers (before $XDG_CACHE_HOME/gpubench and "
       "~/.cache/gpubench)",
       false, "src/run/search_cache.cpp"},
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

const std::vector<PlatformVariable>& platform_variables() {
  static const std::vector<PlatformVariable> table = {
      {"NVIDIA_TF32_OVERRIDE", true, "0 turns TF32 off in every CUDA library, whatever the app asks"},
      {"PYTORCH_CUDA_ALLOC_CONF", true, "the caching allocator's options (the max batch)"},
      {"PYTORCH_ALLOC_CONF", true, "the caching allocator's options (newer PyTorch's name)"},
      {"PYTORCH_NO_CUDA_MEMORY_CACHING", true, "1 turns the caching allocator off"},
      {"CUBLAS_WORKSPACE_CONFIG", true, "cuBLAS's workspaces (deterministic GEMMs)"},
      {"CUBLASLT_WORKSPACE_SIZE", true, "cuBLASLt's workspace size"},
      {"CUDNN_CONV_WSCAP_DBG", true, "caps cuDNN's convolution workspaces"},
      {"CUDA_LAUNCH_BLOCKING", true, "1 makes every kernel launch wait for the kernel"},
      {"CUDA_DEVICE_MAX_CONNECTIONS", true, "how many hardware queues the streams share"},
      {"TORCH_CUDNN_V8_API_DISABLED", true, "1 goes back to cuDNN's older API"},
      {"TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT", true, "how many cuDNN execution plans are kept"},
      {"TORCH_BLAS_PREFER_CUBLASLT", true, "GEMMs through cuBLASLt"},
      {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", true, "1 allows TF32 in fp32 GEMMs"},
      {"CUDA_VISIBLE_DEVICES", false, "which GPUs the process sees"},
      {"CUDA_MODULE_LOADING", false, "LAZY or EAGER loading of kernels"},
      {"OMP_NUM_THREADS", false, "CPU threads of OpenMP (the CPU runs)"},
      {"MKL_NUM_THREADS", false, "CPU threads of MKL"},
      {"OPENBLAS_NUM_THREADS", false, "CPU threads of OpenBLAS"},
      {"NCCL_", false, "NCCL's communication settings (data-parallel runs)"},
      {"TORCH_NCCL_", false, "PyTorch's settings of its NCCL process group"},
  };
  return table;
}

namespace {

bool starts_with(const char* text, const char* prefix) {
  return std::strncmp(text, prefix, std::strlen(prefix)) == 0;
}

/// The platform variable `name` is, or null.
const PlatformVariable* platform_variable(const std::string& name) {
  for (const PlatformVariable& v : platform_variables()) {
    const std::size_t n = std::strlen(v.name);
    const bool prefix = n > 0 && v.name[n - 1] == '_';
    if (prefix ? starts_with(name.c_str(), v.name) : name == v.name) return &v;
  }
  return nullptr;
}

}  // namespace

Json select_variables(const char* const* entries) {
  Json out = Json::object();
  for (const char* const* entry = entries; entry && *entry; ++entry) {
    const std::string text = *entry;
    const auto eq = text.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = text.substr(0, eq);
    if (starts_with(name.c_str(), "GPUBENCH_") || platform_variable(name)) {
      out[name] = text.substr(eq + 1);
    }
  }
  return out;
}

const Json& recorded_variables() {
  static const Json variables = select_variables(environ);
  return variables;
}

std::vector<std::string> modifying_variables(const Json& variables) {
  std::vector<std::string> names;
  if (!variables.is_object()) return names;
  for (const auto& [name, value] : variables.items()) {
    if (value.is_string() && value.get<std::string>().empty()) continue;  // set to nothing
    bool modifies = false;
    for (const SwitchInfo& row : switches()) {
      if (name == row.name) modifies = row.changes_computation;
    }
    if (const PlatformVariable* v = platform_variable(name); v && v->changes_computation) {
      modifies = true;
      if (name == "PYTORCH_CUDA_ALLOC_CONF" || name == "PYTORCH_ALLOC_CONF") {
        modifies = value.is_string() &&
                   !allocator_options_without(value.get<std::string>(), "expandable_segments")
                        .empty();
      }
    }
    if (modifies) names.push_back(name);
  }
  return names;
}

std::vector<std::string> allocator_options_without(const std::string& conf,
                                                   const std::string& key) {
  std::vector<std::string> kept;
  std::size_t start = 0;
  while (start <= conf.size()) {
    std::size_t end = conf.find(',', start);
    if (end == std::string::npos) end = conf.size();
    const std::string pair = conf.substr(start, end - start);
    const auto first = pair.find_first_not_of(" \t");
    if (first != std::string::npos) {
      const std::string trimmed = pair.substr(first, pair.find_last_not_of(" \t") - first + 1);
      if (trimmed.substr(0, trimmed.find(':')) != key) kept.push_back(trimmed);
    }
    start = end + 1;
  }
  return kept;
}

}  // namespace gpubench::env
