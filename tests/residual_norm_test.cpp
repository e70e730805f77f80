// LayerNorm(residual + dropout(x)) (train::residual_layer_norm, issue 44 item 4): the fused
// autograd function gives ATen's output and ATen's four gradients for the same keep-mask, in
// every type mix the models make; on the CPU its double implementation (the kernels' formulas)
// draws ATen's own mask, so every language workload trains to the same losses and gradients with
// runtime.fused_norm on as off; on CUDA the kernels (the _CUDA tests, where a build has them).
#include "gpubench/train/residual_norm.h"

#include "gpubench/base/compat.h"
#include "tests/builtin_store.h"
#include "tests/smoke_training.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpubench::train {
namespace {

using testing::builtin_store;

/// x, residual, weight and bias drawn from a fixed seed (a weight away from 1 and a bias away
/// from 0, so that a formula that drops either shows), a keep-mask of about 70%, on `device`.
struct Case {
  torch::Tensor x, residual, mask;
  NormParams norm;
  double scale = 1.0 / 0.7;
};

Case make_case(std::vector<int64_t> shape, torch::Dtype x_type, torch::Dtype residual_type,
               torch::Device device = torch::kCPU, uint64_t seed = 3) {
  torch::manual_seed(seed);
  const int64_t width = shape.back();
  Case c;
  c.x = torch::randn(shape).to(device).to(x_type);
  c.residual = (torch::randn(shape) * 2 + 0.5).to(device).to(residual_type);
  c.mask = torch::rand(shape).lt(0.7).to(torch::kByte).to(device);
  c.norm.weight = (torch::rand({width}) + 0.5).to(device);
  c.norm.bias = (torch::randn({width}) * 0.3).to(device);
  c.norm.eps = 1e-5;
  return c;
}

/// The output and the gradients of x, the residual, the weight and the bias for the upstream
/// gradient `up` (drawn from the seed).
struct Result {
  torch::Tensor y, gx, gr, gw, gb;
};

Result backward_of(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& r,
                   const NormParams& n) {
  torch::manual_seed(9);
  const auto up = torch::randn(y.sizes()).to(y.device()).to(y.scalar_type());
  y.backward(up);
  return {y.detach(), x.grad(), r.grad(), n.weight.grad(), n.bias.grad()};
}

struct Leaves {
  torch::Tensor x, r;
  NormParams n;
};

Leaves leaves(const Case& c) {
  return {c.x.detach().clone().requires_grad_(true),
          c.residual.detach().clone().requires_grad_(true),
          {c.norm.weight.detach().clone().requires_grad_(true),
           c.norm.bias.detach().clone().requires_grad_(true), c.norm.eps}};
}

Result fused(const Case& c, bool with_mask = true) {
  Leaves l = leaves(c);
  const auto y = fused_residual_layer_norm(l.x, l.r, with_mask ? c.mask : torch::Tensor(),
                                           with_mask ? c.scale : 1.0, l.n);
  return backward_of(y, l.x, l.r, l.n);
}

/// ATen with the same mask: the dropout's output in x's type, the sum in the add's type,
/// layer_norm in fp32 (autocast's, and 1.13's CPU takes no bf16 input with an fp32 weight), its
/// output in `y_type`.
Result aten(const Case& c, torch::ScalarType y_type, bool with_mask = true) {
  Leaves l = leaves(c);
  auto d = l.x;
  if (with_mask)
    d = (l.x.to(torch::kFloat) * c.mask.to(torch::kFloat) * c.scale).to(l.x.scalar_type());
  const auto z = l.r + d;
  const auto y =
      torch::layer_norm(z.to(torch::kFloat), {c.x.size(-1)}, l.n.weight, l.n.bias, l.n.eps)
          .to(y_type);
  return backward_of(y, l.x, l.r, l.n);
}

/// Each of the five within `tol` of the reference's largest magnitude (at least 1); a tensor of a
/// 16-bit type within two of its rounding steps at least (ATen rounds the gradient of a bf16
/// input twice on its way, the kernels once).
void expect_close(const Result& got, const Result& want, double fp32_tol, const std::string& what) {
  const auto close = [&](const torch::Tensor& a, const torch::Tensor& b, const char* name) {
    ASSERT_TRUE(a.defined() && b.defined()) << what << " " << name;
    EXPECT_EQ(a.scalar_type(), b.scalar_type()) << what << " " << name;
    const double step = b.scalar_type() == torch::kBFloat16 ? 1.0 / 256
                        : b.scalar_type() == torch::kHalf   ? 1.0 / 2048
                                                            : 0.0;
    const double tol = std::max(fp32_tol, 2 * step);
    const auto af = a.to(torch::kDouble), bf = b.to(torch::kDouble);
    const double err = (af - bf).abs().max().item<double>();
    const double scale = std::max(1.0, bf.abs().max().item<double>());
    EXPECT_LE(err, tol * scale) << what << " " << name << ": largest difference " << err;
  };
  close(got.y, want.y, "output");
  close(got.gx, want.gx, "x's gradient");
  close(got.gr, want.gr, "the residual's gradient");
  close(got.gw, want.gw, "the weight's gradient");
  close(got.gb, want.gb, "the bias's gradient");
}

TEST(ResidualNormTest, FusedIsATensOutputAndGradientsOnTheCpu) {
  const Case c = make_case({3, 5, 40}, torch::kFloat, torch::kFloat);
  expect_close(fused(c), aten(c, torch::kFloat), 1e-5, "fp32 with dropout");
  expect_close(fused(c, false), aten(c, torch::kFloat, false), 1e-5, "fp32 without");
  // A dropped element passes no gradient to x; a kept one passes the residual's times the scale.
  const Result r = fused(c);
  const auto dropped = c.mask.eq(0);
  EXPECT_TRUE(r.gx.masked_select(dropped).eq(0).all().item<bool>());
  EXPECT_TRUE(torch::allclose(r.gx.masked_select(dropped.logical_not()),
                              r.gr.masked_select(dropped.logical_not()) * c.scale, 1e-5, 1e-6));
}

TEST(ResidualNormTest, HalfTypesKeepATensTypes) {
  // amp's mix: a bf16 (or fp16) sub-layer output on an fp32 residual stream, z and y fp32.
  for (const auto type : {torch::kBFloat16, torch::kHalf}) {
    const Case c = make_case({4, 64}, type, torch::kFloat);
    expect_close(fused(c), aten(c, torch::kFloat), 1e-4, std::string("x ") + c10::toString(type));
  }
  // Everything bf16: z and y bf16, the gradients in their inputs' types.
  const Case c = make_case({4, 64}, torch::kBFloat16, torch::kBFloat16);
  expect_close(fused(c), aten(c, torch::kBFloat16), 2e-2, "all bf16");
}

TEST(ResidualNormTest, OnTheCpuTheMaskIsATensDropoutsDraw) {
  const Case c = make_case({6, 48}, torch::kFloat, torch::kFloat);
  torch::manual_seed(21);
  const auto plain = residual_layer_norm(c.x, c.residual, 0.3, true, c.norm, false);
  torch::manual_seed(21);
  const auto fused_y = residual_layer_norm(c.x, c.residual, 0.3, true, c.norm, true);
  EXPECT_TRUE(torch::allclose(fused_y, plain, 1e-5, 1e-5));
  // Not training, or p 0: no dropout either way.
  EXPECT_TRUE(torch::allclose(residual_layer_norm(c.x, c.residual, 0.3, false, c.norm, true),
                              residual_layer_norm(c.x, c.residual, 0.3, false, c.norm, false), 1e-5,
                              1e-5));
}

TEST(ResidualNormTest, TheFusedFunctionRunsWhereItCan) {
  const Case c = make_case({2, 16}, torch::kFloat, torch::kFloat);
  EXPECT_TRUE(fused_residual_norm_runs(c.x, c.residual, c.norm));
  EXPECT_FALSE(fused_residual_norm_runs(c.x.to(torch::kDouble), c.residual, c.norm));
  EXPECT_FALSE(fused_residual_norm_runs(c.x.to(torch::kBFloat16), c.residual.to(torch::kHalf),
                                        c.norm));  // their sum would be fp32: neither's type
  EXPECT_FALSE(fused_residual_norm_runs(c.x, c.residual.to(torch::kBFloat16), c.norm));
  EXPECT_FALSE(fused_residual_norm_runs(c.x, c.residual.narrow(0, 0, 1), c.norm));
  EXPECT_FALSE(fused_residual_norm_runs(
      c.x, c.residual, {c.norm.weight.to(torch::kBFloat16), c.norm.bias, c.norm.eps}));
  const auto wide = torch::zeros({2, 1025});
  const NormParams wide_norm{torch::ones({1025}), torch::zeros({1025}), 1e-5};
  EXPECT_FALSE(fused_residual_norm_runs(wide, wide, wide_norm));
  // Where it does not run, residual_layer_norm takes the ATen path rather than failing.
  const auto d = c.x.to(torch::kDouble);
  const NormParams dn{c.norm.weight.to(torch::kDouble), c.norm.bias.to(torch::kDouble), 1e-5};
  EXPECT_TRUE(torch::allclose(residual_layer_norm(d, d, 0.1, false, dn, true),
                              residual_layer_norm(d, d, 0.1, false, dn, false)));
  EXPECT_THROW(fused_residual_layer_norm(d, d, torch::Tensor(), 1.0, dn), c10::Error);
}

TEST(ResidualNormTest, AMaskOfAnotherShapeOrTypeIsRefused) {
  const Case c = make_case({2, 16}, torch::kFloat, torch::kFloat);
  try {
    fused_residual_layer_norm(c.x, c.residual, c.mask.narrow(1, 0, 8), c.scale, c.norm);
    FAIL() << "a mask of half the row was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the mask is uint8 of x's shape"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(fused_residual_layer_norm(c.x, c.residual, c.mask.to(torch::kBool), c.scale, c.norm),
               c10::Error);
}

// ---- Whole workloads: the same training with the fused norm ----

void expect_same_training(const std::string& model, torch::Device device = torch::kCPU,
                          Precision precision = Precision::kFp32, double tol = 1e-5,
                          const Json& overlay = Json::object()) {
  testing::expect_setting_trains_the_same(
      model, "fused_norm", [](RuntimeSettings& r, bool on) { r.fused_norm = on; }, device,
      precision, tol, overlay);
}

TEST(ResidualNormTest, BertTrainsTheSameWithTheFusedNorm) {
  expect_same_training("bert-base");
  expect_same_training("bert-base-mlm");
  expect_same_training("bert-finetune");
}

TEST(ResidualNormTest, MtDnnTrainsTheSameWithTheFusedNorm) { expect_same_training("mt-dnn"); }

TEST(ResidualNormTest, TransformerTrainsTheSameWithTheFusedNorm) {
  expect_same_training("transformer-big");
}

TEST(ResidualNormTest, UnsupMtTrainsTheSameWithTheFusedNorm) { expect_same_training("unsupmt"); }

TEST(ResidualNormTest, TheRecordSaysItDidNotRunWhereNoLayerTookIt) {
  // Rows wider than the kernels take run ATen's path: the record must not say the fused norm did.
  const auto info = [](const Json& overlay) {
    return testing::train_smoke(
               "bert-base", 1, [](StepContext& ctx) { ctx.runtime.fused_norm = true; }, overlay)
        .runtime_info;
  };
  const Json wide = info(Json{{"hidden_size", 1056}, {"heads", 2}, {"intermediate_size", 64}});
  EXPECT_EQ(wide.value("fused_norm", true), false) << wide.dump();
  EXPECT_NE(wide.value("fused_norm_note", "").find("no layer ran the fused norm"),
            std::string::npos)
      << wide.dump();
  const Json ran = info(Json::object());
  EXPECT_EQ(ran.value("fused_norm", false), true) << ran.dump();
  EXPECT_FALSE(ran.contains("fused_norm_note")) << ran.dump();
}

TEST(ResidualNormTest, TheSettingIsInTheRuntimeSectionAndOffByDefault) {
  EXPECT_FALSE(RuntimeSettings{}.fused_norm);
  for (const char* name : {"bert-base", "unsupmt", "transformer-big", "mt-dnn"}) {
    const ModelConfig& config = builtin_store().model(name);
    EXPECT_FALSE(RuntimeSettings::from_params(config.runtime).fused_norm) << name;
    EXPECT_EQ(config.to_json()["runtime"]["fused_norm"], false) << name;
  }
}

// ---- The kernels (builds with GPUBENCH_CUDA_KERNELS, on a GPU) ----

TEST(ResidualNormTest, KernelsGiveATensOutputAndGradients_CUDA) {
  if (!have_residual_norm_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  const torch::Device cuda(torch::kCUDA, 0);
  struct Types {
    torch::Dtype x, residual;
    double tol;
  };
  // BERT's 768 and the transformers' 1024 (24 and 32 columns a lane), a width no lane count
  // divides, one under a warp; fp32, amp's mixes, all bf16; more rows than the backward's blocks.
  for (const int64_t width : {768, 1024, 100, 17}) {
    for (const Types t :
         {Types{torch::kFloat, torch::kFloat, 2e-5}, Types{torch::kBFloat16, torch::kFloat, 1e-4},
          Types{torch::kHalf, torch::kFloat, 1e-4},
          Types{torch::kBFloat16, torch::kBFloat16, 2e-2}}) {
      const Case c = make_case({9000, width}, t.x, t.residual, cuda);
      const std::string what =
          std::to_string(width) + " " + c10::toString(t.x) + "+" + c10::toString(t.residual);
      const auto y_type = torch::promote_types(t.x, t.residual);
      expect_close(fused(c), aten(c, y_type), t.tol, what);
      expect_close(fused(c, false), aten(c, y_type, false), t.tol, what + " without dropout");
    }
  }
  // Under autocast the output is fp32, as autocast's layer_norm's.
  const Case c = make_case({300, 768}, torch::kBFloat16, torch::kBFloat16, cuda);
  compat::set_autocast(torch::kCUDA, true, torch::kBFloat16);
  Result got = fused(c);
  compat::set_autocast(torch::kCUDA, false, torch::kBFloat16);
  expect_close(got, aten(c, torch::kFloat), 2e-2, "bf16 under autocast");
}

TEST(ResidualNormTest, TheKernelsDropTheShareAskedFor_CUDA) {
  if (!have_residual_norm_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  const Case c =
      make_case({4096, 1024}, torch::kFloat, torch::kFloat, torch::Device(torch::kCUDA, 0));
  Leaves l = leaves(c);
  const auto y = residual_layer_norm(l.x, l.r, 0.1, true, l.n, true);
  const Result r = backward_of(y, l.x, l.r, l.n);
  // x's gradient is 0 where an element was dropped and the residual's times 1 / 0.9 where kept.
  const auto dropped = r.gx.eq(0);
  const double share = dropped.to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(share, 0.1, 0.003);
  const auto kept = dropped.logical_not();
  EXPECT_TRUE(
      torch::allclose(r.gx.masked_select(kept), r.gr.masked_select(kept) / 0.9, 1e-5, 1e-6));
}

TEST(ResidualNormTest, LanguageModelsTrainTheSameWithTheFusedNormInBf16_CUDA) {
  if (!have_residual_norm_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  // Without dropout, since on CUDA the fused function's mask is another draw than ATen's.
  const torch::Device cuda(torch::kCUDA, 0);
  expect_same_training("bert-base-mlm", cuda, Precision::kAmpBf16, 2e-3,
                       Json{{"hidden_dropout", 0.0}, {"attention_dropout", 0.0}});
  expect_same_training("transformer-big", cuda, Precision::kAmpBf16, 2e-3, Json{{"dropout", 0.0}});
  expect_same_training("transformer-big", cuda, Precision::kFp32, 1e-4, Json{{"dropout", 0.0}});
}

}  // namespace
}  // namespace gpubench::train
