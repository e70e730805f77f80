// Test helper: a workload's smoke step trained a few steps from a fixed seed, and the check that
// two such trainings (one setting off and on: the fast paths, the fused loss, the fused norm)
// gave the same losses and gradients.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "gpubench/train/workload.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gpubench::testing {

/// What `steps` runs of a smoke step gave: each step's losses by name, the last step's gradient
/// norm of every parameter (-1 where it has none), the trainable elements and runtime_info().
/// Gradient norms matter: a step's loss can come before any update changes a parameter (a
/// warm-up that starts at a rate of 0), the gradient is the loss function's own.
struct SmokeTraining {
  std::vector<std::map<std::string, double>> losses;
  std::vector<double> grad_norms;
  int64_t trainable = 0;
  Json runtime_info;
};

/// `model`'s smoke step (fp32 on the CPU, seed 11) with `setup` applied to its context (runtime
/// settings, device, precision) and `overlay` over its smoke model's parameters, run `steps`
/// times.
inline SmokeTraining train_smoke(const std::string& model, int steps,
                                 const std::function<void(StepContext&)>& setup,
                                 const Json& overlay = Json::object()) {
  const ModelConfig& config = builtin_store().model(model);
  const Architecture& arch = builtin_registry().get(config.architecture);
  StepContext ctx = smoke_context(config, config.smoke_batch);
  if (!overlay.empty()) {
    Json values = config.smoke_model.json();
    values.update(overlay);
    ctx.model = Params(arch.model_schema, values, Where{"test", "model"});
  }
  ctx.seed = 11;
  if (setup) setup(ctx);
  auto step = arch.prepare(ctx);
  SmokeTraining out;
  for (int i = 0; i < steps; ++i) {
    step->run();
    std::map<std::string, double> values;
    for (const auto& [name, loss] : step->losses()) values[name] = loss.item<double>();
    out.losses.push_back(values);
  }
  for (const auto& [network, params] : step->parameters()) {
    for (const auto& p : params) {
      if (p.requires_grad()) out.trainable += p.numel();
      out.grad_norms.push_back(p.grad().defined() ? p.grad().norm().item<double>() : -1.0);
    }
  }
  out.runtime_info = step->runtime_info();
  return out;
}

/// Expects `b` to have trained as `a` did: the same trainable elements, every step's losses
/// within `tol` (relative, at least absolute), every gradient norm within 10 * `tol`, and some
/// parameter with a gradient to compare.
inline void expect_same_training(const SmokeTraining& a, const SmokeTraining& b, double tol,
                                 const std::string& what) {
  EXPECT_EQ(b.trainable, a.trainable) << what;
  ASSERT_EQ(b.losses.size(), a.losses.size()) << what;
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    ASSERT_EQ(b.losses[i].size(), a.losses[i].size()) << what << " step " << i;
    for (const auto& [name, value] : a.losses[i]) {
      ASSERT_TRUE(b.losses[i].count(name)) << what << " step " << i << " " << name;
      const double other = b.losses[i].at(name);
      EXPECT_TRUE(std::isfinite(other)) << what << " step " << i << " " << name;
      EXPECT_NEAR(other, value, tol * std::max(1.0, std::abs(value)))
          << what << " step " << i << " " << name;
    }
  }
  ASSERT_EQ(b.grad_norms.size(), a.grad_norms.size()) << what;
  int with_gradient = 0;
  for (std::size_t k = 0; k < a.grad_norms.size(); ++k) {
    const double value = a.grad_norms[k];
    if (value > 0) ++with_gradient;
    EXPECT_NEAR(b.grad_norms[k], value, 10 * tol * std::max(1e-3, std::abs(value)))
        << what << ": the gradient norm of parameter " << k;
  }
  EXPECT_GT(with_gradient, 0) << what << ": no parameter kept a gradient to compare";
}

/// `model` trained with one runtime setting off and on (`set` turns it), on `device` in
/// `precision` with `overlay` over its smoke model: the same training (expect_same_training),
/// and each run's runtime_info()[`key`] saying whether it ran.
inline void expect_setting_trains_the_same(const std::string& model, const std::string& key,
                                           const std::function<void(RuntimeSettings&, bool)>& set,
                                           torch::Device device = torch::kCPU,
                                           Precision precision = Precision::kFp32,
                                           double tol = 1e-5,
                                           const Json& overlay = Json::object()) {
  const std::string what = model + " " + to_string(precision) + " " + key +
                           (overlay.empty() ? "" : " " + overlay.dump());
  const auto train = [&](bool on) {
    SmokeTraining out = train_smoke(
        model, 3,
        [&](StepContext& ctx) {
          ctx.device = device;
          ctx.precision = precision;
          set(ctx.runtime, on);
        },
        overlay);
    EXPECT_EQ(out.runtime_info.value(key, !on), on) << what << ": runtime_info's " << key;
    return out;
  };
  const SmokeTraining off = train(false);
  expect_same_training(off, train(true), tol, what);
}

}  // namespace gpubench::testing
