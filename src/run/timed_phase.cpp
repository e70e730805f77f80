// The worker's timed phase (time_phase) in its steps: the step built, the warm-up, the timed
// window, the record filled from it, and the losses read at both ends; and a memory tier's
// confirm (confirm_phase).
#include "gpubench/base/strings.h"
#include "gpubench/device/device.h"
#include "gpubench/device/nvml.h"
#include "gpubench/device/profile.h"
#include "gpubench/measure/timing.h"
#include "gpubench/records/result.h"
#include "gpubench/run/worker.h"
#include "src/run/worker_progress.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace gpubench {

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
  record.memory.confirm_steps = steps;
  // A tier's batch is an answer only where the model trains soundly: its losses are read, as a
  // timed run's are.
  const LossReading reading = read_losses(*step);
  record.losses = reading.values;
  if (!reading.non_finite.empty()) {
    record.status = JobStatus::diverged;
    record.message = fmt::format("loss '{}' is {} after {} at batch {} in a fresh process",
                                 reading.non_finite, reading.non_finite_value,
                                 counted(steps, "step"), ctx.batch);
    worker_log(record.model, "diverged: " + record.message);
    return;
  }
  record.status = JobStatus::ok;
  worker_log(record.model, fmt::format("batch {} trained {} in a fresh process (peak {})",
                                       ctx.batch, counted(steps, "step"),
                                       format_bytes(static_cast<double>(stats.reserved_peak))));
}

