// The worker: one phase in this process (run_phase), as `gpubench worker` runs it for the parent
// (run_worker). The device is set up first (the allocator's options, a memory cap), then the
// search's probes, a timed run (timed_phase.cpp) or a memory tier's confirm.
#include "gpubench/run/worker.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/device/device.h"
#include "gpubench/device/nvml.h"
#include "gpubench/measure/timing.h"
#include "gpubench/run/search_cache.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/registry.h"
#include "src/run/worker_progress.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

namespace gpubench {

namespace {

using Clock = std::chrono::steady_clock;

/// The first line of an error message, without libtorch's C++ stack trace.
std::string short_message(const std::string& what) {
  std::string line = what.substr(0, what.find('\n'));
  const auto trace = line.find(" (Triggered internally at");
  if (trace != std::string::npos) line = line.substr(0, trace);
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

JobRecord base_record(const ModelConfig& config, const RunSettings& run) {
  JobRecord r;
  r.model = config.name;
  r.family = config.family;
  r.precision = to_string(run.precision);
  r.batch_unit = config.batch_unit;
  r.throughput_unit = config.throughput_unit;
  r.memory_cap_gib = run.memory_cap_gib;
  r.emulated = run.memory_cap_gib.has_value();
  r.config = config.to_json();
  r.created_utc = utc_now();
  return r;
}

/// The workload's `runtime:` section as this run applies it. cuDNN autotuning is on when both the
/// run's switch (run.cudnn_benchmark, on by default) and the workload's are
/// (runtime.cudnn_benchmark: off where its reference trains without it, docs/internals.md
/// "cuDNN autotuning"); the algorithms it tries per convolution are the workload's
/// runtime.cudnn_benchmark_limit where it sets one (a twin of eager PyTorch tries PyTorch's 10),
/// else the run's run.cudnn_benchmark_limit.
RuntimeSettings applied_runtime(const ModelConfig& config, const RunSettings& run) {
  RuntimeSettings r = RuntimeSettings::from_params(config.runtime);
  r.cudnn_benchmark = run.cudnn_benchmark && r.cudnn_benchmark;
  if (r.cudnn_benchmark_limit < 0) r.cudnn_benchmark_limit = run.cudnn_benchmark_limit;
  return r;
}

StepContext make_context(const ModelConfig& config, const RunSettings& run,
                         const torch::Device& device, int64_t batch) {
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.model;
  ctx.optimizer = config.optimizer;
  ctx.batch = batch;
  ctx.precision = run.precision;
  ctx.device = device;
  ctx.seed = run.seed;
  // What the worker applied: the step records it in its runtime info.
  ctx.runtime = applied_runtime(config, run);
  return ctx;
}

/// A failure's message, with the reason where a known limit of this libtorch explains it.
std::string explain_failure(const std::string& message, Precision precision,
                            const torch::Device& device) {
  // libtorch 1.13's CPU autocast runs layer_norm in fp32 and hands bf16 to the next op.
  const bool cpu_bf16 = device.is_cpu() && precision == Precision::kAmpBf16;
  if (cpu_bf16 && !compat::kCpuAutocastLayerNorm &&
      message.find("expected scalar type BFloat16 but found Float") != std::string::npos) {
    return fmt::format(
        "amp-bf16 does not run this model on the CPU with libtorch {}: its CPU autocast mixes "
        "bf16 and fp32 around layer_norm (libtorch 2.1 and later do not); use --precision fp32 "
        "on the CPU, or amp-bf16 on a GPU (libtorch: {})",
        TORCH_VERSION, message);
  }
  return message;
}

}  // namespace

Params probe_model_params(const Architecture& arch, const Params& model, bool search_only) {
  const Json& values = model.json();
  if (search_only || !values.contains("probe_memory_format")) return model;
  const std::string layout = values["probe_memory_format"].get<std::string>();
  if (layout == "same" || !values.contains("memory_format") || values["memory_format"] == layout) {
    return model;
  }
  Json changed = values;
  changed["memory_format"] = layout;
  return Params(arch.model_schema, changed, Where{"probe_memory_format", "model.memory_format"});
}

ProbeOutcome probe_step(const Architecture& arch, const StepContext& ctx, int64_t headroom_bytes) {
  ProbeOutcome outcome;
  const torch::Device& device = ctx.device;
  release_cached_memory(device);
  reset_peak_memory(device);
  const MemoryStats before = memory_stats(device);
  const auto started = Clock::now();
  try {
    // Held through the probe: the batch fits only with this much to spare (search.headroom).
    const torch::Tensor ballast =
        headroom_bytes > 0
            ? torch::empty({headroom_bytes}, torch::TensorOptions(torch::kUInt8).device(device))
            : torch::Tensor();
    auto step = arch.prepare(ctx);
    synchronize(device);
    outcome.prepare_seconds = seconds_since(started);
    // One run() with the optimizer state allocated beforehand, on the batch (or, for token-budget
    // steps, the batches) that may peak highest, peaks as a steady step does; a step that cannot
    // be readied so runs two, the first allocating it.
    const bool one_step = step->prepare_probe();
    outcome.steps = one_step ? 1 : 2;
    const auto steps_started = Clock::now();
    for (int i = 0; i < outcome.steps; ++i) step->run();
    synchronize(device);
    outcome.steps_seconds = seconds_since(steps_started);
    const MemoryStats stats = memory_stats(device);
    outcome.allocator = allocator_counters_between(before, stats);
    outcome.fits = true;
    outcome.peak_bytes = stats.reserved_peak;
    outcome.peak_allocated_bytes = stats.allocated_peak;
    outcome.resident_bytes = stats.allocated_current;
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    outcome.fits = false;
    outcome.error = "out of memory: " + short_message(e.what());
    outcome.allocator = allocator_counters_between(before, memory_stats(device));
    if (outcome.prepare_seconds == 0) outcome.prepare_seconds = seconds_since(started);
    // An out-of-memory error is recoverable unless it left the device broken; the search then
    // goes on in a fresh worker.
    const std::string broken = device_error(device);
    if (!broken.empty()) {
      outcome.worker_unusable = true;
      outcome.error += "; afterwards the device reports: " + broken;
      return outcome;
    }
  }
  train::ModelReuse::park();  // a reused model keeps its weights on the device, nothing more
  release_cached_memory(device);
  return outcome;
}

namespace {

/// Before anything allocates on a CUDA device (the allocator reads its options once): the
/// allocator's options, the device made current, and run.memory_cap_gib's cap, which
/// `cap_record` describes. Returns the memory the phase may fill: what is free once the context
/// exists, within the cap's share for the allocator; 0 on the CPU.
int64_t prepare_device(const JobRecord& record, const ModelConfig& config, const RunSettings& run,
                       const torch::Device& device, std::optional<MemoryCap>& cap_record) {
  if (!device.is_cuda()) return 0;
  configure_allocator(run.expandable_segments);
  set_current_device(device);
  int64_t capacity = device_memory_info(device).first;  // free memory once the context exists
  if (!run.memory_cap_gib) return capacity;
  const auto cap = static_cast<int64_t>(*run.memory_cap_gib * double(int64_t{1} << 30));
  // A cap at or above what is free would not be enforced: the result would be this card's,
  // labelled as a smaller one's.
  GPUBENCH_CHECK(cap < capacity, ConfigError,
                 "memory cap {} GiB: {} has only {:.1f} GiB free; a cap can only emulate "
                 "a smaller card (choose caps below that)",
                 format_number(*run.memory_cap_gib), record.device.name,
                 static_cast<double>(capacity) / double(int64_t{1} << 30));
  // A real card of `cap` bytes also holds the context and the loaded kernels, which the
  // allocator's cap does not see: load them, measure them, and leave the allocator the rest.
  touch_device_libraries(device);
  const int64_t outside = outside_allocator_bytes(device);
  const int64_t allocator_cap = allocator_cap_bytes(cap, outside);
  set_memory_cap(device, allocator_cap);
  capacity = std::min(capacity, allocator_cap);
  cap_record = MemoryCap{cap, outside, allocator_cap, std::nullopt};
  // NVML's count of this process's memory (context and allocator together), to check the
  // reading against; NVML cannot always say (another PID namespace, MIG).
  if (const auto used = nvml_process_memory_bytes(record.device.pci_bus_id, getpid())) {
    cap_record->nvml_process_bytes = *used;
  }
  worker_log(config.name, fmt::format("memory cap {}: {} outside the allocator, which gets {}",
                                      format_bytes(static_cast<double>(cap)),
                                      format_bytes(static_cast<double>(outside)),
                                      format_bytes(static_cast<double>(allocator_cap))));
  return capacity;
}

/// One progress line per search probe: what it found and what its time went to.
void log_probe(const std::string& model, const ProbeRecord& p, int index) {
  std::string timing = fmt::format("{:.1f} s: build {:.1f} s, steps {:.1f} s", p.seconds,
                                   p.prepare_seconds, p.steps_seconds);
  // Allocations that failed and emptied the allocator's cache before a retry: under a cap,
  // what makes a probe slow (docs/search.md, "Hints across memory caps").
  const int64_t retries =
      p.allocator.is_object() ? p.allocator.value("alloc_retries", int64_t{0}) : 0;
  if (retries > 0) timing += fmt::format(", {} allocator retries", retries);
  worker_log(model, p.sticky ? fmt::format("search probe {}: batch {} left the worker unusable "
                                           "({}): {}",
                                           index, p.batch, timing, p.error)
                    : p.fits
                        ? fmt::format("search probe {} ({}): batch {} fits (peak {}, {})", index,
                                      p.phase, p.batch, format_bytes(p.peak_bytes), timing)
                        : fmt::format("search probe {} ({}): batch {} is out of memory ({})", index,
                                      p.phase, p.batch, timing));
}

/// The search's answer in the record: its batch, and a status and message for a search that
/// broke, found nothing that fits, or did not converge.
void record_search(JobRecord& record, SearchRecord search, const ModelConfig& config) {
  record.batch = search.max_batch;
  record.batch_source = "search";
  const bool broken = search.interrupted || search.stop.probe_broke();
  record.status = broken                 ? JobStatus::failed
                  : search.max_batch > 0 ? JobStatus::ok
                                         : JobStatus::no_fit;
  if (broken) {
    record.message = "search: " + search.stop.text;
  } else if (search.max_batch == 0) {
    record.message =
        fmt::format("does not fit at batch {} ({})", config.search.min_batch, search.stop.text);
  } else if (!search.converged) {
    record.message = fmt::format(
        "warning: the search did not converge ({}); batch {} fits but may be below the "
        "largest that does (raise search.max_probes to close the bracket)",
        search.stop.text, search.max_batch);
  }
  record.search = std::move(search);
}

/// The key of this search's answer in the cache of search answers (run/search_cache.h).
Json search_cache_key_of(const JobRecord& record, const JobSpec& spec, const ModelConfig& config,
                         const RunSettings& run) {
  SearchCacheInputs in;
  in.environment = record.environment;
  in.config = config.to_json();
  in.run = run;
  in.search_only = spec.search_only;
  // The search runs in one process on one GPU, also for a data-parallel job.
  in.world_size = spec.distributed.is_null() ? 1 : spec.distributed.value("world_size", 1);
  in.variables = search_cache_variables();
  return search_cache_key(in);
}

/// The search phase: the largest batch that fits in `capacity`, probe by probe (find_max_batch),
/// going on from the probes an earlier worker of the search made; on a GPU, through the cache of
/// search answers unless run --no-cache (cached_search: a cached answer verified by two probes).
void search_phase(JobRecord& record, const JobSpec& spec, const ModelConfig& config,
                  const RunSettings& run, const Architecture& arch, const torch::Device& device,
                  int64_t capacity, const RuntimeSettings& applied) {
  const bool autotuning = applied.cudnn_benchmark;
  // Heuristics unless asked: no autotuning at every new shape, and workspaces picked by
  // shape rather than by what happens to be free (docs/search.md).
  set_cudnn_algorithm_choice(config.search.cudnn_benchmark && autotuning,
                             applied.cudnn_benchmark_limit, run.cudnn_benchmark_empty_cache);
  // A workload may probe in another layout than it trains in (probe_memory_format: cuDNN
  // builds a kernel for each channels-last depthwise convolution at every new shape); the
  // timed run keeps its own and confirms the batch (docs/search.md, "Cheap probes").
  const Params probe_model = probe_model_params(arch, config.model, spec.search_only);
  const bool probe_layout_differs = probe_model.json() != config.model.json();
  if (probe_layout_differs) {
    worker_log(config.name,
               fmt::format("search probes build with memory_format {} (the timed run: {})",
                           probe_model.str("memory_format"), config.model.str("memory_format")));
  }
  // A fresh process at the searched batch lays memory out otherwise than the probe worker
  // did, and needs a little more (docs/search.md, "Headroom"): each probe leaves it free.
  const int64_t headroom_bytes =
      device.is_cuda()
          ? static_cast<int64_t>(config.search.headroom * static_cast<double>(capacity))
          : 0;
  // Numbered from the probes an earlier worker of this search made: the probes so far.
  std::size_t probe_number = spec.search_probes.size();
  auto probe = [&](int64_t batch) {
    Heartbeat::phase(fmt::format("search probe {} at batch {}", ++probe_number, batch));
    try {
      StepContext ctx = make_context(config, run, device, batch);
      ctx.model = probe_model;
      return probe_step(arch, ctx, headroom_bytes);
    } catch (const std::exception& e) {
      // Not out of memory: the worker may be broken (a sticky CUDA error) or the model is.
      // Either way this worker stops; a fresh one probes the batch again once.
      ProbeOutcome o;
      o.worker_unusable = true;
      o.error = short_message(e.what());
      return o;
    }
  };
  SearchOptions options;
  options.hint = spec.search_hint;
  options.prior = spec.search_probes;
  options.worker = spec.search_worker;
  options.headroom_bytes = headroom_bytes;
  // configure_allocator() set the option before the first allocation, where this libtorch
  // knows it.
  options.expandable_allocator =
      device.is_cuda() && run.expandable_segments && compat::kHasExpandableSegments;
  options.on_probe = [&](const ProbeRecord& p, int index) { log_probe(config.name, p, index); };
  options.on_note = [&](const std::string& text) { worker_log(config.name, text); };
  std::optional<SearchCache> cache;
  SearchCacheUse use;
  if (device.is_cuda() && run.search_cache) {
    const std::string folder = default_search_cache_folder();
    if (folder.empty()) {
      worker_log(config.name,
                 "warning: the search cache has no folder (none of GPUBENCH_CACHE_DIR, "
                 "XDG_CACHE_HOME and HOME is set); searching without it (set "
                 "GPUBENCH_CACHE_DIR, or run with --no-cache)");
    } else {
      cache.emplace(folder);
      use.cache = &*cache;
      use.key = search_cache_key_of(record, spec, config, run);
      // The first worker looks the answer up; one that goes on from its probes only stores.
      use.read = spec.search_worker == 0 && spec.search_probes.empty();
    }
  }
  // Probes after the first reuse its model, restored to its initial weights (a fresh
  // build's seconds of host-side initialization; train/model_reuse.h).
  SearchRecord search = [&] {
    const train::ModelReuse reuse;
    return cached_search(config.search, capacity, probe, options, use);
  }();
  search.headroom_bytes = headroom_bytes;
  Heartbeat::phase("");
  search.cudnn_benchmark = config.search.cudnn_benchmark && autotuning;
  if (probe_layout_differs) {
    search.probe_overrides = {{"memory_format", probe_model.str("memory_format")}};
  }
  record_search(record, std::move(search), config);
}

/// A phase at the spec's batch: a memory tier's confirm, or a timed run (on one rank of a
/// data-parallel run, through `join_rank`), and then the timed run's compute utilisation.
void batch_phase(JobRecord& record, const JobSpec& spec, const ModelConfig& config,
                 const RunSettings& run, const Architecture& arch, const torch::Device& device,
                 const RankJoiner& join_rank) {
  GPUBENCH_ASSERT(spec.batch > 0);
  record.batch = spec.batch;
  StepContext ctx = make_context(config, run, device, spec.batch);
  if (spec.phase == WorkerPhase::confirm) {
    confirm_phase(record, arch, ctx);
  } else if (spec.distributed.is_null()) {
    time_phase(record, arch, ctx, run);
  } else {
    // One rank of a data-parallel run: the process group, the bucketed all-reduce in the
    // runtime's gradient-sync seam, then every rank's numbers. Every rank builds with the
    // same seed: identical replicas (DDP broadcasts rank 0's weights to get there) on the
    // same synthetic batch, which costs what a batch of its own would.
    GPUBENCH_CHECK(join_rank != nullptr, JobError,
                   "{}: a data-parallel rank, in a process that cannot join one", config.name);
    const std::unique_ptr<DataParallelRank> rank = join_rank(spec.distributed, device);
    ctx.gradient_sync = rank->gradient_sync();
    time_phase(record, arch, ctx, run, &rank->agreement());
    rank->finish(record);
  }
  // The timed window's FLOPs per unit, from the shapes its steps ran (time_phase), where the
  // step derives them; else the config's constant for a model as shipped.
  const ComputeRecord window_flops = std::exchange(record.compute, ComputeRecord{});
  const FlopsPerUnit flops =
      FlopsPerUnit::from_compute(window_flops).or_config(config.flops_per_unit, config.modified);
  if (!record.ok()) return;
  // The step is gone: the device's matmul peak at this precision, for the utilisation;
  // measured once per suite, by its first timed run on this device at this kind.
  const std::string kind = matmul_peak_kind(to_string(run.precision));
  const PeakChoice peak =
      choose_matmul_peak(spec.matmul_peak, spec.device, kind, [&]() -> std::optional<double> {
        if (!device.is_cuda()) return std::nullopt;
        return measure_matmul_peak_tflops(device, kind);
      });
  // A data-parallel record's throughput is the sum over its ranks; the utilisation is one GPU's
  // (the mean over the ranks against one GPU's peak), and the total beside it.
  const int world_size = spec.distributed.is_null() ? 1 : spec.distributed.value("world_size", 1);
  record.compute = compute_with_peak(record.throughput / world_size, flops, kind, peak);
  if (world_size > 1 && record.compute.tflops) {
    record.compute.tflops_total = *record.compute.tflops * world_size;
  }
}

}  // namespace

JobRecord run_phase(const JobSpec& spec, const ConfigStore& store, const RankJoiner& join_rank) {
  const ModelConfig& config = store.model(spec.model);
  const RunSettings& run = store.run();
  JobRecord record = base_record(config, run);
  const Heartbeat heartbeat(config.name);
  const torch::Device device(spec.device);
  record.device = device.is_cuda() ? cuda_device_info(device.index()) : cpu_device_info();
  record.environment = environment_json(record.device);
  // A memory cap: the cap, what is outside the allocator, the allocator's part.
  std::optional<MemoryCap> cap_record;
  try {
    const int64_t capacity = prepare_device(record, config, run, device, cap_record);
    // Before the model is built: cuDNN reads the setting at each convolution's first run.
    const RuntimeSettings applied = applied_runtime(config, run);
    apply_math_mode(run.precision, applied.cudnn_benchmark);
    set_cudnn_algorithm_choice(applied.cudnn_benchmark, applied.cudnn_benchmark_limit,
                               run.cudnn_benchmark_empty_cache);
    torch::manual_seed(static_cast<uint64_t>(run.seed));
    const Architecture& arch = builtin_registry().get(config.architecture);
    if (spec.phase == WorkerPhase::search) {
      search_phase(record, spec, config, run, arch, device, capacity, applied);
    } else {
      batch_phase(record, spec, config, run, arch, device, join_rank);
    }
    if (cap_record) record.memory.cap = cap_record;
  } catch (const std::exception& e) {
    record.status = is_out_of_memory(e) ? JobStatus::oom : JobStatus::failed;
    record.message = explain_failure(short_message(e.what()), run.precision, device);
    release_cached_memory(device);
  }
  return record;
}

namespace {

/// One phase from its spec file to its record file; `shipped`: the shipped configs, already
/// loaded (a waiting worker's), or none to load them.
int run_spec_file(const std::string& spec_path, const std::string& out_path,
                  const RankJoiner& join_rank, const ConfigStore* shipped) {
  const JobSpec spec = JobSpec::from_json(load_config_file(spec_path));
  set_progress_prefix(spec.progress_label, spec.progress_started_unix, spec.progress_eta_unix);
  const JobRecord record = run_phase(
      spec, shipped ? resolve_store(spec.overlays, *shipped) : resolve_store(spec.overlays),
      join_rank);
  write_file_atomically(out_path, record.to_json().dump());
  return kExitOk;
}

/// The parent's two lines on standard input (the spec's path, the record's); false at end of
/// file or on an error before both came.
bool read_phase_paths(std::string& spec_path, std::string& out_path) {
  std::string text;
  char buffer[4096];
  while (std::count(text.begin(), text.end(), '\n') < 2) {
    const ssize_t n = ::read(0, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  const std::size_t first = text.find('\n');
  const std::size_t second = text.find('\n', first + 1);
  spec_path = text.substr(0, first);
  out_path = text.substr(first + 1, second - first - 1);
  return !spec_path.empty() && !out_path.empty();
}

/// Writes all of `text` to standard input's socket; false when the parent is gone.
bool answer_parent(const std::string& text) {
  for (std::size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::send(0, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

int run_worker(const std::string& spec_path, const std::string& out_path,
               const RankJoiner& join_rank) {
  return run_spec_file(spec_path, out_path, join_rank, nullptr);
}

int run_waiting_worker(const Priority& run_at, const RankJoiner& join_rank) {
  // What no phase changes, while the previous worker runs: the shipped configs, parsed and
  // checked. Configs that do not load fail the phase itself, in the fresh way, with its message.
  std::optional<ConfigStore> shipped;
  try {
    shipped = ConfigStore::load_builtin(builtin_registry());
  } catch (const std::exception&) {
    shipped.reset();
  }
  std::string spec_path, out_path;
  if (!read_phase_paths(spec_path, out_path)) return kExitOk;  // not needed: no word
  // The phase runs at the priority a fresh worker would have, or not here.
  if (!restore_priority(run_at)) return kExitOk;
  if (!answer_parent("ok\n")) return kExitOk;
  return run_spec_file(spec_path, out_path, join_rank, shipped ? &*shipped : nullptr);
}

}  // namespace gpubench
