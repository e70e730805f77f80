// Optimizers as the reference codebases define them, written with libtorch's multi-tensor
// (_foreach) kernels: a few launches per parameter group instead of several per parameter. With
// UpdateKernels::kDevice (what the training runtime picks on CUDA) Adam, AdamW and SGD run
// libtorch's fused kernels, whose math is theirs, and every optimizer reads its per-update
// scalars (the rate, Adam's step count) from device tensors, so that an update captured in a
// CUDA graph is right when it is replayed. None reads a value on the host, so a training step
// never synchronizes.
#pragma once

#include "gpubench/base/json.h"

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpubench {
class Params;
}

namespace gpubench::train {

/// Parameters that share a weight decay.
struct ParamGroup {
  std::vector<torch::Tensor> params;
  double weight_decay = 0;  ///< coefficient; how it applies is the optimizer's (L2 or decoupled)
};

/// Which kernels run an update and where its per-update scalars live.
enum class UpdateKernels {
  /// Multi-tensor (_foreach) kernels, the rate and bias corrections passed as host values: what
  /// runs on the CPU, and on CUDA with `runtime.optimizer_kernels: foreach`.
  kForeach,
  /// libtorch's fused kernel where one has exactly the optimizer's math (Adam, AdamW, SGD; from
  /// libtorch 2.4), multi-tensor kernels otherwise; either way the per-update scalars are read
  /// from device tensors that prepare() writes, so update() enqueues the same kernels with the
  /// same arguments every time and can be captured once and replayed.
  kDevice,
};

/// Which parameters Optimizer::allocate_state() gives state to.
enum class StateFor {
  /// Those that have a gradient now: what the next update would create (a skipped fp16 update).
  kParametersWithGradient,
  /// Every parameter that requires a gradient, gradient or not: the state of a model whose every
  /// parameter has been updated once (a one-step search probe, before its step).
  kEveryParameter,
};

/// Base: parameter groups, the learning rate, zero_grad, and an update split into its host half
/// (prepare) and its device half (update).
class Optimizer {
 public:
  /// Updates of one optimizer that one captured iteration may hold (XLM's step makes four).
  static constexpr int kMaxSlots = 8;

  Optimizer(std::vector<ParamGroup> groups, double lr);
  virtual ~Optimizer() = default;

  /// Sets every gradient to none (as `zero_grad(set_to_none=True)`).
  void zero_grad();
  /// One update at lr(): prepare(0), then update(0). Parameters without a gradient are skipped.
  void step() {
    prepare(0);
    update(0);
  }
  /// The host half of an update: counts it and, with kDevice kernels, writes its scalars (the
  /// rate, the step count) into slot `slot` on the device, where update(slot) reads them.
  virtual void prepare(int slot);
  /// The device half: the kernels of one update, reading slot `slot` (kDevice) or the host
  /// values of the last prepare() (kForeach).
  virtual void update(int slot) = 0;
  /// Creates the state that updates would create for the parameters `which` names, and updates
  /// nothing. An update that fp16 loss scaling skips calls it for the parameters with a
  /// gradient, so that the optimizer holds from the first step on the memory it holds in
  /// training (a search probe whose updates are all skipped counts it too); a one-step search
  /// probe calls it for every parameter before its step. The state gets its initial values, so
  /// the first update that applies does exactly what it would have done without this.
  virtual void allocate_state(StateFor which) { (void)which; }
  /// The state tensors the optimizer holds now (moments, buffers), for memory accounting.
  virtual std::vector<torch::Tensor> state() const { return {}; }

  /// Picks the kernels; call before the first update. kDevice falls back to kForeach where the
  /// optimizer cannot honour it (see kernels()).
  virtual void set_kernels(UpdateKernels kernels);
  UpdateKernels kernels() const { return kernels_; }
  /// For the record: {"name": ..., "kernels": ...} and the optimizer's settings.
  virtual Json describe() const = 0;

  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  /// Updates done so far.
  int64_t steps() const { return steps_; }
  std::vector<torch::Tensor> parameters() const;

