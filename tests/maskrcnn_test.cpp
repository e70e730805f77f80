// Mask R-CNN specifics: the parameter breakdown against the spec, the folded FrozenBatchNorm,
// the mask head's own-class logits, the synthetic ground truth, the plan at full size, the
// solver, and one full iteration that updates every head.
#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "models/mask_rcnn.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace gpubench::models {
namespace {

using testing::builtin_store;

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

int64_t count_all(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(MaskRcnnTest, ParameterBreakdownMatchesTheSpec) {
  // spec image §6: backbone convs 23,454,912 of which 222,400 frozen (stem + res2), FPN
  // 3,344,384, RPN 593,935, box head 14,310,805, mask head 2,643,537.
  MaskRcnn model(mask_rcnn_options(builtin_store().model("mask-rcnn").model));
  EXPECT_EQ(count_all(*model->backbone), 23454912);
  EXPECT_EQ(count(*model->backbone), 23454912 - 222400);
  EXPECT_EQ(count_all(*model->backbone->stem) + count_all(*model->backbone->stages[0]), 222400);
  EXPECT_EQ(count(*model->backbone->stem) + count(*model->backbone->stages[0]), 0);
  EXPECT_EQ(count(*model->fpn), 3344384);
  EXPECT_EQ(count(*model->rpn), 593935);
  EXPECT_EQ(count(*model->box_head), 14310805);
  EXPECT_EQ(count(*model->mask_head), 2643537);
  EXPECT_EQ(count(*model), 44125173);
  // FrozenBatchNorm holds buffers only: every backbone parameter is a conv weight.
  for (const auto& p : model->backbone->named_parameters()) {
    EXPECT_NE(p.key().find("conv.weight"), std::string::npos) << p.key();
  }
}

TEST(MaskRcnnTest, FoldedFrozenBatchNormEqualsConvThenAffine) {
  torch::manual_seed(0);
  rcnn::ConvFrozenBn layer(4, 6, 3, 2, 1);
  layer->bn->weight.uniform_(0.5, 2);
  layer->bn->bias.normal_();
  layer->bn->running_mean.normal_();
  layer->bn->running_var.uniform_(0.5, 2);
  const auto x = torch::randn({2, 4, 9, 9});
  const auto expected = layer->bn->forward(layer->conv->forward(x));
  EXPECT_TRUE(torch::allclose(layer->forward(x), expected, 1e-4, 1e-5));
}

TEST(MaskRcnnTest, CalibrationNormalizesEachFrozenBatchNormOnItsInput) {
  torch::manual_seed(0);
  rcnn::ConvFrozenBn layer(4, 6, 3, 2, 1);
  const auto x = torch::randn({2, 4, 9, 9}) * 30 + 5;
  layer->calibration_gain = 0.25;
  layer->calibrating = true;
  const auto y = layer->forward(x);
  layer->calibrating = false;
  // The statistics are the convolution's own output's: mean 0, standard deviation the gain.
  const auto mean = y.mean({0, 2, 3});
  const auto sd = (y - mean.view({1, -1, 1, 1})).pow(2).mean({0, 2, 3}).sqrt();
  EXPECT_LT(mean.abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(torch::allclose(sd, torch::full({6}, 0.25), 1e-3, 1e-4)) << sd;
  // Frozen afterwards: the same input gives the same output, another input is not renormalized.
  EXPECT_TRUE(torch::allclose(layer->forward(x), y, 1e-5, 1e-6));
  const auto y2 = layer->forward(x * 2);
  const auto sd2 = (y2 - y2.mean({0, 2, 3}).view({1, -1, 1, 1})).pow(2).mean({0, 2, 3}).sqrt();
  EXPECT_TRUE(torch::allclose(sd2, torch::full({6}, 0.5), 1e-3, 1e-4)) << sd2;

  // The whole backbone: every FrozenBatchNorm leaves the identity, each residual branch ends at
  // gain 1 / sqrt(blocks), and the features the FPN receives are of order 1.
  const ModelConfig& config = builtin_store().model("mask-rcnn");
  auto options = mask_rcnn_options(config.smoke_model);
  MaskRcnn model(options);
  const auto images = torch::randn({2, 3, 64, 96}) * 50;
  model->calibrate_frozen_batchnorm(images);
  int64_t blocks = 0;
  for (const int64_t b : options.blocks()) blocks += b;
  int layers = 0;
  for (const auto& m : model->backbone->modules(/*include_self=*/false)) {
    if (auto* l = m->as<rcnn::ConvFrozenBnImpl>()) {
      ++layers;
      EXPECT_FALSE(torch::equal(l->bn->running_var, torch::ones_like(l->bn->running_var)));
      EXPECT_FALSE(l->calibrating);
    }
  }
  EXPECT_GT(layers, 4 * blocks / 2);
  for (auto& stage : model->backbone->stages) {
    for (const auto& block : stage->children()) {
      const auto& bn = block->as<rcnn::BottleneckImpl>()->conv3->bn;
      EXPECT_TRUE(torch::allclose(bn->weight, torch::full_like(bn->weight, 1 / std::sqrt(blocks))));
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& f : model->backbone->forward(images)) {
    const double sd_f = f.std().item<double>();
    EXPECT_GT(sd_f, 0.1);
    EXPECT_LT(sd_f, 10.0);
  }
}

TEST(MaskRcnnTest, OwnClassMaskLogitsEqualTheFullPredictorIndexed) {
  torch::manual_seed(0);
  MaskHead head(8, std::vector<int64_t>{8, 8}, 5);
  const auto x = torch::randn({3, 8, 4, 4});
  const auto labels = torch::tensor(std::vector<int64_t>{2, 0, 4});
  const auto full = head->forward(x);  // [3, 5, 8, 8]
  const auto expected = full.gather(1, labels.view({3, 1, 1, 1}).expand({3, 1, 8, 8})).squeeze(1);
  const auto own = head->class_logits(x, labels);
  ASSERT_EQ(own.sizes(), (std::vector<int64_t>{3, 8, 8}));
  EXPECT_TRUE(torch::allclose(own, expected, 1e-5, 1e-5));
  // Same gradients for the predictor as the reference's index-then-loss.
  expected.sum().backward();
  const auto reference_grad = head->logits->weight.grad().clone();
  head->logits->weight.mutable_grad().reset();
  head->class_logits(x, labels).sum().backward();
  EXPECT_TRUE(torch::allclose(head->logits->weight.grad(), reference_grad, 1e-5, 1e-5));
}

TEST(MaskRcnnTest, SyntheticGroundTruthLooksLikeCoco) {
  const auto b = synthetic_detection_batch(4, 800, 1333, 32, 7, 16, 512, 81, torch::kCPU, 3);
  ASSERT_EQ(b.images.sizes(), (std::vector<int64_t>{4, 3, 800, 1344}));
  EXPECT_EQ(b.images.narrow(3, 1333, 11).abs().max().item<float>(), 0);  // padding
  EXPECT_GE(b.images.min().item<float>(), -122.8);  // pixels 0..255 minus the BGR mean
  EXPECT_LE(b.images.max().item<float>(), 255 - 102.9);
  ASSERT_EQ(b.boxes.sizes(), (std::vector<int64_t>{4, 7, 4}));
  const auto x1 = b.boxes.select(-1, 0), y1 = b.boxes.select(-1, 1);
  const auto x2 = b.boxes.select(-1, 2), y2 = b.boxes.select(-1, 3);
  EXPECT_TRUE((x1.ge(0) & y1.ge(0) & x2.le(1332) & y2.le(799)).all().item<bool>());
  const auto w = x2 - x1 + 1, h = y2 - y1 + 1;
  EXPECT_TRUE((w.ge(1) & h.ge(1)).all().item<bool>());
  const auto side = (w * h).sqrt();
  EXPECT_TRUE((side.ge(16 - 1e-3) & side.le(512 + 1e-3)).all().item<bool>());
  EXPECT_TRUE(((w / h).ge(0.5 - 1e-4) & (w / h).le(2 + 1e-4)).all().item<bool>());
  EXPECT_TRUE((b.labels.ge(1) & b.labels.lt(81)).all().item<bool>());
  // Deterministic from the seed.
  const auto again = synthetic_detection_batch(4, 800, 1333, 32, 7, 16, 512, 81, torch::kCPU, 3);
  EXPECT_TRUE(torch::equal(again.boxes, b.boxes));
  EXPECT_TRUE(torch::equal(again.images, b.images));
}

TEST(MaskRcnnTest, EllipseMasksMatchTheirBoxes) {
  // The mask of a box cropped to the box itself: the inscribed ellipse, touching every side.
  const auto gt = torch::tensor({10.f, 20.f, 65.f, 47.f}).view({1, 4});  // 56 x 28 pixels
  const auto mask = ellipse_mask_targets(gt, gt, 28)[0];
  EXPECT_EQ(mask[14][14].item<float>(), 1);
  EXPECT_EQ(mask[0][0].item<float>() + mask[0][27].item<float>() + mask[27][0].item<float>() +
                mask[27][27].item<float>(),
            0);
  EXPECT_EQ(mask[14][0].item<float>(), 1);  // middle of the left side
  EXPECT_EQ(mask[0][14].item<float>(), 1);  // middle of the top
  EXPECT_NEAR(mask.mean().item<float>(), M_PI / 4, 0.05);
  // A RoI beside the object sees nothing of it; one over its right half (x 38..66, the full
  // height) sees a half ellipse filling pi/4 of it, symmetric top to bottom.
  const auto beside = torch::tensor({70.f, 20.f, 100.f, 47.f}).view({1, 4});
  EXPECT_EQ(ellipse_mask_targets(gt, beside, 28).sum().item<float>(), 0);
  const auto right = torch::tensor({38.f, 20.f, 66.f, 48.f}).view({1, 4});
  const auto half = ellipse_mask_targets(gt, right, 28)[0];
  EXPECT_NEAR(half.mean().item<float>(), M_PI / 4, 0.03);
  EXPECT_TRUE(torch::equal(half, half.flip({0})));
  EXPECT_EQ(half.select(1, 0).sum().item<float>(), 28);  // the centre column is all in
}

TEST(MaskRcnnTest, PlanAtFullSizeHasTheReferenceAnchorsAndLevels) {
  const MaskRcnnOptions options = mask_rcnn_options(builtin_store().model("mask-rcnn").model);
  MaskRcnn model(options);
  const auto plan = model->plan(800, 1333, 800, 1344, torch::kCPU);
  EXPECT_EQ(plan.level_sizes, (std::vector<std::pair<int64_t, int64_t>>{
                                  {200, 336}, {100, 168}, {50, 84}, {25, 42}, {13, 21}}));
  EXPECT_EQ(plan.anchors.size(0), 268569);  // spec: 268,569 anchors per image
  // Anchors past x = 1333 (the padding) or crossing any border are ignored.
  const auto visible = plan.anchors.index({plan.visible});
  EXPECT_GE(visible.select(1, 0).min().item<float>(), 0);
  EXPECT_LT(visible.select(1, 2).max().item<float>(), 1333);
  EXPECT_LT(visible.select(1, 3).max().item<float>(), 800);
  // RoIAlign reads P2..P5: one row per pixel of each.
  EXPECT_EQ(plan.rows->pixels_per_image(), 200 * 336 + 100 * 168 + 50 * 84 + 25 * 42);
}

TEST(MaskRcnnTest, ProposalsAreCutOverTheBatchAndStayInsideTheImage) {
  torch::manual_seed(0);
  const MaskRcnnOptions options = mask_rcnn_options(builtin_store().model("mask-rcnn").smoke_model);
  MaskRcnn model(options);
  const auto plan = model->plan(120, 128, 128, 128, torch::kCPU);
  const int64_t images = 3, anchors = plan.anchors.size(0);
  const auto objectness = torch::randn({images, anchors});
  const auto deltas = torch::randn({images, anchors, 4}) * 0.5;
  const int64_t cut = options.fpn_post_nms_top_n();  // 150 at the smoke size
  const auto [boxes, valid] = rpn_proposals(objectness, deltas, plan, options);
  ASSERT_EQ(boxes.sizes(), (std::vector<int64_t>{images, cut, 4}));
  // FPN_POST_NMS_PER_BATCH: the cut is over the batch, so the images share it.
  EXPECT_EQ(valid.sum().item<int64_t>(), cut);
  EXPECT_LT(valid.sum(1).max().item<int64_t>(), cut);
  // Clipped to the real (unpadded) 120 x 128 image.
  const auto x = boxes.select(-1, 0), y = boxes.select(-1, 1);
  const auto x2 = boxes.select(-1, 2), y2 = boxes.select(-1, 3);
  EXPECT_TRUE((x.ge(0) & y.ge(0) & x2.le(127) & y2.le(119)).all().item<bool>());
  // Per image, each image gets its own cut.
  const auto [per_image_boxes, per_image_valid] = rpn_proposals(
      objectness, deltas, plan, MaskRcnnOptions(options).fpn_post_nms_per_batch(false));
  EXPECT_TRUE(per_image_valid.sum(1).eq(cut).all().item<bool>());
}

TEST(MaskRcnnTest, SolverMatchesMakeOptimizerAndWarmupMultiStepLr) {
  // WarmupMultiStepLR: factor 1/3 rising linearly over 500 iterations, x0.1 at each step.
  const auto lr = train::warmup_multistep(0.02, {60000, 80000}, 0.1, 1.0 / 3, 500);
  EXPECT_NEAR(lr(1), 0.02 * (1.0 / 3 + (2.0 / 3) / 500), 1e-12);
  EXPECT_NEAR(lr(250), 0.02 * (2.0 / 3), 1e-12);
  EXPECT_NEAR(lr(500), 0.02, 1e-12);
  EXPECT_NEAR(lr(60000), 0.002, 1e-12);
  EXPECT_NEAR(lr(85000), 0.0002, 1e-12);
  // Biases move at twice the rate without decay; weights at the rate with decay, linear in
  // the batch (0.02 for 16 images -> 0.005 for 4).
  torch::nn::Linear layer(3, 2);
  const auto w0 = layer->weight.detach().clone(), b0 = layer->bias.detach().clone();
  auto updater = make_mask_rcnn_updater(*layer, builtin_store().model("mask-rcnn").optimizer, 4,
                                        Precision::kFp32, torch::kCPU);
  updater.zero_grad();
  const auto x = torch::randn({5, 3});
  updater.backward_and_step(layer->forward(x).sum());
  const double rate = 0.005 * (1.0 / 3 + (2.0 / 3) / 500);
  const auto gw = torch::ones({2, 1}) * x.sum(0).view({1, 3});  // d sum / d weight
  EXPECT_TRUE(torch::allclose(layer->weight.detach(), w0 - rate * (gw + 1e-4 * w0), 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(layer->bias.detach(), b0 - 2 * rate * 5, 1e-6, 1e-6));
  // Above IMS_PER_BATCH the rate stays BASE_LR (scaled up, it diverges at a large max batch).
  for (const int64_t batch : {16, 64}) {
    auto big = make_mask_rcnn_updater(*layer, builtin_store().model("mask-rcnn").optimizer, batch,
                                      Precision::kFp32, torch::kCPU);
    EXPECT_NEAR(big.optimizer().lr(), 0.02 * (1.0 / 3 + (2.0 / 3) / 500), 1e-12) << batch;
  }
}

TEST(MaskRcnnTest, ChannelsLastComputesTheSameLosses) {
  const ModelConfig& config = builtin_store().model("mask-rcnn");
  std::map<std::string, torch::Tensor> losses[2];
  for (int nhwc = 0; nhwc < 2; ++nhwc) {
    Json values = config.smoke_model.json();
    values["channels_last"] = nhwc == 1;
    StepContext ctx;
    ctx.config = &config;
    ctx.model = Params(mask_rcnn_model_schema(), values, Where{"test", ""});
    ctx.optimizer = config.optimizer;
    ctx.batch = 2;
    ctx.device = torch::kCPU;
    auto step = builtin_registry().get("mask-rcnn").prepare(ctx);
    const auto stem_weight = step->parameters().at("model")[0];
    EXPECT_EQ(stem_weight.is_contiguous(torch::MemoryFormat::ChannelsLast), nhwc == 1);
    step->run();
    losses[nhwc] = step->losses();
  }
  // The RPN losses do not depend on the order of near-tied proposal scores, which NHWC
  // rounding may flip; they must agree.
  for (const char* name : {"loss_objectness", "loss_rpn_box_reg"}) {
    EXPECT_NEAR(losses[1][name].item<float>(), losses[0][name].item<float>(),
                1e-4 * std::abs(losses[0][name].item<float>()) + 1e-6)
        << name;
  }
}

TEST(MaskRcnnTest, OneIterationUpdatesEveryHead) {
  const ModelConfig& config = builtin_store().model("mask-rcnn");
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = config.optimizer;
  ctx.batch = config.smoke_batch;
  ctx.device = torch::kCPU;
  auto step = builtin_registry().get("mask-rcnn").prepare(ctx);
  // The parts by parameter name prefix.
  MaskRcnn probe(mask_rcnn_options(ctx.model));
  std::vector<std::string> names;
  for (const auto& p : probe->named_parameters()) names.push_back(p.key());
  const auto params = step->parameters().at("model");
  ASSERT_EQ(params.size(), names.size());
  std::vector<torch::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());
  step->run();
  for (const auto& [name, loss] : step->losses()) {
    EXPECT_TRUE(std::isfinite(loss.item<float>())) << name;
    if (name != "loss") {
      EXPECT_GT(loss.item<float>(), 0) << name;
    }
  }
  std::map<std::string, int> changed;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string part = names[i].substr(0, names[i].find('.'));
    const bool frozen =
        names[i].rfind("backbone.stem.", 0) == 0 || names[i].rfind("backbone.layer1.", 0) == 0;
    const bool moved = !torch::equal(params[i].detach(), before[i]);
    EXPECT_EQ(moved, !frozen) << names[i];
    EXPECT_EQ(params[i].grad().defined(), !frozen) << names[i];
    changed[part] += moved;
  }
  for (const char* part : {"backbone", "fpn", "rpn", "box_head", "mask_head"}) {
    EXPECT_GT(changed[part], 0) << part;
  }
}

// ---- The RoIs the box and mask heads process ----

// Hand-set heads make every count readable from the losses. The RPN's box deltas are zeroed, so
// the proposals are the (clipped) anchors; the ground truth is 3x3-pixel boxes, which no anchor
// (8 px and up at the smoke size) overlaps at IoU 0.5, so the sampled positives are exactly
// the ground-truth boxes that add_gt_proposals appends (IoU 1 with themselves) and every proposal
// is a negative. The box classifier's weights are zeroed and its bias is 0 for the background and
// -kMargin for every object class, so a background RoI costs log(1 + 80 e^-kMargin) and a
// foreground one kMargin more: the classifier loss (the mean over the sampled RoIs) gives the
// number of RoIs sampled. The box deltas are all kDelta and a ground-truth box's target is 0:
// 4 smooth-L1(kDelta) per positive. The mask logits are one constant per class.
constexpr double kMargin = 20;
constexpr double kDelta = 2;

struct RoiHeadCounts {
  int64_t box_slots = 0, mask_slots = 0;      ///< the heads' batch dimensions
  int64_t box_counted = 0, mask_counted = 0;  ///< losses.box_rois and mask_rois
  double box_rois = 0;        ///< RoIs whose classification enters the loss, whole batch
  int64_t positives = 0;      ///< losses.positive_rois
  double regressed_rois = 0;  ///< RoIs in the box regression loss, from its value
  double mask_loss = 0;
};

/// 3x3-pixel boxes (legacy inclusive corners) on a 6-pixel grid inside the 120x128 smoke image,
/// the same in each of `images` images; none overlaps another.
torch::Tensor tiny_boxes(int64_t images, int64_t count) {
  std::vector<float> b;
  for (int64_t k = 0; k < count; ++k) {
    const auto x = static_cast<float>(16 + (k % 16) * 6), y = static_cast<float>(16 + (k / 16) * 6);
    b.insert(b.end(), {x, y, x + 2, y + 2});
  }
  return torch::tensor(b).view({1, count, 4}).repeat({images, 1, 1});
}

/// The smoke-size network with `options`' sampling and the hand-set heads, fed two identical
/// images (so the batch-wide proposal cut leaves each the same number of proposals); mask logit
/// bias[class] = mask_bias[class].
class RoiHeadProbe {
 public:
  RoiHeadProbe(const MaskRcnnOptions& options, const torch::Tensor& mask_bias)
      : options_(options), model_(seeded(options)) {
    model_->train();
    plan_ = model_->plan(120, 128, 128, 128, torch::kCPU);
    const auto image = torch::zeros({1, 3, 128, 128});
    image.narrow(2, 0, 120).uniform_(-100, 150);  // BGR pixels minus the mean; the pad stays 0
    images_ = image.repeat({2, 1, 1, 1});
    model_->calibrate_frozen_batchnorm(images_);  // features of order 1: spread-out scores
    torch::NoGradGuard no_grad;
    model_->rpn->bbox_pred->weight.zero_();
    model_->rpn->bbox_pred->bias.zero_();
    model_->box_head->cls_score->weight.zero_();
    model_->box_head->cls_score->bias.fill_(-kMargin);
    model_->box_head->cls_score->bias[0] = 0;
    model_->box_head->bbox_pred->weight.zero_();
    model_->box_head->bbox_pred->bias.fill_(kDelta);
    model_->mask_head->logits->weight.zero_();
    model_->mask_head->logits->bias.copy_(mask_bias);
  }

  /// One forward with ground truth `boxes` [2, G, 4] and `labels` [2, G].
  RoiHeadCounts run(const torch::Tensor& boxes, const torch::Tensor& labels) {
    DetectionBatch batch;
    batch.images = images_;
    batch.boxes = boxes;
    batch.labels = labels;
    batch.image_height = 120;
    batch.image_width = 128;
    torch::NoGradGuard no_grad;
    const auto losses = model_->forward(batch, plan_);
    const double background = std::log1p(static_cast<double>(options_.num_classes() - 1) *
                                         std::exp(-kMargin));  // cross-entropy of a background RoI
    RoiHeadCounts c;
    c.box_slots = losses.box_slots;
    c.mask_slots = losses.mask_slots;
    c.box_counted = losses.box_rois.item<int64_t>();
    c.mask_counted = losses.mask_rois.item<int64_t>();
    c.positives = losses.positive_rois.item<int64_t>();
    c.box_rois = kMargin * static_cast<double>(c.positives) /
                 (losses.classifier.item<double>() - background);
    const double per_positive = 4 * (kDelta - 0.5);  // smooth-L1 with beta 1, four deltas
    c.regressed_rois = losses.box_reg.item<double>() * c.box_rois / per_positive;
    c.mask_loss = losses.mask.item<double>();
    return c;
  }

 private:
  static MaskRcnn seeded(const MaskRcnnOptions& options) {
    torch::manual_seed(0);
    return MaskRcnn(options);
  }

  MaskRcnnOptions options_;
  MaskRcnn model_;
  DetectionPlan plan_;
  torch::Tensor images_;

 public:
  /// The heads' slots for a batch of two images with `gt` boxes each.
  RoiSlots slots(int64_t gt) const { return model_->roi_slots(2, gt, plan_); }
};

/// The mean binary cross-entropy of constant mask logits `logit` against a ground-truth box's
/// own mask (its inscribed ellipse, the target of a positive that is the box itself).
double mask_loss_of(double logit, const torch::Tensor& box, int64_t resolution) {
  const double inside =
      ellipse_mask_targets(box.view({1, 4}), box.view({1, 4}), resolution).mean().item<double>();
  return std::log1p(std::exp(logit)) - logit * inside;
}

/// The sampling of `options` on few and on many ground-truth boxes: `budget` RoIs per image of
/// which at most `positive_cap` positive, and the mask head on the positives only; the heads ran
/// roi_slots' RoIs, and counted the sampled ones.
void expect_roi_sampling_with(const MaskRcnnOptions& options, int64_t budget,
                              int64_t positive_cap) {
  const int64_t images = 2, classes = options.num_classes();
  const int64_t mask_side = 2 * options.mask_resolution();
  const auto mask_bias = torch::arange(classes, torch::kFloat) * 0.5 - 2;  // class k: k/2 - 2
  const auto bias = [&](int64_t k) { return mask_bias[k].item<double>(); };
  RoiHeadProbe probe(options, mask_bias);
  {
    // Three objects per image, of classes 1-3 and 4-6: all six are sampled (the cap is far),
    // the budget fills up with negatives, and the mask loss is the mean over exactly those six.
    const auto boxes = tiny_boxes(images, 3);
    const auto labels = torch::arange(1, 7, torch::kLong).view({images, 3});
    const auto c = probe.run(boxes, labels);
    const RoiSlots slots = probe.slots(3);
    EXPECT_EQ(c.box_slots, slots.box);
    EXPECT_EQ(c.mask_slots, slots.mask);
    EXPECT_EQ(c.box_counted, images * budget);
    EXPECT_EQ(c.mask_counted, images * 3);
    EXPECT_EQ(c.positives, images * 3);
    EXPECT_NEAR(c.box_rois, static_cast<double>(images * budget), 1e-2);
    EXPECT_NEAR(c.regressed_rois, static_cast<double>(images * 3), 1e-2);
    double expected = 0;
    for (int64_t k = 1; k <= 6; ++k) expected += mask_loss_of(bias(k), boxes[0][0], mask_side) / 6;
    EXPECT_NEAR(c.mask_loss, expected, 1e-5);
  }
  {
    // More objects per image than the positive share allows: positive_cap per image, the rest of
    // the budget negatives; every object of image 0 is class 1 and of image 1 class 2, so the
    // mask loss weighs the two images' positives equally.
    const int64_t objects = positive_cap + 22;
    const auto boxes = tiny_boxes(images, objects);
    const auto labels =
        torch::tensor(std::vector<int64_t>{1, 2}).view({images, 1}).repeat({1, objects});
    const auto c = probe.run(boxes, labels);
    const RoiSlots slots = probe.slots(objects);
    EXPECT_EQ(c.box_slots, slots.box);
    EXPECT_EQ(c.mask_slots, slots.mask);
    EXPECT_EQ(c.box_counted, images * budget);
    EXPECT_EQ(c.mask_counted, images * positive_cap);
    EXPECT_EQ(c.positives, images * positive_cap);
    EXPECT_NEAR(c.box_rois, static_cast<double>(images * budget), 1e-2);
    EXPECT_NEAR(c.regressed_rois, static_cast<double>(images * positive_cap), 1e-2);
    EXPECT_NEAR(c.mask_loss,
                (mask_loss_of(bias(1), boxes[0][0], mask_side) +
                 mask_loss_of(bias(2), boxes[0][0], mask_side)) /
                    2,
                1e-5);
  }
}

/// expect_roi_sampling_with under both roi_heads settings.
void expect_roi_sampling(const MaskRcnnOptions& options, int64_t budget, int64_t positive_cap) {
  for (const auto heads : {RoiHeadSlots::kPerBatch, RoiHeadSlots::kFixedMax}) {
    SCOPED_TRACE(heads == RoiHeadSlots::kPerBatch ? "roi_heads per_batch" : "roi_heads fixed_max");
    expect_roi_sampling_with(MaskRcnnOptions(options).roi_heads(heads), budget, positive_cap);
  }
}

TEST(MaskRcnnTest, ShippedRoiSamplingTakes512RoisPerImageAQuarterPositive) {
  // maskrcnn-benchmark's ROI_HEADS.BATCH_SIZE_PER_IMAGE 512 and POSITIVE_FRACTION 0.25
  // (defaults.py, kept by e2e_mask_rcnn_R_50_FPN_1x.yaml): 512 RoIs per image, at most
  // 512 x 0.25 = 128 positive, the mask head on the positives (keep_only_positive_boxes). The
  // shipped model section's sampling and proposal settings on the smoke-size network (2000
  // proposals over the batch: 1000 per image, enough negatives to fill the budget).
  const ModelConfig& config = builtin_store().model("mask-rcnn");
  Json values = config.smoke_model.json();
  for (const char* key : {"roi_batch_per_image", "roi_positive_fraction", "roi_fg_iou",
                          "roi_bg_iou", "mask_rois_per_image", "pre_nms_top_n", "post_nms_top_n",
                          "fpn_post_nms_top_n", "fpn_post_nms_per_batch", "roi_heads"}) {
    values[key] = config.model.json().at(key);
  }
  const auto options =
      mask_rcnn_options(Params(mask_rcnn_model_schema(), values, Where{"test", "model"}));
  expect_roi_sampling(options, 512, 128);
}

TEST(MaskRcnnTest, SmokeRoiSamplingTakes64RoisPerImageAQuarterPositive) {
  // The smoke section shrinks the budget to 64 and keeps the fraction: 64 x 0.25 = 16 positive
  // at most.
  expect_roi_sampling(mask_rcnn_options(builtin_store().model("mask-rcnn").smoke_model), 64, 16);
}

// ---- The heads' RoI slots: maskrcnn-benchmark's batch-wide budget ----

TEST(MaskRcnnTest, RoiSlotBoundIsTheMostTheSamplerCanReturn) {
  // maskrcnn-benchmark at batch 16: 2000 proposals over the batch (FPN_POST_NMS_TOP_N_TRAIN,
  // FPN_POST_NMS_PER_BATCH) plus 7 ground-truth boxes per image, 512 sampled per image at most
  // (ROI_HEADS.BATCH_SIZE_PER_IMAGE), 128 of them positive (POSITIVE_FRACTION 0.25).
  EXPECT_EQ(roi_slot_bound(16, 512, 7, 2000), 2112);
  EXPECT_EQ(roi_slot_bound(16, 128, 7, 2000), 2048);
  // Against the brute-force most of sum_i min(cap, p_i + G) over proposal counts p_i >= 0 with
  // sum p_i <= P: the bound is exact.
  for (int64_t images = 1; images <= 3; ++images) {
    for (int64_t cap = 1; cap <= 6; ++cap) {
      for (int64_t gt = 0; gt <= 7; ++gt) {
        for (int64_t proposals = 0; proposals <= 9; ++proposals) {
          std::function<int64_t(int64_t, int64_t)> most = [&](int64_t image, int64_t left) {
            if (image == images) return int64_t{0};
            int64_t best = 0;
            for (int64_t p = 0; p <= left; ++p) {
              best = std::max(best, std::min(cap, p + gt) + most(image + 1, left - p));
            }
            return best;
          };
          EXPECT_EQ(roi_slot_bound(images, cap, gt, proposals), most(0, proposals))
              << images << " images, cap " << cap << ", " << gt << " boxes, " << proposals
              << " proposals";
        }
      }
    }
  }
}

TEST(MaskRcnnTest, HeadsRunTheBatchBoundOrEveryImagesMost) {
  auto options = mask_rcnn_options(builtin_store().model("mask-rcnn").model);
  EXPECT_EQ(options.roi_heads(), RoiHeadSlots::kPerBatch);  // the shipped setting
  MaskRcnn model(options);
  const auto plan = model->plan(800, 1333, 800, 1344, torch::kCPU);
  const RoiSlots per_batch = model->roi_slots(16, 7, plan);
  EXPECT_EQ(per_batch.proposals_per_image, 2000);
  EXPECT_EQ(per_batch.proposals, 2000);
  EXPECT_EQ(per_batch.samples_per_image, 512);
  EXPECT_EQ(per_batch.mask_per_image, 128);
  EXPECT_EQ(per_batch.box, 2112);
  EXPECT_EQ(per_batch.mask, 2048);
  model->options.roi_heads(RoiHeadSlots::kFixedMax);
  const RoiSlots fixed = model->roi_slots(16, 7, plan);
  EXPECT_EQ(fixed.box, 16 * 512);
  EXPECT_EQ(fixed.mask, 16 * 128);
  // With the proposal cut per image, every image may fill its 512.
  model->options.roi_heads(RoiHeadSlots::kPerBatch).fpn_post_nms_per_batch(false);
  EXPECT_EQ(model->roi_slots(16, 7, plan).box, 16 * 512);
  EXPECT_EQ(model->roi_slots(16, 7, plan).proposals, 16 * 2000);
}

TEST(MaskRcnnTest, PerBatchSlotsComputeFixedMaxsLossesOnFewerRois) {
  // Four smoke-size images of 3 boxes and 20 proposals over the batch: each image samples its
  // proposals and boxes (fewer than 64), 12 + 20 = 32 RoIs in all. per_batch runs the box head
  // on 32 slots and the mask head on 12 + min(20, 4 x 13) = 32; fixed_max on 4 x 23 and 4 x 16.
  // With the same weights and draws the two compute the same losses.
  const auto options =
      mask_rcnn_options(builtin_store().model("mask-rcnn").smoke_model).fpn_post_nms_top_n(20);
  const auto batch = synthetic_detection_batch(4, 120, 128, 32, 3, 8, 64, 81, torch::kCPU, 7);
  MaskRcnnLosses losses[2];
  const RoiHeadSlots modes[2] = {RoiHeadSlots::kPerBatch, RoiHeadSlots::kFixedMax};
  for (int m = 0; m < 2; ++m) {
    torch::manual_seed(0);
    MaskRcnn model(MaskRcnnOptions(options).roi_heads(modes[m]));
    model->train();
    const auto plan = model->plan(120, 128, 128, 128, torch::kCPU);
    model->calibrate_frozen_batchnorm(batch.images);
    torch::manual_seed(1);
    losses[m] = model->forward(batch, plan);
  }
  EXPECT_EQ(losses[0].box_slots, 32);
  EXPECT_EQ(losses[0].mask_slots, 32);
  EXPECT_EQ(losses[1].box_slots, 4 * 23);
  EXPECT_EQ(losses[1].mask_slots, 4 * 16);
  for (const auto& l : losses) {
    EXPECT_EQ(l.box_rois.item<int64_t>(), 32);
    EXPECT_GE(l.mask_rois.item<int64_t>(), 12);  // every ground-truth box is its own positive
    EXPECT_EQ(l.mask_rois.item<int64_t>(), l.positive_rois.item<int64_t>());
  }
  EXPECT_EQ(losses[0].mask_rois.item<int64_t>(), losses[1].mask_rois.item<int64_t>());
  const auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
    return std::abs(a.item<double>() - b.item<double>()) <=
           1e-5 * std::abs(b.item<double>()) + 1e-7;
  };
  EXPECT_TRUE(same(losses[0].objectness, losses[1].objectness));
  EXPECT_TRUE(same(losses[0].rpn_box_reg, losses[1].rpn_box_reg));
  EXPECT_TRUE(same(losses[0].classifier, losses[1].classifier))
      << losses[0].classifier.item<double>() << " " << losses[1].classifier.item<double>();
  EXPECT_TRUE(same(losses[0].box_reg, losses[1].box_reg))
      << losses[0].box_reg.item<double>() << " " << losses[1].box_reg.item<double>();
  EXPECT_TRUE(same(losses[0].mask, losses[1].mask))
      << losses[0].mask.item<double>() << " " << losses[1].mask.item<double>();
}

TEST(MaskRcnnTest, StepRecordsTheRoisAndPositivesPerImageOfItsWindow) {
  // The smoke step with 20 proposals over its batch of 2: every image samples its share of
  // them and its 3 boxes, (2 x 3 + 20) / 2 = 13 RoIs per image, whichever setting. Losses stay
  // finite over the steps; the record gives the window's counts and the heads' slots.
  const ModelConfig& config = builtin_store().model("mask-rcnn");
  double positives[2] = {0, 0};
  int m = 0;
  for (const char* mode : {"per_batch", "fixed_max"}) {
    SCOPED_TRACE(mode);
    Json values = config.smoke_model.json();
    values["roi_heads"] = mode;
    values["fpn_post_nms_top_n"] = 20;
    StepContext ctx;
    ctx.config = &config;
    ctx.model = Params(mask_rcnn_model_schema(), values, Where{"test", ""});
    ctx.optimizer = config.optimizer;
    ctx.batch = 2;
    ctx.device = torch::kCPU;
    auto step = builtin_registry().get("mask-rcnn").prepare(ctx);
    const Json batch_info = step->batch_info();
    EXPECT_EQ(batch_info.at("roi_heads"), mode);
    const bool per_batch = std::string(mode) == "per_batch";
    EXPECT_EQ(batch_info.at("box_roi_slots").get<int64_t>(), per_batch ? 26 : 2 * 23);
    EXPECT_EQ(batch_info.at("mask_roi_slots").get<int64_t>(), per_batch ? 26 : 2 * 16);
    step->run();
    EXPECT_FALSE(step->runtime_info().at("roi_heads").contains("rois_per_image"));  // no window
    step->begin_window();
    for (int i = 0; i < 4; ++i) {
      step->run();
      for (const auto& [name, loss] : step->losses()) {
        EXPECT_TRUE(std::isfinite(loss.item<float>())) << name << " at step " << i;
      }
    }
    const Json heads = step->runtime_info().at("roi_heads");
    EXPECT_EQ(heads.at("mode"), mode);
    EXPECT_EQ(heads.at("steps").get<int64_t>(), 4);
    EXPECT_EQ(heads.at("box_slots"), batch_info.at("box_roi_slots"));
    EXPECT_EQ(heads.at("mask_slots"), batch_info.at("mask_roi_slots"));
    EXPECT_DOUBLE_EQ(heads.at("rois_per_image").get<double>(), 13.0);
    positives[m] = heads.at("positives_per_image").get<double>();
    EXPECT_GE(positives[m], 3.0);
    EXPECT_LE(positives[m], 13.0);
    ++m;
  }
  EXPECT_NEAR(positives[0], positives[1], 0.5);
}

}  // namespace
}  // namespace gpubench::models
