// mt-dnn: the head layout against the spec's count, the SAN module, the GLUE batches and the
// task sampling (every head trains when its task is drawn).
#include "models/mtdnn.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <limits>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

namespace gpubench::models {
namespace {

using testing::builtin_store;

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

TEST(MtDnnTest, HeadsMatchTheSpecsCount) {
  // spec §6.3: BERT-Large 335,141,888 + heads 36,791,317. A SAN head with h = 1024 and n
  // classes: Linear(h, 1) + bilinear Linear(h, h) + GRUCell(h, h) + Linear(4h, n)
  // = (h + 1) + (h^2 + h) + (6h^2 + 6h) + (4hn + n).
  const Params& m = builtin_store().model("mt-dnn").model;
  const auto tasks = glue_tasks(m);
  ASSERT_EQ(tasks.size(), 8u);
  // The heads as the workload's model builds them, not a formula; on a one-layer encoder of
  // the same width to keep the test fast (the heads read only its width). The full encoder
  // follows: the workload test checks the built model's total against the config's.
  const BertOptions encoder = bert_options(m).layers(1).vocab_size(100);
  ASSERT_EQ(encoder.hidden_size(), 1024);
  MtDnn model(encoder, tasks, m.i64("san_turns"), m.f64("san_memory_dropout"));
  const int64_t h = 1024;
  auto san = [&](int64_t n) {
    return (h + 1) + (h * h + h) + (6 * h * h + 6 * h) + (4 * h * n + n);
  };
  ASSERT_EQ(model->heads->size(), tasks.size());
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    const int64_t n = tasks[t].classes;
    EXPECT_EQ(count(*model->heads[t]), tasks[t].head == "san" ? san(n) : h * n + n)
        << tasks[t].name << " (" << tasks[t].head << ")";
    if (tasks[t].name == "mnli") {
      EXPECT_EQ(count(*model->heads[t]), 7360516);  // by hand, n = 3
    }
  }
  EXPECT_EQ(count(*model->heads), 36791317);
  EXPECT_EQ(count(*model), count(*model->bert) + 36791317);
  EXPECT_EQ(builtin_store().model("mt-dnn").trainable_params.at("total"), 335141888 + 36791317);
}

/// mt-dnn's SAN (answer_opt 1) in eval, written out independently of the module: the initial
/// state from a self-attention over h, then `turns` rounds of bilinear attention over x,
/// classification of [x~, s, |x~ - s|, x~ * s] and a GRU step; log of the mean of the turns'
/// probabilities. Uses the module's weights only.
torch::Tensor reference_san(const SanClassifier& san, const torch::Tensor& x,
                            const torch::Tensor& h, const torch::Tensor& x_mask,
                            const torch::Tensor& h_mask) {
  const double inf = std::numeric_limits<double>::infinity();
  const auto linear = [](const Linear& l, const torch::Tensor& v) {
    return torch::matmul(v, l->weight.t()) + l->bias;
  };
  auto alpha = torch::softmax(linear(san->query_wsum, h).squeeze(-1).masked_fill(h_mask, -inf), 1);
  auto s = (alpha.unsqueeze(-1) * h).sum(1);  // [B, H]
  const auto& gru = san->rnn;
  const int64_t hidden = s.size(1);
  torch::Tensor mean;
  for (int64_t turn = 0; turn < san->options.turns(); ++turn) {
    const auto wy = linear(san->attention, s);
    const auto scores = (x * wy.unsqueeze(1)).sum(2).masked_fill(x_mask, -inf);
    const auto xt = (torch::softmax(scores, 1).unsqueeze(-1) * x).sum(1);
    const auto p =
        torch::softmax(linear(san->classifier, torch::cat({xt, s, (xt - s).abs(), xt * s}, 1)), 1);
    mean = turn == 0 ? p : mean + p;
    // GRU cell (PyTorch's gate order r, z, n).
    const auto gi = torch::matmul(xt, gru->weight_ih.t()) + gru->bias_ih;
    const auto gh = torch::matmul(s, gru->weight_hh.t()) + gru->bias_hh;
    const auto r = torch::sigmoid(gi.narrow(1, 0, hidden) + gh.narrow(1, 0, hidden));
    const auto z = torch::sigmoid(gi.narrow(1, hidden, hidden) + gh.narrow(1, hidden, hidden));
    const auto n =
        torch::tanh(gi.narrow(1, 2 * hidden, hidden) + r * gh.narrow(1, 2 * hidden, hidden));
    s = (1 - z) * n + z * s;
  }
  return torch::log(mean / static_cast<double>(san->options.turns()));
}

TEST(MtDnnTest, SanTurnsAndGruShapeTheOutputAsTheReferenceDoes) {
  torch::manual_seed(3);
  const auto x = torch::randn({3, 6, 8}), h = torch::randn({3, 4, 8});
  auto x_mask = torch::zeros({3, 6}, torch::kBool), h_mask = torch::zeros({3, 4}, torch::kBool);
  x_mask.index_put_({0, torch::indexing::Slice(4, 6)}, true);
  h_mask.index_put_({2, 3}, true);
  std::map<int64_t, torch::Tensor> by_turns;
  for (const int64_t turns : {1, 2, 5}) {
    torch::manual_seed(7);  // the same weights whatever the turn count
    SanClassifier san(SanOptions(8, 3).turns(turns).dropout(0.0).memory_dropout(0.0));
    san->eval();
    torch::NoGradGuard no_grad;
    const auto out = san->forward(x, h, x_mask, h_mask);
    EXPECT_TRUE(torch::allclose(out, reference_san(san, x, h, x_mask, h_mask), 1e-5, 1e-6))
        << turns << " turns";
    by_turns[turns] = out;
    // The GRU updates the state between turns: with one turn it cannot matter, with more it
    // must.
    san->rnn->weight_ih.add_(torch::randn_like(san->rnn->weight_ih));
    san->rnn->weight_hh.add_(torch::randn_like(san->rnn->weight_hh));
    const auto changed = san->forward(x, h, x_mask, h_mask);
    if (turns == 1) {
      EXPECT_TRUE(torch::allclose(changed, out, 0, 1e-7));
    } else {
      EXPECT_GT((changed - out).abs().max().item<double>(), 1e-4) << turns << " turns";
    }
  }
  // More turns average more (different) answers.
  EXPECT_GT((by_turns[2] - by_turns[1]).abs().max().item<double>(), 1e-4);
  EXPECT_GT((by_turns[5] - by_turns[2]).abs().max().item<double>(), 1e-4);
}

TEST(MtDnnTest, SanReturnsLogProbabilitiesAndIgnoresMaskedPositions) {
  torch::manual_seed(0);
  SanClassifier san(SanOptions(8, 3).turns(3).dropout(0.0).memory_dropout(0.0));
  san->eval();
  auto x = torch::randn({2, 6, 8});
  auto h = torch::randn({2, 4, 8});
  auto x_mask = torch::zeros({2, 6}, torch::kBool);
  x_mask.index_put_({torch::indexing::Slice(), torch::indexing::Slice(4, 6)}, true);
  auto h_mask = torch::zeros({2, 4}, torch::kBool);
  h_mask.index_put_({1, 3}, true);
  const auto out = san->forward(x, h, x_mask, h_mask);
  EXPECT_TRUE(torch::allclose(out.exp().sum(1), torch::ones({2}), 1e-5, 1e-5));
  // Changing masked-out memory changes nothing.
  auto x2 = x.clone();
  x2.index_put_({torch::indexing::Slice(), torch::indexing::Slice(4, 6)}, 7.0);
  auto h2 = h.clone();
  h2.index_put_({1, 3}, -5.0);
  EXPECT_TRUE(torch::allclose(san->forward(x2, h2, x_mask, h_mask), out, 1e-5, 1e-5));
}

TEST(MtDnnTest, TrainingTurnMaskKeepsAtLeastOneTurn) {
  torch::manual_seed(1);
  SanClassifier san(SanOptions(8, 2).turns(5).dropout(0.0).memory_dropout(0.99));
  san->train();
  const auto out =
      san->forward(torch::randn({64, 5, 8}), torch::randn({64, 3, 8}),
                   torch::zeros({64, 5}, torch::kBool), torch::zeros({64, 3}, torch::kBool));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());  // never log(0): one turn always kept
}