 protected:
  /// The group's parameters that have a gradient, and those gradients.
  static void with_grads(const ParamGroup& group, std::vector<torch::Tensor>& params,
                         std::vector<torch::Tensor>& grads);
  /// Writes this update's scalars into row `slot` of scalars_ (kDevice only).
  virtual void write_scalars(int /*slot*/) {}
  /// Allocates scalars_: kMaxSlots rows of `per_slot` floats on the parameters' device.
  void allocate_scalars(int64_t per_slot);
  /// Scalar `index` of row `slot`, a 0-dim float tensor on the device.
  torch::Tensor scalar(int slot, int64_t index) const { return scalars_[slot][index]; }
  /// "fused", "foreach" or, for kDevice without a fused kernel, "foreach, device scalars".
  std::string kernels_name(bool fused) const;

  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t steps_ = 0;
  UpdateKernels kernels_ = UpdateKernels::kForeach;
  torch::Tensor scalars_;  // [kMaxSlots, n] float32 on the parameters' device (kDevice)
};

/// How weight decay enters an Adam-family update.
enum class WeightDecayMode {
  kL2,         ///< added to the gradient (torch.optim.Adam, SGD)
  kDecoupled,  ///< p -= lr * wd * p beside the update (AdamW, BERT's AdamWeightDecay, fairseq)
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool bias_correction = true;  ///< false for BERT's AdamWeightDecayOptimizer
  WeightDecayMode weight_decay_mode = WeightDecayMode::kL2;
};

/// Adam (Kingma & Ba) with optional bias correction and either weight-decay form. Covers
/// torch.optim.Adam, fairseq's and XLM's Adam and google-research/bert's AdamWeightDecay
/// (no bias correction, decoupled decay).
///
/// With kDevice: at::_fused_adam_ (L2) or at::_fused_adamw_ (decoupled), whose math is this
/// formula: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p -= lr / bc1 * m / (sqrt(v) /
/// sqrt(bc2) + eps), bc_i = 1 - b_i^step, with L2 decay added to g or decoupled decay
/// p -= lr wd p first. Without bias correction the fused kernel is given a step count so large
/// that b^step is exactly 0 (so bc1 = bc2 = 1 exactly), which needs b1 < 1 and b2 < 1.
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  void update(int slot) override;
  void allocate_state(StateFor which) override;
  std::vector<torch::Tensor> state() const override;
  void set_kernels(UpdateKernels kernels) override;
  Json describe() const override;

 private:
  void write_scalars(int slot) override;
  bool fused() const;

  AdamOptions options_;
  std::vector<std::vector<torch::Tensor>> exp_avg_, exp_avg_sq_;  // per group, per parameter
};

/// Adam's settings from an `optimizer:` section's "lr", "beta1", "beta2" and "eps", with bias
/// correction and `weight_decay_mode`: the Adam of every workload that has one, which changes the
/// rest itself where its reference's Adam differs (BERT's has no bias correction).
AdamOptions adam_options(const Params& optimizer,
                         WeightDecayMode weight_decay_mode = WeightDecayMode::kL2);
/// Adam over `groups` with adam_options(optimizer, weight_decay_mode).
std::unique_ptr<Adam> make_adam(std::vector<ParamGroup> groups, const Params& optimizer,
                                WeightDecayMode weight_decay_mode = WeightDecayMode::kL2);

struct AdamaxOptions {
  double lr = 2e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
};

/// MT-DNN's BERT-style Adamax (module/bert_optim.py): no bias correction,
/// u = max(beta2 * u, |g| + eps), p -= lr * (m / (u + eps) + wd * p).
class Adamax : public Optimizer {
 public:
  Adamax(std::vector<ParamGroup> groups, AdamaxOptions options);
  void update(int slot) override;
  void allocate_state(StateFor which) override;
  std::vector<torch::Tensor> state() const override;
  void set_kernels(UpdateKernels kernels) override;
  Json describe() const override;

 private:
  void write_scalars(int slot) override;

  AdamaxOptions options_;
  std::vector<std::vector<torch::Tensor>> exp_avg_, exp_inf_;
};

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0;
  bool nesterov = false;
};

/// torch.optim.SGD: L2 weight decay on the gradient, momentum buffer, optional Nesterov.
/// With a constant rate, fairseq's NAG is this with nesterov (spec: language §2.4). With kDevice:
/// at::_fused_sgd_ (dampening 0), the same formula: g += wd p; buf = g on a parameter's first
/// update, else momentum buf + g; p -= lr (nesterov ? g + momentum buf : buf).
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, SgdOptions options);
  void update(int slot) override;
  void allocate_state(StateFor which) override;
  std::vector<torch::Tensor> state() const override;
  void set_kernels(UpdateKernels kernels) override;
  Json describe() const override;

 private:
  void write_scalars(int slot) override;

  SgdOptions options_;
  std::vector<std::vector<torch::Tensor>> momentum_;
};

/// Splits a module's trainable parameters into a decayed group and an undecayed one: a
/// parameter is not decayed when its name contains any of `no_decay_patterns` ("bias", "norm").
std::vector<ParamGroup> decay_groups(const torch::nn::Module& module, double weight_decay,
                                     const std::vector<std::string>& no_decay_patterns);

// ---- Learning-rate schedules: step (1-based) -> rate ----
using LrSchedule = std::function<double(int64_t step)>;

