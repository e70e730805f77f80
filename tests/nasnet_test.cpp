// NASNet-A Large specifics: the parameter breakdown against the spec's layer list, the TF-slim
// wiring, TF "SAME" padding and the factorized reduction on hand-made inputs, the cells' output
// shapes at full size, the synthetic batch, and TF's RMSProp against its formula.
#include "models/nasnet.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "gpubench/train/optimizers.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>

namespace gpubench::models {
namespace {

using testing::builtin_store;

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

NasNet& large() {
  static NasNet model(nasnet_options(builtin_store().model("nasnet-large").model));
  return model;
}

TEST(NasNetTest, ParameterBreakdownMatchesTheSpec) {
  // Computed from spec §1's layer list (docs/workloads/nasnet-large.md shows the sums): a
  // separable stack k, in -> out is in k^2 + in out + 2 out + out k^2 + out^2 + 2 out.
  NasNet& m = large();
  EXPECT_EQ(count(*m->conv0) + count(*m->conv0_bn), 2784);
  const std::map<std::string, int64_t> expected{
      {"cell_stem_0", 49230},
      {"cell_stem_1", 121128},
      {"cell_0", 396816},
      {"cell_1", 537936},
      {"cell_2", 650832},
      {"cell_5", 650832},
      {"reduction_cell_0", 1919904},
      {"cell_6", 1979040},
      {"cell_7", 2317728},
      {"cell_8", 2543520},
      {"cell_11", 2543520},
      {"reduction_cell_1", 7452480},
      {"cell_12", 7796544},
      {"cell_13", 9151296},
      {"cell_14", 10054464},
      {"cell_17", 10054464},
  };
  const auto children = m->named_children();
  for (const auto& [name, params] : expected) {
    ASSERT_TRUE(children.contains(name)) << name;
    EXPECT_EQ(count(*children[name]), params) << name;
  }
  // The three stacks of six normal cells.
  auto stack = [&](int first) {
    int64_t sum = 0;
    for (int i = first; i < first + 6; ++i) sum += count(*children["cell_" + std::to_string(i)]);
    return sum;
  };
  EXPECT_EQ(stack(0), 3538080);
  EXPECT_EQ(stack(6), 14470848);
  EXPECT_EQ(stack(12), 57165696);
  EXPECT_EQ(count(*m->last_linear), 4033000);  // 4032 x 1000 + 1000
  EXPECT_EQ(count(*m), 88753150);
}

TEST(NasNetTest, CellsAreWiredAsTfSlimBuildsThem) {
  const auto& steps = large()->steps();
  ASSERT_EQ(steps.size(), 22u);  // 2 stem cells, 18 normal cells, 2 reduction cells
  std::vector<std::string> names;
  for (const auto& s : steps) names.push_back(s.name);
  EXPECT_EQ(names[0], "cell_stem_0");
  EXPECT_EQ(names[1], "cell_stem_1");
  EXPECT_EQ(names[2], "cell_0");
  EXPECT_EQ(names[8], "reduction_cell_0");
  EXPECT_EQ(names[9], "cell_6");
  EXPECT_EQ(names[15], "reduction_cell_1");
  EXPECT_EQ(names[21], "cell_17");
  // States: 0 = conv0, i + 1 = output of step i (cell_4 is step 6, state 7).
  EXPECT_EQ(steps[0].prev, -1);  // cell_stem_0 reads conv0 for both inputs
  EXPECT_EQ(steps[0].prev_path, PrevPath::kIdentity);
  EXPECT_EQ(steps[1].prev, 0);  // cell_stem_1(cell_stem_0, conv0)
  EXPECT_EQ(steps[1].prev_path, PrevPath::kFactorized);
  EXPECT_EQ(steps[2].prev, 1);  // cell_0(cell_stem_1, cell_stem_0): a first cell
  EXPECT_EQ(steps[2].prev_path, PrevPath::kFactorized);
  EXPECT_EQ(steps[3].prev_path, PrevPath::kConv1x1);
  EXPECT_EQ(steps[8].prev, 7);  // reduction_cell_0(cell_5, cell_4)
  EXPECT_EQ(steps[8].prev_path, PrevPath::kConv1x1);
  EXPECT_EQ(steps[9].prev, 7);  // cell_6(reduction_cell_0, cell_4): skip_reduction_layer_input
  EXPECT_EQ(steps[9].prev_path, PrevPath::kFactorized);
  EXPECT_EQ(steps[10].prev, 9);   // cell_7(cell_6, reduction_cell_0)
  EXPECT_EQ(steps[16].prev, 14);  // cell_12(reduction_cell_1, cell_10)
  EXPECT_EQ(steps[0].filters, 42);
  EXPECT_EQ(steps[1].filters, 84);
  EXPECT_EQ(steps[2].filters, 168);
  EXPECT_EQ(steps[8].filters, 336);
  EXPECT_EQ(steps[15].filters, 672);
  EXPECT_EQ(steps[21].out_channels, 4032);
}

TEST(NasNetTest, CellOutputShapesAtFullSize) {
  torch::NoGradGuard no_grad;
  NasNet& m = large();
  auto shape = [](const torch::Tensor& t) { return t.sizes().vec(); };
  using Shape = std::vector<int64_t>;
  const auto image = torch::randn({1, 3, 331, 331});
  const auto conv0 = m->conv0_bn(m->conv0(image));
  EXPECT_EQ(shape(conv0), (Shape{1, 96, 165, 165}));
  const auto stem0 = m->reduction_cells[0]->forward(conv0, conv0);
  EXPECT_EQ(shape(stem0), (Shape{1, 168, 83, 83}));
  const auto stem1 = m->reduction_cells[1]->forward(stem0, conv0);
  EXPECT_EQ(shape(stem1), (Shape{1, 336, 42, 42}));
  const auto cell0 = m->normal_cells[0]->forward(stem1, stem0);
  EXPECT_EQ(shape(cell0), (Shape{1, 1008, 42, 42}));
  // reduction_cell_0 halves an even size: TF's asymmetric SAME padding.
  const auto r0 = m->reduction_cells[2]->forward(cell0, cell0);
  EXPECT_EQ(shape(r0), (Shape{1, 1344, 21, 21}));
  const auto cell6 = m->normal_cells[6]->forward(r0, cell0);
  EXPECT_EQ(shape(cell6), (Shape{1, 2016, 21, 21}));
  const auto r1 = m->reduction_cells[3]->forward(cell6, cell6);
  EXPECT_EQ(shape(r1), (Shape{1, 2688, 11, 11}));
  const auto cell12 = m->normal_cells[12]->forward(r1, cell6);
  EXPECT_EQ(shape(cell12), (Shape{1, 4032, 11, 11}));
}

TEST(NasNetTest, SamePaddingMatchesTensorFlow) {
  using Pad = std::pair<int64_t, int64_t>;
  EXPECT_EQ(tf_same_padding(42, 3, 2), (Pad{0, 1}));  // even size: the odd pixel goes after
  EXPECT_EQ(tf_same_padding(42, 5, 2), (Pad{1, 2}));
  EXPECT_EQ(tf_same_padding(42, 7, 2), (Pad{2, 3}));
  EXPECT_EQ(tf_same_padding(165, 7, 2), (Pad{3, 3}));
  EXPECT_EQ(tf_same_padding(83, 3, 2), (Pad{1, 1}));
  EXPECT_EQ(tf_same_padding(21, 5, 1), (Pad{2, 2}));

  // 4 x 4 input 0..15, 3 x 3 windows with stride 2: TF pads (0, 1), so the windows are rows
  // and columns {0, 1, 2} and {2, 3}; averages count only real pixels.
  const auto x = torch::arange(16, torch::kFloat).view({1, 1, 4, 4});
  const auto avg = avg_pool2d_same(x, 3, 2);
  const auto expected_avg =
      torch::tensor({(0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10) / 9.0, (2 + 3 + 6 + 7 + 10 + 11) / 6.0,
                     (8 + 9 + 10 + 12 + 13 + 14) / 6.0, (10 + 11 + 14 + 15) / 4.0},
                    torch::kFloat)
          .view({1, 1, 2, 2});
  EXPECT_TRUE(torch::allclose(avg, expected_avg)) << avg;
  const auto max = max_pool2d_same(x - 100, 3, 2);  // negative: padding must not win
  EXPECT_TRUE(torch::equal(max, torch::tensor({10.f, 11.f, 14.f, 15.f}).view({1, 1, 2, 2}) - 100));
  // Stride 1 on an odd size: symmetric padding, still excluded from the average.
  const auto y = torch::arange(9, torch::kFloat).view({1, 1, 3, 3});
  EXPECT_FLOAT_EQ(avg_pool2d_same(y, 3, 1)[0][0][0][0].item<float>(), (0 + 1 + 3 + 4) / 4.0f);

  // Convolution: the same as padding (1, 2) explicitly for a 5 x 5 kernel on an even size.
  torch::manual_seed(0);
  const auto image = torch::randn({2, 3, 8, 8});
  const auto weight = torch::randn({4, 3, 5, 5});
  const auto ours = conv2d_same(image, weight, 2);
  const auto reference = torch::conv2d(torch::constant_pad_nd(image, {1, 2, 1, 2}), weight, {}, 2);
  EXPECT_TRUE(torch::allclose(ours, reference, 1e-5, 1e-5));
  const auto odd = torch::randn({2, 3, 9, 9});
  EXPECT_TRUE(torch::allclose(conv2d_same(odd, weight, 2), torch::conv2d(odd, weight, {}, 2, 2),
                              1e-5, 1e-5));
}

TEST(NasNetTest, FactorizedReductionMatchesTfDefinition) {
  torch::manual_seed(0);
  const NasNetOptions options;
  FactorizedReduction reduction(4, 6, options);
  reduction->eval();  // BatchNorm from fixed statistics, so both sides see the same transform
  for (const int64_t size : {7, 8}) {
    const auto x = torch::randn({2, 4, size, size}).relu();
    // TF: path 1 = 1 x 1 average pool with stride 2 (every second pixel) -> 1 x 1 conv;
    // path 2 = pad one zero at the bottom and right, drop the first row and column, same.
    const auto every_second = [](const torch::Tensor& t) { return torch::avg_pool2d(t, 1, 2); };
    const auto path1 = torch::conv2d(every_second(x), reduction->path1_conv->weight);
    const auto shifted =
        torch::constant_pad_nd(x, {0, 1, 0, 1}).slice(2, 1, size + 1).slice(3, 1, size + 1);
    const auto path2 = torch::conv2d(every_second(shifted), reduction->path2_conv->weight);
    const auto expected = reduction->final_path_bn(torch::cat({path1, path2}, 1));
    const auto ours = reduction(x);
    ASSERT_EQ(ours.sizes(), expected.sizes()) << size;
    EXPECT_TRUE(torch::allclose(ours, expected, 1e-5, 1e-6)) << size;
  }
}

TEST(NasNetTest, SyntheticBatchHasImageNetRanges) {
  const ImageBatch b(16, 35, 1000, /*channels_last=*/true, torch::kCPU, 7);
  EXPECT_EQ(b.images.sizes(), (std::vector<int64_t>{16, 3, 35, 35}));
  EXPECT_TRUE(b.images.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_GE(b.images.min().item<float>(), -1.0f);
  EXPECT_LE(b.images.max().item<float>(), 1.0f);
  EXPECT_LT(b.images.min().item<float>(), -0.9f);  // the whole range is used
  EXPECT_GT(b.images.max().item<float>(), 0.9f);
  EXPECT_EQ(b.labels.scalar_type(), torch::kLong);
  EXPECT_TRUE((b.labels.ge(0) & b.labels.lt(1000)).all().item<bool>());
  const ImageBatch again(16, 35, 1000, true, torch::kCPU, 7);
  EXPECT_TRUE(torch::equal(b.images, again.images));  // deterministic from the seed
  EXPECT_TRUE(torch::equal(b.labels, again.labels));
}

TEST(NasNetTest, TfRmsPropFollowsTensorFlowsFormula) {
  // tf.train.RMSPropOptimizer: ms starts at 1, ms = rho ms + (1 - rho) g^2,
  // mom = mu mom + lr g / sqrt(ms + eps), p -= mom; L2 adds wd * p to the gradient.
  torch::manual_seed(1);
  auto decayed = torch::randn({4, 3}).requires_grad_();
  auto plain = torch::randn({5}).requires_grad_();
  train::TfRmsPropOptions options;
  options.lr = 0.05;
  options.decay = 0.9;
  options.momentum = 0.9;
  options.eps = 1.0;
  train::TfRmsProp rms({{{decayed}, 1e-2}, {{plain}, 0.0}}, options);
  auto p1 = decayed.detach().clone(), p2 = plain.detach().clone();
  auto ms1 = torch::ones_like(p1), ms2 = torch::ones_like(p2);
  auto mom1 = torch::zeros_like(p1), mom2 = torch::zeros_like(p2);
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(100 + step);
    decayed.mutable_grad() = torch::randn_like(decayed);
    plain.mutable_grad() = torch::randn_like(plain);
    const auto g1 = decayed.grad().clone() + 1e-2 * p1;
    const auto g2 = plain.grad().clone();
    ms1 = 0.9 * ms1 + 0.1 * g1 * g1;
    ms2 = 0.9 * ms2 + 0.1 * g2 * g2;
    mom1 = 0.9 * mom1 + 0.05 * g1 / (ms1 + 1.0).sqrt();
    mom2 = 0.9 * mom2 + 0.05 * g2 / (ms2 + 1.0).sqrt();
    p1 = p1 - mom1;
    p2 = p2 - mom2;
    rms.step();
  }
  EXPECT_TRUE(torch::allclose(decayed, p1, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(plain, p2, 1e-6, 1e-7));
  // Not torch.optim.RMSprop (eps outside the root, mean square from 0, lr on the update).
  auto theirs = torch::randn({5}).requires_grad_();
  auto ours = theirs.detach().clone().requires_grad_();
  torch::optim::RMSprop reference(
      {theirs}, torch::optim::RMSpropOptions(0.05).alpha(0.9).eps(1.0).momentum(0.9));
  train::TfRmsProp tf({{{ours}, 0.0}}, options);
  theirs.mutable_grad() = torch::ones_like(theirs);
  ours.mutable_grad() = torch::ones_like(ours);
  reference.step();
  tf.step();
  EXPECT_FALSE(torch::allclose(ours, theirs, 1e-4, 1e-5));
}

TEST(NasNetTest, LearningRateDecaysInStairsEveryTwoEpochs) {
  const auto schedule = train::exponential_decay(0.01, 0.94, 100, /*staircase=*/true);
  EXPECT_DOUBLE_EQ(schedule(1), 0.01);    // TF global step 0
  EXPECT_DOUBLE_EQ(schedule(100), 0.01);  // global step 99
  EXPECT_DOUBLE_EQ(schedule(101), 0.01 * 0.94);
  EXPECT_DOUBLE_EQ(schedule(250), 0.01 * 0.94 * 0.94);
  const auto smooth = train::exponential_decay(0.01, 0.94, 100, /*staircase=*/false);
  EXPECT_NEAR(smooth(51), 0.01 * std::pow(0.94, 0.5), 1e-12);
}

TEST(NasNetTest, WeightDecayReachesConvolutionAndClassifierWeightsOnly) {
  // With every gradient zero, only the L2 term moves a parameter.
  const auto& config = builtin_store().model("nasnet-large");
  torch::manual_seed(0);
  NasNet model(nasnet_options(config.smoke_model));
  auto updater = make_nasnet_updater(*model, config.optimizer, 32, Precision::kFp32, torch::kCPU);
  std::vector<torch::Tensor> before;
  for (auto& p : model->parameters()) {
    p.mutable_grad() = torch::zeros_like(p);
    before.push_back(p.detach().clone());
  }
  updater.step();
  int64_t moved = 0, still = 0;
  const auto params = model->named_parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i].value();
    const bool changed = !torch::equal(p, before[i]);
    EXPECT_EQ(changed, p.dim() > 1) << params[i].key();
    (changed ? moved : still) += 1;
  }
  EXPECT_GT(moved, 0);
  EXPECT_GT(still, 0);
}

TEST(NasNetTest, ChannelsLastAndContiguousComputeTheSameStep) {
  // memory_format is a layout choice only: one smoke step from the same weights and batch
  // gives the same loss either way.
  const auto& config = builtin_store().model("nasnet-large");
  std::vector<double> losses;
  for (const char* format : {"channels_last", "contiguous"}) {
    Json model = config.smoke_model.json();
    model["memory_format"] = format;
    model["dropout"] = 0.0;
    StepContext ctx;
    ctx.config = &config;
    ctx.model = Params(nasnet_model_schema(), model, Where{"test", ""});
    ctx.optimizer = config.optimizer;
    ctx.batch = 2;
    auto step = nasnet_architecture().prepare(ctx);
    step->run();
    losses.push_back(step->losses().at("loss").item<double>());
  }
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::abs(losses[0]));
}

}  // namespace
}  // namespace gpubench::models
