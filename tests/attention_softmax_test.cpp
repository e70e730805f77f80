// Stored attention's fused masks + softmax + dropout (train::fused_attention_probs, issue 44
// item 3): the fused autograd function gives ATen's probabilities and the scores' gradient for
// the same keep-mask, with padding masks broadcast over heads and queries, causal masks and
// amp's types; on the CPU its double implementation draws ATen's own mask, so every attention
// workload trains to the same losses and gradients with runtime.fused_softmax on as off; on
// CUDA the kernels (the _CUDA tests, where a build has them).
#include "gpubench/train/attention_softmax.h"

#include "gpubench/base/compat.h"
#include "tests/builtin_store.h"
#include "tests/smoke_training.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace gpubench::train {
namespace {

using testing::builtin_store;

/// Scores [batch, heads, q_len, k_len] drawn from a fixed seed, an additive padding mask
/// [batch, 1, 1, k_len] (sequence b's last 1 + b % (k_len / 2) keys -10000, as BERT's), a
/// keep-mask of about 80%.
struct Case {
  torch::Tensor scores, keep;
  std::optional<torch::Tensor> mask;
  double scale = 1.0 / 0.8;
};

Case make_case(int64_t batch, int64_t heads, int64_t q_len, int64_t k_len, torch::Dtype type,
               torch::Device device = torch::kCPU, bool with_mask = true, uint64_t seed = 4) {
  torch::manual_seed(seed);
  Case c;
  c.scores = (torch::randn({batch, heads, q_len, k_len}) * 2).to(device).to(type);
  c.keep = torch::rand({batch, heads, q_len, k_len}).lt(0.8).to(torch::kByte).to(device);
  if (with_mask) {
    auto m = torch::zeros({batch, 1, 1, k_len});
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t pad = k_len < 2 ? 0 : 1 + b % std::max<int64_t>(1, k_len / 2);
      if (pad > 0) m[b].narrow(-1, k_len - pad, pad).fill_(-10000.0);
    }
    c.mask = m.to(device).to(type);
  }
  return c;
}

/// The output and the scores' gradient for an upstream gradient drawn from a seed.
struct Result {
  torch::Tensor out, grad;
};

Result backward_of(const torch::Tensor& out, const torch::Tensor& leaf) {
  torch::manual_seed(8);
  const auto up = torch::randn(out.sizes()).to(out.device()).to(out.scalar_type());
  out.backward(up);
  return {out.detach(), leaf.grad()};
}

Result fused(const Case& c, bool causal, bool with_keep = true) {
  auto leaf = c.scores.detach().clone().requires_grad_(true);
  const auto out = fused_attention_softmax(
      leaf, c.mask, causal, with_keep ? c.keep : torch::Tensor(), with_keep ? c.scale : 1.0);
  return backward_of(out, leaf);
}

/// ATen's ops with the same keep-mask, the sum in the scores' type, softmax in fp32, the result
/// in `out_type`.
Result aten(const Case& c, bool causal, torch::ScalarType out_type, bool with_keep = true) {
  auto leaf = c.scores.detach().clone().requires_grad_(true);
  auto s = leaf;
  if (causal) {
    const auto future =
        torch::ones({s.size(2), s.size(3)}, s.options().dtype(torch::kBool)).triu(1);
    s = s.masked_fill(future, -std::numeric_limits<float>::infinity());
  }
  if (c.mask) s = s + *c.mask;
  auto p = torch::softmax(s.to(torch::kFloat), -1);
  if (with_keep) p = p * c.keep.to(torch::kFloat) * c.scale;
  return backward_of(p.to(out_type), leaf);
}

