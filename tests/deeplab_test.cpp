// DeepLab specifics: parameter breakdowns against the spec (TF Xception-65 DeepLabv3+, torchvision
// DeepLabV3-ResNet101, and the ResNet options a detector needs), output strides, TF padding,
// the ASPP branches, the ignore-255 loss on hand-made cases, the synthetic labels and the
// optimizer's decay groups and schedule.
#include "models/deeplab.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "models/resnet.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gpubench::models {
namespace {

namespace F = torch::nn::functional;

using testing::builtin_store;

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

std::vector<int64_t> spatial(const torch::Tensor& t) { return {t.size(2), t.size(3)}; }

class DeepLabTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(DeepLabTest, XceptionDeepLabParameterBreakdownMatchesTheSpec) {
  // spec image §2: 41,055,413 with the decoder, 40,892,485 without; the parts computed from
  // the layer list (entry stem, three entry blocks, 16 middle blocks, two exit blocks).
  DeepLabV3Plus model(DeepLabV3PlusOptions(21));
  const auto& blocks = *model->backbone->blocks;
  EXPECT_EQ(count(*model->backbone->conv1_1) + count(*model->backbone->bn1_1) +
                count(*model->backbone->conv1_2) + count(*model->backbone->bn1_2),
            19488);
  EXPECT_EQ(count(*blocks[0]), 53696);
  EXPECT_EQ(count(*blocks[1]), 205696);
  EXPECT_EQ(count(*blocks[2]), 1457360);
  EXPECT_EQ(count(*blocks[3]), 1618344);  // each of the 16 middle blocks
  EXPECT_EQ(count(*blocks[19]), 3104384);
  EXPECT_EQ(count(*blocks[20]), 7133184);
  EXPECT_EQ(count(*model->backbone), 37867312);
  EXPECT_EQ(count(*model->aspp), 3019776);
  EXPECT_EQ(count(*model->projection) + count(*model->projection_bn) +
                count(*model->decoder_conv0) + count(*model->decoder_conv1),
            162928);
  EXPECT_EQ(count(*model->logits), 5397);
  EXPECT_EQ(count(*model), 41055413);
  EXPECT_EQ(count(*model) - 162928, 40892485);  // the spec's count without the decoder
}

TEST_F(DeepLabTest, ResNetCountsMatchTorchvision) {
  // torchvision's published counts: resnet50 25,557,032; resnet101 44,549,160.
  EXPECT_EQ(count(*ResNet(resnet_options(50))), 25557032);
  EXPECT_EQ(count(*ResNet(resnet_options(101))), 44549160);
  EXPECT_EQ(count(*ResNet(resnet_options(18))), 11689512);
  EXPECT_EQ(count(*ResNet(resnet_options(101).num_classes(0))), 42500160);
}

TEST_F(DeepLabTest, TorchvisionDeepLabParameterBreakdownMatchesTheSpec) {
  // deeplabv3_resnet101 with aux is 60,996,202 (torchvision meta); the aux FCNHead is
  // 2,365,205, so without it 58,630,997.
  DeepLabV3 model(
      DeepLabV3Options(resnet_options(101).replace_stride_with_dilation({false, true, true}), 21));
  EXPECT_EQ(count(*model->backbone), 42500160);
  EXPECT_EQ(count(*model->aspp), 15535104);
  EXPECT_EQ(count(*model->head_conv) + count(*model->head_bn), 590336);
  EXPECT_EQ(count(*model->classifier), 5397);
  EXPECT_EQ(count(*model), 58630997);
  EXPECT_EQ(count(*model) + 2365205, 60996202);
}

TEST_F(DeepLabTest, ResNetDetectorOptionsFreezeWhatMaskRcnnFreezes) {
  // spec image §6: R-50 conv weights 23,454,912, of which the stem and res2 hold 222,400.
  ResNet frozen(
      resnet_options(50).num_classes(0).frozen_bn(true).frozen_stages(2).stride_in_1x1(true));
  EXPECT_EQ(count(*frozen), 23454912 - 222400);
  for (const auto& p : frozen->layer1->parameters()) EXPECT_FALSE(p.requires_grad());
  EXPECT_TRUE(frozen->layer2->parameters().front().requires_grad());
  // The stride sits in the first 1x1 of a downsampling bottleneck.
  auto* first = frozen->layer2[0]->as<ResNetBlock>();
  EXPECT_EQ(first->conv1->options.stride()->at(0), 2);
  EXPECT_EQ(first->conv2->options.stride()->at(0), 1);
  // Frozen BatchNorm is an affine map of fixed statistics.
  FrozenBatchNorm2d bn(2, 0.0);
  bn->weight.copy_(torch::tensor({2.0f, 1.0f}));
  bn->bias.copy_(torch::tensor({1.0f, 0.0f}));
  bn->running_mean.copy_(torch::tensor({1.0f, -1.0f}));
  bn->running_var.copy_(torch::tensor({4.0f, 1.0f}));
  const auto y = bn(torch::ones({1, 2, 1, 1}));
  EXPECT_FLOAT_EQ(y[0][0][0][0].item<float>(), 1.0f);  // (1 - 1) / 2 * 2 + 1
  EXPECT_FLOAT_EQ(y[0][1][0][0].item<float>(), 2.0f);  // (1 + 1) / 1 * 1 + 0
}

TEST_F(DeepLabTest, DilatedResNetFollowsTorchvisionsRule) {
  // replace_stride_with_dilation [False, True, True]: a dilated stage's first block keeps the
  // previous dilation, the others take the new one.
  ResNet net(resnet_options(101).num_classes(0).replace_stride_with_dilation({false, true, true}));
  auto dilation = [](const torch::nn::Sequential& stage, size_t i) {
    return stage->ptr(i)->as<ResNetBlock>()->conv2->options.dilation()->at(0);
  };
  EXPECT_EQ(dilation(net->layer3, 0), 1);
  EXPECT_EQ(dilation(net->layer3, 1), 2);
  EXPECT_EQ(dilation(net->layer4, 0), 2);
  EXPECT_EQ(dilation(net->layer4, 2), 4);
  EXPECT_EQ(net->layer4[0]->as<ResNetBlock>()->conv2->options.stride()->at(0), 1);
  // Output stride 8 at the spec's sizes: 129 -> 17.
  torch::NoGradGuard no_grad;
  ResNet small(
      ResNetOptions({1, 1, 1, 1}).num_classes(0).replace_stride_with_dilation({false, true, true}));
  const auto stages = small->stages(torch::randn({2, 3, 129, 129}));
  EXPECT_EQ(spatial(stages[0]), (std::vector<int64_t>{33, 33}));
  EXPECT_EQ(spatial(stages[1]), (std::vector<int64_t>{17, 17}));
  EXPECT_EQ(spatial(stages[3]), (std::vector<int64_t>{17, 17}));
  EXPECT_EQ(stages[3].size(1), 2048);
}

TEST_F(DeepLabTest, XceptionOutputStrideAndDecoderResolution) {
  torch::NoGradGuard no_grad;
  // A 4k+1 crop keeps TF's scale_dimension exact: (S - 1) / stride + 1. Evaluation mode, so one
  // image is enough for the image-pooling BatchNorm.
  const auto x = torch::randn({1, 3, 65, 65});
  DeepLabV3Plus os16(DeepLabV3PlusOptions(21).backbone(XceptionOptions().middle_blocks(1)));
  os16->eval();
  auto [features, low_level] = os16->backbone(x);
  EXPECT_EQ(features.sizes(), (std::vector<int64_t>{1, 2048, 5, 5}));
  EXPECT_EQ(low_level.sizes(), (std::vector<int64_t>{1, 256, 17, 17}));
  const auto logits = os16->decoder_logits(x);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, 21, 17, 17}));
  // The loss's upsampling (align_corners) keeps the corners.
  const auto upsampled = os16->forward(x);
  EXPECT_EQ(upsampled.sizes(), (std::vector<int64_t>{1, 21, 65, 65}));
  EXPECT_TRUE(torch::allclose(upsampled.select(2, 64).select(2, 64),
                              logits.select(2, 16).select(2, 16), 1e-4, 1e-5));
  // Past the target stride the strides become rates: exit block 2 runs at rate 2 at OS16.
  const auto& blocks = *os16->backbone->blocks;
  EXPECT_EQ(blocks[blocks.size() - 2]->as<XceptionModule>()->options.rate(), 1);
  EXPECT_EQ(blocks[blocks.size() - 2]->as<XceptionModule>()->options.stride(), 1);
  EXPECT_EQ(blocks[blocks.size() - 1]->as<XceptionModule>()->options.rate(), 2);

  Xception os8(XceptionOptions().middle_blocks(1).output_stride(8));
  os8->eval();
  EXPECT_EQ(spatial(os8(x).first), (std::vector<int64_t>{9, 9}));
  EXPECT_EQ(os8->blocks[3]->as<XceptionModule>()->options.rate(), 2);  // the middle flow
}

