#include "gpubench/train/optimizers.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/params.h"

#include <torch/torch.h>

#include <cmath>
#include <initializer_list>
#include <limits>

namespace gpubench::train {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr)
    : groups_(std::move(groups)), lr_(lr) {}

void Optimizer::prepare(int slot) {
  ++steps_;
  if (kernels_ == UpdateKernels::kDevice) {
    TORCH_CHECK(slot >= 0 && slot < kMaxSlots, "optimizer slot ", slot, " outside [0, ", kMaxSlots,
                ")");
    write_scalars(slot);
  }
}

void Optimizer::set_kernels(UpdateKernels kernels) {
  TORCH_CHECK(steps_ == 0, "set_kernels: choose the kernels before the first update");
  kernels_ = kernels;
}

void Optimizer::allocate_scalars(int64_t per_slot) {
  torch::Device device = torch::kCPU;
  for (const auto& group : groups_) {
    if (!group.params.empty()) device = group.params.front().device();
  }
  // Uninitialized on purpose: prepare() writes a row before any update reads it.
  scalars_ = torch::empty({kMaxSlots, per_slot},
                          torch::TensorOptions().dtype(torch::kFloat).device(device));
}

std::string Optimizer::kernels_name(bool fused) const {
  if (kernels_ == UpdateKernels::kForeach) return "foreach";
  return fused ? "fused" : "foreach, device scalars";
}

void Optimizer::zero_grad() {
  for (auto& group : groups_) {
    for (auto& p : group.params) {
      if (p.grad().defined()) p.mutable_grad().reset();
    }
  }
}

std::vector<torch::Tensor> Optimizer::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& group : groups_) out.insert(out.end(), group.params.begin(), group.params.end());
  return out;
}

void Optimizer::with_grads(const ParamGroup& group, std::vector<torch::Tensor>& params,
                           std::vector<torch::Tensor>& grads) {
  params.clear();
  grads.clear();
  for (const auto& p : group.params) {
    if (!p.grad().defined()) continue;
    params.push_back(p);
    grads.push_back(p.grad());
  }
}

namespace {
/// State tensors for the parameters of a group that have a gradient, created filled with
/// `initial` (zeros unless said otherwise: TF1's RMSProp starts its mean square at 1) on first
/// use. A parameter without a gradient keeps its slot (undefined until it gets one), unless
/// `which` is kEveryParameter: then every parameter that requires a gradient gets its state, and
/// all of them are returned.
std::vector<torch::Tensor> state_for(std::vector<torch::Tensor>& state, const ParamGroup& group,
                                     double initial = 0.0,
                                     StateFor which = StateFor::kParametersWithGradient) {
  if (state.size() != group.params.size()) state.resize(group.params.size());
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    const bool wanted = which == StateFor::kEveryParameter ? group.params[i].requires_grad()
                                                           : group.params[i].grad().defined();
    if (!wanted) continue;
    if (!state[i].defined()) state[i] = torch::full_like(group.params[i], initial);
    out.push_back(state[i]);
  }
  return out;
}
/// The defined tensors of per-group state lists, in order.
std::vector<torch::Tensor> defined_state(
    std::initializer_list<const std::vector<std::vector<torch::Tensor>>*> lists) {
  std::vector<torch::Tensor> out;
  for (const auto* list : lists) {
    for (const auto& group : *list) {
      for (const auto& t : group) {
        if (t.defined()) out.push_back(t);
      }
    }
  }
  return out;
}
}  // namespace

// ---- Adam ----

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Optimizer(std::move(groups), options.lr), options_(options) {
  exp_avg_.resize(groups_.size());
  exp_avg_sq_.resize(groups_.size());
}

AdamOptions adam_options(const Params& optimizer, WeightDecayMode weight_decay_mode) {
  AdamOptions adam;
  adam.lr = optimizer.f64("lr");
  adam.beta1 = optimizer.f64("beta1");
  adam.beta2 = optimizer.f64("beta2");
  adam.eps = optimizer.f64("eps");
  adam.weight_decay_mode = weight_decay_mode;
  return adam;
}

std::unique_ptr<Adam> make_adam(std::vector<ParamGroup> groups, const Params& optimizer,
                                WeightDecayMode weight_decay_mode) {
  return std::make_unique<Adam>(std::move(groups), adam_options(optimizer, weight_decay_mode));
}