void expect_close(const Result& got, const Result& want, double tol, const std::string& what) {
  for (const auto& [a, b, name] : {std::tuple{got.out, want.out, "output"},
                                   std::tuple{got.grad, want.grad, "the scores' gradient"}}) {
    ASSERT_TRUE(a.defined() && b.defined()) << what << " " << name;
    EXPECT_EQ(a.scalar_type(), b.scalar_type()) << what << " " << name;
    const double err = (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
    EXPECT_LE(err, tol) << what << " " << name << ": largest difference " << err;
  }
}

TEST(AttentionSoftmaxTest, FusedIsATensProbabilitiesAndGradientOnTheCpu) {
  const Case c = make_case(2, 3, 6, 6, torch::kFloat);
  for (const bool causal : {false, true}) {
    const std::string what = causal ? "causal" : "padding";
    expect_close(fused(c, causal), aten(c, causal, torch::kFloat), 1e-6, what);
    expect_close(fused(c, causal, false), aten(c, causal, torch::kFloat, false), 1e-6,
                 what + " without dropout");
  }
  // Cross attention: queries and keys of other lengths, no mask.
  const Case cross = make_case(2, 2, 3, 9, torch::kFloat, torch::kCPU, false);
  expect_close(fused(cross, false), aten(cross, false, torch::kFloat), 1e-6, "cross");
  // A dropped probability passes nothing on; a padded key gets no probability.
  const Result r = fused(c, false, false);
  EXPECT_TRUE(fused(c, false).out.masked_select(c.keep.eq(0)).eq(0).all().item<bool>());
  EXPECT_EQ(r.out[0].select(-1, 5).abs().max().item<double>(), 0.0);
  EXPECT_GT(r.out[0].select(-1, 4).abs().min().item<double>(), 0.0);
}

TEST(AttentionSoftmaxTest, OnTheCpuTheKeepMaskIsATensDropoutsDraw) {
  const Case c = make_case(2, 2, 5, 5, torch::kFloat);
  torch::manual_seed(31);
  const auto plain = torch::dropout(torch::softmax(c.scores + *c.mask, -1), 0.25, true);
  torch::manual_seed(31);
  const auto fused_p = fused_attention_probs(c.scores, c.mask, false, 0.25);
  EXPECT_TRUE(torch::allclose(fused_p, plain, 1e-6, 1e-7));
}

TEST(AttentionSoftmaxTest, TheFusedFunctionRunsWhereItCan) {
  const Case c = make_case(1, 2, 4, 4, torch::kFloat);
  EXPECT_TRUE(fused_attention_softmax_runs(c.scores, c.mask));
  EXPECT_TRUE(fused_attention_softmax_runs(c.scores, std::nullopt));
  EXPECT_FALSE(fused_attention_softmax_runs(c.scores[0], c.mask));  // 3-d
  EXPECT_FALSE(fused_attention_softmax_runs(c.scores.to(torch::kDouble), std::nullopt));
  EXPECT_FALSE(fused_attention_softmax_runs(c.scores, torch::zeros({1, 1, 1, 3})));
  EXPECT_FALSE(fused_attention_softmax_runs(torch::zeros({1, 1, 2, 1025}), std::nullopt));
  // bf16 scores and an fp32 mask without autocast: the sum and the probabilities fp32, not the
  // type the product with v reads.
  EXPECT_FALSE(fused_attention_softmax_runs(c.scores.to(torch::kBFloat16), c.mask));
  EXPECT_THROW(fused_attention_softmax(c.scores.to(torch::kDouble), std::nullopt, false,
                                       torch::Tensor(), 1.0),
               c10::Error);
}

TEST(AttentionSoftmaxTest, AKeepMaskOfAnotherShapeIsRefused) {
  const Case c = make_case(1, 2, 4, 4, torch::kFloat);
  try {
    fused_attention_softmax(c.scores, c.mask, false, c.keep.narrow(3, 0, 2), c.scale);
    FAIL() << "a keep-mask of half the keys was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the keep-mask is uint8 of the scores' shape"),
              std::string::npos)
        << e.what();
  }
}

// ---- Whole workloads: the same training with the fused softmax ----

void expect_same_training(const std::string& model, torch::Device device = torch::kCPU,
                          Precision precision = Precision::kFp32, double tol = 1e-5,
                          const Json& overlay = Json::object()) {
  testing::expect_setting_trains_the_same(
      model, "fused_softmax", [](RuntimeSettings& r, bool on) { r.fused_softmax = on; }, device,
      precision, tol, overlay);
}

TEST(AttentionSoftmaxTest, BertTrainsTheSameWithTheFusedSoftmax) {
  expect_same_training("bert-base");
  expect_same_training("bert-base-mlm");
  expect_same_training("bert-finetune");  // padding masked
}

TEST(AttentionSoftmaxTest, MtDnnTrainsTheSameWithTheFusedSoftmax) {
  expect_same_training("mt-dnn");
}

TEST(AttentionSoftmaxTest, TransformerTrainsTheSameWithTheFusedSoftmax) {
  expect_same_training("transformer-big");  // causal and padding masks
  expect_same_training("transformer-big", torch::kCPU, Precision::kFp32, 1e-5,
                       Json{{"attention_dropout", 0.1}});
}

TEST(AttentionSoftmaxTest, UnsupMtTrainsTheSameWithTheFusedSoftmax) {
  expect_same_training("unsupmt");  // causal decoder, cross attention
}

TEST(AttentionSoftmaxTest, TheRecordSaysItDidNotRunWhereNothingTakesIt) {
  // Fused attention has no stored probabilities to fuse; with fast_paths off the plain path
  // runs. Either way the record must not say the fused softmax ran.
  const auto train = [](bool fast_paths, const Json& overlay) {
    return testing::train_smoke(
        "bert-base", 1,
        [&](StepContext& ctx) {
          ctx.runtime.fused_softmax = true;
          ctx.runtime.fast_paths = fast_paths;
        },
        overlay);
  };
  for (const auto& [what, info] :
       {std::pair{"fused attention", train(true, Json{{"attention", "fused"}}).runtime_info},
        std::pair{"fast_paths off", train(false, Json::object()).runtime_info}}) {
    EXPECT_EQ(info.value("fused_softmax", true), false) << what;
    EXPECT_NE(info.value("fused_softmax_note", "").find("no layer ran the fused softmax"),
              std::string::npos)
        << what << ": " << info.dump();
  }
  // And where it runs, no note.
  const Json ran = train(true, Json{{"attention", "stored"}}).runtime_info;
  EXPECT_EQ(ran.value("fused_softmax", false), true) << ran.dump();
  EXPECT_FALSE(ran.contains("fused_softmax_note")) << ran.dump();
}

