// The training runtime (train/runtime.h) and the optimizers' update paths: each optimizer, with
// the kernels it runs on this libtorch, against a plain per-tensor reference update, step for
// step; the runtime's eager iteration, its gradient-sync seam, its settings; and (_CUDA) CUDA
// graph replays against eager iterations.
#include "gpubench/train/runtime.h"

#include "gpubench/train/model_reuse.h"

#include "gpubench/base/compat.h"
#include "gpubench/config/config.h"
#include "gpubench/base/errors.h"
#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace gpubench::train {
namespace {

// ---- Optimizers against per-tensor references ----

/// One parameter's reference state: up to two slots, undefined until its first update.
struct RefState {
  torch::Tensor a, b;
};

/// A plain per-tensor update of `p` with gradient `g`, decay `wd`, rate `lr`, update number
/// `step` (1-based, counted per optimizer) and the parameter's state.
using Reference = std::function<void(torch::Tensor& p, const torch::Tensor& g, double wd, double lr,
                                     int64_t step, RefState& s)>;

struct OptimizerCase {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)> make;
  Reference reference;
  double lr_factor_group1 = 1.0;  ///< ScaledLrSgd: the second group's rate factor
  int state_slots = 2;            ///< state tensors per parameter (Adam: moments m and v)
};

std::vector<OptimizerCase> optimizer_cases() {
  auto adam = [](bool decoupled, bool bias_correction) {
    return [=](torch::Tensor& p, const torch::Tensor& grad, double wd, double lr, int64_t step,
               RefState& s) {
      const double b1 = 0.9, b2 = 0.98, eps = 1e-6;
      auto g = grad;
      if (!decoupled) g = g + wd * p;
      if (!s.a.defined()) s.a = torch::zeros_like(p), s.b = torch::zeros_like(p);
      s.a = b1 * s.a + (1 - b1) * g;
      s.b = b2 * s.b + (1 - b2) * g * g;
      const double bc1 = bias_correction ? 1 - std::pow(b1, double(step)) : 1;
      const double bc2 = bias_correction ? 1 - std::pow(b2, double(step)) : 1;
      if (decoupled) p = p - lr * wd * p;
      p = p - lr / bc1 * s.a / (s.b.sqrt() / std::sqrt(bc2) + eps);
    };
  };
  auto make_adam = [](bool decoupled, bool bias_correction) {
    return [=](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
      AdamOptions o{1e-3,
                    0.9,
                    0.98,
                    1e-6,
                    bias_correction,
                    decoupled ? WeightDecayMode::kDecoupled : WeightDecayMode::kL2};
      return std::make_unique<Adam>(std::move(groups), o);
    };
  };
  auto sgd = [](double momentum, bool nesterov) {
    return [=](torch::Tensor& p, const torch::Tensor& grad, double wd, double lr, int64_t,
               RefState& s) {
      auto g = grad + wd * p;
      if (momentum != 0) {
        s.a = s.a.defined() ? momentum * s.a + g : g.clone();
        g = nesterov ? g + momentum * s.a : s.a;
      }
      p = p - lr * g;
    };
  };
  auto make_sgd = [](double momentum, bool nesterov) {
    return [=](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Sgd>(std::move(groups), SgdOptions{0.1, momentum, nesterov});
    };
  };
  std::vector<OptimizerCase> cases = {
      {"Adam", make_adam(false, true), adam(false, true)},
      {"AdamW", make_adam(true, true), adam(true, true)},
      {"BertAdamWithoutBiasCorrection", make_adam(true, false), adam(true, false)},
      {"Adamax",
       [](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Adamax>(std::move(groups), AdamaxOptions{2e-3, 0.9, 0.999, 1e-6});
       },
       [](torch::Tensor& p, const torch::Tensor& g, double wd, double lr, int64_t, RefState& s) {
         if (!s.a.defined()) s.a = torch::zeros_like(p), s.b = torch::zeros_like(p);
         s.a = 0.9 * s.a + 0.1 * g;
         s.b = torch::max(0.999 * s.b, g.abs() + 1e-6);
         p = p - lr * (s.a / (s.b + 1e-6) + wd * p);
       }},
      {"SgdMomentum", make_sgd(0.9, false), sgd(0.9, false), 1.0, 1},
      {"SgdNesterov", make_sgd(0.99, true), sgd(0.99, true), 1.0, 1},
      {"SgdPlain", make_sgd(0.0, false), sgd(0.0, false), 1.0, 0},
      {"TfRmsProp",
       [](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
         TfRmsPropOptions o;
         o.lr = 0.01;
         return std::make_unique<TfRmsProp>(std::move(groups), o);
       },
       [](torch::Tensor& p, const torch::Tensor& grad, double wd, double lr, int64_t, RefState& s) {
         const auto g = grad + wd * p;
         if (!s.a.defined()) s.a = torch::ones_like(p), s.b = torch::zeros_like(p);
         s.a = 0.9 * s.a + 0.1 * g * g;
         s.b = 0.9 * s.b + lr * g / (s.a + 1.0).sqrt();
         p = p - s.b;
       }},
      {"ScaledLrSgd",
       [](std::vector<ParamGroup> groups) -> std::unique_ptr<Optimizer> {
         return std::make_unique<ScaledLrSgd>(std::move(groups), std::vector<double>{1.0, 2.0},
                                              SgdOptions{0.1, 0.9, false});
       },
       sgd(0.9, false), 2.0, 1},
  };
  return cases;
}