namespace {
/// The step count given to the fused kernel when Adam has no bias correction: b^step is then
/// exactly 0 for every b < 1 (it underflows), so both corrections are exactly 1.
constexpr float kNoBiasCorrectionStep = std::numeric_limits<float>::max();
}  // namespace

void Adam::set_kernels(UpdateKernels kernels) {
  // Without bias correction the fused kernel's corrections are 1 only when both betas are
  // below 1; otherwise keep the multi-tensor kernels.
  const bool fusable = compat::kHasFusedOptimizers &&
                       (options_.bias_correction || (options_.beta1 < 1 && options_.beta2 < 1));
  Optimizer::set_kernels(fusable ? kernels : UpdateKernels::kForeach);
  if (kernels_ == UpdateKernels::kDevice) allocate_scalars(2);  // rate, step count
}

bool Adam::fused() const { return kernels_ == UpdateKernels::kDevice; }

void Adam::write_scalars(int slot) {
  scalar(slot, 0).fill_(lr_);
  scalar(slot, 1).fill_(options_.bias_correction ? static_cast<double>(steps_)
                                                 : static_cast<double>(kNoBiasCorrectionStep));
}

Json Adam::describe() const {
  const bool decoupled = options_.weight_decay_mode == WeightDecayMode::kDecoupled;
  return {{"name", decoupled ? "adamw" : "adam"},
          {"kernels", kernels_name(fused())},
          {"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"bias_correction", options_.bias_correction},
          {"weight_decay", decoupled ? "decoupled" : "l2"}};
}

void Adam::update(int slot) {
  torch::NoGradGuard no_grad;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bc1 = options_.bias_correction ? 1 - std::pow(b1, static_cast<double>(steps_)) : 1;
  const double bc2 = options_.bias_correction ? 1 - std::pow(b2, static_cast<double>(steps_)) : 1;
  const bool decoupled = options_.weight_decay_mode == WeightDecayMode::kDecoupled;
  std::vector<torch::Tensor> params, grads;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    with_grads(group, params, grads);
    if (params.empty()) continue;
    auto m = state_for(exp_avg_[g], group);
    auto v = state_for(exp_avg_sq_[g], group);
    const double wd = group.weight_decay;
    if (fused()) {
      const std::vector<torch::Tensor> steps(params.size(), scalar(slot, 1));
      compat::fused_adam_(decoupled, params, grads, m, v, steps, scalar(slot, 0), b1, b2, wd,
                          options_.eps);
      continue;
    }
    if (wd != 0 && !decoupled) grads = at::_foreach_add(grads, params, wd);
    at::_foreach_mul_(m, b1);
    at::_foreach_add_(m, grads, 1 - b1);
    at::_foreach_mul_(v, b2);
    at::_foreach_addcmul_(v, grads, grads, 1 - b2);
    auto denom = at::_foreach_sqrt(v);
    if (bc2 != 1) at::_foreach_div_(denom, std::sqrt(bc2));
    at::_foreach_add_(denom, options_.eps);
    if (wd != 0 && decoupled) at::_foreach_mul_(params, 1 - lr_ * wd);
    at::_foreach_addcdiv_(params, m, denom, -lr_ / bc1);
  }
}

void Adam::allocate_state(StateFor which) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    state_for(exp_avg_[g], groups_[g], 0.0, which);
    state_for(exp_avg_sq_[g], groups_[g], 0.0, which);
  }
}

std::vector<torch::Tensor> Adam::state() const { return defined_state({&exp_avg_, &exp_avg_sq_}); }

// ---- Adamax (BERT style) ----

Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions options)
    : Optimizer(std::move(groups), options.lr), options_(options) {
  exp_avg_.resize(groups_.size());
  exp_inf_.resize(groups_.size());
}

void Adamax::set_kernels(UpdateKernels kernels) {
  Optimizer::set_kernels(kernels);
  // Per slot: -rate, then 1 - rate x decay for each group.
  if (kernels_ == UpdateKernels::kDevice)
    allocate_scalars(1 + static_cast<int64_t>(groups_.size()));
}

void Adamax::write_scalars(int slot) {
  scalar(slot, 0).fill_(-lr_);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    scalar(slot, 1 + static_cast<int64_t>(g)).fill_(1 - lr_ * groups_[g].weight_decay);
  }
}

