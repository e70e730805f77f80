// The training runtime every workload's step runs through. A workload describes its model(s),
// its batch and its loss; the runtime owns the rest of a training iteration:
// - precision: the autocast scope of forward and loss, and dynamic loss scaling for amp-fp16
//   (each Updater's GradScaler);
// - the updaters: optimizer (multi-tensor or fused kernels), schedule, clipping, one per
//   network for a GAN;
// - the gradient-synchronization seam between backward and the update (GradientSync, a no-op
//   by default; data-parallel training hooks its all-reduce in there);
// - how an iteration is launched: eagerly, or captured once per batch shape as a CUDA graph on
//   a side stream (after one eager run of that shape, in one private memory pool) and replayed.
//
// A step, in full:
//
//   class MyStep final : public train::RuntimeStep {
//    public:
//     explicit MyStep(const StepContext& ctx)
//         : RuntimeStep(ctx), model_(build(ctx)),
//           updater_(runtime_.add("model", make_updater(*model_, ctx))) {}
//     double run() override {
//       return runtime_.run([&] {
//         updater_.zero_grad();
//         torch::Tensor loss;
//         {
//           const auto autocast = runtime_.autocast();
//           loss = criterion(model_->forward(batch_.x), batch_.y);
//         }
//         runtime_.record_loss("loss", loss);
//         runtime_.backward(updater_, loss);
//         runtime_.update(updater_);
//         return static_cast<double>(batch_.x.size(0));
//       });
//     }
//     ...
//   };
//
// What the lambda may do: enqueue device work, and change host state that it sets the same way
// every time (zero_grad, requires_grad, train()/eval()). It must not read the device, nor
// depend on host state that changes between iterations: with CUDA graphs it runs once per batch
// shape, and replays repeat its device work only. Choose the batch outside it and say which it
// is (`run(variant, body)`). Host values that change per update (the scheduled rate, Adam's step
// count) live in the optimizers' device scalars, written before every replay.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/base/precision.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"

#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpubench::train {

/// The seam for data-parallel training. The runtime calls synchronize() once per update, after
/// backward and before the gradients are unscaled, clipped and applied, with the gradients of
/// the updater's parameters that have one; the default does nothing (one process, one GPU).
/// Under CUDA graphs it runs inside the capture, so it may only enqueue device work (NCCL
/// collectives can be captured).
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Makes `gradients` (in place) what every replica applies: a DDP reducer all-reduces them
  /// and divides by the world size. `updater` names the network ("model", "generator", ...).
  virtual void synchronize(const std::string& updater, std::vector<torch::Tensor>& gradients) {
    (void)updater, (void)gradients;
  }
  /// For the record: "none", "nccl-allreduce", ...
  virtual std::string name() const { return "none"; }
  /// Called once per network when the runtime takes its updater over, before any backward:
  /// `parameters` are the optimizer's, in registration order. A reducer hooks them here so
  /// that it can all-reduce gradients while backward still runs. Default: nothing
  virtual void attach(const std::string& updater, const std::vector<torch::Tensor>& parameters) {
    (void)updater, (void)parameters;
  }
  /// Called before each backward the runtime runs, with the network whose update its gradients
  /// are for. A backward can reach another network's parameters too (a GAN's generator loss
  /// runs through the discriminator): a reducer leaves those gradients to that network's own
  /// backward or update rather than all-reducing them now and again there. Default: nothing
  virtual void backward_for(const std::string& updater) { (void)updater; }
  /// Why iterations with this sync cannot be captured as CUDA graphs, or "" when they can.
  virtual std::string capture_problem() const { return {}; }
};

/// Runs a workload's training iterations: precision, updaters, gradient sync, launch.
class Runtime {
 public:
  /// Eager runs of a batch shape before it is captured: cuDNN autotuning, cuBLAS workspaces and
  /// the optimizer state happen there, outside the capture. One, so that the search's two-step
  /// probe (what a probe runs with graphs on) captures and replays (its peak memory includes
  /// the graph's pool).
  static constexpr int kEagerRunsBeforeCapture = 1;

