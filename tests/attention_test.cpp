// models/attention.h: the `attention: stored | fused` setting of the attention workloads. Both
// forms compute the same function (outputs and gradients with dropout off), stored keeps its
// probabilities and dropout mask in the autograd graph, parameters do not change, and every
// attention workload's resolved config (which each record embeds) carries the setting.
#include "models/attention.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "models/bert.h"
#include "models/transformer.h"
#include "models/unsupmt.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace gpubench::models {
namespace {

using testing::builtin_store;

const std::vector<std::string> kAttentionWorkloads = {
    "bert-base", "bert-base-mlm", "bert-finetune", "mt-dnn", "transformer-big", "unsupmt"};

// softmax(q k^T / sqrt(d) + mask) v written out one (batch, head, query) row at a time: an
// independent reference for both forms.
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& mask, bool causal) {
  auto out = torch::zeros_like(q);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  for (int64_t b = 0; b < q.size(0); ++b) {
    for (int64_t h = 0; h < q.size(1); ++h) {
      for (int64_t i = 0; i < q.size(2); ++i) {
        std::vector<double> scores;
        double top = -1e30;
        for (int64_t j = 0; j < k.size(2); ++j) {
          double s = (q[b][h][i] * k[b][h][j]).sum().item<double>() * scale;
          s += mask[b][0][0][j].item<double>();
          if (causal && j > i) s = -1e30;
          scores.push_back(s);
          top = std::max(top, s);
        }
        double total = 0;
        for (auto& s : scores) total += (s = std::exp(s - top));
        auto row = out[b][h][i];  // a view: adding to it writes into out
        for (int64_t j = 0; j < k.size(2); ++j) row += v[b][h][j] * (scores[j] / total);
      }
    }
  }
  return out;
}

// Names of every node of the autograd graph below `t`.
std::multiset<std::string> graph_nodes(const torch::Tensor& t) {
  std::multiset<std::string> names;
  std::vector<torch::autograd::Node*> stack{t.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    names.insert(node->name());
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return names;
}

std::size_t count_containing(const std::multiset<std::string>& names, const std::string& part) {
  std::size_t n = 0;
  for (const auto& name : names) n += name.find(part) != std::string::npos ? 1 : 0;
  return n;
}

TEST(AttentionTest, StoredAndFusedComputeTheSameFunction) {
  torch::manual_seed(0);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  for (const bool causal : {false, true}) {
    auto q = torch::randn({2, 3, 5, 4}, options).requires_grad_();
    auto k = torch::randn({2, 3, 5, 4}, options).requires_grad_();
    auto v = torch::randn({2, 3, 5, 4}, options).requires_grad_();
    // The second sequence's last two keys are padding.
    auto mask = torch::zeros({2, 1, 1, 5}, options);
    mask.index_put_({1, 0, 0, torch::indexing::Slice(3)}, -10000.0);
    const auto expected = naive_attention(q.detach(), k.detach(), v.detach(), mask, causal);
    const auto weights = torch::randn({2, 3, 5, 4}, options);
    std::vector<std::vector<torch::Tensor>> grads;
    for (const std::string kind : {"stored", "fused"}) {
      const auto out = attention(kind, q, k, v, mask, 0.0, causal);
      EXPECT_TRUE(torch::allclose(out, expected, 1e-9, 1e-9)) << kind << " causal " << causal;
      grads.push_back(torch::autograd::grad({(out * weights).sum()}, {q, k, v}));
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::allclose(grads[0][i], grads[1][i], 1e-9, 1e-9)) << i;
      EXPECT_GT(grads[0][i].abs().sum().item<double>(), 0) << i;
    }
  }
  EXPECT_THROW(attention("flash", torch::randn({1, 1, 2, 2}), torch::randn({1, 1, 2, 2}),
                         torch::randn({1, 1, 2, 2}), std::nullopt, 0.0),
               c10::Error);
}