TEST(MtDnnTest, GlueBatchesPadToTheLongestPairWithTheBatchersMasks) {
  GlueTask mnli;
  mnli.name = "mnli";
  mnli.head = "san";
  mnli.classes = 3;
  mnli.length_median = 37;
  mnli.length_sigma = 0.45;
  const GlueBatch b(mnli, 0, 32, 512, 30522, torch::kCPU, 0);
  ASSERT_EQ(b.input_ids.size(1), b.length);
  const auto lengths = b.attention_mask.sum(1);
  EXPECT_EQ(lengths.max().item<int64_t>(), b.length);
  EXPECT_LT(lengths.min().item<int64_t>(), b.length);  // shorter pairs are padded
  for (int64_t i = 0; i < 32; ++i) {
    const int64_t n = lengths[i].item<int64_t>();
    const int64_t first = n - b.token_type_ids[i].sum().item<int64_t>();
    EXPECT_EQ(b.input_ids[i][first - 1].item<int64_t>(), 102);  // [SEP] closes segment 0
    EXPECT_EQ(b.input_ids[i][n - 1].item<int64_t>(), 102);
    // hypothesis mask: the first segment is attended; premise mask: the second segment is.
    EXPECT_EQ(b.hypothesis_mask[i].logical_not().sum().item<int64_t>(), first);
    EXPECT_EQ(b.premise_mask[i].logical_not().sum().item<int64_t>(), n - first);
  }
  EXPECT_EQ(b.hypothesis_mask.size(1), (lengths - b.token_type_ids.sum(1)).max().item<int64_t>());
  EXPECT_TRUE(b.labels.ge(0).logical_and(b.labels.lt(3)).all().item<bool>());
}