class OptimizerPathTest : public ::testing::TestWithParam<OptimizerCase> {
 protected:
  /// Three parameters in two groups (decay 0.01 and 0); the second gets no gradient in updates 1
  /// and 3, so it starts late and skips one, as a task head in mt-dnn does.
  struct Setup {
    std::vector<torch::Tensor> params, reference;
    std::vector<double> decay = {0.01, 0.01, 0.0};
    std::vector<RefState> states = std::vector<RefState>(3);
    std::unique_ptr<Optimizer> optimizer;
  };

  Setup setup(const torch::Device& device, UpdateKernels kernels) {
    Setup s;
    torch::manual_seed(1);
    for (const auto& shape : {std::vector<int64_t>{4, 3}, {5}, {2, 2}}) {
      s.params.push_back(torch::randn(shape, device).requires_grad_());
      s.reference.push_back(s.params.back().detach().clone());
    }
    s.optimizer =
        GetParam().make({{{s.params[0], s.params[1]}, s.decay[0]}, {{s.params[2]}, s.decay[2]}});
    s.optimizer->set_kernels(kernels);
    return s;
  }

  static double rate(int64_t update) { return 0.01 * (1.0 + 0.1 * static_cast<double>(update)); }

  /// Gradients of update `update` (1-based); parameter 1 has none in updates 1 and 3.
  static void set_grads(Setup& s, int64_t update) {
    torch::manual_seed(100 + update);
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      auto g = torch::randn_like(s.params[i]);
      if (i == 1 && (update == 1 || update == 3)) {
        s.params[i].mutable_grad().reset();
      } else {
        s.params[i].mutable_grad() = g;
      }
    }
  }

  /// The reference update `update` of every parameter that has a gradient.
  static void reference_update(Setup& s, int64_t update, double lr) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      if (!s.params[i].grad().defined()) continue;
      const double factor = i == 2 ? GetParam().lr_factor_group1 : 1.0;
      GetParam().reference(s.reference[i], s.params[i].grad(), s.decay[i], lr * factor, update,
                           s.states[i]);
    }
  }

  static void expect_same(const Setup& s, int64_t update) {
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(s.params[i].detach().cpu(), s.reference[i].cpu(), 1e-5, 1e-6))
          << GetParam().name << ": parameter " << i << " after update " << update << "\n"
          << (s.params[i].detach().cpu() - s.reference[i].cpu()).abs().max();
    }
  }

  /// Updates 1 to `last` with step(), each at its own rate, each against the reference.
  static void step_against_reference(Setup& s, int64_t last) {
    for (int64_t update = 1; update <= last; ++update) {
      set_grads(s, update);
      s.optimizer->set_lr(rate(update));
      s.optimizer->step();
      reference_update(s, update, rate(update));
      expect_same(s, update);
    }
  }

  /// Elements over `tensors`.
  static int64_t numel(const std::vector<torch::Tensor>& tensors) {
    int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    return n;
  }

  /// step() after step(), each at its own rate, against the reference.
  void one_at_a_time(const torch::Device& device, UpdateKernels kernels) {
    Setup s = setup(device, kernels);
    step_against_reference(s, 5);
    EXPECT_EQ(s.optimizer->steps(), 5);
  }

  /// As a replayed graph runs them: the host halves of two updates first (each writes its own
  /// slot), then their device halves in order.
  void two_slots(const torch::Device& device) {
    Setup s = setup(device, UpdateKernels::kDevice);
    if (s.optimizer->kernels() != UpdateKernels::kDevice) {
      GTEST_SKIP() << GetParam().name << " has no device-scalar path on libtorch " << TORCH_VERSION;
    }
    for (int64_t update = 1; update <= 5; update += 2) {
      for (int slot = 0; slot < 2; ++slot) {
        s.optimizer->set_lr(rate(update + slot));
        s.optimizer->prepare(slot);
      }
      for (int slot = 0; slot < 2; ++slot) {
        set_grads(s, update + slot);
        s.optimizer->update(slot);
        reference_update(s, update + slot, rate(update + slot));
        expect_same(s, update + slot);
      }
    }
  }
};

TEST_P(OptimizerPathTest, ForeachKernelsMatchThePerTensorReference) {
  one_at_a_time(torch::kCPU, UpdateKernels::kForeach);
}

TEST_P(OptimizerPathTest, DeviceScalarKernelsMatchThePerTensorReference) {
  // On the CPU: fused kernels from libtorch 2.4, device-scalar multi-tensor kernels always.
  one_at_a_time(torch::kCPU, UpdateKernels::kDevice);
}

TEST_P(OptimizerPathTest, SlotsKeepEachUpdatesScalarsApart) { two_slots(torch::kCPU); }