TEST_F(DeepLabTest, FullCropLogitsAreAtTheDecoderStrideOfTheCrop) {
  // The shipped model at train_crop_size 513 (spec image §2), one image in evaluation mode (the
  // image-pooling BatchNorm sees one value per image; no gradient: only the shapes matter).
  // TF's scale_dimension (S - 1) / stride + 1: the exit flow runs at output stride 16 (33^2),
  // the decoder at stride 4 (the block2 tap, 129^2), where the 1x1 conv gives the 21 PASCAL
  // logits (20 classes + background); forward() then resizes them to the input's size for the
  // loss (upsample_logits), which XceptionOutputStrideAndDecoderResolution checks at 65.
  const Params& m = builtin_store().model("deeplabv3").model;
  const int64_t size = m.i64("image_size");
  ASSERT_EQ(size, 513);
  ASSERT_EQ(m.i64("output_stride"), 16);
  const auto backbone = XceptionOptions()
                            .middle_blocks(m.i64("middle_blocks"))
                            .output_stride(m.i64("output_stride"))
                            .multi_grid(m.i64s("multi_grid"));
  DeepLabV3Plus model(DeepLabV3PlusOptions(m.i64("num_classes"))
                          .backbone(backbone)
                          .atrous_rates(m.i64s("atrous_rates"))
                          .decoder(m.flag("decoder")));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, 3, size, size});
  const auto logits = model->decoder_logits(x);  // the one full pass
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, 21, 129, 129}));
  EXPECT_TRUE(logits.isfinite().all().item<bool>());
  // The decoder resizes ASPP's output to the tap's size, so the logits would not show a wrong
  // exit stride: the backbone's outputs show it. With one middle-flow block instead of 16 (the
  // middle flow is stride-1 'sum' units, and half the compute): half a pass.
  Xception shallow(XceptionOptions(backbone).middle_blocks(1));
  shallow->eval();
  const auto [features, low_level] = shallow->forward(x);
  EXPECT_EQ(features.sizes(), (std::vector<int64_t>{1, 2048, 33, 33}));
  EXPECT_EQ(low_level.sizes(), (std::vector<int64_t>{1, 256, 129, 129}));
}