TEST(MtDnnTest, EveryHeadTrainsWhenItsTaskIsDrawn) {
  const ModelConfig& config = builtin_store().model("mt-dnn");  // smoke size cycles through the tasks
  ASSERT_EQ(config.smoke_model.str("task_order"), "cycle");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = config.smoke_optimizer;
  ctx.batch = 3;
  auto step = builtin_registry().get("mt-dnn").prepare(ctx);
  const auto params = step->parameters().at("model");
  // The same layout, built alone, tells which parameters belong to which head.
  MtDnn layout(bert_options(ctx.model), glue_tasks(ctx.model), ctx.model.i64("san_turns"),
               ctx.model.f64("san_memory_dropout"));
  std::size_t offset = layout->bert->parameters().size();
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const auto& head : *layout->heads) {
    ranges.emplace_back(offset, offset + head->parameters().size());
    offset = ranges.back().second;
  }
  ASSERT_EQ(offset, params.size());
  step->run();  // the opening: the peak batch twice
  step->run();
  for (std::size_t t = 0; t < ranges.size(); ++t) {
    std::vector<torch::Tensor> before;
    for (const auto& p : params) before.push_back(p.detach().clone());
    step->run();
    for (std::size_t h = 0; h < ranges.size(); ++h) {
      bool changed = false;
      for (std::size_t i = ranges[h].first; i < ranges[h].second; ++i) {
        changed |= !torch::equal(params[i], before[i]);
      }
      EXPECT_EQ(changed, h == t) << "step " << t << ", head " << layout->tasks[h].name;
    }
    EXPECT_TRUE(torch::isfinite(step->losses().at("loss")).item<bool>());
  }
}

TEST(MtDnnTest, ScheduleSpreadsTasksEvenlyInProportion) {
  const std::vector<double> weights = {392702, 2490, 363846, 104743, 3668, 67349, 8551, 5749};
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const auto order = proportional_schedule(weights, 2000);
  for (std::size_t t = 0; t < weights.size(); ++t) {
    const auto n = std::count(order.begin(), order.begin() + 1000, static_cast<int64_t>(t));
    EXPECT_LT(std::abs(static_cast<double>(n) - 1000 * weights[t] / total), 1.0) << "prefix, task " << t;
  }
  // Any 20 consecutive draws hold every task within two draws of its share (a prefix within
  // one), where independent draws would spread by about sqrt(20 p).
  for (std::size_t start = 0; start + 20 <= order.size(); start += 7) {
    for (std::size_t t = 0; t < weights.size(); ++t) {
      const auto n = std::count(order.begin() + start, order.begin() + start + 20,
                                static_cast<int64_t>(t));
      EXPECT_LE(std::abs(static_cast<double>(n) - 20 * weights[t] / total), 2.0)
          << "task " << t << " from " << start;
    }
  }
}

TEST(MtDnnTest, ThePeakBatchPadsToTheEpochsLongestExampleWhateverTheBatchSize) {
  const auto tasks = glue_tasks(builtin_store().model("mt-dnn").model);
  // RTE: median 64, sigma 0.5, 2,490 examples -> z(1 - 1/2490) = 3.35 -> 342 WordPieces.
  EXPECT_NEAR(static_cast<double>(longest_example(tasks[1], 512)), 342, 3);
  EXPECT_EQ(longest_example(tasks[1], 128), 128);
  for (const auto& t : tasks) {
    EXPECT_LE(longest_example(t, 512), longest_example(tasks[1], 512)) << t.name;
  }
  for (int64_t batch : {4, 32}) {
    const GlueBatch b(tasks[1], 1, batch, 512, 30522, torch::kCPU, 0, 342);
    EXPECT_EQ(b.length, 342) << batch;
  }
}

