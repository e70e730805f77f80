// models/fast_paths.h and runtime.fast_paths (issue 44): the padded vocab projection's logits
// and gradients are the plain ones (tied and untied, the gradient reaching the one parameter),
// split_heads and stored attention's fast form compute what the plain code does, and every
// language workload trains to the same losses with the fast paths on as off, with the same
// parameters.
#include "models/fast_paths.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "models/attention.h"
#include "tests/builtin_store.h"
#include "tests/smoke_training.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace gpubench::models {
namespace {

using testing::builtin_store;

constexpr int64_t kVocab = 37;  // padded to 64
constexpr int64_t kHidden = 8;
constexpr int64_t kTokens = 11;

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6))
      << what << ": largest difference " << (a - b).abs().max().item<double>();
}

/// A [rows, cols] parameter drawn from a fixed seed.
torch::Tensor parameter(std::vector<int64_t> sizes, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(sizes).requires_grad_(true);
}

TEST(FastPathsTest, AlignedRowsRoundUpToSixtyFour) {
  EXPECT_EQ(aligned_rows(1), 64);
  EXPECT_EQ(aligned_rows(64), 64);
  EXPECT_EQ(aligned_rows(30522), 30528);  // BERT's WordPiece vocabulary
  EXPECT_EQ(aligned_rows(64699), 64704);  // XLM's
  EXPECT_EQ(aligned_rows(32768), 32768);  // transformer-big's joined vocabulary: aligned
  EXPECT_EQ(aligned_rows(40000), 40000);  // conv-seq2seq's: aligned
}

TEST(FastPathsTest, PaddingKeepsTheParameterItsSizeAndItsValues) {
  auto weight = parameter({kVocab, kHidden}, 1);
  auto bias = parameter({kVocab}, 2);
  const auto weight_before = weight.detach().clone();
  const auto bias_before = bias.detach().clone();
  const auto* impl = weight.unsafeGetTensorImpl();
  EXPECT_FALSE(has_row_padding(weight));
  pad_vocab_projection(weight, bias);
  EXPECT_TRUE(has_row_padding(weight));
  EXPECT_TRUE(has_row_padding(bias));
  // The same tensor (what a module and an optimizer hold), the same size, values and flags.
  EXPECT_EQ(weight.unsafeGetTensorImpl(), impl);
  EXPECT_EQ(weight.sizes(), (std::vector<int64_t>{kVocab, kHidden}));
  EXPECT_EQ(bias.numel(), kVocab);
  EXPECT_TRUE(weight.requires_grad());
  EXPECT_TRUE(weight.is_leaf());
  EXPECT_TRUE(weight.is_contiguous());
  EXPECT_TRUE(torch::equal(weight.detach(), weight_before));
  EXPECT_TRUE(torch::equal(bias.detach(), bias_before));
  // The padding: zero weight rows, -inf bias entries; padding twice changes nothing.
  const auto padded_weight = padded_rows(weight).detach();
  const auto padded_bias = padded_rows(bias).detach();
  EXPECT_EQ(padded_weight.size(0), 64);
  EXPECT_TRUE(torch::equal(padded_weight.narrow(0, 0, kVocab), weight_before));
  EXPECT_EQ(padded_weight.narrow(0, kVocab, 64 - kVocab).abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::all(padded_bias.narrow(0, kVocab, 64 - kVocab).isneginf()).item<bool>());
  const auto* storage = weight.storage().data();
  pad_vocab_projection(weight, bias);
  EXPECT_EQ(weight.storage().data(), storage);
}

TEST(FastPathsTest, UnpaddedParameterIsRefused) {
  auto weight = parameter({kVocab, kHidden}, 1);
  auto bias = parameter({kVocab}, 2);
  EXPECT_THROW(aligned_vocab_linear(torch::randn({2, kHidden}), weight, bias), c10::Error);
}

