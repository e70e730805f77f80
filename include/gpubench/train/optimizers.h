// Optimizers as the reference codebases define them, written with libtorch's multi-tensor
// (_foreach) kernels: a few launches per parameter group instead of several per parameter.
// None reads a value on the host, so a training step never synchronizes.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpubench::train {

/// Parameters that share a weight decay.
struct ParamGroup {
  std::vector<torch::Tensor> params;
  double weight_decay = 0;  ///< coefficient; how it applies is the optimizer's (L2 or decoupled)
};

/// Base: parameter groups, the learning rate, zero_grad.
class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> groups, double lr);
  virtual ~Optimizer() = default;

  /// Sets every gradient to none (as `zero_grad(set_to_none=True)`).
  void zero_grad();
  /// One update at lr(). Parameters without a gradient are skipped.
  virtual void step() = 0;

  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  /// Updates done so far.
  int64_t steps() const { return steps_; }
  std::vector<torch::Tensor> parameters() const;

 protected:
  /// The group's parameters that have a gradient, and those gradients.
  static void with_grads(const ParamGroup& group, std::vector<torch::Tensor>& params,
                         std::vector<torch::Tensor>& grads);

  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t steps_ = 0;
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
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  void step() override;

 private:
  AdamOptions options_;
  std::vector<std::vector<torch::Tensor>> exp_avg_, exp_avg_sq_;  // per group, per parameter
};

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
  void step() override;

 private:
  AdamaxOptions options_;
  std::vector<std::vector<torch::Tensor>> exp_avg_, exp_inf_;
};

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0;
  bool nesterov = false;
};

/// torch.optim.SGD: L2 weight decay on the gradient, momentum buffer, optional Nesterov.
/// With a constant rate, fairseq's NAG is this with nesterov (spec: language §2.4).
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, SgdOptions options);
  void step() override;

 private:
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
  void step() override;

 private:
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
/// their own weight decay. Each group updates exactly as Sgd does at lr() x its factor.
class ScaledLrSgd : public Optimizer {
 public:
  /// `lr_factors[g]` multiplies lr() for `groups[g]`; the two vectors have the same length.
  ScaledLrSgd(std::vector<ParamGroup> groups, std::vector<double> lr_factors, SgdOptions options);
  void step() override;

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