TEST_F(DeepLabTest, StridedSeparableConvMatchesSameConvThenSubsample) {
  // xception.py: separable_conv2d_same at stride 2 equals the stride-1 'SAME' conv subsampled
  // by 2, on odd and even inputs alike (what plain 'SAME' at stride 2 would not give).
  torch::NoGradGuard no_grad;
  for (const int64_t size : {9, 8}) {
    for (const int64_t rate : {1, 2}) {
      TfSeparableConv2d strided(TfSeparableConv2dOptions(4, 6).stride(2).rate(rate));
      TfSeparableConv2d dense(TfSeparableConv2dOptions(4, 6).rate(rate));
      dense->depthwise->weight.copy_(strided->depthwise->weight);
      dense->pointwise->weight.copy_(strided->pointwise->weight);
      strided->eval();
      dense->eval();
      const auto x = torch::randn({1, 4, size, size});
      const auto subsampled = dense(x).slice(2, 0, size, 2).slice(3, 0, size, 2);
      EXPECT_TRUE(torch::allclose(strided(x), subsampled, 1e-5, 1e-5))
          << "size " << size << " rate " << rate;
    }
  }
}

TEST_F(DeepLabTest, AsppBranchesHaveTheReferenceShapes) {
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 64, 9, 9});
  // TF: image pooling first, separable atrous branches.
  Aspp tf(AsppOptions(64, {6, 12, 18}).channels(16).separable(true).pooling_first(true));
  const auto tf_branches = tf->branches(x);
  ASSERT_EQ(tf_branches.size(), 5u);
  for (const auto& b : tf_branches) EXPECT_EQ(b.sizes(), (std::vector<int64_t>{2, 16, 9, 9}));
  // The pooling branch is constant over space.
  EXPECT_TRUE(torch::equal(
      tf_branches[0],
      tf_branches[0].select(2, 0).select(2, 0).view({2, 16, 1, 1}).expand_as(tf_branches[0])));
  EXPECT_NE(tf->atrous[0]->as<TfSeparableConv2d>(), nullptr);
  EXPECT_EQ(tf->atrous[2]->as<TfSeparableConv2d>()->depthwise->options.dilation()->at(0), 18);
  EXPECT_EQ(tf->project->options.in_channels(), 80);
  EXPECT_EQ(tf(x).sizes(), (std::vector<int64_t>{2, 16, 9, 9}));
  // torchvision: dense atrous branches, pooling last.
  Aspp tv(AsppOptions(64, {12, 24, 36}).channels(16));
  const auto tv_branches = tv->branches(x);
  ASSERT_EQ(tv_branches.size(), 5u);
  EXPECT_TRUE(torch::equal(tv_branches[4].select(3, 0), tv_branches[4].select(3, 8)));
  EXPECT_EQ(tv->atrous[1]
                ->as<torch::nn::Sequential>()
                ->ptr(0)
                ->as<torch::nn::Conv2d>()
                ->options.dilation()
                ->at(0),
            24);
  // The full-size parameter counts of both ASPPs.
  EXPECT_EQ(count(*Aspp(AsppOptions(2048, {6, 12, 18}).separable(true))), 3019776);
  EXPECT_EQ(count(*Aspp(AsppOptions(2048, {12, 24, 36}))), 15535104);
}