TEST(MtDnnTest, ProportionalDrawsFollowTheTrainSizesAndStartWithTheLongestBatch) {
  const ModelConfig& config = builtin_store().model("mt-dnn");
  StepContext ctx;
  ctx.config = &config;
  Json small = config.smoke_model.json();
  small["task_order"] = "proportional";
  ctx.model = Params(builtin_registry().get("mt-dnn").model_schema, small, {"test", ""});
  ctx.optimizer = config.smoke_optimizer;
  ctx.batch = 4;
  auto step = builtin_registry().get("mt-dnn").prepare(ctx);
  const Json info = step->batch_info();
  const Json& draws = info["draws_by_task"];
  EXPECT_GT(draws["mnli"].get<int>(), draws["sst"].get<int>());
  EXPECT_GT(draws["qqp"].get<int>(), 10 * draws["rte"].get<int>() / 2);
  EXPECT_EQ(info["padded_lengths_by_task"].size(), 8u);
  // At this size every task's longest example is capped at max_seq_length (96).
  EXPECT_EQ(info["peak_batch"]["padded_length"], small["max_seq_length"]);
  EXPECT_EQ(info["representative_steps"], 24);  // the cycle
}

TEST(MtDnnTest, InFp32NothingBuildsPerShapeAndTheWarmUpRunsTheOpening) {
  // The timed run's warm-up (timed_phase.cpp): eager fp32 builds nothing per batch shape, so it
  // runs the opening (the peak batch twice, each task's first), not the whole cycle after it.
  const ModelConfig& config = builtin_store().model("mt-dnn");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = config.smoke_optimizer;
  ctx.batch = 3;
  auto step = builtin_registry().get("mt-dnn").prepare(ctx);
  EXPECT_FALSE(step->uniform_steps());
  EXPECT_FALSE(step->builds_per_shape());
  EXPECT_GT(step->opening_steps(), 2);
  // Eager, the whole-shape warm-up is the opening and one cycle.
  EXPECT_EQ(step->warmup_steps(), step->opening_steps() + step->representative_steps());
}

TEST(MtDnnTest, ApportionGivesEveryStepByLargestRemainders) {
  const std::vector<double> glue = {392702, 2490, 363846, 104743, 3668, 67349, 8551, 5749};
  // 24 x shares: 9.93, 0.06, 9.20, 2.65, 0.09, 1.70, 0.22, 0.15 -> floors 9, 9, 2, 1 (21) and
  // the three largest remainders (mnli .93, sst .70, qnli .65) get one more.
  EXPECT_EQ(apportion(glue, 24), (std::vector<int64_t>{10, 0, 9, 3, 0, 2, 0, 0}));
  EXPECT_EQ(apportion({1, 1, 1}, 4), (std::vector<int64_t>{2, 1, 1}));
  for (const int64_t steps : {1, 7, 24, 100, 1000}) {
    const auto counts = apportion(glue, steps);
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), steps);
    const double total = std::accumulate(glue.begin(), glue.end(), 0.0);
    for (std::size_t t = 0; t < glue.size(); ++t) {
      EXPECT_LT(std::abs(static_cast<double>(counts[t]) - steps * glue[t] / total), 1.0);
    }
  }
}

TEST(MtDnnTest, ABatchPadsToTheQuantileOfTheLongestOfItsExamples) {
  GlueTask mnli;
  mnli.length_median = 37;
  mnli.length_sigma = 0.45;
  // One example: its median is the distribution's.
  EXPECT_EQ(batch_padded_length(mnli, 1, 0.5, 512), 37);
  // Checked against an independent inversion: P(longest of B <= L) = Phi(ln(L / 37) / 0.45)^B.
  const auto cdf_of_longest = [&](double length, int64_t batch) {
    const double z = std::log(length / 37.0) / 0.45;
    return std::pow(0.5 * std::erfc(-z / std::sqrt(2.0)), static_cast<double>(batch));
  };
  for (const int64_t batch : {8, 32, 254}) {
    for (const double q : {0.1, 0.5, 0.9}) {
      const int64_t length = batch_padded_length(mnli, batch, q, 512);
      EXPECT_LE(cdf_of_longest(static_cast<double>(length) - 0.5, batch), q) << batch << " " << q;
      EXPECT_GE(cdf_of_longest(static_cast<double>(length) + 0.5, batch), q) << batch << " " << q;
    }
    EXPECT_GT(batch_padded_length(mnli, batch, 0.9, 512),
              batch_padded_length(mnli, batch, 0.1, 512));
  }
  EXPECT_GT(batch_padded_length(mnli, 254, 0.5, 512), batch_padded_length(mnli, 8, 0.5, 512));
  EXPECT_EQ(batch_padded_length(mnli, 1000000, 0.99, 128), 128);  // capped at max_seq_length
}