// The gradient through the padded view is the plain one and lands on the parameter.
TEST(FastPathsTest, PaddedProjectionGivesThePlainLossAndGradientsUntied) {
  auto weight = parameter({kVocab, kHidden}, 1);
  auto bias = parameter({kVocab}, 2);
  pad_vocab_projection(weight, bias);
  torch::manual_seed(3);
  const auto x = torch::randn({kTokens, kHidden});
  const auto target = torch::randint(0, kVocab, {kTokens});

  const auto plain_logits = torch::linear(x, weight, bias);
  const auto plain = torch::nll_loss(torch::log_softmax(plain_logits, -1), target);
  plain.backward();
  const auto plain_weight_grad = weight.grad().clone();
  const auto plain_bias_grad = bias.grad().clone();
  weight.mutable_grad().reset();
  bias.mutable_grad().reset();

  const auto logits = aligned_vocab_linear(x, weight, bias);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{kTokens, 64}));
  expect_close(logits.narrow(1, 0, kVocab), plain_logits, "logits");
  EXPECT_TRUE(torch::all(logits.narrow(1, kVocab, 64 - kVocab).isneginf()).item<bool>());
  const auto fast = torch::nll_loss(torch::log_softmax(logits, -1, torch::kFloat), target);
  expect_close(fast, plain, "loss");
  fast.backward();
  ASSERT_TRUE(weight.grad().defined());
  ASSERT_TRUE(bias.grad().defined());
  EXPECT_EQ(weight.grad().sizes(), weight.sizes());
  EXPECT_EQ(bias.grad().sizes(), bias.sizes());
  EXPECT_TRUE(torch::isfinite(weight.grad()).all().item<bool>());
  expect_close(weight.grad(), plain_weight_grad, "weight gradient");
  expect_close(bias.grad(), plain_bias_grad, "bias gradient");
}

// A table both looked up (embedding) and projected on (the output layer): one parameter, whose
// gradient is the sum of both uses, as on the plain path.
TEST(FastPathsTest, PaddedProjectionGivesThePlainGradientToATiedTable) {
  auto table = parameter({kVocab, kHidden}, 4);
  auto bias = parameter({kVocab}, 5);
  pad_vocab_projection(table, bias);
  torch::manual_seed(6);
  const auto ids = torch::randint(0, kVocab, {kTokens});
  const auto target = torch::randint(0, kVocab, {kTokens});
  const auto mix = torch::randn({kHidden, kHidden});

  auto loss_of = [&](bool fast) {
    const auto hidden = torch::tanh(torch::matmul(torch::embedding(table, ids), mix));
    const auto logits =
        fast ? aligned_vocab_linear(hidden, table, bias) : torch::linear(hidden, table, bias);
    return torch::nll_loss(torch::log_softmax(logits, -1, torch::kFloat), target);
  };
  const auto plain = loss_of(false);
  plain.backward();
  const auto plain_grad = table.grad().clone();
  table.mutable_grad().reset();
  bias.mutable_grad().reset();
  const auto fast = loss_of(true);
  fast.backward();
  expect_close(fast, plain, "loss");
  ASSERT_TRUE(table.grad().defined());
  expect_close(table.grad(), plain_grad, "tied table's gradient");
  EXPECT_EQ(table.grad().sizes(), table.sizes());
}

TEST(FastPathsTest, SplitHeadsGivesTheUnbindViewsAndTheirGradient) {
  constexpr int64_t kBatch = 2, kLength = 5, kHeads = 2, kHeadDim = 3;
  for (const int64_t parts : {2, 3}) {
    torch::manual_seed(7);
    auto y = torch::randn({kBatch, kLength, parts * kHeads * kHeadDim}).requires_grad_(true);
    std::vector<torch::Tensor> weights;
    for (int64_t i = 0; i < parts; ++i)
      weights.push_back(torch::randn({kBatch, kHeads, kLength, kHeadDim}));
    auto loss_of = [&](const std::vector<torch::Tensor>& views) {
      torch::Tensor loss = torch::zeros({});
      for (int64_t i = 0; i < parts; ++i) loss = loss + (views[i] * weights[i]).sin().sum();
      return loss;
    };
    const auto plain_views =
        y.view({kBatch, kLength, parts, kHeads, kHeadDim}).permute({2, 0, 3, 1, 4}).unbind(0);
    const auto plain = loss_of(plain_views);
    plain.backward();
    const auto plain_grad = y.grad().clone();
    y.mutable_grad().reset();

    const auto views = split_heads(y, parts, kHeads);
    ASSERT_EQ(views.size(), static_cast<std::size_t>(parts));
    for (int64_t i = 0; i < parts; ++i) {
      EXPECT_TRUE(torch::equal(views[i], plain_views[i])) << "part " << i;
      EXPECT_EQ(views[i].strides(), plain_views[i].strides()) << "a view, not a copy";
      EXPECT_EQ(views[i].data_ptr(), plain_views[i].data_ptr()) << "part " << i;
    }
    loss_of(views).backward();
    expect_close(y.grad(), plain_grad, "split_heads gradient, parts " + std::to_string(parts));
  }
}

