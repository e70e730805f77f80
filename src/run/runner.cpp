#include "gpubench/run/runner.h"

#include "gpubench/base/compat.h"
#include "gpubench/device/device.h"
#include "gpubench/distributed/distributed.h"
#include "gpubench/base/errors.h"
#include "gpubench/device/nvml.h"
#include "gpubench/run/process.h"
#include "gpubench/device/profile.h"
#include "gpubench/train/registry.h"
#include "gpubench/base/strings.h"
#include "gpubench/measure/timing.h"
#include "gpubench/train/model_reuse.h"

#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

namespace gpubench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The first line of an error message, without libtorch's C++ stack trace.
std::string short_message(const std::string& what) {
  std::string line = what.substr(0, what.find('\n'));
  const auto trace = line.find(" (Triggered internally at");
  if (trace != std::string::npos) line = line.substr(0, trace);
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

/// Who is speaking in a worker's progress lines: "[2:13] job 3/12 nasnet-large" in a suite.
struct ProgressPrefix {
  std::string label;
  double started_unix = 0;
};
ProgressPrefix& progress_prefix() {
  static ProgressPrefix prefix;
  return prefix;
}

/// When the worker last said something (steady clock, ns): the heartbeat speaks after silence.
std::atomic<int64_t> g_last_log_ns{0};
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void worker_log(const std::string& model, const std::string& text) {
  g_last_log_ns = now_ns();
  if (const char* quiet = std::getenv("GPUBENCH_QUIET"); quiet && *quiet == '1') return;
  const ProgressPrefix& p = progress_prefix();
  std::string prefix = p.label.empty() ? model : p.label;
  if (p.started_unix > 0) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto elapsed = static_cast<int64_t>(std::max(0.0, now - p.started_unix));
    const int64_t h = elapsed / 3600, m = elapsed / 60 % 60, sec = elapsed % 60;
    // As the parent's lines: m:ss, or h:mm:ss past an hour.
    prefix = h > 0 ? fmt::format("[{}:{:02}:{:02}] {}", h, m, sec, prefix)
                   : fmt::format("[{}:{:02}] {}", m, sec, prefix);
  }
  static std::mutex m;  // the heartbeat's thread logs too
  const std::lock_guard<std::mutex> lock(m);
  std::cerr << fmt::format("  {}: {}\n", prefix, terminal_safe(text)) << std::flush;
}

