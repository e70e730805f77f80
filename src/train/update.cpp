#include "gpubench/train/update.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/env.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace gpubench::train {

namespace {

/// GPUBENCH_TRACE_OVERFLOW=1: before each unscale, which gradients hold inf or NaN, on stderr
/// (it reads every gradient on the host: a diagnosis, never a timed run).
bool trace_overflow() {
  static const bool on = [] {
    const char* v = env::get(env::Switch::kTraceOverflow);
    return v != nullptr && *v == '1';
  }();
  return on;
}

void print_overflow(const std::vector<torch::Tensor>& parameters, const torch::Tensor& scale) {
  std::string lines;
  int bad = 0, shown = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto& g = parameters[i].grad();
    if (!g.defined()) continue;
    const auto nan = g.isnan().sum().item<int64_t>();
    const auto inf = g.isinf().sum().item<int64_t>();
    if (nan == 0 && inf == 0) continue;
    ++bad;
    if (++shown > 16) continue;
    const auto finite = g.masked_select(g.isfinite());
    const double max_abs = finite.numel() > 0 ? finite.abs().max().item<double>() : 0.0;
    std::string shape;
    for (const auto d : g.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    lines += fmt::format("  parameter {} {}: {} nan, {} inf of {}, largest finite |g| {:.3g}\n", i,
                         shape, nan, inf, g.numel(), max_abs);
  }
  if (bad == 0) return;
  std::fprintf(stderr, "overflow trace: scale %.4g, %d of %zu gradients not finite\n%s",
               scale.item<double>(), bad, parameters.size(), lines.c_str());
}

}  // namespace

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return torch::zeros({});
  torch::NoGradGuard no_grad;
  const auto norms = at::_foreach_norm(grads);
  const auto total = torch::stack(norms).norm();
  // Scale by min(1, max_norm / norm) on the device: no host read of the norm.
  const auto coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  compat::foreach_mul_(grads, coefficient);
  return total;
}

GradScaler::GradScaler(bool enabled, const torch::Device& device, double init_scale,
                       double growth_factor, double backoff_factor, int64_t growth_interval)
    : enabled_(enabled),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval) {
  if (!enabled_) return;
  const auto options = torch::TensorOptions().device(device);
  scale_ = torch::full({1}, init_scale, options.dtype(torch::kFloat));
  found_inf_ = torch::zeros({1}, options.dtype(torch::kFloat));
  growth_tracker_ = torch::zeros({1}, options.dtype(torch::kInt));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.dtype()) : loss;
}

void GradScaler::unscale(const std::vector<torch::Tensor>& parameters) {
  if (!enabled_) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (trace_overflow()) print_overflow(parameters, scale_);
  found_inf_.zero_();
  const auto inverse = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  if (scale_.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inverse);
  } else {
    for (auto& g : grads) {
      found_inf_.add_(g.isfinite().all().logical_not().to(torch::kFloat));
      g.mul_(inverse);
    }
    found_inf_.clamp_max_(1.0);
  }
}

bool GradScaler::should_step() {
  if (!enabled_) return true;
  const bool step = found_inf_.item<float>() == 0.0f;
  ++checked_;
  if (!step) ++skipped_;
  last_skipped_ = !step;
  steps_since_skip_ = step ? steps_since_skip_ + 1 : 0;
  return step;
}

void GradScaler::update() {
  if (!enabled_) return;
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, growth_factor_, backoff_factor_,
                           growth_interval_);
    return;
  }
  // The same rule on the CPU, where the fused kernel does not exist in every libtorch.
  if (found_inf_.item<float>() > 0) {
    scale_.mul_(backoff_factor_);
    growth_tracker_.zero_();
  } else if (growth_tracker_.item<int>() + 1 >= growth_interval_) {
    scale_.mul_(growth_factor_);
    growth_tracker_.zero_();
  } else {
    growth_tracker_.add_(1);
  }
}

double GradScaler::current_scale() const { return enabled_ ? scale_.item<double>() : 1.0; }

Updater::Updater(std::unique_ptr<Optimizer> optimizer, Precision precision,
                 const torch::Device& device, double clip_norm, LrSchedule schedule)
    : optimizer_(std::move(optimizer)),
      scaler_(precision == Precision::kAmpFp16, device),
      clip_norm_(clip_norm),
      schedule_(std::move(schedule)) {
  if (schedule_) optimizer_->set_lr(schedule_(1));
}

void Updater::backward(const torch::Tensor& loss, bool retain_graph) {
  scaler_.scale(loss).backward({}, retain_graph);
}

void Updater::step() {
  const auto params = optimizer_->parameters();
  scaler_.unscale(params);
  if (clip_norm_ > 0) clip_grad_norm(params, clip_norm_);
  if (scaler_.should_step()) {
    prepare_update(0);
    optimizer_->update(0);
  } else {
    optimizer_->allocate_state(StateFor::kParametersWithGradient);  // as an applied update would
  }
  scaler_.update();
  finish_update();
}

void Updater::prepare_update(int slot) {
  if (schedule_) optimizer_->set_lr(schedule_(optimizer_->steps() + 1));
  optimizer_->prepare(slot);
}

void Updater::update_kernels(int slot) {
  TORCH_CHECK(!scaler_.enabled(),
              "an update with fp16 loss scaling decides on the host whether to step; it cannot "
              "run without that read");
  const auto params = optimizer_->parameters();
  if (clip_norm_ > 0) clip_grad_norm(params, clip_norm_);
  optimizer_->update(slot);
}

void Updater::finish_update() {
  if (schedule_) optimizer_->set_lr(schedule_(optimizer_->steps() + 1));
}

std::vector<torch::Tensor> Updater::gradients() const {
  std::vector<torch::Tensor> grads;
  for (const auto& p : optimizer_->parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

void Updater::backward_and_step(const torch::Tensor& loss) {
  backward(loss);
  step();
}

}  // namespace gpubench::train