TEST_F(DeepLabTest, CrossEntropySkipsIgnoredPixelsAndAveragesOverTheRest) {
  // Three pixels, three classes. Pixel 0: logits (ln 2, 0, 0), label 0 -> -ln(2/4) = ln 2.
  // Pixel 1: ignored, whatever its logits. Pixel 2: uniform logits, label 2 -> ln 3.
  auto logits = torch::tensor({std::log(2.0f), 0.0f, 0.0f, 50.0f, -50.0f, 7.0f, 0.0f, 0.0f, 0.0f})
                    .view({1, 3, 3})
                    .permute({0, 2, 1})
                    .unsqueeze(2)
                    .contiguous()
                    .requires_grad_(true);  // [1, 3 classes, 1, 3 pixels]
  const auto labels = torch::tensor({0L, 255L, 2L}).view({1, 1, 3});
  auto loss = segmentation_cross_entropy(logits, labels, 255);
  EXPECT_NEAR(loss.item<float>(), std::log(6.0) / 2, 1e-6);
  loss.backward();
  // The ignored pixel gets no gradient; a counted one gets (softmax - onehot) / 2.
  EXPECT_TRUE(torch::equal(logits.grad().select(3, 1), torch::zeros({1, 3, 1})));
  EXPECT_NEAR(logits.grad()[0][0][0][0].item<float>(), (0.5 - 1) / 2, 1e-6);
  // The same as torch's mean reduction with ignore_index (the torchvision reference).
  const auto torch_mean =
      F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().ignore_index(255));
  EXPECT_NEAR(loss.item<float>(), torch_mean.item<float>(), 1e-6);
  // Everything ignored: TF's _div_maybe_zero gives 0, not NaN.
  const auto all_ignored =
      segmentation_cross_entropy(logits, torch::full({1, 1, 3}, 255, torch::kLong), 255);
  EXPECT_EQ(all_ignored.item<float>(), 0.0f);
}