Json Adamax::describe() const {
  return {{"name", "adamax"},
          {"kernels", kernels_name(false)},
          {"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps}};
}

void Adamax::update(int slot) {
  torch::NoGradGuard no_grad;
  const bool device = kernels_ == UpdateKernels::kDevice;
  std::vector<torch::Tensor> params, grads;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    with_grads(group, params, grads);
    if (params.empty()) continue;
    auto m = state_for(exp_avg_[g], group);
    auto u = state_for(exp_inf_[g], group);
    at::_foreach_mul_(m, options_.beta1);
    at::_foreach_add_(m, grads, 1 - options_.beta1);
    auto magnitude = at::_foreach_abs(grads);
    at::_foreach_add_(magnitude, options_.eps);
    at::_foreach_mul_(u, options_.beta2);
    at::_foreach_maximum_(u, magnitude);
    auto denom = at::_foreach_add(u, options_.eps);
    if (device) {
      // p = p (1 - lr wd) + m / (denom / -lr): the rate read from the device.
      if (group.weight_decay != 0) {
        compat::foreach_mul_(params, scalar(slot, 1 + static_cast<int64_t>(g)));
      }
      compat::foreach_div_(denom, scalar(slot, 0));
      at::_foreach_addcdiv_(params, m, denom);
      continue;
    }
    if (group.weight_decay != 0) at::_foreach_mul_(params, 1 - lr_ * group.weight_decay);
    at::_foreach_addcdiv_(params, m, denom, -lr_);
  }
}

void Adamax::allocate_state(StateFor which) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    state_for(exp_avg_[g], groups_[g], 0.0, which);
    state_for(exp_inf_[g], groups_[g], 0.0, which);
  }
}

std::vector<torch::Tensor> Adamax::state() const { return defined_state({&exp_avg_, &exp_inf_}); }

// ---- SGD ----

Sgd::Sgd(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer(std::move(groups), options.lr), options_(options) {
  momentum_.resize(groups_.size());
}

void Sgd::allocate_state(StateFor which) {
  if (options_.momentum == 0) return;
  // Zero buffers: an update then makes each buffer momentum x 0 + gradient, which is exactly
  // the gradient, as a first update does.
  for (std::size_t g = 0; g < groups_.size(); ++g) state_for(momentum_[g], groups_[g], 0.0, which);
}

std::vector<torch::Tensor> Sgd::state() const { return defined_state({&momentum_}); }

void Sgd::set_kernels(UpdateKernels kernels) {
  Optimizer::set_kernels(compat::kHasFusedOptimizers ? kernels : UpdateKernels::kForeach);
  if (kernels_ == UpdateKernels::kDevice) allocate_scalars(1);  // rate
}

void Sgd::write_scalars(int slot) { scalar(slot, 0).fill_(lr_); }

Json Sgd::describe() const {
  return {{"name", options_.nesterov ? "sgd-nesterov" : "sgd"},
          {"kernels", kernels_name(kernels_ == UpdateKernels::kDevice)},
          {"momentum", options_.momentum}};
}

void Sgd::update(int slot) {
  torch::NoGradGuard no_grad;
  const bool fused = kernels_ == UpdateKernels::kDevice;
  std::vector<torch::Tensor> params, grads;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    with_grads(group, params, grads);
    if (params.empty()) continue;
    if (fused) {
      std::vector<torch::Tensor> none;
      if (options_.momentum == 0) {
        compat::fused_sgd_(params, grads, none, group.weight_decay, 0.0, scalar(slot, 0), false,
                           false);
        continue;
      }
      // A parameter's first update makes its buffer the gradient (as torch.optim.SGD); the
      // parameters that have a buffer already and those that do not go in separate calls.
      auto& state = momentum_[g];
      if (state.size() != group.params.size()) state.resize(group.params.size());
      std::vector<torch::Tensor> old_params, old_grads, old_buffers, new_params, new_grads,
          new_buffers;
      std::size_t k = 0;
      for (std::size_t i = 0; i < group.params.size(); ++i) {
        if (!group.params[i].grad().defined()) continue;
        const bool first = !state[i].defined();
        if (first) state[i] = torch::empty_like(group.params[i]);
        (first ? new_params : old_params).push_back(params[k]);
        (first ? new_grads : old_grads).push_back(grads[k]);
        (first ? new_buffers : old_buffers).push_back(state[i]);
        ++k;
      }
      for (const bool first : {true, false}) {
        auto& ps = first ? new_params : old_params;
        if (ps.empty()) continue;
        compat::fused_sgd_(ps, first ? new_grads : old_grads, first ? new_buffers : old_buffers,
                           group.weight_decay, options_.momentum, scalar(slot, 0),
                           options_.nesterov, first);
      }
      continue;
    }
    if (group.weight_decay != 0) grads = at::_foreach_add(grads, params, group.weight_decay);
    if (options_.momentum != 0) {
      auto& state = momentum_[g];
      if (state.size() != group.params.size()) state.resize(group.params.size());
      std::vector<torch::Tensor> buffers, old_buffers, old_grads;
      std::size_t k = 0;
      for (std::size_t i = 0; i < group.params.size(); ++i) {
        if (!group.params[i].grad().defined()) continue;
        if (!state[i].defined()) {
          state[i] = grads[k].clone();  // torch.optim.SGD: the buffer starts as the gradient
        } else {
          old_buffers.push_back(state[i]);
          old_grads.push_back(grads[k]);
        }
        buffers.push_back(state[i]);
        ++k;
      }
      if (!old_buffers.empty()) {
        at::_foreach_mul_(old_buffers, options_.momentum);
        at::_foreach_add_(old_buffers, old_grads);
      }
      grads = options_.nesterov ? at::_foreach_add(grads, buffers, options_.momentum) : buffers;
    }
    at::_foreach_add_(params, grads, -lr_);
  }
}