/// For the scope of one worker phase, a line whenever the worker has said nothing for a while
/// (10 s, or GPUBENCH_HEARTBEAT_S), naming what it is doing and for how long: a first step that
/// autotunes for a minute, or a probe that takes 18 s, never leaves the terminal quiet.
class Heartbeat {
 public:
  explicit Heartbeat(std::string model) : model_(std::move(model)) {
    if (const char* s = std::getenv("GPUBENCH_HEARTBEAT_S"); s && *s) silence_s_ = std::atof(s);
    if (!(silence_s_ > 0)) silence_s_ = 10;
    g_last_log_ns = now_ns();
    thread_ = std::thread([this] { loop(); });
    current() = this;
  }
  ~Heartbeat() {
    current() = nullptr;
    {
      const std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// What the worker is doing from now on ("warm-up step 1 at batch 456"); "" for nothing.
  static void phase(const std::string& what) {
    Heartbeat* h = current();
    if (h == nullptr) return;
    const std::lock_guard<std::mutex> lock(h->m_);
    h->phase_ = what;
    h->phase_started_ = Clock::now();
  }

 private:
  /// The heartbeat of this worker, if one runs.
  static Heartbeat*& current() {
    static Heartbeat* h = nullptr;
    return h;
  }
  void loop() {
    const auto tick = std::chrono::duration<double>(std::min(1.0, silence_s_ / 2));
    std::unique_lock<std::mutex> lock(m_);
    while (!cv_.wait_for(lock, tick, [this] { return stop_; })) {
      const double quiet_s = static_cast<double>(now_ns() - g_last_log_ns) / 1e9;
      if (phase_.empty() || quiet_s < silence_s_) continue;
      worker_log(model_, fmt::format("{}: still running after {:.0f} s", phase_,
                                     seconds_since(phase_started_)));
    }
  }

  std::string model_;
  double silence_s_ = 10;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string phase_;
  Clock::time_point phase_started_ = Clock::now();
  std::thread thread_;  // last: it starts once the rest exists
};

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
/// (runtime.cudnn_benchmark: off where its reference trains without it, docs/ARCHITECTURE.md
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

ProbeOutcome probe_step(const Architecture& arch, const StepContext& ctx,
                        int64_t headroom_bytes) {
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

LossReading read_losses(const TrainStep& step) {
  LossReading reading;
  for (const auto& [name, loss] : step.losses()) {
    if (!loss.defined()) continue;
    const double value = loss.detach().to(torch::kCPU).to(torch::kDouble).item<double>();
    reading.values[name] = std::isfinite(value) ? Json(value) : Json(nullptr);
    if (!std::isfinite(value) && reading.non_finite.empty()) {
      reading.non_finite = name;
      reading.non_finite_value = std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf";
    }
  }
  return reading;
}

void confirm_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx) {
  const torch::Device& device = ctx.device;
  Heartbeat::phase(fmt::format("confirming batch {}", ctx.batch));
  auto step = arch.prepare(ctx);
  step->allocate_optimizer_state();  // below the activations, as the search's probe laid it
  const int steps =
      device.is_cuda() ? autotune_steps(step->uniform_steps(), step->warmup_steps()) + 1 : 1;
  reset_peak_memory(device);
  for (int i = 0; i < steps; ++i) step->run();
  synchronize(device);
  const MemoryStats stats = memory_stats(device);
  record.batch_info = step->batch_info();
  record.peak_memory_bytes = stats.reserved_peak;
  record.peak_allocated_bytes = stats.allocated_peak;
  record.memory["confirm_steps"] = steps;
  record.status = "ok";
  worker_log(record.model, fmt::format("batch {} trained {} in a fresh process (peak {})",
                                       ctx.batch, counted(steps, "step"),
                                       format_bytes(static_cast<double>(stats.reserved_peak))));
}

/// runtime.cuda_graphs_if_host_bound, after the eager warm-up: when the host's share of the
/// last steps (at least one cycle of the step's mix) reaches kHostBoundShare, turns CUDA graphs
/// on and runs more warm-up steps (`warm_step`) until a whole cycle, and at least two steps,
/// replayed without a capture, so that no capture falls in the timed window. Returns the
/// decision for the record's warmup.host_bound (null when the setting is off).
Json graphs_if_host_bound(const std::string& model, TrainStep& step,
                          const RuntimeSettings& runtime, int cycle,
                          const std::vector<double>& host_ms, const std::vector<double>& warm_ms,
                          const std::function<void()>& warm_step) {
  if (!runtime.cuda_graphs_if_host_bound || runtime.cuda_graphs) return nullptr;
  const HostShare share = host_share(host_ms, warm_ms, std::max(3, cycle));
  Json out = {{"steps", share.steps},         {"host_ms", share.host_ms},
              {"device_ms", share.device_ms}, {"share", share.share},
              {"threshold", kHostBoundShare}, {"host_bound", share.host_bound},
              {"graphs", "off"}};
  if (!share.host_bound) {
    worker_log(model, fmt::format("the host took {:.0f}% of the warm-up's last {}: the step "
                                  "fills the device and stays eager",
                                  100 * share.share, counted(share.steps, "step")));
    return out;
  }
  const std::string why_not = step.enable_graphs();
  if (!why_not.empty()) {
    out["why_not"] = why_not;
    worker_log(model, fmt::format("the host took {:.0f}% of the warm-up's last {}; no CUDA "
                                  "graphs: {}",
                                  100 * share.share, counted(share.steps, "step"), why_not));
    return out;
  }
  const int64_t needed = std::max(cycle, 2);
  const int64_t limit = 10 * needed + 8;  // every shape of a cycle captured well before this
  int64_t steps = 0;
  while (step.replays_in_a_row() < needed && steps < limit) {
    Heartbeat::phase(fmt::format("warm-up: capturing CUDA graphs, step {}", steps + 1));
    warm_step();
    ++steps;
  }
  const bool settled = step.replays_in_a_row() >= needed;
  // A capture that failed put the step back on eager iterations (its runtime note says why).
  const bool on = step.runtime_info().value("launch", "") == "cuda-graphs";
  out["graphs"] = !on ? "off" : settled ? "on" : "on, still capturing";
  out["capture_steps"] = steps;
  worker_log(model, fmt::format("the host took {:.0f}% of the warm-up's last {}: CUDA graphs "
                                "{} after {} more",
                                100 * share.share, counted(share.steps, "step"),
                                out["graphs"].get<std::string>(), counted(steps, "step")));
  return out;
}

void time_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx,
                const RunSettings& run) {
  const torch::Device& device = ctx.device;
  TimingSettings t = device.is_cuda() ? run.timing : run.cpu_timing;
  Heartbeat::phase(fmt::format("building the step at batch {}", ctx.batch));
  auto step = arch.prepare(ctx);
  // The optimizer state before the first step, as the search's probe allocated it: a first
  // update puts it among the blocks the first step's activations freed, and at the searched
  // batch every timed run on the H200 that ran out of memory so (2026-12-02) was short by less
  // than the memory the allocator held reserved but unused (docs/search.md, "The suite's
  // floor").
  step->allocate_optimizer_state();
  t.warmup_steps = std::max<int>(t.warmup_steps, static_cast<int>(step->warmup_steps()));
  t.max_warmup_steps = std::max(t.max_warmup_steps, t.warmup_steps);
  if (!step->uniform_steps()) t.steady_tolerance = -1;  // never "steady": stop at warmup_steps
  // A step mix that repeats every `cycle` steps is timed over whole cycles.
  const int cycle = static_cast<int>(std::max<int64_t>(1, step->representative_steps()));
  t.min_steps = std::max(t.min_steps, cycle);
  record.batch_info = step->batch_info();
  for (const auto& [network, params] : step->parameters()) {
    record.trainable_params[network] = count_trainable(params);
  }
  reset_peak_memory(device);

  const MemoryStats before_warmup = memory_stats(device);  // its counters, for the warm-up's

  // Warm-up: until cuDNN autotuning and allocator growth are over and step times are steady.
  worker_log(record.model, fmt::format("warm-up at batch {}", ctx.batch));
  StepClock clock(device);
  std::vector<double> warm_ms;  // each step's device time
  std::vector<double> host_ms;  // the host's time inside each step's run()
  auto warm_step = [&] {
    clock.clear();
    clock.mark();
    const auto host_start = Clock::now();
    step->run();
    host_ms.push_back(1000.0 * seconds_since(host_start));
    clock.mark();
    warm_ms.push_back(clock.intervals_ms().front());
  };
  std::string reason, detail;
  // Steps that may still autotune are never timed, whatever the warm-up's limits.
  const int autotune =
      device.is_cuda() ? autotune_steps(step->uniform_steps(), step->warmup_steps()) : 0;
  const auto warm_start = Clock::now();
  // Steps the warm-up may add after its rules are met while the step is not settled (an fp16
  // loss scale backing off halves per skipped update: 16 steps take 65536 to 1).
  constexpr std::size_t kMaxSettlingSteps = 64;
  std::size_t settling_steps = 0;
  std::string settling;
  while (true) {
    const auto decision = warmup_done(warm_ms, seconds_since(warm_start), t, autotune);
    if (decision.done) {
      const std::string why = step->unsettled();
      // Every 8 settling steps the losses are read (a sync, outside any window): a loss already
      // NaN or infinite will not settle, so the warm-up ends there and the window's first
      // reading says `diverged` instead of 64 more steps of a broken model.
      const bool broken = !why.empty() && settling_steps > 0 && settling_steps % 8 == 0 &&
                          !read_losses(*step).non_finite.empty();
      if (!why.empty() && settling_steps < kMaxSettlingSteps && !broken) {
        if (settling_steps == 0) worker_log(record.model, "warm-up goes on: " + why);
        settling = why;
        ++settling_steps;
      } else {
        reason = decision.reason;
        detail = decision.detail;
        if (settling_steps > 0) {
          detail += fmt::format("{}then {} more step{} while {}{}", detail.empty() ? "" : "; ",
                                settling_steps, settling_steps == 1 ? "" : "s", settling,
                                broken        ? " (stopped: a loss is no longer finite)"
                                : why.empty() ? ""
                                              : " (still so)");
        }
        break;
      }
    }
    Heartbeat::phase(fmt::format(
        "warm-up step {} at batch {}{}", warm_ms.size() + 1, ctx.batch,
        static_cast<int>(warm_ms.size()) < autotune ? " (cuDNN autotunes each new shape)" : ""));
    warm_step();
  }
  const Json host_bound = graphs_if_host_bound(record.model, *step, ctx.runtime, cycle, host_ms,
                                               warm_ms, warm_step);
  Heartbeat::phase("after the warm-up");
  const double warm_seconds = seconds_since(warm_start);
  record.warmup = {{"steps", warm_ms.size()},  {"reason", reason},
                   {"detail", detail},         {"seconds", warm_seconds},
                   {"autotune_steps", autotune}, {"step_time_ms", warm_ms}};
  if (!host_bound.is_null()) record.warmup["host_bound"] = host_bound;
  worker_log(record.model, fmt::format("warm-up: {} in {:.1f} s ({}{})",
                                       counted(static_cast<int64_t>(warm_ms.size()), "step"),
                                       warm_seconds, reason, detail.empty() ? "" : ": " + detail));
  // How the step runs (launch, precision, optimizer kernels), settled by the warm-up: a CUDA
  // graph is captured there.
  record.runtime = step->runtime_info();
  // A developer's trace of a few more steps (GPUBENCH_PROFILE_TRACE), outside the window.
  const ProfileRequest profile = ProfileRequest::from_environment();
  if (!profile.trace_path.empty()) {
    const std::string why_not = profile_steps(
        profile, [&] { step->run(); }, [&] { synchronize(device); });
    worker_log(record.model, why_not.empty()
                                 ? fmt::format("profiled {} into {}",
                                               counted(profile.steps, "step"), profile.trace_path)
                                 : "no profile: " + why_not);
  }
  // The warm-up's peak holds autotuning's trial workspaces; the timed window's is training's.
  const MemoryStats warm_stats = memory_stats(device);
  record.memory = {
      {"autotune_peak_allocated_bytes", warm_stats.allocated_peak},
      {"autotune_peak_reserved_bytes", warm_stats.reserved_peak},
      {"cudnn", cudnn_algorithm_choice_json()},
      {"allocator", allocator_json(device)},
      {"allocator_counters_warmup", allocator_counters_between(before_warmup, warm_stats)}};
  record.peak_memory_bytes = warm_stats.reserved_peak;
  record.peak_allocated_bytes = warm_stats.allocated_peak;
  // The model's health before the window: reading the losses synchronizes, so it happens here,
  // outside the timed region.
  const LossReading at_start = read_losses(*step);
  record.losses_start = at_start.values;
  auto mark_diverged = [&](const std::string& problem) {
    record.status = "diverged";
    record.message = problem + "; the throughput of a model that no longer trains soundly is "
                               "not a result";
    record.diverged_throughput = record.throughput;
    record.throughput = 0;
    worker_log(record.model, "diverged: " + problem);
  };
  if (!at_start.non_finite.empty()) {
    // Timing a model that already diverged would measure nothing worth keeping.
    record.losses = at_start.values;
    mark_diverged(fmt::format("loss '{}' is {} at the start of the timed window (after {} "
                              "warm-up steps)",
                              at_start.non_finite, at_start.non_finite_value, warm_ms.size()));
    return;
  }
  reset_peak_memory(device);
  const MemoryStats before_window = memory_stats(device);
  step->begin_window();
  worker_log(record.model,
             fmt::format("timing: at least {} and {} s{}", counted(t.min_steps, "step"),
                         format_number(t.min_seconds),
                         t.max_seconds > t.min_seconds
                             ? fmt::format(", then until the noise is at most {}% or {} s "
                                           "(or sooner, when it cannot get there by then)",
                                           format_number(100 * t.noise_target),
                                           format_number(t.max_seconds))
                             : std::string()));
  Heartbeat::phase(fmt::format("timing at batch {}", ctx.batch));

  // Timed window: each step between device events; the host may run ahead, so the window is
  // checked against device time once the host thinks it is long enough.
  ClockSampler sampler(device.is_cuda() ? cuda_device_info(device.index()).pci_bus_id : "");
  sampler.start();
  clock.clear();
  clock.mark();
  double units = 0;
  int steps = 0;
  std::vector<double> times;
  std::optional<double> noise;
  std::string stop;
  const auto window_start = Clock::now();
  constexpr int kMaxSteps = 1000000;
  int next_check = 0;  // past the minimum: the step count of the next look at the noise
  while (true) {
    units += step->run();
    clock.mark();
    ++steps;
    if (steps >= kMaxSteps) {
      times = clock.intervals_ms();
      noise = window_noise(times, cycle);
      stop = "step limit";
      break;
    }
    if (steps % cycle != 0 || steps < next_check) continue;
    if (!window_done(steps, seconds_since(window_start), t)) continue;
    // Each look waits for the device: the host may have run ahead of it.
    times = clock.intervals_ms();
    double device_seconds = 0;
    for (double ms : times) device_seconds += ms / 1000.0;
    if (!window_done(steps, device_seconds, t)) continue;
    noise = window_noise(times, cycle);
    stop = window_stop(noise, static_cast<int>(times.size()) / cycle, device_seconds, t);
    if (!stop.empty()) break;
    // The next look after about a quarter more steps, whole cycles, and not far past the limit.
    const double per_step = device_seconds / steps;
    const int to_limit =
        per_step > 0 ? static_cast<int>(std::ceil((t.max_seconds - device_seconds) / per_step)) : 1;
    int more = std::max(1, std::min(steps / 4, to_limit));
    more = (more + cycle - 1) / cycle * cycle;
    next_check = steps + more;
  }
  record.clocks = sampler.stop();
  double window_seconds = 0;
  for (double ms : times) window_seconds += ms / 1000.0;
  if (Json energy = energy_summary(sampler.energy_joules(), units, steps, window_seconds);
      !energy.empty()) {
    record.clocks["energy"] = std::move(energy);
  }
  record.step_time_ms = times;
  record.timing = summarize_steps(times, window_seconds);
  record.timing.noise = noise;
  record.timing.stop = stop;
  record.units_per_step = units / steps;
  record.throughput = window_seconds > 0 ? units / window_seconds : 0;
  const MemoryStats stats = memory_stats(device);
  record.peak_memory_bytes = std::max(warm_stats.reserved_peak, stats.reserved_peak);
  record.peak_allocated_bytes = std::max(warm_stats.allocated_peak, stats.allocated_peak);
  record.memory["resident_bytes"] = stats.allocated_current;
  record.memory["window_peak_allocated_bytes"] = stats.allocated_peak;
  record.memory["window_peak_reserved_bytes"] = stats.reserved_peak;
  // What the process holds outside the allocator once training ran (context, kernels, handles).
  if (device.is_cuda()) record.memory["outside_allocator_bytes"] = outside_allocator_bytes(device);
  const Json window_counters = allocator_counters_between(before_window, stats);
  record.memory["allocator_counters_window"] = window_counters;
  // A window where the allocator had to free its cache and retry, or ran out, timed thrashing.
  if (window_counters.value("alloc_retries", int64_t{0}) > 0 ||
      window_counters.value("ooms", int64_t{0}) > 0) {
    const std::string warning = fmt::format(
        "warning: the caching allocator retried {} and ran out of memory {} in the timed "
        "window (the batch is at the memory edge; its time includes freeing and refilling "
        "the cache)",
        counted(window_counters.value("alloc_retries", int64_t{0}), "allocation"),
        counted(window_counters.value("ooms", int64_t{0}), "time"));
    worker_log(record.model, warning);
    record.message = record.message.empty() ? warning : record.message + "; " + warning;
  }
  Heartbeat::phase("");
  const LossReading at_end = read_losses(*step);
  record.losses = at_end.values;
  record.runtime = step->runtime_info();  // again: with loss scaling, the updates it skipped
  worker_log(record.model,
             fmt::format("timed: {} in {:.2f} s, {} {}{}", counted(steps, "step"), window_seconds,
                         format_significant(record.throughput, 4), record.throughput_unit,
                         stop == "minimum" ? std::string()
                         : noise ? fmt::format(" (+-{:.2f}%, {})", 100 * *noise, stop)
                                 : fmt::format(" ({})", stop)));

  // A number is a result only when the model it timed was training soundly: finite losses at
  // both ends of the window, and the workload's own degeneracy check.
  if (!at_end.non_finite.empty()) {
    mark_diverged(fmt::format("loss '{}' is {} at the end of the timed window (after {} warm-up "
                              "and {} timed steps)",
                              at_end.non_finite, at_end.non_finite_value, warm_ms.size(), steps));
    return;
  }
  const std::string degenerate = step->degeneracy();
  if (!degenerate.empty()) mark_diverged("the model is degenerate: " + degenerate);
}

namespace {
Json probes_json(const std::vector<ProbeRecord>& probes) {
  Json out = Json::array();
  for (const auto& p : probes) out.push_back(p.to_json());
  return out;
}
}  // namespace

Json MatmulPeak::to_json() const {
  return {{"device", device}, {"kind", kind}, {"tflops", tflops}, {"measured_by", measured_by}};
}

MatmulPeak MatmulPeak::from_json(const Json& json) {
  MatmulPeak p;
  p.device = json.at("device").get<std::string>();
  p.kind = json.at("kind").get<std::string>();
  p.tflops = json.at("tflops").get<double>();
  p.measured_by = json.value("measured_by", std::string());
  return p;
}

PeakChoice choose_matmul_peak(const std::optional<MatmulPeak>& given, const std::string& device,
                              const std::string& kind,
                              const std::function<std::optional<double>()>& measure) {
  PeakChoice choice;
  if (given && !kind.empty() && given->device == device && given->kind == kind &&
      given->tflops > 0) {
    choice.tflops = given->tflops;
    choice.source = "reused";
    choice.measured_by = given->measured_by;
    return choice;
  }
  choice.tflops = measure();
  if (choice.tflops) choice.source = "measured";
  return choice;
}

Json compute_with_peak(double throughput, std::optional<double> flops_per_unit,
                       const std::string& kind, const PeakChoice& peak) {
  Json out = compute_summary(throughput, flops_per_unit, kind, peak.tflops);
  if (out.contains("peak_tflops")) {
    out["peak_source"] = peak.source;
    if (!peak.measured_by.empty()) out["peak_measured_by"] = peak.measured_by;
  }
  return out;
}

std::optional<MatmulPeak> measured_matmul_peak(const JobRecord& record, const std::string& device) {
  const Json& c = record.compute;
  if (!c.is_object() || c.value("peak_source", std::string()) != "measured" ||
      !c.contains("peak_tflops") || !c["peak_tflops"].is_number() || !c.contains("peak_kind")) {
    return std::nullopt;
  }
  MatmulPeak p;
  p.device = device;
  p.kind = c["peak_kind"].get<std::string>();
  p.tflops = c["peak_tflops"].get<double>();
  p.measured_by = record.model;
  if (!(p.tflops > 0) || p.kind.empty()) return std::nullopt;
  return p;
}

Json JobSpec::to_json() const {
  Json overlays_json = Json::array();
  for (const auto& [file, document] : overlays) {
    overlays_json.push_back({{"file", file}, {"document", document}});
  }
  return {{"model", model},
          {"phase", phase},
          {"batch", batch},
          {"device", device},
          {"overlays", overlays_json},
          {"search_hint", search_hint ? search_hint->to_json() : Json(nullptr)},
          {"search_probes", probes_json(search_probes)},
          {"search_worker", search_worker},
          {"search_only", search_only},
          {"progress", {{"label", progress_label}, {"started_unix", progress_started_unix}}},
          {"distributed", distributed},
          {"matmul_peak", matmul_peak ? matmul_peak->to_json() : Json(nullptr)}};
}

JobSpec JobSpec::from_json(const Json& json) {
  JobSpec spec;
  spec.model = json.at("model").get<std::string>();
  spec.phase = json.at("phase").get<std::string>();
  spec.batch = json.at("batch").get<int64_t>();
  spec.device = json.at("device").get<std::string>();
  for (const auto& overlay : json.at("overlays")) {
    spec.overlays.emplace_back(overlay.at("file").get<std::string>(), overlay.at("document"));
  }
  if (json.contains("search_hint")) spec.search_hint = SearchHint::from_json(json["search_hint"]);
  for (const auto& p : json.value("search_probes", Json::array())) {
    spec.search_probes.push_back(ProbeRecord::from_json(p));
  }
  spec.search_worker = json.value("search_worker", 0);
  spec.search_only = json.value("search_only", false);
  spec.distributed = json.value("distributed", Json());
  if (json.contains("matmul_peak") && json["matmul_peak"].is_object()) {
    spec.matmul_peak = MatmulPeak::from_json(json["matmul_peak"]);
  }
  if (json.contains("progress")) {
    spec.progress_label = json["progress"].value("label", std::string());
    spec.progress_started_unix = json["progress"].value("started_unix", 0.0);
  }
  return spec;
}

ConfigStore resolve_store(const std::vector<ConfigOverlay>& overlays) {
  ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  for (const auto& [file, document] : overlays) store.apply_document(document, file);
  return store;
}

JobRecord run_phase(const JobSpec& spec, const ConfigStore& store) {
  const ModelConfig& config = store.model(spec.model);
  const RunSettings& run = store.run();
  JobRecord record = base_record(config, run);
  const Heartbeat heartbeat(config.name);
  const torch::Device device(spec.device);
  record.device = device.is_cuda() ? cuda_device_info(device.index()) : cpu_device_info();
  record.environment = environment_json(record.device);
  Json cap_record;  // a memory cap: the cap, what is outside the allocator, the allocator's part
  try {
    int64_t capacity = 0;
    if (device.is_cuda()) {
      // Before anything allocates: the allocator reads its options once.
      configure_allocator(run.expandable_segments);
      set_current_device(device);
      capacity = device_memory_info(device).first;  // free memory once the context exists
      if (run.memory_cap_gib) {
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
        cap_record = {{"cap_bytes", cap},
                      {"outside_allocator_bytes", outside},
                      {"allocator_cap_bytes", allocator_cap}};
        // NVML's count of this process's memory (context and allocator together), to check the
        // reading against; NVML cannot always say (another PID namespace, MIG).
        if (const auto used = nvml_process_memory_bytes(record.device.pci_bus_id, getpid())) {
          cap_record["nvml_process_bytes"] = *used;
        }
        worker_log(config.name,
                   fmt::format("memory cap {}: {} outside the allocator, which gets {}",
                               format_bytes(static_cast<double>(cap)),
                               format_bytes(static_cast<double>(outside)),
                               format_bytes(static_cast<double>(allocator_cap))));
      }
    }
    // Before the model is built: cuDNN reads the setting at each convolution's first run.
    const RuntimeSettings applied = applied_runtime(config, run);
    const bool autotuning = applied.cudnn_benchmark;
    const int algorithm_limit = applied.cudnn_benchmark_limit;
    apply_math_mode(run.precision, autotuning);
    set_cudnn_algorithm_choice(autotuning, algorithm_limit, run.cudnn_benchmark_empty_cache);
    torch::manual_seed(static_cast<uint64_t>(run.seed));
    const Architecture& arch = builtin_registry().get(config.architecture);

    if (spec.phase == "search") {
      // Heuristics unless asked: no autotuning at every new shape, and workspaces picked by
      // shape rather than by what happens to be free (docs/search.md).
      set_cudnn_algorithm_choice(config.search.cudnn_benchmark && autotuning, algorithm_limit,
                                 run.cudnn_benchmark_empty_cache);
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
          device.is_cuda() ? static_cast<int64_t>(config.search.headroom *
                                                  static_cast<double>(capacity))
                           : 0;
      auto probe = [&](int64_t batch) {
        Heartbeat::phase(fmt::format("search probe at batch {}", batch));
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
      // configure_allocator() above set the option before the first allocation, where this
      // libtorch knows it.
      options.expandable_allocator =
          device.is_cuda() && run.expandable_segments && compat::kHasExpandableSegments;
      options.on_probe = [&](const ProbeRecord& p, int index) {
        std::string timing =
            fmt::format("{:.1f} s: build {:.1f} s, steps {:.1f} s", p.seconds, p.prepare_seconds,
                        p.steps_seconds);
        // Allocations that failed and emptied the allocator's cache before a retry: under a cap,
        // what makes a probe slow (docs/search.md, "Hints across memory caps").
        const int64_t retries = p.allocator.is_object() ? p.allocator.value("alloc_retries", int64_t{0}) : 0;
        if (retries > 0) timing += fmt::format(", {} allocator retries", retries);
        worker_log(config.name,
                   p.sticky ? fmt::format("search probe {}: batch {} left the worker unusable "
                                          "({}): {}",
                                          index, p.batch, timing, p.error)
                   : p.fits ? fmt::format("search probe {} ({}): batch {} fits (peak {}, {})",
                                          index, p.phase, p.batch, format_bytes(p.peak_bytes),
                                          timing)
                            : fmt::format("search probe {} ({}): batch {} is out of memory ({})",
                                          index, p.phase, p.batch, timing));
      };
      options.on_note = [&](const std::string& text) { worker_log(config.name, text); };
      // Probes after the first reuse its model, restored to its initial weights (a fresh
      // build's seconds of host-side initialization; train/model_reuse.h).
      SearchRecord search = [&] {
        const train::ModelReuse reuse;
        return find_max_batch(config.search, capacity, probe, options);
      }();
      search.headroom_bytes = headroom_bytes;
      Heartbeat::phase("");
      search.cudnn_benchmark = config.search.cudnn_benchmark && autotuning;
      if (probe_layout_differs) {
        search.probe_overrides = {{"memory_format", probe_model.str("memory_format")}};
      }
      record.batch = search.max_batch;
      record.batch_source = "search";
      const bool broken = search.interrupted || search.stop_reason.rfind("the probe at", 0) == 0;
      record.status = broken ? "failed" : search.max_batch > 0 ? "ok" : "no-fit";
      if (broken) {
        record.message = "search: " + search.stop_reason;
      } else if (search.max_batch == 0) {
        record.message = fmt::format("does not fit at batch {} ({})", config.search.min_batch,
                                     search.stop_reason);
      } else if (!search.converged) {
        record.message = fmt::format(
            "warning: the search did not converge ({}); batch {} fits but may be below the "
            "largest that does (raise search.max_probes to close the bracket)",
            search.stop_reason, search.max_batch);
      }
      record.search = std::move(search);
    } else {
      GPUBENCH_ASSERT(spec.batch > 0);
      record.batch = spec.batch;
      StepContext ctx = make_context(config, run, device, spec.batch);
      if (spec.phase == "confirm") {
        confirm_phase(record, arch, ctx);
      } else if (spec.distributed.is_null()) {
        time_phase(record, arch, ctx, run);
      } else {
        // One rank of a data-parallel run: the process group, the bucketed all-reduce in the
        // runtime's gradient-sync seam, then every rank's numbers. Every rank builds with the
        // same seed: identical replicas (DDP broadcasts rank 0's weights to get there) on the
        // same synthetic batch, which costs what a batch of its own would.
        const auto rank = distributed::RankSpec::from_json(spec.distributed);
        const auto communicator = distributed::connect(rank, device);
        const auto sync = std::make_shared<distributed::BucketedGradientSync>(communicator);
        ctx.gradient_sync = sync;
        time_phase(record, arch, ctx, run);
        distributed::finish_timed_phase(record, *communicator, rank, *sync);
      }
      if (record.ok()) {
        // The step is gone: the device's matmul peak at this precision, for the utilisation;
        // measured once per suite, by its first timed run on this device at this kind.
        const std::string kind = matmul_peak_kind(to_string(run.precision));
        const PeakChoice peak =
            choose_matmul_peak(spec.matmul_peak, spec.device, kind, [&]() -> std::optional<double> {
              if (!device.is_cuda()) return std::nullopt;
              return measure_matmul_peak_tflops(device, kind);
            });
        record.compute = compute_with_peak(record.throughput, config.flops_per_unit, kind, peak);
      }
    }
    if (!cap_record.is_null()) record.memory["cap"] = cap_record;
  } catch (const std::exception& e) {
    record.status = is_out_of_memory(e) ? "oom" : "failed";
    record.message = explain_failure(short_message(e.what()), run.precision, device);
    release_cached_memory(device);
  }
  return record;
}

// ---- Launchers ----

WorkerLauncher::WorkerLauncher(std::string executable)
    : executable_(executable.empty() ? current_executable() : std::move(executable)) {}

JobRecord WorkerLauncher::launch(const JobSpec& spec, double timeout_s) {
  const std::string spec_path = make_work_file("spec");
  const std::string out_path = make_work_file("out");
  // Removed however the launch ends: a record read, a failure, or the user stopping the run.
  struct RemoveOnExit {
    const std::string& spec;
    const std::string& out;
    ~RemoveOnExit() {
      std::remove(spec.c_str());
      std::remove(out.c_str());
    }
  } remove_on_exit{spec_path, out_path};
  write_file_atomically(spec_path, spec.to_json().dump());
  std::remove(out_path.c_str());
  const ProcessResult process =
      run_process({executable_, "worker", "--spec", spec_path, "--out", out_path}, timeout_s);
  JobRecord record;
  std::ifstream in(out_path);
  if (in.good() && process.exit_code == 0) {
    std::stringstream buffer;
    buffer << in.rdbuf();
    try {
      record = JobRecord::from_json(Json::parse(buffer.str()));
    } catch (const std::exception& e) {
      // A worker that wrote garbage fails its own job, not the run.
      record = JobRecord();
      record.model = spec.model;
      record.status = "failed";
      record.message = fmt::format("the worker's record cannot be read: {}", e.what());
    }
  } else {
    record.model = spec.model;
    record.status = process.timed_out ? "timeout" : process.signal ? "crashed" : "failed";
    record.message = fmt::format("{} worker {}",
                                 spec.phase == "search" ? "the search's"
                                 : spec.phase == "time"   ? "the timed run's"
                                 : spec.phase == "confirm" ? "the confirm's"
                                                           : spec.phase,
                                 process.describe());
  }
  return record;
}

JobRecord InProcessLauncher::launch(const JobSpec& spec, double /*timeout_s*/) {
  return run_phase(spec, resolve_store(spec.overlays));
}

int worker_main(const std::string& spec_path, const std::string& out_path) {
  const JobSpec spec = JobSpec::from_json(load_config_file(spec_path));
  progress_prefix() = {spec.progress_label, spec.progress_started_unix};
  const JobRecord record = run_phase(spec, resolve_store(spec.overlays));
  write_file_atomically(out_path, record.to_json().dump());
  return kExitOk;
}

// ---- Parent side ----

void normalize(JobRecord& record, const ModelConfig& config, const ReferenceTable& reference) {
  record.normalized.reset();
  if (!record.ok() || !config.reference_2020 || config.modified) return;
  const ReferenceRow* row = reference.find_row(config.reference_2020->row);
  if (!row) return;
  NormalizedScore s;
  s.reference_row = row->model;
  s.baseline_gpu = reference.baseline().id;
  s.baseline_throughput = reference.baseline_throughput(*row);
  s.baseline_max_batch = row->max_batch.at(reference.baseline_index());
  s.score = normalized_score(record.throughput, s.baseline_throughput);
  record.normalized = s;
}

int64_t next_timed_batch(const std::vector<std::pair<int64_t, bool>>& attempts,
                         const SearchSettings& search) {
  if (attempts.empty() || static_cast<int>(attempts.size()) >= kMaxTimedAttempts) return 0;
  const int64_t g = std::max<int64_t>(1, search.granularity);
  const int64_t first = attempts.front().first;
  auto align_down = [&](int64_t b) {
    if (b <= search.min_batch) return search.min_batch;
    const int64_t aligned = b / g * g;
    return aligned <= search.min_batch ? search.min_batch : aligned;
  };
  // The first step: 1% of the search's batch, at least one granule.
  const auto one_percent = static_cast<int64_t>(std::ceil(0.01 * static_cast<double>(first)));
  const int64_t step = std::max(g, (one_percent + g - 1) / g * g);
  int64_t best = 0, failed = 0, failures = 0;
  for (const auto& [b, fitted] : attempts) {
    if (fitted) best = std::max(best, b);
  }
  for (const auto& [b, fitted] : attempts) {
    if (fitted || b <= best) continue;
    failed = failed == 0 ? b : std::min(failed, b);
    ++failures;
  }
  if (failed == 0) return 0;  // the largest one tried trained
  if (best == 0) {
    // Stepping down, each step twice the last, so a far miss costs few fresh processes.
    if (failed <= search.min_batch) return 0;
    const double delta = static_cast<double>(step) * std::pow(2.0, failures - 1);
    const int64_t next = align_down(failed - static_cast<int64_t>(delta));
    return next < failed ? next : 0;
  }
  // One trained below one that did not: halve the gap while it is wider than the first step.
  if (failed - best <= step) return 0;
  const int64_t mid = align_down(best + (failed - best) / 2);
  return mid > best && mid < failed ? mid : 0;
}

namespace {
/// Fills in what a record must always say, for records of workers that died before saying it.
void fill_identity(JobRecord& record, const ModelConfig& config, const RunSettings& run,
                   const std::string& device) {
  if (record.family.empty()) record.family = config.family;
  if (record.precision.empty()) record.precision = to_string(run.precision);
  if (record.batch_unit.empty()) record.batch_unit = config.batch_unit;
  if (record.throughput_unit.empty()) record.throughput_unit = config.throughput_unit;
  if (!record.memory_cap_gib) record.memory_cap_gib = run.memory_cap_gib;
  record.emulated = record.emulated || record.memory_cap_gib.has_value();
  if (record.device.type.empty() || record.device.name.empty()) {
    // The whole description, so the record groups with the job's other records in reports.
    record.device = device.rfind("cuda:", 0) == 0 ? cuda_device_info(std::atoi(device.c_str() + 5))
                                                  : cpu_device_info();
  }
  if (record.config.empty()) record.config = config.to_json();
  if (record.created_utc.empty()) record.created_utc = utc_now();
}
}  // namespace

namespace {

/// One timed run as a repetition: what it measured and how it ended.
Json repetition_json(const JobRecord& r, double seconds) {
  return {{"throughput", r.ok() ? r.throughput : 0.0},
          {"step_time_ms_median", r.timing.median_ms},
          {"steps", r.timing.steps},
          {"window_seconds", r.timing.window_seconds},
          {"status", r.status},
          {"message", r.message},
          {"seconds", seconds}};
}

/// run.repeat >= 2: the timed run again, each time in a fresh process at `record`'s batch, and
/// the record's throughput their median. A repeat that diverges makes the job diverged (a number
/// is only a result when every timed run trained soundly); one that fails otherwise (out of
/// memory at the edge, a crash) is kept in `repeats` and said in the message, and the
/// statistics are over those that trained.
void repeat_timed_run(JobRecord& record, JobSpec spec, const RunSettings& run,
                      PhaseLauncher& launcher, const std::function<void(const std::string&)>& log) {
  const double first_seconds =
      record.confirm.empty() ? 0.0 : record.confirm.back().value("seconds", 0.0);
  record.repeats = Json::array({repetition_json(record, first_seconds)});
  std::vector<double> throughputs = {record.throughput};
  std::vector<std::string> problems;
  spec.phase = "time";
  spec.batch = record.batch;
  for (int i = 2; i <= run.repeat; ++i) {
    log(fmt::format("{}: timed run {} of {} at batch {}", record.model, i, run.repeat,
                    record.batch));
    const auto started = Clock::now();
    const JobRecord again = launcher.launch(spec, run.job_timeout_s);
    record.repeats.push_back(repetition_json(again, seconds_since(started)));
    if (again.ok()) {
      throughputs.push_back(again.throughput);
    } else if (again.status == "diverged") {
      record.status = "diverged";
      record.diverged_throughput = record.throughput;
      record.throughput = 0;
      record.message = fmt::format("timed run {} of {}: {}", i, run.repeat, again.message);
      record.normalized.reset();
      return;
    } else {
      problems.push_back(fmt::format("timed run {} of {}: {} ({})", i, run.repeat, again.status,
                                     again.message.substr(0, 120)));
    }
  }
  const SampleStats stats = summarize_sample(throughputs);
  record.throughput_stats = stats;
  record.throughput = stats.median;
  if (!problems.empty()) {
    record.message = fmt::format(
        "{} of {} timed runs did not finish, the statistics are over the "
        "other {}: {}",
        problems.size(), run.repeat, stats.n, join(problems, "; "));
  }
}

}  // namespace

namespace {

/// The fresh-process runs at a searched (or given) batch, with the step-down after an
/// out-of-memory error and the bisection back up once a batch trained.
struct Attempts {
  JobRecord record;       ///< the largest batch that trained, else the last run's record
  Json log = Json::array();  ///< every run: batch, status, message, seconds, phase
  int64_t first_batch = 0;
  int64_t last_batch = 0;
};

Attempts run_at_batch(JobSpec spec, int64_t batch, bool may_step, const ModelConfig& config,
                      const RunSettings& run, PhaseLauncher& launcher,
                      const std::function<void(const std::string&)>& log) {
  Attempts out;
  out.first_batch = batch;
  std::vector<std::pair<int64_t, bool>> outcomes;  // {batch, fitted} of the runs so far
  std::optional<JobRecord> best;                   // the largest batch that trained
  const bool confirm_only = spec.phase == "confirm";
  for (int attempt = 0;; ++attempt) {
    spec.batch = batch;
    const char* phase = attempt == 0 ? "confirm" : best ? "bisect" : "step-down";
    log(confirm_only ? fmt::format("{}: confirming batch {} ({}) in a fresh process", spec.model,
                                   batch, config.batch_unit)
                     : fmt::format("{}: timing at batch {} ({})", spec.model, batch,
                                   config.batch_unit));
    const auto attempt_started = Clock::now();
    out.record = launcher.launch(spec, run.job_timeout_s);
    out.last_batch = batch;
    out.log.push_back({{"batch", batch},
                       {"status", out.record.status},
                       {"message", out.record.message},
                       {"seconds", seconds_since(attempt_started)},
                       {"phase", phase}});
    if (out.record.status != "oom" && !out.record.ok()) break;  // not memory: stop
    outcomes.emplace_back(batch, out.record.ok());
    if (out.record.ok() && (!best || batch > best->batch)) best = out.record;
    // Only a searched batch steps down: a --batch or CPU batch is timed as given.
    if (!may_step) break;
    const int64_t next = next_timed_batch(outcomes, config.search);
    if (next <= 0) break;
    log(out.record.ok()
            ? fmt::format("{}: batch {} trained; trying {}, between it and the smallest batch "
                          "that did not",
                          spec.model, batch, next)
            : fmt::format("{}: batch {} did not fit in a fresh process{}; stepping down to {}",
                          spec.model, batch, confirm_only ? "" : " with autotuning", next));
    batch = next;
  }
  if (best) out.record = *best;  // a bisection above it may have run out of memory
  return out;
}

/// A memory tier's batch, confirmed in a fresh process under the same cap (issue 12: a capped
/// search's worker has run other batches first); a batch that does not train there steps down
/// as a timed run's would. The tier's answer is the largest batch that trained there.
void confirm_tier(JobRecord& found, JobSpec spec, const ModelConfig& config, const RunSettings& run,
                  PhaseLauncher& launcher, const std::function<void(const std::string&)>& log) {
  spec.phase = "confirm";
  const Attempts confirmed = run_at_batch(spec, found.batch, true, config, run, launcher, log);
  found.confirm = confirmed.log;
  if (confirmed.record.ok()) {
    if (confirmed.record.batch != found.batch) {
      const std::string note = fmt::format(
          "the search's batch {} did not train in a fresh process under the cap; confirmed {}",
          found.batch, confirmed.record.batch);
      found.message = found.message.empty() ? note : found.message + "; " + note;
      found.batch = confirmed.record.batch;
    }
    return;
  }
  found.status = "failed";
  found.message = confirmed.record.status == "oom"
                      ? fmt::format("the search's batch {} did not train in a fresh process "
                                    "under the cap, nor any step down to {}: {}",
                                    found.batch, confirmed.last_batch, confirmed.record.message)
                      : fmt::format("the confirm at batch {} failed: {}", confirmed.last_batch,
                                    confirmed.record.message);
}

}  // namespace

JobRecord run_job(const JobPlan& plan, const ConfigStore& store, PhaseLauncher& launcher,
                  const std::function<void(const std::string&)>& log) {
  const auto started = Clock::now();
  const ModelConfig& config = store.model(plan.model);
  const RunSettings& run = store.run();
  JobSpec spec;
  spec.model = plan.model;
  spec.device = plan.device;
  spec.overlays = plan.overlays;
  spec.search_hint = plan.search_hint;
  spec.progress_label = plan.progress_label;
  spec.progress_started_unix = plan.progress_started_unix;
  spec.search_only = plan.search_only;
  spec.matmul_peak = plan.matmul_peak;

  GPUBENCH_CHECK(!plan.search_only || (!plan.fixed_batch && plan.device != "cpu"), ConfigError,
                 "{}: a search-only job needs a CUDA device and no --batch", plan.model);
  std::optional<SearchRecord> search;
  std::string search_warning;  // a search that did not converge: said again in the final record
  std::string source;
  int64_t batch = 0;
  if (plan.fixed_batch) {
    batch = *plan.fixed_batch;
    source = plan.same_batch ? "2020" : "flag";
  } else if (plan.device == "cpu") {
    batch = config.cpu_batch;
    source = "cpu";
  } else {
    log(fmt::format("{}: searching for the largest batch on {}", plan.model, plan.device));
    spec.phase = "search";
    JobRecord found;
    for (int worker = 0;; ++worker) {
      spec.search_worker = worker;
      found = launcher.launch(spec, run.job_timeout_s);
      // A probe that left its worker unusable: the search goes on in a fresh one, from the
      // probes so far (a second failure of the same batch there fails the job).
      if (!found.search || !found.search->interrupted || worker + 1 >= kMaxSearchWorkers) break;
      spec.search_probes = found.search->probes;
      log(fmt::format("{}: {}; the search goes on in a fresh worker", plan.model,
                      found.search->stop_reason));
    }
    if (found.search && !found.search->converged && found.ok()) {
      log(fmt::format("{}: warning: {}", plan.model, found.message));
      search_warning = found.message;
    }
    if (found.ok() && plan.search_only) confirm_tier(found, spec, config, run, launcher, log);
    if (!found.ok() || plan.search_only) {
      found.wall_seconds = seconds_since(started);
      if (found.status == "oom") found.status = "failed";
      found.search_only = plan.search_only;
      fill_identity(found, config, run, plan.device);
      return found;
    }
    search = found.search;
    batch = found.batch;
    source = "search";
  }

  spec.phase = "time";
  Attempts timed = run_at_batch(spec, batch, source == "search", config, run, launcher, log);
  JobRecord record = std::move(timed.record);
  const Json attempts = std::move(timed.log);
  if (record.status == "oom") {
    record.status = "failed";
    record.message = fmt::format("out of memory at batch {}: {}", timed.last_batch, record.message);
  } else if (record.ok() && source == "search" && record.batch != timed.first_batch &&
             record.message.empty()) {
    record.message = fmt::format(
        "the search's batch {} did not fit in a fresh process with autotuning; timed at {}",
        timed.first_batch, record.batch);
  }
  if (record.ok() && run.repeat > 1) {
    // The repeats reuse the peak the first timed run measured, if it measured one.
    if (!spec.matmul_peak) spec.matmul_peak = measured_matmul_peak(record, plan.device);
    repeat_timed_run(record, spec, run, launcher, log);
    if (record.ok() && !record.compute.empty()) {  // the achieved FLOP/s of the median
      const Json& c = record.compute;
      PeakChoice peak;
      if (c.contains("peak_tflops")) peak.tflops = c["peak_tflops"].get<double>();
      peak.source = c.value("peak_source", std::string());
      peak.measured_by = c.value("peak_measured_by", std::string());
      record.compute = compute_with_peak(
          record.throughput,
          c.contains("flops_per_unit") ? std::optional<double>(c["flops_per_unit"].get<double>())
                                       : std::nullopt,
          c.value("peak_kind", std::string()), peak);
    }
  }
  if (!search_warning.empty() && record.ok() && record.message.empty()) {
    record.message = search_warning;  // the timed run's record must not drop it
  }
  record.search = search;
  record.batch_source = source;
  record.confirm = attempts;
  record.wall_seconds = seconds_since(started);
  fill_identity(record, config, run, plan.device);
  normalize(record, config, store.reference());
  return record;
}

}  // namespace gpubench
