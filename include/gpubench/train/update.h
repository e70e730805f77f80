// The update half of every training step: loss scaling for amp-fp16, gradient unscaling,
// clipping, the optimizer step and the learning-rate schedule, with no host synchronization
// except the one amp-fp16 needs to skip a step on overflow (as PyTorch's GradScaler does).
#pragma once

#include "gpubench/base/precision.h"
#include "gpubench/train/optimizers.h"

#include <torch/types.h>

#include <memory>
#include <vector>

namespace gpubench::train {

/// Scales the global L2 norm of the gradients down to `max_norm` on the device; returns the
/// norm before clipping as a 0-dim tensor (reading it would synchronize).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);

/// Dynamic loss scaling (torch.cuda.amp.GradScaler's algorithm); a no-op when disabled.
class GradScaler {
 public:
  GradScaler(bool enabled, const torch::Device& device, double init_scale = 65536.0,
             double growth_factor = 2.0, double backoff_factor = 0.5,
             int64_t growth_interval = 2000);

  bool enabled() const { return enabled_; }
  /// loss * scale.
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// Divides the gradients by the scale and records whether any is inf or NaN.
  void unscale(const std::vector<torch::Tensor>& parameters);
  /// Whether the optimizer may step (false after an overflow). Reads one flag on the host, and
  /// counts the update as checked (and skipped, after an overflow).
  bool should_step();
  /// Updates checked by should_step() so far, and how many of them were skipped. Host counters:
  /// reading them does not synchronize.
  int64_t updates_checked() const { return checked_; }
  int64_t updates_skipped() const { return skipped_; }
  /// Whether the last update checked was skipped.
  bool last_skipped() const { return last_skipped_; }
  /// Updates that stepped since the last skipped one (since the first, when none was skipped).
  int64_t steps_since_skip() const { return steps_since_skip_; }
  /// Clean updates after which the scale grows (and the next overflow may be the grown scale's).
  int64_t growth_interval() const { return growth_interval_; }
  /// Adjusts the scale: back off after an overflow, grow after growth_interval clean steps.
  void update();
  /// The current scale (reading it synchronizes).
  double current_scale() const;

 private:
  bool enabled_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  torch::Tensor scale_, found_inf_, growth_tracker_;
  int64_t checked_ = 0, skipped_ = 0, steps_since_skip_ = 0;
  bool last_skipped_ = false;
};

/// One optimizer with its loss scaling, clipping and schedule:
/// scale -> backward -> unscale -> clip -> step (unless overflow) -> scaler update -> schedule.
/// Workloads hand their Updaters to a train::Runtime, which runs them; the standalone methods
/// (backward_and_step, step) are the same update run eagerly.
class Updater {
 public:
  /// `clip_norm` <= 0 disables clipping; an empty `schedule` keeps the optimizer's rate.
  Updater(std::unique_ptr<Optimizer> optimizer, Precision precision, const torch::Device& device,
          double clip_norm = 0, LrSchedule schedule = {});

  void zero_grad() { optimizer_->zero_grad(); }
  /// backward(loss) and one update of every parameter of the optimizer.
  void backward_and_step(const torch::Tensor& loss);
  /// Scaled backward only (several losses into one update); then call step().
  void backward(const torch::Tensor& loss, bool retain_graph = false);
  /// Unscale, clip, step and schedule, after backward(): one eager update. An update that fp16
  /// loss scaling skips still gives the optimizer its state (Optimizer::allocate_state()).
  void step();

  // The halves of an update, for a runtime that captures update_kernels() in a CUDA graph and
  // replays it: prepare_update(slot) before each replay, finish_update() after.
  /// Host: the scheduled rate of this update, and the optimizer's prepare(slot).
  void prepare_update(int slot);
  /// Device: unscale (a no-op without fp16 scaling), clip, and the optimizer's update(slot).
  /// Reads nothing on the host.
  void update_kernels(int slot);
  /// Host: the schedule's rate for the next update.
  void finish_update();

  /// The gradients of the optimizer's parameters that have one.
  std::vector<torch::Tensor> gradients() const;
  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  const GradScaler& scaler() const { return scaler_; }
  double clip_norm() const { return clip_norm_; }
  bool scheduled() const { return static_cast<bool>(schedule_); }

 private:
  std::unique_ptr<Optimizer> optimizer_;
  GradScaler scaler_;
  double clip_norm_;
  LrSchedule schedule_;
};

}  // namespace gpubench::train