std::vector<ParamGroup> decay_groups(const torch::nn::Module& module, double weight_decay,
                                     const std::vector<std::string>& no_decay_patterns) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    bool excluded = false;
    for (const auto& pattern : no_decay_patterns) {
      if (item.key().find(pattern) != std::string::npos) excluded = true;
    }
    (excluded ? no_decay : decay).params.push_back(item.value());
  }
  return {decay, no_decay};
}

LrSchedule warmup_linear_decay(double lr, int64_t warmup, int64_t total) {
  return [=](int64_t step) {
    const double s = static_cast<double>(step);
    if (warmup > 0 && step < warmup) return lr * s / static_cast<double>(warmup);
    if (total <= 0) return lr;
    return lr * std::max(0.0, 1.0 - s / static_cast<double>(total));
  };
}

LrSchedule inverse_sqrt(double lr, int64_t warmup, double init_lr) {
  return [=](int64_t step) {
    const double s = static_cast<double>(step);
    if (step < warmup) return init_lr + (lr - init_lr) * s / static_cast<double>(warmup);
    return lr * std::sqrt(static_cast<double>(warmup) / s);
  };
}

LrSchedule constant(double lr) {
  return [=](int64_t) { return lr; };
}

// ---- TensorFlow's RMSProp ----

TfRmsProp::TfRmsProp(std::vector<ParamGroup> groups, TfRmsPropOptions options)
    : Optimizer(std::move(groups), options.lr), options_(options) {
  mean_square_.resize(groups_.size());
  momentum_.resize(groups_.size());
}

void TfRmsProp::set_kernels(UpdateKernels kernels) {
  Optimizer::set_kernels(kernels);
  if (kernels_ == UpdateKernels::kDevice) allocate_scalars(1);  // rate
}

void TfRmsProp::write_scalars(int slot) { scalar(slot, 0).fill_(lr_); }

Json TfRmsProp::describe() const {
  return {{"name", "tf-rmsprop"},
          {"kernels", kernels_name(false)},
          {"decay", options_.decay},
          {"momentum", options_.momentum},
          {"eps", options_.eps}};
}

void TfRmsProp::update(int slot) {
  torch::NoGradGuard no_grad;
  const bool device = kernels_ == UpdateKernels::kDevice;
  std::vector<torch::Tensor> params, grads;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    with_grads(group, params, grads);
    if (params.empty()) continue;
    auto ms = state_for(mean_square_[g], group, options_.initial_mean_square);
    auto mom = state_for(momentum_[g], group);
    if (group.weight_decay != 0) grads = at::_foreach_add(grads, params, group.weight_decay);
    at::_foreach_mul_(ms, options_.decay);
    at::_foreach_addcmul_(ms, grads, grads, 1 - options_.decay);
    auto denom = at::_foreach_add(ms, options_.eps);
    at::_foreach_sqrt_(denom);
    at::_foreach_mul_(mom, options_.momentum);
    if (device) {
      // mom += g / (denom / lr): the rate read from the device.
      compat::foreach_div_(denom, scalar(slot, 0));
      at::_foreach_addcdiv_(mom, grads, denom);
    } else {
      at::_foreach_addcdiv_(mom, grads, denom, lr_);
    }
    at::_foreach_sub_(params, mom);
  }
}