TEST_F(DeepLabTest, SyntheticLabelsLookLikePascal) {
  const SegmentationBatch b(6, 129, 21, 4, 5, 255, InputRange::kXception, torch::kCPU, 3);
  ASSERT_EQ(b.images.sizes(), (std::vector<int64_t>{6, 3, 129, 129}));
  ASSERT_EQ(b.labels.sizes(), (std::vector<int64_t>{6, 129, 129}));
  EXPECT_EQ(b.labels.scalar_type(), torch::kLong);
  const auto ignored = b.labels.eq(255);
  EXPECT_TRUE((b.labels.lt(21) | ignored).all().item<bool>());
  EXPECT_TRUE(b.labels.ge(0).all().item<bool>());
  EXPECT_GE(b.images.min().item<float>(), -1.0f);
  EXPECT_LE(b.images.max().item<float>(), 1.0f);
  // Some foreground in every image, and a void share of a few percent (VOC: about 5%).
  EXPECT_TRUE((b.labels.gt(0) & b.labels.lt(21)).flatten(1).any(1).all().item<bool>());
  const double share = ignored.to(torch::kDouble).mean().item<double>();
  EXPECT_GT(share, 0.01);
  EXPECT_LT(share, 0.2);
  // The same seed without the band gives the clean labels: void pixels are exactly those with
  // a different clean label within two pixels (no boundary at the image edge).
  const SegmentationBatch clean(6, 129, 21, 4, 0, 255, InputRange::kXception, torch::kCPU, 3);
  EXPECT_FALSE(clean.labels.eq(255).any().item<bool>());
  EXPECT_TRUE(torch::equal(b.labels.masked_select(ignored.logical_not()),
                           clean.labels.masked_select(ignored.logical_not())));
  const auto padded = F::pad(clean.labels.unsqueeze(1).to(torch::kFloat),
                             F::PadFuncOptions({2, 2, 2, 2}).mode(torch::kReplicate));
  const auto windows = F::unfold(padded, F::UnfoldFuncOptions({5, 5}));  // [N, 25, S * S]
  const auto differs = windows.ne(windows.select(1, 12).unsqueeze(1)).any(1).view({6, 129, 129});
  EXPECT_TRUE(torch::equal(ignored, differs));
  // Deterministic from the seed.
  const SegmentationBatch again(6, 129, 21, 4, 5, 255, InputRange::kXception, torch::kCPU, 3);
  EXPECT_TRUE(torch::equal(b.labels, again.labels));
  EXPECT_TRUE(torch::equal(b.images, again.images));
  const SegmentationBatch other(6, 129, 21, 4, 5, 255, InputRange::kXception, torch::kCPU, 4);
  EXPECT_FALSE(torch::equal(b.labels, other.labels));
  // ImageNet normalization spans roughly [-2.1, 2.6].
  const SegmentationBatch imagenet(2, 65, 21, 4, 5, 255, InputRange::kImageNet, torch::kCPU, 3);
  EXPECT_LT(imagenet.images.min().item<float>(), -1.5f);
  EXPECT_GT(imagenet.images.max().item<float>(), 1.5f);
}

TEST_F(DeepLabTest, TfDecayGroupsSkipDepthwiseBatchNormAndBiases) {
  DeepLabV3Plus model(DeepLabV3PlusOptions(21).backbone(XceptionOptions().middle_blocks(1)));
  int64_t expected = 0;
  for (const auto& m : model->modules(/*include_self=*/false)) {
    if (const auto* c = m->as<torch::nn::Conv2d>()) {
      if (c->options.groups() == 1) expected += c->weight.numel();
    }
  }
  // A large rate and decay, so that one step shows which parameters decay in fp32.
  constexpr double kLr = 0.1, kDecay = 0.5;
  const Params optimizer(deeplab_optimizer_schema(), Json{{"lr", kLr}, {"weight_decay", kDecay}},
                         Where{"test", ""});
  auto updater = make_deeplab_updater(*model, optimizer, Precision::kFp32, torch::kCPU);
  EXPECT_DOUBLE_EQ(updater.optimizer().lr(), kLr);
  // With every gradient 1, a decayed weight moves by lr * (1 + wd * w), any other by lr.
  std::vector<torch::Tensor> before;
  for (auto& p : model->parameters()) {
    before.push_back(p.detach().clone());
    p.mutable_grad() = torch::ones_like(p);
  }
  updater.step();
  int64_t decayed = 0;
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (torch::allclose(params[i], before[i] - kLr, 0, 1e-6)) continue;
    EXPECT_TRUE(torch::allclose(params[i], before[i] - kLr * (1 + kDecay * before[i]), 0, 1e-6));
    decayed += params[i].numel();
  }
  EXPECT_EQ(decayed, expected);
  // Poly from step 0: the second update runs at lr * (1 - 1 / total)^0.9.
  const double total = static_cast<double>(optimizer.i64("total_steps"));
  EXPECT_DOUBLE_EQ(updater.optimizer().lr(), kLr * std::pow(1 - 1 / total, 0.9));
}