// What a skipped fp16 update does: the state an update would make, for the parameters with a
// gradient, and nothing else; the updates that follow match the reference that never saw it.
TEST_P(OptimizerPathTest, AllocatedStateChangesNoUpdate) {
  for (const auto kernels : {UpdateKernels::kForeach, UpdateKernels::kDevice}) {
    Setup s = setup(torch::kCPU, kernels);
    EXPECT_TRUE(s.optimizer->state().empty());
    set_grads(s, 1);  // parameter 1 has no gradient here
    s.optimizer->allocate_state(StateFor::kParametersWithGradient);
    EXPECT_EQ(numel(s.optimizer->state()),
              GetParam().state_slots * (s.params[0].numel() + s.params[2].numel()))
        << GetParam().name;
    expect_same(s, 0);
    EXPECT_EQ(s.optimizer->steps(), 0);
    step_against_reference(s, 4);
    EXPECT_EQ(numel(s.optimizer->state()), GetParam().state_slots * numel(s.params))
        << GetParam().name;
  }
}

// What a one-step search probe does before its step: state for every parameter, though none has
// a gradient yet; the updates that follow still match the reference that never saw it.
TEST_P(OptimizerPathTest, StateForEveryParameterBeforeAnyGradientChangesNoUpdate) {
  for (const auto kernels : {UpdateKernels::kForeach, UpdateKernels::kDevice}) {
    Setup s = setup(torch::kCPU, kernels);
    s.optimizer->allocate_state(StateFor::kParametersWithGradient);
    EXPECT_TRUE(s.optimizer->state().empty()) << "no parameter has a gradient yet";
    s.optimizer->allocate_state(StateFor::kEveryParameter);
    EXPECT_EQ(numel(s.optimizer->state()), GetParam().state_slots * numel(s.params))
        << GetParam().name;
    expect_same(s, 0);
    step_against_reference(s, 4);
  }
}

TEST_P(OptimizerPathTest, FusedKernelsMatchThePerTensorReference_CUDA) {
  one_at_a_time(torch::Device(torch::kCUDA, 0), UpdateKernels::kDevice);
}