TEST(FastPathsTest, FastStoredAttentionComputesThePlainOne) {
  constexpr int64_t kBatch = 2, kHeads = 3, kLength = 6, kHeadDim = 5;
  torch::manual_seed(8);
  const auto y = torch::randn({kBatch, kLength, 3 * kHeads * kHeadDim}).requires_grad_(true);
  auto mask = torch::zeros({kBatch, 1, 1, kLength});
  mask.index_put_({1, 0, 0, kLength - 1}, -std::numeric_limits<float>::infinity());
  const auto weight = torch::randn({kBatch, kHeads, kLength, kHeadDim});
  for (const bool causal : {false, true}) {
    for (const bool masked : {false, true}) {
      const std::optional<torch::Tensor> m =
          masked ? std::optional<torch::Tensor>(mask) : std::nullopt;
      CausalMasks masks;
      auto run = [&](bool fast) {
        const auto qkv =
            fast
                ? split_heads(y, 3, kHeads)
                : y.view({kBatch, kLength, 3, kHeads, kHeadDim}).permute({2, 0, 3, 1, 4}).unbind(0);
        const auto out = attention("stored", qkv[0], qkv[1], qkv[2], m, 0.0, causal, fast, &masks);
        (out * weight).sum().backward();
        auto grad = y.grad().clone();
        y.mutable_grad().reset();
        return std::make_pair(out.detach(), grad);
      };
      const std::string what =
          std::string(causal ? "causal" : "not causal") + (masked ? ", masked" : ", unmasked");
      const auto [plain_out, plain_grad] = run(false);
      const auto [fast_out, fast_grad] = run(true);
      expect_close(fast_out, plain_out, "output, " + what);
      expect_close(fast_grad, plain_grad, "gradient, " + what);
      EXPECT_EQ(masks.size(), causal ? 1u : 0u) << what;
      run(true);  // the same shape again: the cached mask
      EXPECT_EQ(masks.size(), causal ? 1u : 0u) << what;
    }
  }
}

TEST(FastPathsTest, CausalMaskHidesTheFuture) {
  CausalMasks masks;
  const auto& mask = masks.get(3, 4, torch::TensorOptions().dtype(torch::kFloat));
  const float inf = std::numeric_limits<float>::infinity();
  const auto expected =
      torch::tensor({0.f, -inf, -inf, -inf, 0.f, 0.f, -inf, -inf, 0.f, 0.f, 0.f, -inf})
          .view({3, 4});
  EXPECT_TRUE(torch::equal(mask, expected));
  EXPECT_EQ(&masks.get(3, 4, torch::TensorOptions().dtype(torch::kFloat)), &mask);
  masks.get(3, 4, torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_EQ(masks.size(), 2u);
  // One mask at a time: the first shape again is built again.
  masks.get(3, 4, torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_EQ(masks.size(), 3u);
}

// ---- The workloads ----

/// `model` trained with the fast paths off and on (fixed seed, fp32 on the CPU; `overlay` over
/// its smoke model): the same trainable elements, losses and gradients, and each run's record
/// says which paths ran.
void expect_same_training(const std::string& model, const Json& overlay = Json::object()) {
  testing::expect_setting_trains_the_same(
      model, "fast_paths", [](RuntimeSettings& r, bool on) { r.fast_paths = on; }, torch::kCPU,
      Precision::kFp32, 1e-5, overlay);
}

TEST(FastPathsTest, BertPretrainingTrainsTheSameWithTheFastPaths) {
  expect_same_training("bert-base");  // masked positions gathered, next sentence
}

TEST(FastPathsTest, BertMaskedLmTrainsTheSameWithTheFastPaths) {
  expect_same_training("bert-base-mlm");  // logits at every position
  expect_same_training("bert-base-mlm", Json{{"attention", "fused"}});
}

TEST(FastPathsTest, BertFinetuneTrainsTheSameWithTheFastPaths) {
  expect_same_training("bert-finetune");  // padding masked in attention
}

TEST(FastPathsTest, MtDnnTrainsTheSameWithTheFastPaths) { expect_same_training("mt-dnn"); }

TEST(FastPathsTest, TransformerTrainsTheSameWithTheFastPaths) {
  expect_same_training("transformer-big");  // causal and padding masks, smoothed loss
}

TEST(FastPathsTest, ConvSeq2SeqTrainsTheSameWithTheFastPaths) {
  expect_same_training("conv-seq2seq");  // the smoothed loss only
}

TEST(FastPathsTest, UnsupMtTrainsTheSameWithTheFastPaths) {
  expect_same_training("unsupmt");  // tied, padded pred_layer; greedy decoding in between
}

TEST(FastPathsTest, TheSettingIsInTheRuntimeSectionAndOnByDefault) {
  EXPECT_TRUE(RuntimeSettings{}.fast_paths);
  for (const char* name : {"bert-base", "unsupmt", "transformer-big", "yolov3"}) {
    const ModelConfig& config = builtin_store().model(name);
    EXPECT_TRUE(RuntimeSettings::from_params(config.runtime).fast_paths) << name;
    EXPECT_EQ(config.to_json()["runtime"]["fast_paths"], true) << name;
  }
}

}  // namespace
}  // namespace gpubench::models