/// BERT: linear warm-up to `lr` over `warmup` steps, then linear decay to 0 at `total`.
LrSchedule warmup_linear_decay(double lr, int64_t warmup, int64_t total);
/// fairseq / XLM inverse square root: linear warm-up from `init_lr` to `lr` over `warmup`
/// steps, then lr * sqrt(warmup / step).
LrSchedule inverse_sqrt(double lr, int64_t warmup, double init_lr);
/// A constant rate.
LrSchedule constant(double lr);

// ---- TensorFlow's RMSProp ----

/// TfRmsProp's settings; the defaults are train_image_classifier.py's flags.
struct TfRmsPropOptions {
  double lr = 0.01;
  double decay = 0.9;     ///< rho: the mean-square moving average keeps this much per step
  double momentum = 0.9;  ///< momentum on the scaled step (0: none)
  double eps = 1.0;       ///< added to the mean square under the root
  double initial_mean_square = 1.0;  ///< TF1's RMSPropOptimizer starts its "rms" slot at ones
};

/// tf.compat.v1.train.RMSPropOptimizer (uncentered), as TF-slim's train_image_classifier.py
/// uses it; weight decay is L2 on the gradient (slim's l2_regularizer adds wd/2 * |w|^2 to the
/// loss, whose gradient is wd * w):
///   ms  = decay * ms + (1 - decay) * g^2          (ms starts at 1, not 0)
///   mom = momentum * mom + lr * g / sqrt(ms + eps)
///   p  -= mom
/// Unlike torch.optim.RMSprop, eps sits inside the root, the rate scales the momentum input
/// rather than the update, and the mean square starts at one.
class TfRmsProp : public Optimizer {
 public:
  TfRmsProp(std::vector<ParamGroup> groups, TfRmsPropOptions options);
  void update(int slot) override;
  void allocate_state(StateFor which) override;
  std::vector<torch::Tensor> state() const override;
  void set_kernels(UpdateKernels kernels) override;
  Json describe() const override;

 private:
  void write_scalars(int slot) override;

  TfRmsPropOptions options_;
  std::vector<std::vector<torch::Tensor>> mean_square_, momentum_;
};

/// tf.train.exponential_decay as a schedule: lr * rate^((step - 1) / decay_steps), the exponent
/// floored when `staircase` (TF counts global steps from 0; gpubench steps from 1).
LrSchedule exponential_decay(double lr, double rate, int64_t decay_steps, bool staircase);

/// Polynomial decay to 0 over `total` updates, counted from 0 as TF's polynomial_decay and
/// torch's PolynomialLR / LambdaLR do: the k-th update (1-based) uses
/// lr * (1 - (k - 1) / total)^power, and 0 from update total + 1 on.
LrSchedule poly(double lr, int64_t total, double power);

/// darknet's get_current_rate with policy=steps (src/network.c): lr * (step / burn_in)^power
/// before `burn_in`, then lr times the scales of every boundary in `steps` already reached
/// (`steps` ascending, one scale each).
LrSchedule darknet_steps(double lr, int64_t burn_in, double power, std::vector<int64_t> steps,
                         std::vector<double> scales);

// ---- Appended for mask-rcnn (maskrcnn-benchmark's solver) ----

/// torch.optim.SGD over parameter groups that each scale the learning rate (a per-group "lr" in
/// Python): maskrcnn-benchmark's make_optimizer gives biases BIAS_LR_FACTOR x the base rate and
/// their own weight decay. Each group updates exactly as Sgd does at lr() x its factor (one
/// multi-tensor or fused update per group).
class ScaledLrSgd : public Optimizer {
 public:
  /// `lr_factors[g]` multiplies lr() for `groups[g]`; the two vectors have the same length.
  ScaledLrSgd(std::vector<ParamGroup> groups, std::vector<double> lr_factors, SgdOptions options);
  void prepare(int slot) override;
  void update(int slot) override;
  void allocate_state(StateFor which) override;
  std::vector<torch::Tensor> state() const override;
  void set_kernels(UpdateKernels kernels) override;
  Json describe() const override;

 private:
  std::vector<double> lr_factors_;
  std::vector<std::unique_ptr<Sgd>> per_group_;
};

/// maskrcnn-benchmark's WarmupMultiStepLR (as stepped once before each iteration): the rate of
/// 1-based `step` is lr x gamma^(milestones <= step) x warm-up factor, where the factor rises
/// linearly from `warmup_factor` at step 0 to 1 at `warmup_iters` ("linear"), or stays at
/// `warmup_factor` before it ("constant").
LrSchedule warmup_multistep(double lr, std::vector<int64_t> milestones, double gamma,
                            double warmup_factor, int64_t warmup_iters, bool linear_warmup = true);

}  // namespace gpubench::train