TEST_P(OptimizerPathTest, SlotsKeepEachUpdatesScalarsApart_CUDA) {
  two_slots(torch::Device(torch::kCUDA, 0));
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerPathTest, ::testing::ValuesIn(optimizer_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(OptimizerKernelsTest, DescribeNamesTheKernelsInUse) {
  auto p = torch::randn({3}).requires_grad_();
  Adam adam({{{p}, 0.0}}, AdamOptions{});
  EXPECT_EQ(adam.describe()["kernels"], "foreach");
  adam.set_kernels(UpdateKernels::kDevice);
  EXPECT_EQ(adam.describe()["kernels"], compat::kHasFusedOptimizers ? "fused" : "foreach");
  Adamax adamax({{{p}, 0.0}}, AdamaxOptions{});
  adamax.set_kernels(UpdateKernels::kDevice);
  EXPECT_EQ(adamax.describe()["kernels"], "foreach, device scalars");
  // Without bias correction the fused kernel needs betas below 1.
  Adam no_correction({{{p}, 0.0}}, AdamOptions{1e-3, 0.9, 1.0, 1e-8, false});
  no_correction.set_kernels(UpdateKernels::kDevice);
  EXPECT_EQ(no_correction.kernels(), UpdateKernels::kForeach);
}

TEST(UpdaterTest, AnUpdateThatFp16LossScalingSkipsStillHoldsTheOptimizerState) {
  // A search probe whose fp16 updates all overflow must count the memory training holds.
  auto p = torch::randn({6, 5}).requires_grad_();
  Updater updater(std::make_unique<Adam>(std::vector<ParamGroup>{{{p}, 0.0}}, AdamOptions{}),
                  Precision::kAmpFp16, torch::kCPU);
  const auto before = p.detach().clone();
  updater.zero_grad();
  p.mutable_grad() = torch::full_like(p, std::numeric_limits<float>::infinity());
  updater.step();
  EXPECT_EQ(updater.scaler().updates_skipped(), 1);
  EXPECT_TRUE(torch::equal(p.detach(), before));
  EXPECT_EQ(updater.optimizer().steps(), 0);
  const auto state = updater.optimizer().state();
  ASSERT_EQ(state.size(), 2u);  // Adam's two moments, at their initial zeros
  for (const auto& t : state) EXPECT_TRUE(torch::equal(t, torch::zeros_like(p)));
}

// ---- Reusing a built model across probes ----

torch::nn::Linear build_linear(const std::string& key, uint64_t seed) {
  return build_model<torch::nn::Linear>(key, torch::kCPU, seed,
                                        [] { return torch::nn::Linear(64, 32); });
}

TEST(ModelReuseTest, OutsideAScopeEveryBuildIsFresh) {
  EXPECT_FALSE(ModelReuse::active());
  auto a = build_linear("linear", 5);
  auto b = build_linear("linear", 5);
  EXPECT_NE(a.ptr(), b.ptr());
  EXPECT_TRUE(torch::equal(a->weight, b->weight));  // the same seed, built twice
  EXPECT_EQ(ModelReuse::reused(), 0);
}

TEST(ModelReuseTest, ABuildWithTheSameKeyGetsTheKeptModelAsItWasFirstBuilt) {
  const auto fresh = build_linear("linear", 5);
  const auto fresh_draw = torch::rand({4});  // where a fresh build leaves the host generator
  const ModelReuse reuse;
  const void* kept = nullptr;
  {
    auto first = build_linear("linear", 5);
    kept = first.ptr().get();
    EXPECT_TRUE(torch::equal(first->weight, fresh->weight));
    EXPECT_TRUE(torch::equal(torch::rand({4}), fresh_draw));
    // A probe trains it: the weights move, gradients stay behind.
    first->weight.sum().backward();
    torch::NoGradGuard no_grad;
    first->weight.add_(1.0);
    first->bias.mul_(3.0);
  }
  ModelReuse::park();
  torch::manual_seed(99);  // whatever ran in between
  auto second = build_linear("linear", 5);
  EXPECT_EQ(second.ptr().get(), kept);
  EXPECT_EQ(ModelReuse::reused(), 1);
  EXPECT_TRUE(torch::equal(second->weight, fresh->weight));
  EXPECT_TRUE(torch::equal(second->bias, fresh->bias));
  EXPECT_FALSE(second->weight.grad().defined());
  EXPECT_TRUE(second->is_training());
  EXPECT_TRUE(torch::equal(torch::rand({4}), fresh_draw));
  // Another key, or another seed, is another model.
  EXPECT_NE(build_linear("other", 5).ptr().get(), kept);
  auto reseeded = build_linear("linear-seed-6", 6);
  EXPECT_FALSE(torch::equal(reseeded->weight, fresh->weight));
}

TEST(ModelReuseTest, ParkDropsTheGradientsOfKeptModels) {
  const ModelReuse reuse;
  auto model = build_linear("linear", 1);
  model->weight.sum().backward();
  ASSERT_TRUE(model->weight.grad().defined());
  ModelReuse::park();
  EXPECT_FALSE(model->weight.grad().defined());
}

TEST(ModelReuseTest, ScopesDoNotNestAndClosingOneForgetsItsModels) {
  {
    const ModelReuse reuse;
    EXPECT_TRUE(ModelReuse::active());
    EXPECT_THROW(ModelReuse{}, c10::Error);
    build_linear("linear", 5);
    build_linear("linear", 5);
    EXPECT_EQ(ModelReuse::reused(), 1);
  }
  EXPECT_FALSE(ModelReuse::active());
  const ModelReuse again;
  build_linear("linear", 5);
  EXPECT_EQ(ModelReuse::reused(), 0);  // built afresh: the closed scope kept nothing
}

// ---- The runtime ----

StepContext cpu_context() {
  StepContext ctx;
  ctx.device = torch::kCPU;
  ctx.precision = Precision::kFp32;
  return ctx;
}

/// A linear layer and a fixed batch: the smallest real training iteration.
struct TinyModel {
  TinyModel() {
    torch::manual_seed(3);
    net = torch::nn::Linear(4, 3);
    x = torch::randn({8, 4});
    y = torch::randn({8, 3});
  }
  std::vector<ParamGroup> groups() const { return {{net->parameters(), 0.0}}; }
  torch::nn::Linear net{nullptr};
  torch::Tensor x, y;
};

double iterate(Runtime& runtime, Updater& updater, TinyModel& m) {
  return runtime.run([&] {
    updater.zero_grad();
    torch::Tensor loss;
    {
      const auto autocast = runtime.autocast();
      loss = torch::mse_loss(m.net(m.x), m.y);
    }
    runtime.record_loss("loss", loss);
    runtime.backward(updater, loss);
    runtime.update(updater);
    return 8.0;
  });
}

TEST(RuntimeTest, RunsAnEagerIterationAndRecordsItsLoss) {
  TinyModel m;
  Runtime runtime(cpu_context());
  auto& updater =
      runtime.add("model", Updater(std::make_unique<Sgd>(m.groups(), SgdOptions{0.1}),
                                   Precision::kFp32, torch::kCPU, /*clip_norm=*/0, constant(0.1)));
  // The reference: the same loss's gradient by hand, one SGD step.
  const auto w = m.net->weight.detach().clone();
  const auto b = m.net->bias.detach().clone();
  const auto error = (m.x.matmul(w.t()) + b - m.y) * (2.0 / static_cast<double>(m.y.numel()));
  const auto expected_w = w - 0.1 * error.t().matmul(m.x);
  const auto expected_loss = (m.x.matmul(w.t()) + b - m.y).square().mean();

  EXPECT_EQ(iterate(runtime, updater, m), 8.0);
  EXPECT_TRUE(torch::allclose(m.net->weight.detach(), expected_w, 1e-5, 1e-6));
  ASSERT_EQ(runtime.losses().count("loss"), 1u);
  EXPECT_NEAR(runtime.losses().at("loss").item<double>(), expected_loss.item<double>(), 1e-6);
  EXPECT_EQ(updater.optimizer().steps(), 1);

  const Json info = runtime.info();
  EXPECT_EQ(info["launch"], "eager");
  EXPECT_EQ(info["precision"], "fp32");
  EXPECT_EQ(info["loss_scaling"], "off");
  EXPECT_EQ(info["gradient_sync"], "none");
  ASSERT_EQ(info["updaters"].size(), 1u);
  EXPECT_EQ(info["updaters"][0]["name"], "model");
  EXPECT_EQ(info["updaters"][0]["optimizer"]["name"], "sgd");
  EXPECT_EQ(info["updaters"][0]["optimizer"]["kernels"], "foreach");
}

TEST(RuntimeTest, AnFp16UpdaterThatSkipsEveryUpdateOfTheWindowMakesTheStepDegenerate) {
  // A finite loss whose gradients overflow once scaled by 65536: every update is skipped and
  // the scale halves each time, as GradScaler does; the weights never change.
  TinyModel m;
  Runtime runtime(cpu_context());
  auto& updater =
      runtime.add("model", Updater(std::make_unique<Sgd>(m.groups(), SgdOptions{0.1}),
                                   Precision::kAmpFp16, torch::kCPU));
  const auto w = m.net->weight.detach().clone();
  auto overflowing = [&] {
    return runtime.run([&] {
      updater.zero_grad();
      const auto loss = 1e35 * torch::mse_loss(m.net(m.x), m.y);
      runtime.record_loss("loss", loss);
      runtime.backward(updater, loss);
      runtime.update(updater);
      return 8.0;
    });
  };
  EXPECT_EQ(runtime.unsettled(), "");  // nothing checked yet
  overflowing();  // warm-up
  EXPECT_EQ(runtime.unsettled(), "fp16 loss scaling skipped the last update of 'model' (1 of 1 so far)");
  runtime.begin_window();
  for (int i = 0; i < 3; ++i) overflowing();
  EXPECT_TRUE(std::isfinite(runtime.losses().at("loss").item<double>()));
  EXPECT_TRUE(torch::equal(m.net->weight.detach(), w));
  const std::string problem = runtime.degeneracy();
  EXPECT_NE(problem.find("skipped all 3 updates of 'model' in the timed window"),
            std::string::npos)
      << problem;
  EXPECT_NE(problem.find("the scale is now 4096"), std::string::npos) << problem;  // 65536 / 2^4
  const Json info = runtime.info();
  EXPECT_EQ(info["updaters"][0]["updates_checked"], 4);
  EXPECT_EQ(info["updaters"][0]["updates_skipped"], 4);
  // The window's own: the warm-up's skip is not among them.
  EXPECT_EQ(info["updaters"][0]["window_updates_checked"], 3);
  EXPECT_EQ(info["updaters"][0]["window_updates_skipped"], 3);

  // One update that steps in the window is training: no complaint. Skips in the warm-up only
  // do not count either.
  runtime.begin_window();
  iterate(runtime, updater, m);
  EXPECT_EQ(runtime.degeneracy(), "");
  // Its last update stepped, but one clean update after a skip does not yet show a settled scale.
  EXPECT_EQ(runtime.unsettled(),
            "fp16 loss scaling of 'model' stepped 1 update since its last skip, fewer than the 3 "
            "in a row that show its scale settled (4 of 5 skipped so far)");
  EXPECT_EQ(runtime.info()["updaters"][0]["window_updates_checked"], 1);
  EXPECT_EQ(runtime.info()["updaters"][0]["window_updates_skipped"], 0);
  EXPECT_FALSE(torch::equal(m.net->weight.detach(), w));
  runtime.begin_window();
  EXPECT_EQ(runtime.degeneracy(), "");  // no update in the window: nothing to judge
  iterate(runtime, updater, m);
  EXPECT_NE(runtime.unsettled(), "");  // 2 clean updates in a row
  iterate(runtime, updater, m);
  EXPECT_EQ(runtime.unsettled(), "");  // 3: settled
}

TEST(RuntimeTest, AnFp16WindowWithTwoSkippedUpdatesTimedAScaleStillFalling) {
  // Scaled gradients that overflow on some steps only, as stylegan's did in amp-fp16 on the
  // H200 (2 of 3 updates of each network skipped in the window): the model trains on the other
  // steps, but a settled scale skips at most once per growth interval, so the window timed a
  // scale still backing off.
  TinyModel m;
  Runtime runtime(cpu_context());
  auto& updater =
      runtime.add("model", Updater(std::make_unique<Sgd>(m.groups(), SgdOptions{0.1}),
                                   Precision::kAmpFp16, torch::kCPU));
  auto step = [&](double factor) {
    return runtime.run([&] {
      updater.zero_grad();
      const auto loss = factor * torch::mse_loss(m.net(m.x), m.y);
      runtime.record_loss("loss", loss);
      runtime.backward(updater, loss);
      runtime.update(updater);
      return 8.0;
    });
  };
  constexpr double kOverflow = 1e35, kClean = 1.0;
  step(kClean);
  EXPECT_EQ(runtime.unsettled(), "");  // stepped, never skipped: nothing says it is backing off
  step(kOverflow);
  EXPECT_NE(runtime.unsettled().find("skipped the last update"), std::string::npos);
  step(kClean);
  step(kClean);
  EXPECT_NE(runtime.unsettled().find("stepped 2 updates since its last skip"), std::string::npos)
      << runtime.unsettled();
  step(kClean);
  EXPECT_EQ(runtime.unsettled(), "");

  // One skip in a window is a settled scale probing upward: no complaint.
  runtime.begin_window();
  step(kClean);
  step(kOverflow);
  step(kClean);
  EXPECT_EQ(runtime.degeneracy(), "");
  // Two skips in a window of three updates: the window timed a falling scale.
  runtime.begin_window();
  step(kOverflow);
  step(kClean);
  step(kOverflow);
  const std::string problem = runtime.degeneracy();
  EXPECT_NE(problem.find("skipped 2 of the 3 updates of 'model' in the timed window"),
            std::string::npos)
      << problem;
  EXPECT_NE(problem.find("the scale was still falling; it is now 4096"), std::string::npos)
      << problem;  // 65536 halved at each of the 4 skips
  EXPECT_TRUE(std::isfinite(runtime.losses().at("loss").item<double>()));
}

TEST(RuntimeTest, WithoutLossScalingNoUpdateIsEverCalledSkipped) {
  TinyModel m;
  Runtime runtime(cpu_context());
  auto& updater = runtime.add(
      "model", Updater(std::make_unique<Sgd>(m.groups(), SgdOptions{0.1}), Precision::kFp32,
                       torch::kCPU));
  runtime.begin_window();
  iterate(runtime, updater, m);
  EXPECT_EQ(runtime.degeneracy(), "");
  EXPECT_FALSE(runtime.info()["updaters"][0].contains("updates_skipped"));
}

/// Records what it is given and zeroes the gradients, as a stand-in for an all-reduce.
class RecordingSync : public GradientSync {
 public:
  void synchronize(const std::string& updater, std::vector<torch::Tensor>& gradients) override {
    names.push_back(updater);
    double squares = 0;
    for (const auto& g : gradients) squares += g.square().sum().item<double>();
    norms.push_back(std::sqrt(squares));
    for (auto& g : gradients) g.zero_();
  }
  std::string name() const override { return "recording"; }

  std::vector<std::string> names;
  std::vector<double> norms;
};

TEST(RuntimeTest, GradientSyncRunsBetweenBackwardAndTheUpdate) {
  TinyModel m;
  auto sync = std::make_shared<RecordingSync>();
  StepContext ctx = cpu_context();
  ctx.gradient_sync = sync;
  Runtime runtime(ctx);
  // A tight clip: the hook must see the gradients before clipping.
  auto& updater = runtime.add("model", Updater(std::make_unique<Sgd>(m.groups(), SgdOptions{0.1}),
                                               Precision::kFp32, torch::kCPU, /*clip_norm=*/1e-3));
  const auto before = m.net->weight.detach().clone();
  torch::Tensor loss = torch::mse_loss(m.net(m.x), m.y);
  loss.backward();
  double squares = 0;
  for (const auto& p : m.net->parameters()) squares += p.grad().square().sum().item<double>();
  iterate(runtime, updater, m);
  ASSERT_EQ(sync->names, std::vector<std::string>{"model"});
  EXPECT_NEAR(sync->norms[0], std::sqrt(squares), 1e-5);
  EXPECT_GT(sync->norms[0], 1e-3);
  // The update applied what the hook left: zero gradients, so nothing moved.
  EXPECT_TRUE(torch::equal(m.net->weight.detach(), before));
  EXPECT_EQ(runtime.info()["gradient_sync"], "recording");
}

TEST(RuntimeTest, CudaGraphsAskedForOffCudaRunEagerlyAndSaySo) {
  StepContext ctx = cpu_context();
  ctx.runtime.cuda_graphs = true;
  Runtime runtime(ctx);
  EXPECT_FALSE(runtime.graphs_active());
  EXPECT_EQ(runtime.warmup_steps(3, {0, 1, 0, 1}), 3);
  const Json info = runtime.info();
  EXPECT_EQ(info["launch"], "eager");
  EXPECT_EQ(info["cuda_graphs"], true);
  EXPECT_NE(info["cuda_graphs_note"].get<std::string>().find("CUDA devices only"),
            std::string::npos);
}

TEST(RuntimeTest, GraphsTurnedOnLateOffCudaAreRefusedWithTheReason) {
  TinyModel m;
  StepContext ctx = cpu_context();
  ctx.runtime.cuda_graphs_if_host_bound = true;
  Runtime runtime(ctx);
  auto& updater = runtime.add("model", Updater(std::make_unique<Sgd>(m.groups(), SgdOptions{0.1}),
                                               Precision::kFp32, torch::kCPU));
  iterate(runtime, updater, m);
  const std::string why = runtime.enable_graphs();
  EXPECT_NE(why.find("CUDA devices only"), std::string::npos) << why;
  EXPECT_FALSE(runtime.graphs_active());
  iterate(runtime, updater, m);  // still eager, still training
  EXPECT_EQ(runtime.replays_in_a_row(), 0);
  EXPECT_EQ(updater.optimizer().steps(), 2);
  const Json info = runtime.info();
  EXPECT_EQ(info["launch"], "eager");
  EXPECT_EQ(info["cuda_graphs"], false);
  EXPECT_EQ(info["cuda_graphs_if_host_bound"], true);
  EXPECT_EQ(info["cuda_graphs_note"], why);
}

TEST(RuntimeTest, OnlyMtDnnTurnsGraphsOnWhenItsStepIsHostBound) {
  ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  for (const auto& name : store.model_names()) {
    const RuntimeSettings s = RuntimeSettings::from_params(store.model(name).runtime);
    EXPECT_EQ(s.cuda_graphs_if_host_bound, name == "mt-dnn") << name;
    EXPECT_FALSE(s.cuda_graphs) << name;
  }
  EXPECT_THROWS_WITH(
      store.apply_document(
          Json{{"models", {{"mt-dnn", {{"runtime", {{"cuda_graphs_if_host_bound", "auto"}}}}}}}},
          "user.json"),
      ConfigError, "cuda_graphs_if_host_bound");
}

TEST(RuntimeTest, KeepsTheCpuOnForeachKernels) {
  TinyModel m;
  Runtime runtime(cpu_context());  // optimizer_kernels: fused, the default
  auto& updater = runtime.add("model", Updater(std::make_unique<Adam>(m.groups(), AdamOptions{}),
                                               Precision::kFp32, torch::kCPU));
  EXPECT_EQ(updater.optimizer().kernels(), UpdateKernels::kForeach);
  EXPECT_EQ(runtime.info()["optimizer_kernels"], "foreach");
}

TEST(RuntimeTest, RuntimeSectionOfAConfigIsValidatedAndKeepsTheScore) {
  ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  EXPECT_FALSE(store.model("bert-base").runtime.flag("cuda_graphs"));
  store.apply_document(Json{{"models", {{"bert-base", {{"runtime", {{"cuda_graphs", true}}}}}}}},
                       "user.json");
  const ModelConfig& config = store.model("bert-base");
  EXPECT_TRUE(RuntimeSettings::from_params(config.runtime).cuda_graphs);
  EXPECT_FALSE(config.modified);  // how it runs is not what it is
  EXPECT_EQ(config.to_json()["runtime"]["cuda_graphs"], true);
  EXPECT_THROWS_WITH(
      store.apply_document(Json{{"models", {{"bert-base", {{"runtime", {{"cuda_graph", true}}}}}}}},
                           "user.json"),
      ConfigError, "cuda_graphs");
  EXPECT_THROWS_WITH(
      store.apply_document(
          Json{{"models", {{"bert-base", {{"runtime", {{"optimizer_kernels", "fast"}}}}}}}},
          "user.json"),
      ConfigError, "fast");
}

TEST(RuntimeTest, CudnnAutotuningIsAPerWorkloadSettingOffWhereTheReferenceTrainsWithoutIt) {
  ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  for (const auto& name : store.model_names()) {
    const bool off = name == "pix2pixhd" || name == "mask-rcnn";
    EXPECT_EQ(RuntimeSettings::from_params(store.model(name).runtime).cudnn_benchmark, !off)
        << name;
    EXPECT_EQ(store.model(name).to_json()["runtime"]["cudnn_benchmark"], !off) << name;
  }
  store.apply_document(
      Json{{"models", {{"pix2pixhd", {{"runtime", {{"cudnn_benchmark", true}}}}}}}}, "user.json");
  EXPECT_TRUE(RuntimeSettings::from_params(store.model("pix2pixhd").runtime).cudnn_benchmark);
  EXPECT_FALSE(store.model("pix2pixhd").modified);  // how it runs, not what it is
  EXPECT_THROWS_WITH(
      store.apply_document(
          Json{{"models", {{"yolov3", {{"runtime", {{"cudnn_benchmark", "yes"}}}}}}}}, "user.json"),
      ConfigError, "cudnn_benchmark");
  // How many algorithms it tries: the run's number, but for the twin of eager PyTorch's
  // DeepLabv3, which tries PyTorch's 10 as eager does.
  for (const auto& name : store.model_names()) {
    EXPECT_EQ(RuntimeSettings::from_params(store.model(name).runtime).cudnn_benchmark_limit,
              name == "deeplabv3-resnet101" ? 10 : -1)
        << name;
  }
  EXPECT_THROWS_WITH(
      store.apply_document(
          Json{{"models", {{"yolov3", {{"runtime", {{"cudnn_benchmark_limit", -2}}}}}}}},
          "user.json"),
      ConfigError, "cudnn_benchmark_limit");
  // The step's runtime info (the record's `runtime`) says what it ran with.
  StepContext ctx = cpu_context();
  ctx.runtime.cudnn_benchmark = false;
  EXPECT_EQ(Runtime(ctx).info()["cudnn_benchmark"], false);
  EXPECT_EQ(Runtime(cpu_context()).info()["cudnn_benchmark"], true);
}

// ---- CUDA graphs against eager iterations ----

/// Two batch shapes, a schedule, clipping and Adam: iterations alternate between the shapes.
struct GraphFixture {
  explicit GraphFixture(bool graphs) {
    const torch::Device device(torch::kCUDA, 0);
    StepContext ctx;
    ctx.device = device;
    ctx.runtime.cuda_graphs = graphs;
    runtime = std::make_unique<Runtime>(ctx);
    torch::manual_seed(5);
    net = torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::Tanh(),
                                torch::nn::Linear(32, 4));
    net->to(device);
    for (const int64_t rows : {8, 24}) {
      xs.push_back(torch::randn({rows, 16}, device));
      ys.push_back(torch::randn({rows, 4}, device));
    }
    AdamOptions adam;
    adam.lr = 1e-2;
    updater = &runtime->add(
        "model",
        Updater(std::make_unique<Adam>(std::vector<ParamGroup>{{net->parameters(), 0.01}}, adam),
                Precision::kFp32, device, /*clip_norm=*/0.5, warmup_linear_decay(1e-2, 4, 100)));
  }

  /// One iteration of batch `v`, with `updates` updates of the one optimizer.
  void iterate(int64_t v, int updates) {
    runtime->run(v, [&] {
      for (int u = 0; u < updates; ++u) {
        updater->zero_grad();
        const auto loss = torch::mse_loss(net->forward(xs[v]), ys[v]);
        runtime->record_loss("loss" + std::to_string(u), loss);
        runtime->backward(*updater, loss);
        runtime->update(*updater);
      }
      return static_cast<double>(xs[v].size(0));
    });
  }

  std::unique_ptr<Runtime> runtime;
  torch::nn::Sequential net{nullptr};
  std::vector<torch::Tensor> xs, ys;
  Updater* updater = nullptr;
};

void expect_graphs_match_eager(int updates_per_iteration) {
  GraphFixture eager(false), graphs(true);
  ASSERT_TRUE(graphs.runtime->graphs_active());
  for (int i = 0; i < 8; ++i) {
    eager.iterate(i % 2, updates_per_iteration);
    graphs.iterate(i % 2, updates_per_iteration);
    for (const auto& [name, loss] : eager.runtime->losses()) {
      EXPECT_NEAR(graphs.runtime->losses().at(name).item<double>(), loss.item<double>(), 1e-6)
          << name << " at iteration " << i;
    }
  }
  const auto a = eager.net->parameters(), b = graphs.net->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].cpu(), b[i].cpu(), 1e-5, 1e-6)) << "parameter " << i;
  }
  EXPECT_EQ(eager.updater->optimizer().steps(), graphs.updater->optimizer().steps());
  EXPECT_DOUBLE_EQ(eager.updater->optimizer().lr(), graphs.updater->optimizer().lr());
  EXPECT_EQ(graphs.runtime->info()["graphs_captured"], 2);
  EXPECT_EQ(graphs.runtime->info()["launch"], "cuda-graphs");
}