TEST(MtDnnTest, TheCyclePadsAsAnEpochOfRandomBatchesDoesOnAverage) {
  const auto tasks = glue_tasks(builtin_store().model("mt-dnn").model);
  const int64_t batch = 32;
  const GlueCycle cycle = glue_cycle(tasks, batch, 512, 24, /*proportional=*/true);
  ASSERT_EQ(cycle.steps.size(), 24u);
  std::vector<int64_t> seen(tasks.size(), 0);
  for (const auto& [t, j] : cycle.steps) {
    EXPECT_EQ(j, seen[static_cast<std::size_t>(t)]++);  // each batch of a task once, in turn
  }
  EXPECT_EQ(seen, cycle.counts);
  // Random batches of the same tasks, the same number of draws per task: the mean of their
  // padded lengths. The cycle's quantiles should land within a few percent of it.
  torch::manual_seed(0);
  double cycle_mean = 0, random_mean = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    ASSERT_EQ(cycle.lengths[t].size(),
              static_cast<std::size_t>(std::max<int64_t>(1, cycle.counts[t])));
    if (cycle.counts[t] == 0) continue;
    const auto longest = (torch::randn({4000, batch}, torch::kDouble) * tasks[t].length_sigma)
                             .exp()
                             .mul(tasks[t].length_median)
                             .round()
                             .clamp_max(512)
                             .amax(1);
    random_mean += static_cast<double>(cycle.counts[t]) * longest.mean().item<double>();
    for (const int64_t length : cycle.lengths[t]) cycle_mean += static_cast<double>(length);
  }
  EXPECT_NEAR(cycle_mean / random_mean, 1.0, 0.03);
}

TEST(MtDnnTest, TheScheduleAndPaddedLengthsAreTheSameForEverySeedAndCoverTheTasks) {
  const ModelConfig& config = builtin_store().model("mt-dnn");
  Json small = config.smoke_model.json();
  small["task_order"] = "proportional";
  small["max_seq_length"] = 512;
  small["max_positions"] = 512;
  const Params model(builtin_registry().get("mt-dnn").model_schema, small, {"test", ""});
  std::vector<Json> infos;
  for (const uint64_t seed : {0u, 1u, 0u}) {
    StepContext ctx;
    ctx.config = &config;
    ctx.model = model;
    ctx.optimizer = config.smoke_optimizer;
    ctx.batch = 16;
    ctx.seed = seed;
    infos.push_back(builtin_registry().get("mt-dnn").prepare(ctx)->batch_info());
  }
  // The padded lengths come from the tasks' statistics, not the seed: a seed changes tokens,
  // not the work of a cycle.
  EXPECT_EQ(infos[0], infos[1]);
  EXPECT_EQ(infos[0], infos[2]);
  const Json& lengths = infos[0]["padded_lengths_by_task"];
  const Json& draws = infos[0]["draws_by_task"];
  const GlueCycle cycle = glue_cycle(glue_tasks(model), 16, 512, 24, true);
  const auto tasks = glue_tasks(model);
  int64_t total = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    // Every task has a batch (the warm-up runs each); the cycle's tasks one per draw, built at
    // the lengths the cycle asks for.
    EXPECT_EQ(lengths[tasks[t].name].get<std::vector<int64_t>>(), cycle.lengths[t])
        << tasks[t].name;
    EXPECT_EQ(draws[tasks[t].name].get<int64_t>(), cycle.counts[t]);
    total += cycle.counts[t];
  }
  EXPECT_EQ(total, infos[0]["representative_steps"].get<int64_t>());
  // The four tasks over 95% of the draws are all in the cycle.
  for (const char* name : {"mnli", "qqp", "qnli", "sst"}) EXPECT_GT(draws[name].get<int>(), 0);
}

}  // namespace
}  // namespace gpubench::models
