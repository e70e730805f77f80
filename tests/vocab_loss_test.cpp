// The vocabulary cross-entropy's two sums (train::vocab_loss_sums, issue 44 item 2): the fused
// autograd function gives ATen's sums and ATen's gradient, over padded columns, ignored rows,
// strided rows and every logit type; on the CPU its plain-loop implementation (the kernels'
// algorithm), on CUDA the kernels (the _CUDA tests, where a build has them); and every language
// workload trains to the same losses with runtime.fused_loss on as off (CPU, fixed seed), and
// bert-base-mlm in amp-bf16 on the GPU.
#include "gpubench/train/losses.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "tests/builtin_store.h"
#include "tests/smoke_training.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace gpubench::train {
namespace {

using testing::builtin_store;

constexpr int64_t kIgnore = -100;

/// Logits [rows, width] drawn from a fixed seed, the columns past `vocab` -inf (a padded
/// projection's), as a leaf of `type` on `device`; targets [rows] in [0, vocab), every fifth
/// one ignored.
struct Case {
  torch::Tensor logits, target;
  int64_t vocab = 0;
};

Case make_case(int64_t rows, int64_t width, int64_t vocab, torch::Dtype type,
               torch::Device device = torch::kCPU, uint64_t seed = 5) {
  torch::manual_seed(seed);
  auto x = torch::randn({rows, width}) * 3.0;
  if (width > vocab) {
    x.narrow(1, vocab, width - vocab).fill_(-std::numeric_limits<float>::infinity());
  }
  auto target = torch::randint(0, vocab, {rows}, torch::kLong);
  for (int64_t r = 0; r < rows; r += 5) target[r] = kIgnore;
  Case c;
  c.logits = x.to(device).to(type).detach().requires_grad_(true);
  c.target = target.to(device);
  c.vocab = vocab;
  return c;
}

/// The two sums and the gradient of a*nll + b*smooth with respect to the logits.
struct Result {
  torch::Tensor sums, grad;
};

Result run(const Case& c, bool fused, double a = 0.7, double b = 0.013) {
  auto logits = c.logits.detach().clone().requires_grad_(true);
  const auto sums = fused ? fused_vocab_loss_sums(logits, c.target, c.vocab, kIgnore)
                          : vocab_loss_sums(logits, c.target, c.vocab, kIgnore, false);
  (a * sums[0] + b * sums[1]).backward();
  return {sums.detach().cpu(), logits.grad().cpu()};
}

/// |x - y| <= tol * max(1, |y|) elementwise for the sums; the gradient within `grad_tol` of the
/// largest gradient, and exactly 0 where the reference is exactly 0 (padding, ignored rows).
void expect_same(const Result& fused, const Result& aten, double tol, double grad_tol,
                 const std::string& what) {
  ASSERT_EQ(fused.sums.sizes(), aten.sums.sizes()) << what;
  for (int i = 0; i < 2; ++i) {
    const double f = fused.sums[i].item<double>(), r = aten.sums[i].item<double>();
    EXPECT_NEAR(f, r, tol * std::max(1.0, std::abs(r))) << what << " sum " << i;
  }
  ASSERT_EQ(fused.grad.sizes(), aten.grad.sizes()) << what;
  EXPECT_EQ(fused.grad.scalar_type(), aten.grad.scalar_type()) << what;
  const auto g = fused.grad.to(torch::kDouble), r = aten.grad.to(torch::kDouble);
  const double scale = r.abs().max().item<double>();
  EXPECT_LE((g - r).abs().max().item<double>(), grad_tol * scale) << what;
  EXPECT_TRUE(g.masked_select(r.eq(0)).eq(0).all().item<bool>())
      << what << ": a gradient the reference has exactly 0 (padding, ignored rows) is not";
}

TEST(VocabLossTest, FusedSumsAndGradientAreATensOnTheCpu) {
  const Case c = make_case(37, 128, 100, torch::kFloat);
  expect_same(run(c, true), run(c, false), 1e-5, 1e-5, "fp32, 28 padded columns");
  // Nothing padded, nothing ignored but the fifth rows; another pair of weights.
  const Case plain = make_case(23, 50, 50, torch::kFloat, torch::kCPU, 9);
  expect_same(run(plain, true, 1.0, 0.0), run(plain, false, 1.0, 0.0), 1e-5, 1e-5, "nll only");
  expect_same(run(plain, true, 0.0, 1.0), run(plain, false, 0.0, 1.0), 1e-5, 1e-5,
              "smoothing only");
}

TEST(VocabLossTest, PaddedColumnsAndIgnoredRowsGetNoGradient) {
  const Case c = make_case(20, 70, 64, torch::kFloat);
  const Result r = run(c, true);
  EXPECT_TRUE(r.grad.narrow(1, 64, 6).eq(0).all().item<bool>());
  for (int64_t row = 0; row < 20; row += 5) {
    EXPECT_TRUE(r.grad[row].eq(0).all().item<bool>()) << "ignored row " << row;
  }
  // A kept row's gradient of the nll alone sums to 0 (softmax minus a one-hot).
  const Result nll = run(c, true, 1.0, 0.0);
  EXPECT_NEAR(nll.grad[1].sum().item<double>(), 0.0, 1e-5);
  EXPECT_LT(nll.grad[1][c.target[1].item<int64_t>()].item<double>(), 0.0);
}

TEST(VocabLossTest, HalfAndBf16LogitsGiveTheirGradientInTheirType) {
  for (const auto type : {torch::kBFloat16, torch::kHalf}) {
    const Case c = make_case(31, 96, 90, type);
    const Result fused = run(c, true), aten = run(c, false);
    EXPECT_EQ(fused.grad.scalar_type(), type);
    // Both compute in fp32 or better from the same rounded logits; the gradients differ by
    // their type's last bit at most.
    expect_same(fused, aten, 1e-4, 1e-2, std::string("type ") + c10::toString(type));
  }
}

TEST(VocabLossTest, RowsWithAStrideAreRead) {
  // The logits as the first 40 columns of wider rows: a narrow view, row stride 48.
  const Case wide = make_case(12, 48, 48, torch::kFloat);
  auto leaf = wide.logits.detach().clone().requires_grad_(true);
  const auto view = leaf.narrow(1, 0, 40);
  ASSERT_EQ(view.stride(0), 48);
  const auto target = wide.target.remainder(40).masked_fill(wide.target.eq(kIgnore), kIgnore);
  const auto sums = fused_vocab_loss_sums(view, target, 40, kIgnore);
  auto plain_in = view.detach().clone().requires_grad_(true);
  const auto reference = vocab_loss_sums(plain_in, target, 40, kIgnore, false);
  EXPECT_TRUE(torch::allclose(sums, reference, 1e-5, 1e-5));
  (sums[0] + sums[1]).backward();
  (reference[0] + reference[1]).backward();
  EXPECT_TRUE(leaf.grad().narrow(1, 40, 8).eq(0).all().item<bool>());
  EXPECT_TRUE(torch::allclose(leaf.grad().narrow(1, 0, 40), plain_in.grad(), 1e-5, 1e-6));
}

TEST(VocabLossTest, ATargetOutsideTheRowIsANanNotACrash) {
  Case c = make_case(4, 16, 16, torch::kFloat);
  c.target[1] = 16;
  const auto sums = fused_vocab_loss_sums(c.logits, c.target, 16, kIgnore);
  EXPECT_TRUE(std::isnan(sums[0].item<double>()));
}

TEST(VocabLossTest, WrongShapesAreRefusedWithTheirSizes) {
  const Case c = make_case(4, 16, 16, torch::kFloat);
  try {
    fused_vocab_loss_sums(c.logits, c.target.narrow(0, 0, 3), 16, kIgnore);
    FAIL() << "a target of 3 rows for 4 rows of logits was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits [N, W] and target [N]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(fused_vocab_loss_sums(c.logits, c.target, 17, kIgnore), c10::Error);
  EXPECT_THROW(fused_vocab_loss_sums(c.logits.to(torch::kDouble), c.target, 16, kIgnore),
               c10::Error);
}

TEST(VocabLossTest, LabelSmoothedLossIsTheSameFused) {
  const Case c = make_case(3 * 7, 60, 60, torch::kFloat);
  const auto logits = c.logits.detach().view({3, 7, 60});
  const auto target = c.target.masked_fill(c.target.eq(kIgnore), 1).view({3, 7});  // pad = 1
  auto plain_in = logits.clone().requires_grad_(true);
  auto fused_in = logits.clone().requires_grad_(true);
  const auto plain = label_smoothed_nll_loss(plain_in, target, 0.1, 1, true, false);
  const auto fused = label_smoothed_nll_loss(fused_in, target, 0.1, 1, true, true);
  EXPECT_NEAR(fused.loss.item<double>(), plain.loss.item<double>(), 1e-4);
  EXPECT_NEAR(fused.nll_loss.item<double>(), plain.nll_loss.item<double>(), 1e-4);
  plain.loss.backward();
  fused.loss.backward();
  EXPECT_TRUE(torch::allclose(fused_in.grad(), plain_in.grad(), 1e-5, 1e-6));
}

TEST(VocabLossTest, TheFusedFunctionRunsWhereItCan) {
  EXPECT_TRUE(fused_vocab_loss_runs(torch::zeros({2, 3})));
  EXPECT_TRUE(fused_vocab_loss_runs(torch::zeros({2, 3}, torch::kBFloat16)));
  EXPECT_FALSE(fused_vocab_loss_runs(torch::zeros({2, 3}, torch::kDouble)));
  EXPECT_FALSE(fused_vocab_loss_runs(torch::Tensor()));
  // Where it does not run, vocab_loss_sums takes the ATen path rather than failing.
  const auto d = torch::randn({4, 8}, torch::kDouble);
  const auto t = torch::randint(0, 8, {4}, torch::kLong);
  EXPECT_TRUE(torch::allclose(vocab_loss_sums(d, t, 8, kIgnore, true),
                              vocab_loss_sums(d, t, 8, kIgnore, false)));
}

// ---- Whole workloads: the same training with the fused loss ----

void expect_same_training(const std::string& model, torch::Device device = torch::kCPU,
                          Precision precision = Precision::kFp32, double tol = 1e-5) {
  testing::expect_setting_trains_the_same(
      model, "fused_loss", [](RuntimeSettings& r, bool on) { r.fused_loss = on; }, device,
      precision, tol);
}

TEST(VocabLossTest, BertTrainsTheSameWithTheFusedLoss) {
  expect_same_training("bert-base");      // masked positions gathered
  expect_same_training("bert-base-mlm");  // every position, -100 labels ignored
}

TEST(VocabLossTest, TranslationTrainsTheSameWithTheFusedLoss) {
  expect_same_training("transformer-big");  // smoothed, padding ignored
  expect_same_training("conv-seq2seq");
}

TEST(VocabLossTest, UnsupMtTrainsTheSameWithTheFusedLoss) { expect_same_training("unsupmt"); }

TEST(VocabLossTest, TheRecordSaysItDidNotRunWhereNoLossTookIt) {
  // bert-finetune's loss is over answer positions, not a vocabulary: nothing takes the setting.
  const auto info = [](const std::string& model) {
    return testing::train_smoke(model, 1,
                                [](StepContext& ctx) { ctx.runtime.fused_loss = true; })
        .runtime_info;
  };
  const Json finetune = info("bert-finetune");
  EXPECT_EQ(finetune.value("fused_loss", true), false) << finetune.dump();
  EXPECT_NE(finetune.value("fused_loss_note", "").find("no loss ran the fused cross-entropy"),
            std::string::npos)
      << finetune.dump();
  const Json mlm = info("bert-base-mlm");
  EXPECT_EQ(mlm.value("fused_loss", false), true) << mlm.dump();
  EXPECT_FALSE(mlm.contains("fused_loss_note")) << mlm.dump();
}

TEST(VocabLossTest, TheSettingIsInTheRuntimeSectionAndOffByDefault) {
  EXPECT_FALSE(RuntimeSettings{}.fused_loss);
  for (const char* name : {"bert-base", "unsupmt", "transformer-big"}) {
    const ModelConfig& config = builtin_store().model(name);
    EXPECT_FALSE(RuntimeSettings::from_params(config.runtime).fused_loss) << name;
    EXPECT_EQ(config.to_json()["runtime"]["fused_loss"], false) << name;
  }
}

// ---- The kernels (builds with GPUBENCH_CUDA_KERNELS, on a GPU) ----

TEST(VocabLossTest, KernelsGiveATensSumsAndGradient_CUDA) {
  if (!have_vocab_loss_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  const torch::Device cuda(torch::kCUDA, 0);
  // BERT's vocabulary unpadded (rows not 16-byte aligned: the one-element loads) and padded to
  // 30528 (aligned: the 16-byte loads), XLM's padded; every logit type.
  struct Shape {
    int64_t width, vocab;
  };
  for (const Shape s : {Shape{30522, 30522}, Shape{30528, 30522}, Shape{64704, 64699}}) {
    for (const auto type : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      const Case c = make_case(257, s.width, s.vocab, type, cuda);
      const std::string what = std::to_string(s.width) + "/" + std::to_string(s.vocab) + " " +
                               c10::toString(type);
      expect_same(run(c, true), run(c, false), type == torch::kFloat ? 1e-5 : 1e-4,
                  type == torch::kFloat ? 1e-5 : 1e-2, what);
    }
  }
}

TEST(VocabLossTest, BertMlmTrainsTheSameWithTheFusedLossInBf16_CUDA) {
  if (!have_vocab_loss_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  // amp-bf16: the logits are bf16 either way; the sums in fp32 in both, in another order.
  expect_same_training("bert-base-mlm", torch::Device(torch::kCUDA, 0), Precision::kAmpBf16, 2e-3);
  expect_same_training("transformer-big", torch::Device(torch::kCUDA, 0), Precision::kAmpBf16,
                       2e-3);
}

}  // namespace
}  // namespace gpubench::train