  /// Precision, device, settings and gradient sync of `ctx`.
  explicit Runtime(const StepContext& ctx);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Takes `updater` over (its kernels set for the device) and returns it; `name` is the
  /// network it updates ("model", "generator", "discriminator").
  Updater& add(const std::string& name, Updater updater);

  /// Keeps CUDA graphs off for this step (recorded with `reason`): a step whose iteration reads
  /// the device or changes shape from run to run in ways run(variant, ...) cannot key.
  void disable_graphs(const std::string& reason);
  /// Turns CUDA graphs on from the next run() of a runtime that started eager
  /// (RuntimeSettings::cuda_graphs_if_host_bound): every variant then runs
  /// kEagerRunsBeforeCapture times more on the side stream, is captured, and replays. Returns ""
  /// when graphs are on, else why not (CPU, amp-fp16, a host-side optimizer rate, a gradient
  /// sync that cannot be captured, or the step's own disable_graphs()). When a capture after
  /// this fails (out of memory, say), the runtime goes back to eager iterations and says why in
  /// info()'s cuda_graphs_note.
  std::string enable_graphs();
  /// run() calls in a row, up to the last, that replayed a graph without an eager run or a
  /// capture; 0 while graphs are off.
  int64_t replays_in_a_row() const { return replays_in_a_row_; }

  /// One training iteration: `body` eagerly, or the CUDA graph captured from it for `variant`
  /// (a batch shape: steps cycling through several batches give each its index). Returns what
  /// `body` returned when it ran for this variant (the units it processed).
  double run(int64_t variant, const std::function<double()>& body);
  double run(const std::function<double()>& body) { return run(0, body); }

  /// The autocast scope of forward and loss: autocast to the AMP dtype, nothing in fp32/tf32.
  [[nodiscard]] AutocastGuard autocast() const { return AutocastGuard(precision_, device_); }

  /// The scaled backward of `loss` into `updater`'s parameters (fp16 loss scaling). With
  /// GPUBENCH_DETECT_ANOMALY=K (diagnosis), from the process's K-th backward on under autograd's
  /// anomaly mode: the first node returning NaN throws, naming itself.
  void backward(Updater& updater, const torch::Tensor& loss, bool retain_graph = false);
  /// One update of `updater`: gradient sync, unscale, clip, optimizer step, scaler, schedule.
  void update(Updater& updater);

  /// Gives every updater's optimizer its state for all its parameters, as after a first update
  /// of each (Optimizer::allocate_state(StateFor::kEveryParameter)); updates nothing.
  void allocate_optimizer_state();
  /// Keeps `loss` (detached) as the iteration's loss `name`. Under CUDA graphs it is copied into
  /// a buffer that replays refresh.
  void record_loss(const std::string& name, const torch::Tensor& loss);
  /// The last iteration's losses by name (reading them synchronizes).
  std::map<std::string, torch::Tensor> losses() const;

  /// Warm-up steps so that every variant of `order` (the variants of steps 1, 2, ...) is
  /// captured before timing starts: `eager_steps` when graphs are off, else at least up to the
  /// capture of the last variant that `order` repeats.
  int64_t warmup_steps(int64_t eager_steps, const std::vector<int64_t>& order) const;

  /// Whether iterations are captured and replayed (asked for, on CUDA, and possible).
  bool graphs_active() const { return graphs_active_; }
  Precision precision() const { return precision_; }
  const torch::Device& device() const { return device_; }

  /// For the record: launch, precision, loss scaling, gradient sync, each updater's optimizer
  /// (and, with loss scaling, the updates it checked and skipped so far).
  Json info() const;

