// The update half of every training step: loss scaling for amp-fp16, gradient unscaling,
// clipping, the optimizer step and the learning-rate schedule, with no host synchronization
// except the one amp-fp16 needs to skip a step on overflow (as PyTorch's GradScaler does).
#pragma once

#include "gpubench/precision.h"
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
  /// Whether the optimizer may step (false after an overflow). Reads one flag on the host.
  bool should_step() const;
  /// Adjusts the scale: back off after an overflow, grow after growth_interval clean steps.
  void update();
  /// The current scale (reading it synchronizes).
  double current_scale() const;

 private:
  bool enabled_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  torch::Tensor scale_, found_inf_, growth_tracker_;
};

/// Runs backward and the update for one optimizer:
/// scale -> backward -> unscale -> clip -> step (unless overflow) -> scaler update -> schedule.
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
  /// Unscale, clip, step and schedule, after backward().
  void step();

  Optimizer& optimizer() { return *optimizer_; }
  const GradScaler& scaler() const { return scaler_; }

 private:
  std::unique_ptr<Optimizer> optimizer_;
  GradScaler scaler_;
  double clip_norm_;
  LrSchedule schedule_;
};

}  // namespace gpubench::train