/// A module with each kind of parameter the decay groups tell apart: a dense conv weight and
/// bias, a depthwise conv weight, BatchNorm gain and shift. Fast to build, unlike a DeepLab.
struct DecayKindsImpl : torch::nn::Module {
  DecayKindsImpl() {
    dense = register_module("dense", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    depthwise = register_module(
        "depthwise", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 4, 3).groups(4).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.uniform_(0.5, 1.5);  // no zeros: every decay shows
  }
  torch::nn::Conv2d dense{nullptr}, depthwise{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(DecayKinds);

TEST_F(DeepLabTest, ShippedOptimizersDecayWhatTheirReferencesDecay) {
  // The shipped optimizer sections, with only the rate and decay raised so that one step shows
  // which parameters decay: TF DeepLab's (deeplabv3) only the non-depthwise conv weights,
  // torchvision's (deeplabv3-resnet101) every parameter.
  constexpr double kLr = 0.1, kDecay = 0.5;
  for (const auto& [name, expected] : std::vector<std::pair<std::string, std::set<std::string>>>{
           {"deeplabv3", {"dense.weight"}},
           {"deeplabv3-resnet101",
            {"dense.weight", "dense.bias", "depthwise.weight", "bn.weight", "bn.bias"}}}) {
    Json o = builtin_store().model(name).optimizer.json();
    o["lr"] = kLr;
    o["weight_decay"] = kDecay;
    const Params optimizer(deeplab_optimizer_schema(), o, Where{"test", name});
    DecayKinds module;
    auto updater = make_deeplab_updater(*module, optimizer, Precision::kFp32, torch::kCPU);
    std::map<std::string, torch::Tensor> before;
    for (auto& p : module->named_parameters()) {
      before[p.key()] = p.value().detach().clone();
      p.value().mutable_grad() = torch::ones_like(p.value());
    }
    updater.step();
    std::set<std::string> decayed;
    for (const auto& p : module->named_parameters()) {
      const auto& w = before.at(p.key());
      if (torch::allclose(p.value(), w - kLr * (1 + kDecay * w), 0, 1e-6)) {
        decayed.insert(p.key());
      } else {
        EXPECT_TRUE(torch::allclose(p.value(), w - kLr, 0, 1e-6)) << name << " " << p.key();
      }
    }
    EXPECT_EQ(decayed, expected) << name;
  }
}

TEST_F(DeepLabTest, BatchOfOneCannotTrainSoTheSearchStartsAtTwo) {
  // The image-pooling branch normalizes a 1x1 map: at batch 1 BatchNorm sees one value per
  // channel and training fails. At 2 it trains: the workload test's smoke step runs there.
  for (const char* name : {"deeplabv3", "deeplabv3-resnet101"}) {
    const ModelConfig& config = builtin_store().model(name);
    EXPECT_EQ(config.search.min_batch, 2) << name;
    EXPECT_EQ(config.smoke_batch, config.search.min_batch) << name;
    StepContext ctx;
    ctx.config = &config;
    ctx.model = config.smoke_model;
    ctx.optimizer = config.smoke_optimizer;
    ctx.batch = 1;
    try {
      builtin_registry().get(config.architecture).prepare(ctx)->run();
      ADD_FAILURE() << name << " trained at batch 1";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("more than 1 value per channel"), std::string::npos)
          << name << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace gpubench::models
