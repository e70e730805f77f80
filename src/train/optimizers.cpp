#include "gpubench/train/optimizers.h"

#include <torch/torch.h>

#include <cmath>

namespace gpubench::train {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr)
    : groups_(std::move(groups)), lr_(lr) {}

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
/// State tensors for the parameters of a group, created filled with `initial` (zeros unless
/// said otherwise: TF1's RMSProp starts its mean square at 1) on first use. A parameter without
/// a gradient keeps its slot (undefined until it gets one).
std::vector<torch::Tensor> state_for(std::vector<torch::Tensor>& state, const ParamGroup& group,
                                     double initial = 0.0) {
  if (state.size() != group.params.size()) state.resize(group.params.size());
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    if (!group.params[i].grad().defined()) continue;
    if (!state[i].defined()) state[i] = torch::full_like(group.params[i], initial);
    out.push_back(state[i]);
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

void Adam::step() {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bc1 = options_.bias_correction ? 1 - std::pow(b1, static_cast<double>(steps_)) : 1;
  const double bc2 = options_.bias_correction ? 1 - std::pow(b2, static_cast<double>(steps_)) : 1;
  std::vector<torch::Tensor> params, grads;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    with_grads(group, params, grads);
    if (params.empty()) continue;
    auto m = state_for(exp_avg_[g], group);
    auto v = state_for(exp_avg_sq_[g], group);
    const double wd = group.weight_decay;
    if (wd != 0 && options_.weight_decay_mode == WeightDecayMode::kL2) {
      grads = at::_foreach_add(grads, params, wd);
    }
    at::_foreach_mul_(m, b1);
    at::_foreach_add_(m, grads, 1 - b1);
    at::_foreach_mul_(v, b2);
    at::_foreach_addcmul_(v, grads, grads, 1 - b2);
    auto denom = at::_foreach_sqrt(v);
    if (bc2 != 1) at::_foreach_div_(denom, std::sqrt(bc2));
    at::_foreach_add_(denom, options_.eps);
    if (wd != 0 && options_.weight_decay_mode == WeightDecayMode::kDecoupled) {
      at::_foreach_mul_(params, 1 - lr_ * wd);
    }
    at::_foreach_addcdiv_(params, m, denom, -lr_ / bc1);
  }
}

// ---- Adamax (BERT style) ----

Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions options)
    : Optimizer(std::move(groups), options.lr), options_(options) {
  exp_avg_.resize(groups_.size());
  exp_inf_.resize(groups_.size());
}

void Adamax::step() {
  torch::NoGradGuard no_grad;
  ++steps_;
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
    if (group.weight_decay != 0) at::_foreach_mul_(params, 1 - lr_ * group.weight_decay);
    at::_foreach_addcdiv_(params, m, denom, -lr_);
  }
}

// ---- SGD ----

Sgd::Sgd(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer(std::move(groups), options.lr), options_(options) {
  momentum_.resize(groups_.size());
}

void Sgd::step() {
  torch::NoGradGuard no_grad;
  ++steps_;
  std::vector<torch::Tensor> params, grads;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    with_grads(group, params, grads);
    if (params.empty()) continue;
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

void TfRmsProp::step() {
  torch::NoGradGuard no_grad;
  ++steps_;
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
    at::_foreach_addcdiv_(mom, grads, denom, lr_);
    at::_foreach_sub_(params, mom);
  }
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

void ScaledLrSgd::step() {
  ++steps_;
  for (std::size_t g = 0; g < per_group_.size(); ++g) {
    per_group_[g]->set_lr(lr_ * lr_factors_[g]);
    per_group_[g]->step();
  }
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