namespace {

/// runtime.cuda_graphs_if_host_bound, after the eager warm-up: when the host's share of the
/// last steps (at least one cycle of the step's mix) reaches kHostBoundShare, turns CUDA graphs
/// on and runs more warm-up steps (`warm_step`) until a whole cycle, and at least two steps,
/// replayed without a capture, so that no capture falls in the timed window. Returns the
/// decision for the record's warmup.host_bound (null when the setting is off).
Json graphs_if_host_bound(const std::string& model, TrainStep& step, const RuntimeSettings& runtime,
                          int cycle, const std::vector<double>& host_ms,
                          const std::vector<double>& warm_ms,
                          const std::function<void()>& warm_step) {
  if (!runtime.cuda_graphs_if_host_bound || runtime.cuda_graphs) return nullptr;
  const HostShare share = host_share(host_ms, warm_ms, std::max(3, cycle));
  Json out = {
      {"steps", share.steps}, {"host_ms", share.host_ms},     {"device_ms", share.device_ms},
      {"share", share.share}, {"threshold", kHostBoundShare}, {"host_bound", share.host_bound},
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

/// The step a timed phase trains and the settings it is timed with: the run's, with at least the
/// step's own warm-up, and a window of whole cycles of its step mix.
struct TimedStep {
  std::unique_ptr<TrainStep> step;
  TimingSettings timing;
  int cycle = 1;  ///< the step mix repeats every `cycle` steps
  /// The warm-up runs every shape of the cycle (uniform steps, or shapes that build: see
  /// TrainStep::builds_per_shape); false: until nothing is left to build
  bool every_shape = true;
};

TimedStep build_timed_step(JobRecord& record, const Architecture& arch, const StepContext& ctx,
                           const RunSettings& run) {
  TimedStep built;
  TimingSettings& t = built.timing;
  t = ctx.device.is_cuda() ? run.timing : run.cpu_timing;
  Heartbeat::phase(fmt::format("building the step at batch {}", ctx.batch));
  built.step = arch.prepare(ctx);
  TrainStep& step = *built.step;
  // The optimizer state before the first step, as the search's probe allocated it: a first
  // update puts it among the blocks the first step's activations freed, and at the searched
  // batch every timed run on the H200 that ran out of memory so (2026-12-02) was short by less
  // than the memory the allocator held reserved but unused (docs/search.md, "The suite's
  // floor").
  step.allocate_optimizer_state();
  // A step of varying shapes whose first run of each builds something (autotuning, a capture)
  // warms up over every shape; one that builds nothing per shape only over its opening (the
  // steps before its cycle), then until the allocator stops growing (warmup_done, rule 2).
  const bool varying = !step.uniform_steps();
  built.every_shape = !varying || step.builds_per_shape();
  const int64_t own = built.every_shape ? step.warmup_steps() : step.opening_steps();
  t.warmup_steps = std::max<int>(t.warmup_steps, static_cast<int>(own));
  t.max_warmup_steps = std::max(t.max_warmup_steps, t.warmup_steps);
  if (varying) t.steady_tolerance = -1;  // never "steady": the times differ by shape
  // A step mix that repeats every `cycle` steps is timed over whole cycles.
  built.cycle = static_cast<int>(std::max<int64_t>(1, step.representative_steps()));
  t.min_steps = std::max(t.min_steps, built.cycle);
  record.batch_info = step.batch_info();
  for (const auto& [network, params] : step.parameters()) {
    record.trainable_params[network] = count_trainable(params);
  }
  return built;
}

/// What the warm-up ran: each step's device time, and the host's time inside each run().
struct Warmup {
  std::vector<double> warm_ms;
  std::vector<double> host_ms;
};

/// The warm-up, on `clock`: steps until cuDNN autotuning and allocator growth are over and step
/// times are steady (and the step settled, within limits), then CUDA graphs where the host bounds
/// the step (graphs_if_host_bound). Fills record.warmup and record.runtime.
Warmup warm_up(JobRecord& record, TrainStep& step, StepClock& clock, const StepContext& ctx,
               const TimingSettings& t, int cycle, bool every_shape, StepAgreement& agreement) {
  const torch::Device& device = ctx.device;
  Warmup w;
  WarmupShapes shapes;
  shapes.every_shape = every_shape;
  auto warm_step = [&] {
    clock.clear();
    clock.mark();
    // The allocator's reserve before and after the step's enqueueing: its requests are made on
    // the host, so a reserve that grew means the step took memory from the driver (no sync).
    const int64_t reserved_before = memory_stats(device).reserved_current;
    const auto host_start = std::chrono::steady_clock::now();
    step.run();
    w.host_ms.push_back(1000.0 * seconds_since(host_start));
    shapes.allocator_grew = memory_stats(device).reserved_current > reserved_before;
    clock.mark();
    w.warm_ms.push_back(clock.intervals_ms().front());
  };
  WarmupEnd reason = WarmupEnd::none;
  std::string detail;
  // Steps that may still autotune are never timed, whatever the warm-up's limits.
  const int autotune =
      device.is_cuda()
          ? autotune_steps(step.uniform_steps(), step.warmup_steps(), every_shape)
          : 0;
  const auto warm_start = std::chrono::steady_clock::now();
  // Steps the warm-up may add after its rules are met while the step is not settled (an fp16
  // loss scale backing off halves per skipped update: 16 steps take 65536 to 1).
  constexpr std::size_t kMaxSettlingSteps = 64;
  std::size_t settling_steps = 0;
  std::string settling;
  while (true) {
    const auto decision = warmup_done(w.warm_ms, seconds_since(warm_start), t, autotune, shapes);
    std::string why;
    bool broken = false;
    if (decision.done) {
      why = step.unsettled();
      // Every 8 settling steps the losses are read (a sync, outside any window): a loss already
      // NaN or infinite will not settle, so the warm-up ends there and the window's first
      // reading says `diverged` instead of 64 more steps of a broken model.
      broken = !why.empty() && settling_steps > 0 && settling_steps % 8 == 0 &&
               !read_losses(step).non_finite.empty();
    }
    const bool done =
        decision.done && (why.empty() || settling_steps >= kMaxSettlingSteps || broken);
    // Every rank of a data-parallel run ends its warm-up at the same step.
    if (agreement.decide(done)) {
      reason = decision.reason;
      detail = decision.detail;
      if (settling_steps > 0) {
        detail += fmt::format("{}then {} more step{} while {}{}", detail.empty() ? "" : "; ",
                              settling_steps, settling_steps == 1 ? "" : "s", settling,
                              broken        ? " (stopped: a loss is no longer finite)"
                              : why.empty() ? ""
                                            : " (still so)");
      }
      if (!done) {
        detail += fmt::format("{}ended with rank 0's warm-up", detail.empty() ? "" : "; ");
      }
      break;
    }
    if (!why.empty()) {
      if (settling_steps == 0) worker_log(record.model, "warm-up goes on: " + why);
      settling = why;
      ++settling_steps;
    }
    Heartbeat::phase(fmt::format(
        "warm-up step {} at batch {}{}", w.warm_ms.size() + 1, ctx.batch,
        static_cast<int>(w.warm_ms.size()) < autotune ? " (cuDNN autotunes each new shape)" : ""));
    warm_step();
  }
  const Json host_bound =
      graphs_if_host_bound(record.model, step, ctx.runtime, cycle, w.host_ms, w.warm_ms, warm_step);
  Heartbeat::phase("after the warm-up");
  const double warm_seconds = seconds_since(warm_start);
  WarmupRecord& warmup = record.warmup.emplace();
  warmup.steps = static_cast<int64_t>(w.warm_ms.size());
  warmup.reason = reason;
  warmup.detail = detail;
  warmup.seconds = warm_seconds;
  warmup.autotune_steps = autotune;
  warmup.step_time_ms = w.warm_ms;
  warmup.every_shape = every_shape;
  if (!host_bound.is_null()) warmup.host_bound = host_bound;
  worker_log(record.model, fmt::format("warm-up: {} in {:.1f} s ({}{})",
                                       counted(static_cast<int64_t>(w.warm_ms.size()), "step"),
                                       warm_seconds, to_string(reason),
                                       detail.empty() ? "" : ": " + detail));
  // How the step runs (launch, precision, optimizer kernels), settled by the warm-up: a CUDA
  // graph is captured there.
  record.runtime = step.runtime_info();
  return w;
}

/// A developer's trace of a few more steps (GPUBENCH_PROFILE_TRACE), outside the window.
void profile_if_asked(const std::string& model, TrainStep& step, const torch::Device& device) {
  const ProfileRequest profile = ProfileRequest::from_environment();
  if (profile.trace_path.empty()) return;
  const std::string why_not = profile_steps(
      profile, [&] { step.run(); }, [&] { synchronize(device); });
  worker_log(model, why_not.empty()
                        ? fmt::format("profiled {} into {}", counted(profile.steps, "step"),
                                      profile.trace_path)
                        : "no profile: " + why_not);
}

/// The memory after the warm-up, whose peak holds autotuning's trial workspaces (the timed
/// window's is training's): record.memory and the peaks so far. Returns the reading.
MemoryStats record_warmup_memory(JobRecord& record, const torch::Device& device,
                                 const MemoryStats& before_warmup) {
  const MemoryStats warm_stats = memory_stats(device);
  MemoryRecord memory;
  memory.autotune_peak_allocated_bytes = warm_stats.allocated_peak;
  memory.autotune_peak_reserved_bytes = warm_stats.reserved_peak;
  memory.cudnn = cudnn_algorithm_choice_json();
  memory.allocator = allocator_json(device);
  memory.allocator_counters_warmup = AllocatorCounters::from_json(
      allocator_counters_between(before_warmup, warm_stats), "memory.allocator_counters_warmup");
  record.memory = std::move(memory);
  record.peak_memory_bytes = warm_stats.reserved_peak;
  record.peak_allocated_bytes = warm_stats.allocated_peak;
  return warm_stats;
}

/// A model that no longer trains soundly: status "diverged", and its throughput kept aside.
void mark_diverged(JobRecord& record, const std::string& problem) {
  record.status = JobStatus::diverged;
  record.message = problem +
                   "; the throughput of a model that no longer trains soundly is "
                   "not a result";
  record.diverged_throughput = record.throughput;
  record.throughput = 0;
  worker_log(record.model, "diverged: " + problem);
}

/// What the timed window measured.
struct Window {
  double units = 0;  ///< the units the steps trained
  /// Their training FLOPs (TrainStep::step_flops() summed); none once a step had none.
  std::optional<double> flops = 0.0;
  int steps = 0;
  std::vector<double> times;  ///< each step's device time [ms]
  std::optional<double> noise;
  WindowStop stop = WindowStop::none;  ///< why it ended (window_stop, or step_limit)
  double seconds = 0;  ///< the window's device time
};

/// The timed window: each step between device events; the host may run ahead, so the window is
/// checked against device time once the host thinks it is long enough. Ends when window_stop
/// says so. Fills record.clocks (NVML's samples, and the energy).
Window time_window(JobRecord& record, TrainStep& step, StepClock& clock, const StepContext& ctx,
                   const TimingSettings& t, int cycle, StepAgreement& agreement) {
  const torch::Device& device = ctx.device;
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
  ClockSampler sampler(device.is_cuda() ? cuda_device_info(device.index()).pci_bus_id : "");
  sampler.start();
  clock.clear();
  clock.mark();
  Window w;
  const auto window_start = std::chrono::steady_clock::now();
  constexpr int kMaxSteps = 1000000;
  int next_check = 0;  // past the minimum: the step count of the next look at the noise
  // This rank's look at the window after a whole cycle: whether it would stop here. A look
  // past the minimum waits for the device, as the host may have run ahead of it.
  auto look = [&] {
    if (w.steps < next_check) return false;
    if (!window_done(w.steps, seconds_since(window_start), t)) return false;
    w.times = clock.intervals_ms();
    double device_seconds = 0;
    for (double ms : w.times) device_seconds += ms / 1000.0;
    if (!window_done(w.steps, device_seconds, t)) return false;
    w.noise = window_noise(w.times, cycle);
    w.stop = window_stop(w.noise, static_cast<int>(w.times.size()) / cycle, device_seconds, t);
    if (w.stop != WindowStop::none) return true;
    // The next look after about a quarter more steps, whole cycles, and not far past the limit.
    const double per_step = device_seconds / w.steps;
    const int to_limit =
        per_step > 0 ? static_cast<int>(std::ceil((t.max_seconds - device_seconds) / per_step)) : 1;
    int more = std::max(1, std::min(w.steps / 4, to_limit));
    more = (more + cycle - 1) / cycle * cycle;
    next_check = w.steps + more;
    return false;
  };
  while (true) {
    w.units += step.run();
    clock.mark();
    const std::optional<double> step_flops = step.step_flops();  // host arithmetic, no sync
    w.flops = w.flops && step_flops ? std::optional<double>(*w.flops + *step_flops) : std::nullopt;
    ++w.steps;
    if (w.steps >= kMaxSteps) {
      w.times = clock.intervals_ms();
      w.noise = window_noise(w.times, cycle);
      w.stop = WindowStop::step_limit;
      break;
    }
    if (w.steps % cycle != 0) continue;
    // Every rank of a data-parallel run agrees after each cycle, so all end at the same step.
    const bool stop = look();
    if (!agreement.decide(stop)) {
      w.stop = WindowStop::none;
      continue;
    }
    if (!stop) {
      w.times = clock.intervals_ms();
      w.noise = window_noise(w.times, cycle);
      w.stop = WindowStop::with_rank_0;
    }
    break;
  }
  // device/ speaks JSON (it comes before records/): its summaries read as the record's field.
  record.clocks = ClocksRecord::from_json(sampler.stop(), "clocks");
  for (double ms : w.times) w.seconds += ms / 1000.0;
  if (const Json energy =
          energy_summary(sampler.energy_joules(), w.units, w.steps, sampler.energy_seconds());
      !energy.empty()) {
    record.clocks.energy = WindowEnergy::from_json(energy, "clocks.energy");
  }
  return w;
}

/// The record's numbers from the window: step times, throughput, the peaks over the warm-up and
/// the window, what the window's allocator did (with a warning when it retried or ran out).
void record_window(JobRecord& record, const Window& w, const torch::Device& device,
                   const MemoryStats& warm_stats, const MemoryStats& before_window) {
  record.step_time_ms = w.times;
  record.timing = summarize_steps(w.times, w.seconds);
  record.timing.noise = w.noise;
  record.timing.stop = w.stop;
  record.units_per_step = w.units / w.steps;
  // The FLOPs the window's steps ran, per unit: batch_phase (worker.cpp) turns them into the
  // record's compute.
  record.compute = FlopsPerUnit::of_window(w.flops, w.units, w.steps).to_compute();
  record.throughput = w.seconds > 0 ? w.units / w.seconds : 0;
  const MemoryStats stats = memory_stats(device);
  record.peak_memory_bytes = std::max(warm_stats.reserved_peak, stats.reserved_peak);
  record.peak_allocated_bytes = std::max(warm_stats.allocated_peak, stats.allocated_peak);
  record.memory.resident_bytes = stats.allocated_current;
  record.memory.window_peak_allocated_bytes = stats.allocated_peak;
  record.memory.window_peak_reserved_bytes = stats.reserved_peak;
  // What the process holds outside the allocator once training ran (context, kernels, handles).
  if (device.is_cuda()) record.memory.outside_allocator_bytes = outside_allocator_bytes(device);
  const AllocatorCounters window_counters = AllocatorCounters::from_json(
      allocator_counters_between(before_window, stats), "memory.allocator_counters_window");
  record.memory.allocator_counters_window = window_counters;
  // A window where the allocator had to free its cache and retry, or ran out, timed thrashing.
  if (window_counters.alloc_retries > 0 || window_counters.ooms > 0) {
    const std::string warning = fmt::format(
        "warning: the caching allocator retried {} and ran out of memory {} in the timed "
        "window (the batch is at the memory edge; its time includes freeing and refilling "
        "the cache)",
        counted(window_counters.alloc_retries, "allocation"),
        counted(window_counters.ooms, "time"));
    worker_log(record.model, warning);
    record.message = record.message.empty() ? warning : record.message + "; " + warning;
  }
}

}  // namespace

void time_phase(JobRecord& record, const Architecture& arch, const StepContext& ctx,
                const RunSettings& run, StepAgreement* agreement) {
  StepAgreement alone;
  StepAgreement& agree = agreement ? *agreement : alone;
  const torch::Device& device = ctx.device;
  const TimedStep built = build_timed_step(record, arch, ctx, run);
  TrainStep& step = *built.step;
  const TimingSettings& t = built.timing;
  reset_peak_memory(device);
  const MemoryStats before_warmup = memory_stats(device);  // its counters, for the warm-up's
  worker_log(record.model, fmt::format("warm-up at batch {}", ctx.batch));
  StepClock clock(device);
  const Warmup warmup = warm_up(record, step, clock, ctx, t, built.cycle, built.every_shape, agree);
  profile_if_asked(record.model, step, device);
  const MemoryStats warm_stats = record_warmup_memory(record, device, before_warmup);
  // The model's health before the window: reading the losses synchronizes, so it happens here,
  // outside the timed region.
  const LossReading at_start = read_losses(step);
  record.losses_start = at_start.values;
  if (!at_start.non_finite.empty()) {
    // Timing a model that already diverged would measure nothing worth keeping.
    record.losses = at_start.values;
    mark_diverged(
        record, fmt::format("loss '{}' is {} at the start of the timed window (after "
                            "{} warm-up steps)",
                            at_start.non_finite, at_start.non_finite_value, warmup.warm_ms.size()));
    return;
  }
  reset_peak_memory(device);
  const MemoryStats before_window = memory_stats(device);
  step.begin_window();
  const Window window = time_window(record, step, clock, ctx, t, built.cycle, agree);
  record_window(record, window, device, warm_stats, before_window);
  Heartbeat::phase("");
  const LossReading at_end = read_losses(step);
  record.losses = at_end.values;
  record.runtime = step.runtime_info();  // again: with loss scaling, the updates it skipped
  worker_log(
      record.model,
      fmt::format("timed: {} in {:.2f} s, {} {}{}", counted(window.steps, "step"), window.seconds,
                  format_significant(record.throughput, 4), record.throughput_unit,
                  window.stop == WindowStop::minimum ? std::string()
                  : window.noise ? fmt::format(" (+-{:.2f}%, {})", 100 * *window.noise,
                                               to_string(window.stop))
                                 : fmt::format(" ({})", to_string(window.stop))));

  // A number is a result only when the model it timed was training soundly: finite losses at
  // both ends of the window, and the workload's own degeneracy check.
  if (!at_end.non_finite.empty()) {
    mark_diverged(record, fmt::format("loss '{}' is {} at the end of the timed window (after {} "
                                      "warm-up and {} timed steps)",
                                      at_end.non_finite, at_end.non_finite_value,
                                      warmup.warm_ms.size(), window.steps));
    return;
  }
  const std::string degenerate = step.degeneracy();
  if (!degenerate.empty()) mark_diverged(record, "the model is degenerate: " + degenerate);
}

}  // namespace gpubench