TEST(AttentionSoftmaxTest, TheSettingIsInTheRuntimeSectionOnWhereItWasMeasuredToPay) {
  EXPECT_FALSE(RuntimeSettings{}.fused_softmax);
  // On where an H100's pairs showed a gain (docs/results/2026-12-08-h100-fused-kernels), off
  // where it lost (unsupmt) or was not timed alone.
  for (const auto& [name, on] : {std::pair{"bert-base-mlm", true}, std::pair{"transformer-big", true},
                                 std::pair{"bert-base", false}, std::pair{"bert-finetune", false},
                                 std::pair{"mt-dnn", false}, std::pair{"unsupmt", false}}) {
    const ModelConfig& config = builtin_store().model(name);
    EXPECT_EQ(RuntimeSettings::from_params(config.runtime).fused_softmax, on) << name;
    EXPECT_EQ(config.to_json()["runtime"]["fused_softmax"], on) << name;
  }
}

// ---- The kernels (builds with GPUBENCH_CUDA_KERNELS, on a GPU) ----

TEST(AttentionSoftmaxTest, KernelsGiveATensProbabilitiesAndGradient_CUDA) {
  if (!have_attention_softmax_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  const torch::Device cuda(torch::kCUDA, 0);
  struct Shape {
    int64_t batch, heads, q_len, k_len;
    bool causal;
  };
  // BERT's 128 and 512 keys, a causal 100 (no lane count divides it), cross attention with
  // fewer queries, the widest row.
  for (const Shape s :
       {Shape{4, 3, 128, 128, false}, Shape{2, 2, 512, 512, false}, Shape{3, 2, 100, 100, true},
        Shape{2, 2, 17, 40, false}, Shape{1, 1, 8, 1024, false}}) {
    const std::string what =
        std::to_string(s.q_len) + "x" + std::to_string(s.k_len) + (s.causal ? " causal" : "");
    const Case f = make_case(s.batch, s.heads, s.q_len, s.k_len, torch::kFloat, cuda);
    expect_close(fused(f, s.causal), aten(f, s.causal, torch::kFloat), 1e-5, what + " fp32");
    expect_close(fused(f, s.causal, false), aten(f, s.causal, torch::kFloat, false), 1e-5,
                 what + " fp32 without dropout");
    // amp: bf16 scores and mask, the probabilities fp32, the output bf16.
    const Case b = make_case(s.batch, s.heads, s.q_len, s.k_len, torch::kBFloat16, cuda);
    compat::set_autocast(torch::kCUDA, true, torch::kBFloat16);
    const Result got = fused(b, s.causal), got_plain = fused(b, s.causal, false);
    compat::set_autocast(torch::kCUDA, false, torch::kBFloat16);
    expect_close(got, aten(b, s.causal, torch::kBFloat16), 2e-2, what + " bf16 under autocast");
    expect_close(got_plain, aten(b, s.causal, torch::kBFloat16, false), 2e-2,
                 what + " bf16 under autocast without dropout");
  }
}

TEST(AttentionSoftmaxTest, TheKernelsDropTheShareAskedFor_CUDA) {
  if (!have_attention_softmax_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  const Case c = make_case(8, 4, 128, 128, torch::kFloat, torch::Device(torch::kCUDA, 0), false);
  const auto out = fused_attention_probs(c.scores, std::nullopt, false, 0.1);
  const double share = out.eq(0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(share, 0.1, 0.003);
  // Each row's kept probabilities are softmax's times 1 / 0.9.
  const auto p = torch::softmax(c.scores, -1);
  const auto kept = out.ne(0);
  EXPECT_TRUE(torch::allclose(out.masked_select(kept), p.masked_select(kept) / 0.9, 1e-5, 1e-7));
}

TEST(AttentionSoftmaxTest, LanguageModelsTrainTheSameWithTheFusedSoftmaxInBf16_CUDA) {
  if (!have_attention_softmax_kernels()) GTEST_SKIP() << "this build has no CUDA kernels";
  const torch::Device cuda(torch::kCUDA, 0);
  // Without attention dropout (transformer-big has none), since on CUDA the fused function's
  // keep-mask is another draw than ATen's; the other dropouts draw as before.
  expect_same_training("bert-base-mlm", cuda, Precision::kAmpBf16, 2e-3,
                       Json{{"attention_dropout", 0.0}});
  expect_same_training("transformer-big", cuda, Precision::kAmpBf16, 2e-3);
  expect_same_training("transformer-big", cuda, Precision::kFp32, 1e-4);
}

}  // namespace
}  // namespace gpubench::train