void TfRmsProp::allocate_state(StateFor which) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    state_for(mean_square_[g], groups_[g], options_.initial_mean_square, which);
    state_for(momentum_[g], groups_[g], 0.0, which);
  }
}

std::vector<torch::Tensor> TfRmsProp::state() const {
  return defined_state({&mean_square_, &momentum_});
}

LrSchedule exponential_decay(double lr, double rate, int64_t decay_steps, bool staircase) {
  return [=](int64_t step) {
    double exponent = static_cast<double>(step - 1) / static_cast<double>(decay_steps);
    if (staircase) exponent = std::floor(exponent);
    return lr * std::pow(rate, exponent);
  };
}

LrSchedule poly(double lr, int64_t total, double power) {
  return [=](int64_t step) {
    const double done = static_cast<double>(step - 1) / static_cast<double>(total);
    return lr * std::pow(std::max(0.0, 1.0 - done), power);
  };
}

LrSchedule darknet_steps(double lr, int64_t burn_in, double power, std::vector<int64_t> steps,
                         std::vector<double> scales) {
  return [=](int64_t step) {
    if (step < burn_in) {
      return lr * std::pow(static_cast<double>(step) / static_cast<double>(burn_in), power);
    }
    double rate = lr;
    for (std::size_t i = 0; i < steps.size() && i < scales.size(); ++i) {
      if (steps[i] > step) break;
      rate *= scales[i];
    }
    return rate;
  };
}

// ---- Appended for mask-rcnn ----

ScaledLrSgd::ScaledLrSgd(std::vector<ParamGroup> groups, std::vector<double> lr_factors,
                         SgdOptions options)
    : Optimizer(std::move(groups), options.lr), lr_factors_(std::move(lr_factors)) {
  TORCH_CHECK(lr_factors_.size() == groups_.size(), "ScaledLrSgd: one lr factor per group");
  // One plain Sgd per group, so the update (and its momentum state) is Sgd's own code.
  for (const auto& group : groups_) {
    per_group_.push_back(std::make_unique<Sgd>(std::vector<ParamGroup>{group}, options));
  }
}

void ScaledLrSgd::prepare(int slot) {
  ++steps_;
  for (std::size_t g = 0; g < per_group_.size(); ++g) {
    per_group_[g]->set_lr(lr_ * lr_factors_[g]);
    per_group_[g]->prepare(slot);
  }
}

void ScaledLrSgd::update(int slot) {
  for (auto& sgd : per_group_) sgd->update(slot);
}

void ScaledLrSgd::allocate_state(StateFor which) {
  for (auto& sgd : per_group_) sgd->allocate_state(which);
}

std::vector<torch::Tensor> ScaledLrSgd::state() const {
  std::vector<torch::Tensor> out;
  for (const auto& sgd : per_group_) {
    auto part = sgd->state();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void ScaledLrSgd::set_kernels(UpdateKernels kernels) {
  Optimizer::set_kernels(kernels);
  for (auto& sgd : per_group_) sgd->set_kernels(kernels);
  kernels_ = per_group_.empty() ? kernels_ : per_group_.front()->kernels();
}

Json ScaledLrSgd::describe() const {
  Json out = per_group_.empty() ? Json{{"name", "sgd"}} : per_group_.front()->describe();
  out["lr_factors"] = lr_factors_;
  return out;
}

LrSchedule warmup_multistep(double lr, std::vector<int64_t> milestones, double gamma,
                            double warmup_factor, int64_t warmup_iters, bool linear_warmup) {
  return [=](int64_t step) {
    double factor = 1.0;
    if (step < warmup_iters) {
      const double alpha = static_cast<double>(step) / static_cast<double>(warmup_iters);
      factor = linear_warmup ? warmup_factor * (1 - alpha) + alpha : warmup_factor;
    }
    // bisect_right(milestones, step) for sorted milestones: the ones already reached.
    int64_t passed = 0;
    for (const int64_t milestone : milestones) passed += milestone <= step ? 1 : 0;
    return lr * factor * std::pow(gamma, static_cast<double>(passed));
  };
}

}  // namespace gpubench::train