TEST(RuntimeTest, CudaGraphReplaysMatchEagerIterations_CUDA) { expect_graphs_match_eager(1); }

TEST(RuntimeTest, GraphsTurnedOnAfterEagerIterationsMatchEagerIterations_CUDA) {
  GraphFixture eager(false), late(false);
  ASSERT_FALSE(late.runtime->graphs_active());
  for (int i = 0; i < 10; ++i) {
    if (i == 3) {
      ASSERT_EQ(late.runtime->enable_graphs(), "");
      ASSERT_TRUE(late.runtime->graphs_active());
    }
    eager.iterate(i % 2, 1);
    late.iterate(i % 2, 1);
    // Iterations 3 and 4 run each shape eagerly on the side stream, 5 and 6 capture (and
    // replay), every one after replays.
    EXPECT_EQ(late.runtime->replays_in_a_row(), i < 7 ? 0 : i - 6) << "iteration " << i;
    for (const auto& [name, loss] : eager.runtime->losses()) {
      EXPECT_NEAR(late.runtime->losses().at(name).item<double>(), loss.item<double>(), 1e-6)
          << name << " at iteration " << i;
    }
  }
  const auto a = eager.net->parameters(), b = late.net->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].cpu(), b[i].cpu(), 1e-5, 1e-6)) << "parameter " << i;
  }
  const Json info = late.runtime->info();
  EXPECT_EQ(info["launch"], "cuda-graphs");
  EXPECT_EQ(info["graphs_captured"], 2);
  EXPECT_EQ(info["graphs_from"], "host-bound warm-up");
}

TEST(RuntimeTest, AStepThatRefusedGraphsCannotHaveThemTurnedOnLate_CUDA) {
  GraphFixture late(false);
  late.runtime->disable_graphs("this body reads the device");
  EXPECT_EQ(late.runtime->enable_graphs(), "this body reads the device");
  EXPECT_FALSE(late.runtime->graphs_active());
  late.iterate(0, 1);
  EXPECT_EQ(late.runtime->info()["launch"], "eager");
}

TEST(RuntimeTest, CapturedIterationsKeepEachUpdatesScheduledRate_CUDA) {
  expect_graphs_match_eager(3);
}

}  // namespace
}  // namespace gpubench::train