TEST(AttentionTest, StoredKeepsProbabilitiesAndTheDropoutMask) {
  torch::manual_seed(1);
  auto q = torch::randn({2, 2, 6, 4}).requires_grad_();
  auto k = torch::randn({2, 2, 6, 4}).requires_grad_();
  auto v = torch::randn({2, 2, 6, 4}).requires_grad_();
  const auto without = graph_nodes(attention("stored", q, k, v, std::nullopt, 0.0));
  const auto with = graph_nodes(attention("stored", q, k, v, std::nullopt, 0.5));
  // Softmax's backward reads its saved output: the probabilities.
  EXPECT_EQ(count_containing(without, "SoftmaxBackward"), 1u);
  EXPECT_EQ(count_containing(with, "SoftmaxBackward"), 1u);
  // Dropout adds one node, which holds its mask (native_dropout's, or the product with the
  // scaled Bernoulli noise where the CPU kernel is not fused).
  const auto dropout_nodes = [](const std::multiset<std::string>& names) {
    return count_containing(names, "Dropout") + count_containing(names, "MulBackward");
  };
  EXPECT_EQ(dropout_nodes(with), dropout_nodes(without) + 1);
  EXPECT_EQ(with.size(), without.size() + 1);
  // With dropout some probabilities are zeroed: the output differs from the one without.
  torch::manual_seed(2);
  const auto dropped = attention("stored", q, k, v, std::nullopt, 0.5);
  EXPECT_FALSE(torch::allclose(dropped, attention("stored", q, k, v, std::nullopt, 0.0)));
}

TEST(AttentionTest, BertLayersAgreeAndParametersAreTheSame) {
  const BertOptions stored =
      BertOptions(100).hidden_size(16).layers(2).heads(4).intermediate_size(32).max_positions(16);
  BertOptions fused = stored;
  fused.attention("fused");
  torch::manual_seed(4);
  BertModel a(stored);
  torch::manual_seed(4);
  BertModel b(fused);
  a->eval();
  b->eval();
  ASSERT_EQ(count_trainable(a->parameters()), count_trainable(b->parameters()));
  const auto ids = torch::randint(1, 100, {2, 7});
  const auto types = torch::zeros({2, 7}, torch::kLong);
  auto real = torch::ones({2, 7}, torch::kBool);
  real.index_put_({0, torch::indexing::Slice(5)}, false);
  const auto [out_a, pooled_a] = a->forward(ids, types, real);
  const auto [out_b, pooled_b] = b->forward(ids, types, real);
  EXPECT_TRUE(torch::allclose(out_a, out_b, 1e-4, 1e-5));
  (out_a.square().sum() + pooled_a.sum()).backward();
  (out_b.square().sum() + pooled_b.sum()).backward();
  const auto pa = a->parameters(), pb = b->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i].grad(), pb[i].grad(), 1e-3, 1e-5)) << i;
  }
}

TEST(AttentionTest, TranslationAttentionAgrees) {
  torch::manual_seed(5);
  FairseqAttention fairseq_stored(8, 2, 0.0, /*self_attention=*/false, "stored");
  torch::manual_seed(5);
  FairseqAttention fairseq_fused(8, 2, 0.0, /*self_attention=*/false, "fused");
  const auto x = torch::randn({2, 3, 8}), memory = torch::randn({2, 5, 8});
  EXPECT_TRUE(torch::allclose(fairseq_stored(x, memory, std::nullopt, false),
                              fairseq_fused(x, memory, std::nullopt, false), 1e-5, 1e-6));
  torch::manual_seed(6);
  XlmAttention xlm_stored(8, 2, 0.0, /*cross=*/false, "stored");
  torch::manual_seed(6);
  XlmAttention xlm_fused(8, 2, 0.0, /*cross=*/false, "fused");
  xlm_stored->eval();
  xlm_fused->eval();
  EXPECT_TRUE(torch::allclose(xlm_stored->self_attention(x, std::nullopt, true),
                              xlm_fused->self_attention(x, std::nullopt, true), 1e-5, 1e-6));
}

TEST(AttentionTest, EveryAttentionWorkloadHasTheSettingAndItsRecordCarriesIt) {
  const Registry& registry = builtin_registry();
  for (const auto& name : kAttentionWorkloads) {
    const ModelConfig& config = builtin_store().model(name);
    ASSERT_TRUE(config.model.json().contains("attention")) << name;
    EXPECT_EQ(config.model.str("attention"), "stored") << name;
    // The record embeds the resolved config (JobRecord::config = ModelConfig::to_json()).
    EXPECT_EQ(config.to_json()["model"]["attention"], "stored") << name;
    // The setting changes what is stored, not the model: the same parameter counts (at the
    // smoke size, which builds in milliseconds).
    const Architecture& arch = registry.get(config.architecture);
    Json fused = config.smoke_model.json();
    fused["attention"] = "fused";
    const Params fused_params(arch.model_schema, fused, Where{"test", "model"});
    EXPECT_EQ(arch.count_parameters(fused_params), arch.count_parameters(config.smoke_model))
        << name;
  }
}

}  // namespace
}  // namespace gpubench::models