  /// Marks the start of the timed window (outside it): degeneracy() looks at the updates after.
  void begin_window();
  /// Why the iterations since begin_window() did not train soundly, or "": with amp-fp16 loss
  /// scaling, an updater whose every update in the window was skipped (its scaled gradients
  /// overflowed each time: its model never changed while it was timed), or that skipped two or
  /// more (a settled scale skips at most once per growth interval, right after it grew; a
  /// second skip in a shorter window means the scale was still falling, and the window timed
  /// steps that mostly did not update). Reads the loss scale (synchronizes) only when it has
  /// something to say.
  std::string degeneracy() const;
  /// "" unless an updater with loss scaling is still backing off: it skipped its last update,
  /// or has stepped fewer than kSettledUpdates updates since a skip. Then what the warm-up
  /// waits for. Host counters only.
  std::string unsettled() const;
  /// Clean updates in a row after a skip before a loss scale counts as settled.
  static constexpr int64_t kSettledUpdates = 3;

 private:
  struct Graphs;  // the CUDA side: stream, pool, one graph per variant

  Precision precision_;
  torch::Device device_;
  RuntimeSettings settings_;
  std::shared_ptr<GradientSync> sync_;
  std::vector<std::pair<std::string, std::unique_ptr<Updater>>> updaters_;
  /// Why CUDA graphs cannot run for this step ("" when they can): the device, the build, the
  /// precision, the gradient sync, an updater's host-side rate, disable_graphs().
  std::string graphs_problem() const;
  /// run() with graphs on: the variant's eager runs, its capture, then its replays.
  double launch(int64_t variant, const std::function<double()>& body);

  bool graphs_active_ = false;
  bool graphs_enabled_late_ = false;  // by enable_graphs(), not from the start
  std::string graphs_note_;  // why graphs are off although asked for
  std::string graphs_refused_;  // the step's disable_graphs() reason, asked for or not
  int64_t replays_in_a_row_ = 0;
  std::unique_ptr<Graphs> graphs_;
  std::map<std::string, torch::Tensor> losses_;
  std::map<const Updater*, std::pair<int64_t, int64_t>> window_start_;  // checked, skipped
  /// The fused loss's, norm's and softmax's calls in this process when this runtime began:
  /// info() says each ran only where its count grew since (a setting that is on where nothing
  /// takes it, such as the softmax in fused attention, did not run).
  int64_t loss_calls_at_start_ = 0;
  int64_t norm_calls_at_start_ = 0;
  int64_t softmax_calls_at_start_ = 0;
};

/// A TrainStep whose iterations run through `runtime_`: its losses and the record's runtime
/// field come from there. The derived step implements run() as `return runtime_.run(...)`.
class RuntimeStep : public TrainStep {
 public:
  std::map<std::string, torch::Tensor> losses() const override { return runtime_.losses(); }
  Json runtime_info() const override { return runtime_.info(); }
  /// One step; two with CUDA graphs, so that the capture (on the second run) happens in the
  /// warm-up, never in the timed window. Steps that cycle batches override this with
  /// runtime_.warmup_steps(..., their order).
  int64_t warmup_steps() const override { return runtime_.warmup_steps(1, {0, 0}); }
  void begin_window() override { runtime_.begin_window(); }
  /// The optimizer state allocated; eager iterations only (with CUDA graphs the probe's second
  /// run captures). Steps that cycle batches also point the next run() at the batches that may
  /// peak highest (TokenBatches::probe_batches()); unsupmt at the passes where its iteration
  /// peaks.
  bool prepare_probe() override {
    if (runtime_.graphs_active()) return false;
    runtime_.allocate_optimizer_state();
    return true;
  }
  /// Every updater's state for all its parameters (Runtime::allocate_optimizer_state), with or
  /// without CUDA graphs: the eager runs before a capture find it in place.
  void allocate_optimizer_state() override { runtime_.allocate_optimizer_state(); }
  std::string degeneracy() const override { return runtime_.degeneracy(); }
  std::string unsettled() const override { return runtime_.unsettled(); }
  std::string enable_graphs() override { return runtime_.enable_graphs(); }
  int64_t replays_in_a_row() const override { return runtime_.replays_in_a_row(); }

 protected:
  explicit RuntimeStep(const StepContext& ctx) : runtime_(ctx) {}

  Runtime runtime_;
};

}  // namespace gpubench::train
