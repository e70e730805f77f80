#include "models/mask_rcnn.h"

#include "gpubench/config/config.h"
#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace gpubench::models {

namespace F = torch::nn::functional;
namespace det = detection;

namespace {

/// FPN levels read by the RoI heads (P2..P5) and their scales (POOLER_SCALES), and the anchor
/// strides of P2..P6 (ANCHOR_STRIDE): fixed by the backbone's strides 4..32.
constexpr int64_t kRoiLevels = 4;
constexpr int64_t kFirstRoiLevel = 2;  // LevelMapper k_min: P2
constexpr int64_t kLastRoiLevel = kFirstRoiLevel + kRoiLevels - 1;
constexpr int64_t kAnchorLevels = 5;

/// Images the FrozenBatchNorm statistics are measured on (2 x 800 x 1344 pixels at full size).
constexpr int64_t kCalibrationImages = 2;

/// boxes [N, G, 4] at `index` [N, K] -> [N, K, 4].
torch::Tensor gather_boxes(const torch::Tensor& boxes, const torch::Tensor& index) {
  return boxes.gather(1, index.unsqueeze(-1).expand({-1, -1, 4}));
}

/// The sum of smooth L1 over the rows [..., 4] where `mask` [...] holds. Other rows count
/// nothing and pass no gradient, even when their targets are not finite.
torch::Tensor masked_smooth_l1_sum(const torch::Tensor& pred, const torch::Tensor& target,
                                   const torch::Tensor& mask, double beta) {
  const auto off = mask.logical_not().unsqueeze(-1);
  return det::smooth_l1(pred.masked_fill(off, 0), target.masked_fill(off, 0), beta).sum();
}

/// Mean over the valid entries of `values`, 0 when none is (the reference divides by the
/// sampled count, which is never 0 there).
torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& valid) {
  return values.masked_fill(valid.logical_not(), 0).sum() /
         valid.sum().to(torch::kFloat).clamp_min(1);
}

/// Candidates per image and level before NMS, padded to the largest level's.
int64_t candidates_per_level(const DetectionPlan& plan, const MaskRcnnOptions& o) {
  int64_t per_level = 0;
  for (const int64_t count : plan.level_anchors) {
    per_level = std::max(per_level, std::min(o.pre_nms_top_n(), count));
  }
  return per_level;
}

}  // namespace

// ---- Proposals ----

std::pair<torch::Tensor, torch::Tensor> rpn_proposals(const torch::Tensor& objectness,
                                                      const torch::Tensor& deltas,
                                                      const DetectionPlan& plan,
                                                      const MaskRcnnOptions& o) {
  torch::NoGradGuard no_grad;
  const int64_t images = objectness.size(0);
  const int64_t levels = static_cast<int64_t>(plan.level_anchors.size());
  const auto scores = objectness.sigmoid();
  const int64_t per_level = candidates_per_level(plan, o);
  std::vector<torch::Tensor> index_levels, score_levels, valid_levels;
  int64_t offset = 0;
  for (const int64_t count : plan.level_anchors) {
    const int64_t k = std::min(o.pre_nms_top_n(), count);
    auto [score, index] = scores.narrow(1, offset, count).topk(k, 1);
    index = index + offset;
    if (k < per_level) {  // pad with copies of the best, marked invalid
      score = torch::cat({score, score.narrow(1, 0, 1).expand({images, per_level - k})}, 1);
      index = torch::cat({index, index.narrow(1, 0, 1).expand({images, per_level - k})}, 1);
    }
    index_levels.push_back(index);
    score_levels.push_back(score);
    valid_levels.push_back(
        torch::arange(per_level, index.options()).lt(k).unsqueeze(0).expand({images, per_level}));
    offset += count;
  }
  const auto index = torch::stack(index_levels, 1).view({images, levels * per_level});
  const auto score = torch::stack(score_levels, 1).view({images, levels * per_level});
  auto valid = torch::stack(valid_levels, 1).view({images, levels * per_level});
  const det::BoxCoder coder({1, 1, 1, 1});
  auto boxes =
      coder.decode(gather_boxes(deltas, index),
                   plan.anchors.index_select(0, index.reshape({-1})).view({images, -1, 4}));
  // clip_to_image(remove_empty=False)
  const double max_x = static_cast<double>(plan.image_width - 1);
  const double max_y = static_cast<double>(plan.image_height - 1);
  boxes = torch::stack({boxes.select(-1, 0).clamp(0, max_x), boxes.select(-1, 1).clamp(0, max_y),
                        boxes.select(-1, 2).clamp(0, max_x), boxes.select(-1, 3).clamp(0, max_y)},
                       -1);
  // remove_small_boxes: a clipped box is at least one pixel wide, so min_size 0 keeps all.
  if (o.min_size() > 0) {
    const auto w = boxes.select(-1, 2) - boxes.select(-1, 0) + 1;
    const auto h = boxes.select(-1, 3) - boxes.select(-1, 1) + 1;
    valid = valid & w.ge(o.min_size()) & h.ge(o.min_size());
  }
  auto keep = (*plan.nms)(boxes.view({images * levels, per_level, 4}),
                          valid.reshape({images * levels, per_level}), o.nms_thresh())
                  .view({images, levels, per_level});
  if (o.post_nms_top_n() < per_level) {  // boxes are in score order within a level
    keep = keep & keep.cumsum(-1).le(o.post_nms_top_n());
  }
  keep = keep.view({images, levels * per_level});
  const auto key = score.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
  auto selected = keep;
  if (o.fpn_post_nms_per_batch()) {
    const int64_t total = images * levels * per_level;
    const auto top = std::get<1>(key.reshape({-1}).topk(std::min(o.fpn_post_nms_top_n(), total)));
    selected = torch::zeros({total}, keep.options()).index_fill_(0, top, true).view_as(keep) & keep;
  }
  const int64_t kept = std::min(o.fpn_post_nms_top_n(), levels * per_level);
  const auto order =
      std::get<1>(key.masked_fill(selected.logical_not(), -std::numeric_limits<float>::infinity())
                      .topk(kept, 1));
  return {gather_boxes(boxes, order), selected.gather(1, order)};
}

// ---- The detector ----

MaskRcnnImpl::MaskRcnnImpl(const MaskRcnnOptions& o) : options(o) {
  TORCH_CHECK(static_cast<int64_t>(o.anchor_sizes().size()) == kAnchorLevels,
              "one anchor size per level P2..P6 (5 values)");
  TORCH_CHECK(o.bbox_reg_weights().size() == 4, "bbox_reg_weights: 4 values");
  backbone = register_module("backbone", rcnn::ResNetBody(o));
  std::vector<int64_t> in_channels;
  for (int64_t c = o.res2_channels(), s = 0; s < 4; ++s, c *= 2) in_channels.push_back(c);
  fpn = register_module("fpn", Fpn(in_channels, o.fpn_channels()));
  rpn = register_module("rpn",
                        RpnHead(o.fpn_channels(), static_cast<int64_t>(o.aspect_ratios().size())));
  const int64_t r = o.box_resolution();
  box_head =
      register_module("box_head", BoxHead(o.fpn_channels() * r * r, o.mlp_dim(), o.num_classes()));
  mask_head = register_module("mask_head",
                              MaskHead(o.fpn_channels(), o.mask_conv_layers(), o.num_classes()));
}

DetectionPlan MaskRcnnImpl::plan(int64_t image_height, int64_t image_width, int64_t padded_height,
                                 int64_t padded_width, const torch::Device& device) const {
  TORCH_CHECK(padded_height % 32 == 0 && padded_width % 32 == 0,
              "the padded size must be a multiple of 32 (the FPN's coarsest stride)");
  TORCH_CHECK(image_height <= padded_height && image_width <= padded_width,
              "the image must fit its padded size");
  DetectionPlan p;
  p.image_height = image_height;
  p.image_width = image_width;
  p.padded_height = padded_height;
  p.padded_width = padded_width;
  for (int64_t l = 0; l < kRoiLevels; ++l) {
    p.level_sizes.push_back({padded_height >> (l + 2), padded_width >> (l + 2)});
  }
  const auto [h5, w5] = p.level_sizes.back();
  p.level_sizes.push_back({(h5 + 1) / 2, (w5 + 1) / 2});  // P6: kernel 1, stride 2
  std::vector<torch::Tensor> anchors;
  for (int64_t l = 0; l < kAnchorLevels; ++l) {
    const int64_t stride = int64_t{4} << l;
    const auto cell = det::cell_anchors(stride, options.anchor_sizes()[l], options.aspect_ratios());
    anchors.push_back(
        det::grid_anchors(cell, stride, p.level_sizes[l].first, p.level_sizes[l].second));
    p.level_anchors.push_back(anchors.back().size(0));
  }
  const auto all = torch::cat(anchors, 0);
  p.visible =
      det::visible_anchors(all, image_height, image_width, options.straddle_thresh()).to(device);
  p.anchors = all.to(device);
  std::vector<std::pair<int64_t, int64_t>> roi_sizes(p.level_sizes.begin(),
                                                     p.level_sizes.begin() + kRoiLevels);
  std::vector<double> scales;
  for (int64_t l = 0; l < kRoiLevels; ++l) scales.push_back(1.0 / static_cast<double>(4 << l));
  p.rows = std::make_unique<det::FeatureRows>(roi_sizes, scales, device);
  p.nms = std::make_unique<det::BatchedNms>();
  return p;
}

int64_t roi_slot_bound(int64_t images, int64_t per_image, int64_t gt_per_image, int64_t proposals) {
  // An image's sample is at most min(per_image, p + G) for its p proposals and G boxes, which
  // is at most g + min(p, per_image - g); the p add up to at most `proposals`.
  const int64_t g = std::min(per_image, gt_per_image);
  return images * g + std::min(proposals, images * (per_image - g));
}

RoiSlots MaskRcnnImpl::roi_slots(int64_t images, int64_t gt_per_image,
                                 const DetectionPlan& plan) const {
  const MaskRcnnOptions& o = options;
  RoiSlots s;
  const int64_t levels = static_cast<int64_t>(plan.level_anchors.size());
  s.proposals_per_image = std::min(o.fpn_post_nms_top_n(), levels * candidates_per_level(plan, o));
  // FPN_POST_NMS_PER_BATCH: fpn_post_nms_top_n over the batch, else that many per image.
  s.proposals = o.fpn_post_nms_per_batch()
                    ? std::min(o.fpn_post_nms_top_n(), images * s.proposals_per_image)
                    : images * s.proposals_per_image;
  const int64_t candidates = s.proposals_per_image + gt_per_image;
  s.samples_per_image = std::min(o.roi_batch_per_image(), candidates);  // as balanced_sample
  const int64_t positive_cap =
      std::min(static_cast<int64_t>(static_cast<double>(o.roi_batch_per_image()) *
                                    o.roi_positive_fraction()),
               candidates);
  s.mask_per_image = std::min(o.mask_rois_per_image(), positive_cap);
  if (o.roi_heads() == RoiHeadSlots::kPerBatch) {
    s.box = roi_slot_bound(images, s.samples_per_image, gt_per_image, s.proposals);
    s.mask = roi_slot_bound(images, s.mask_per_image, gt_per_image, s.proposals);
  } else {
    s.box = images * s.samples_per_image;
    s.mask = images * s.mask_per_image;
  }
  return s;
}

namespace {

/// Output side of a convolution or pooling window of `kernel` over `size`.
int64_t window_output(int64_t size, int64_t kernel, int64_t stride, int64_t padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

/// A layer's training multiply-adds: its forward, and the forward's again for each gradient the
/// backward computes (autograd asks a convolution or product for its input's gradient only
/// when the input requires one, and for its weight's only when the weight is trained).
double with_backward(double forward, bool input_grad, bool weight_grad) {
  return forward * (1.0 + (input_grad ? 1.0 : 0.0) + (weight_grad ? 1.0 : 0.0));
}

}  // namespace

MaskRcnnMacs mask_rcnn_training_macs(const MaskRcnnOptions& o, int64_t images,
                                     int64_t padded_height, int64_t padded_width, int64_t box_slots,
                                     int64_t mask_slots) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double n = d(images);
  MaskRcnnMacs m;
  // The stem (7x7 stride 2) on the images, which need no gradient; trained at freeze_at 0 only.
  const bool stem_trained = o.freeze_at() < 1;
  int64_t h = window_output(padded_height, 7, 2, 3), w = window_output(padded_width, 7, 2, 3);
  m.backbone += with_backward(n * d(h * w) * d(o.stem_channels() * 3 * 49), false, stem_trained);
  bool grad = stem_trained;       // whether the activation so far requires a gradient
  h = window_output(h, 3, 2, 1);  // max pool 3x3 stride 2
  w = window_output(w, 3, 2, 1);
  // res2..res5; stage s (0-based) is trained when freeze_at < s + 2 (ResNetBodyImpl).
  std::vector<int64_t> level_h, level_w, level_channels;
  std::vector<bool> level_grad;
  int64_t in = o.stem_channels(), out = o.res2_channels(), width = o.width_per_group();
  for (std::size_t s = 0; s < o.blocks().size(); ++s) {
    const bool trained = o.freeze_at() < static_cast<int64_t>(s) + 2;
    for (int64_t b = 0; b < o.blocks()[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const int64_t stride_1x1 = o.stride_in_1x1() ? stride : 1;
      const int64_t stride_3x3 = o.stride_in_1x1() ? 1 : stride;
      const int64_t h1 = window_output(h, 1, stride_1x1, 0),
                    w1 = window_output(w, 1, stride_1x1, 0);
      const int64_t h2 = window_output(h1, 3, stride_3x3, 1),
                    w2 = window_output(w1, 3, stride_3x3, 1);
      // conv1 and the projection shortcut read the block's input; conv2 and conv3 read conv1's
      // output, which requires a gradient when the block's input or its weights do.
      const bool inner_grad = grad || trained;
      m.backbone += with_backward(n * d(h1 * w1) * d(in * width), grad, trained);
      m.backbone += with_backward(n * d(h2 * w2) * d(width * width * 9), inner_grad, trained);
      m.backbone += with_backward(n * d(h2 * w2) * d(width * out), inner_grad, trained);
      if (in != out) {
        const int64_t hd = window_output(h, 1, stride, 0), wd = window_output(w, 1, stride, 0);
        m.backbone += with_backward(n * d(hd * wd) * d(in * out), grad, trained);
      }
      grad = inner_grad;
      h = h2;
      w = w2;
      in = out;
    }
    level_h.push_back(h);
    level_w.push_back(w);
    level_channels.push_back(out);
    level_grad.push_back(grad);
    out *= 2;
    width *= 2;
  }
  // FPN: a 1x1 lateral per level (its input's gradient only where the backbone level has one)
  // and a 3x3 output on the merged map, whose input always has one (the laterals are trained).
  const int64_t f = o.fpn_channels();
  for (std::size_t l = 0; l < level_h.size(); ++l) {
    const double pixels = n * d(level_h[l] * level_w[l]);
    m.fpn += with_backward(pixels * d(level_channels[l] * f), level_grad[l], true);
    m.fpn += with_backward(pixels * d(f * f * 9), true, true);
  }
  // RPN head on P2..P5 and P6 (P5 max-pooled, kernel 1 stride 2): 3x3 conv, 1x1 logits and
  // deltas.
  const int64_t anchors = static_cast<int64_t>(o.aspect_ratios().size());
  std::vector<std::pair<int64_t, int64_t>> rpn_levels;
  for (std::size_t l = 0; l < level_h.size(); ++l) rpn_levels.push_back({level_h[l], level_w[l]});
  rpn_levels.push_back(
      {window_output(level_h.back(), 1, 2, 0), window_output(level_w.back(), 1, 2, 0)});
  for (const auto& [lh, lw] : rpn_levels) {
    m.rpn +=
        with_backward(n * d(lh * lw) * d(f * f * 9 + f * anchors + f * 4 * anchors), true, true);
  }
  // The heads read RoIAlign of the FPN's maps (a gradient to their input) on every slot.
  const int64_t r = o.box_resolution(), mlp = o.mlp_dim(), classes = o.num_classes();
  m.box_head = with_backward(
      d(box_slots) * d(f * r * r * mlp + mlp * mlp + mlp * classes + mlp * 4 * classes), true,
      true);
  const int64_t mr = o.mask_resolution();
  int64_t c = f;
  double mask = 0;
  for (const int64_t layer : o.mask_conv_layers()) {
    mask += d(mr * mr) * d(c * layer * 9);
    c = layer;
  }
  mask += d(mr * mr) * d(c * c * 4);  // 2x2 stride-2 transposed conv: each input x C x 4
  mask += d(4 * mr * mr) * d(c);      // the own class's logits at 2r x 2r (class_logits' bmm)
  m.mask_head = with_backward(d(mask_slots) * mask, true, true);
  return m;
}

void MaskRcnnImpl::calibrate_frozen_batchnorm(const torch::Tensor& images) {
  torch::NoGradGuard no_grad;
  std::vector<rcnn::ConvFrozenBnImpl*> layers;
  for (const auto& m : backbone->modules(/*include_self=*/false)) {
    if (auto* layer = m->as<rcnn::ConvFrozenBnImpl>()) layers.push_back(layer);
  }
  // Residual branches of gain 1 / sqrt(blocks): the branches' variances sum to 1 whatever the
  // depth (the scaling of Fixup, Zhang et al. 2019, and SkipInit, De & Smith 2020, for deep
  // residual networks trained without live normalization, which FrozenBatchNorm is).
  int64_t blocks = 0;
  for (const int64_t b : options.blocks()) blocks += b;
  const double branch_gain = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(blocks, 1)));
  for (auto& stage : backbone->stages) {
    for (const auto& block : stage->children()) {
      block->as<rcnn::BottleneckImpl>()->conv3->calibration_gain = branch_gain;
    }
  }
  for (auto* layer : layers) layer->calibrating = true;
  backbone->forward(images);  // in order: each layer sees its input normalized already
  for (auto* layer : layers) layer->calibrating = false;
}

namespace {

// The stages of MaskRcnnImpl::forward, in the order it runs them. Two of them draw random
// numbers (the RPN's and the RoI heads' balanced samples), so the order is the reference's and
// must stay so for the losses to stay the same.

/// The RPN head's outputs on every level, flattened in the anchors' order (level, y, x, anchor)
/// as concat_box_prediction_layers does, in fp32.
struct RpnOutputs {
  torch::Tensor objectness;  ///< [N, A]
  torch::Tensor deltas;      ///< [N, A, 4]
};

RpnOutputs run_rpn_head(RpnHead& rpn, const std::vector<torch::Tensor>& features,
                        int64_t anchors_per_cell) {
  const int64_t images = features.front().size(0);
  std::vector<torch::Tensor> objectness_levels, delta_levels;
  for (const auto& f : features) {
    const auto [logits, deltas] = rpn->forward(f);
    objectness_levels.push_back(logits.permute({0, 2, 3, 1}).reshape({images, -1}));
    delta_levels.push_back(deltas.view({images, anchors_per_cell, 4, f.size(2), f.size(3)})
                               .permute({0, 3, 4, 1, 2})
                               .reshape({images, -1, 4}));
  }
  return {torch::cat(objectness_levels, 1).to(torch::kFloat),
          torch::cat(delta_levels, 1).to(torch::kFloat)};
}

/// The RPN losses (RPNLossComputation) into `losses`: anchors matched at 0.7 / 0.3 with
/// low-quality matches, crossing anchors ignored, 256 sampled per image with at most half
/// positive.
void add_rpn_losses(const RpnOutputs& rpn, const DetectionBatch& batch, const DetectionPlan& plan,
                    const MaskRcnnOptions& o, MaskRcnnLosses& losses) {
  const int64_t images = batch.images.size(0);
  const det::Matcher anchor_matcher{o.rpn_fg_iou(), o.rpn_bg_iou(), true};
  const auto anchor_match = anchor_matcher(det::box_iou(batch.boxes, plan.anchors));  // [N, A]
  const auto rpn_sample = det::balanced_sample(
      anchor_match.ge(0) & plan.visible, anchor_match.eq(det::kBelowLowThreshold) & plan.visible,
      o.rpn_batch_per_image(), o.rpn_positive_fraction());
  const auto rpn_sampled = rpn_sample.valid.sum().to(torch::kFloat).clamp_min(1);
  const auto objectness_bce = F::binary_cross_entropy_with_logits(
      rpn.objectness.gather(1, rpn_sample.index), rpn_sample.positive.to(torch::kFloat),
      F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  losses.objectness =
      objectness_bce.masked_fill(rpn_sample.valid.logical_not(), 0).sum() / rpn_sampled;
  const auto& positive_anchors = rpn_sample.positive_index;  // [N, P]
  const auto anchor_targets =
      det::BoxCoder({1, 1, 1, 1})
          .encode(
              gather_boxes(batch.boxes, anchor_match.gather(1, positive_anchors).clamp_min(0)),
              plan.anchors.index_select(0, positive_anchors.reshape({-1})).view({images, -1, 4}));
  losses.rpn_box_reg = masked_smooth_l1_sum(gather_boxes(rpn.deltas, positive_anchors),
                                            anchor_targets, rpn_sample.positive_valid, 1.0 / 9) /
                       rpn_sampled;
}

/// The RoIs the heads train on: the proposals with the ground truth appended, their matches and
/// the balanced sample of them.
struct SampledRois {
  int64_t proposals_per_image = 0;  ///< rpn_proposals' K
  torch::Tensor candidates;         ///< [N, K + G, 4]
  torch::Tensor match;              ///< [N, K + G] matched ground truth, or below 0
  det::BalancedSample sample;
};

/// Proposals (no gradient), the ground truth appended (add_gt_proposals), then RoI sampling
/// (FastRCNNLossComputation.subsample): matched at 0.5, 512 per image with at most a quarter
/// foreground.
SampledRois sample_rois(const RpnOutputs& rpn, const DetectionBatch& batch,
                        const DetectionPlan& plan, const MaskRcnnOptions& o) {
  SampledRois s;
  auto [proposals, proposal_valid] =
      rpn_proposals(rpn.objectness.detach(), rpn.deltas.detach(), plan, o);
  s.proposals_per_image = proposals.size(1);
  s.candidates = torch::cat({proposals, batch.boxes}, 1);
  const auto candidate_valid =
      torch::cat({proposal_valid, torch::ones_like(batch.labels).to(torch::kBool)}, 1);
  const det::Matcher roi_matcher{o.roi_fg_iou(), o.roi_bg_iou(), false};
  s.match = roi_matcher(det::box_iou(batch.boxes, s.candidates));
  s.sample = det::balanced_sample(candidate_valid & s.match.ge(0),
                                  candidate_valid & s.match.eq(det::kBelowLowThreshold),
                                  o.roi_batch_per_image(), o.roi_positive_fraction());
  return s;
}

/// The RoIs of one head's slots: each slot's image, box and matched ground truth (flat over the
/// batch).
struct SlotRois {
  torch::Tensor image, rois, gt;
};

/// The box and mask heads' RoIs as flat lists of slots over the batch.
struct HeadRois {
  SlotRois box, mask;
  torch::Tensor box_source;  ///< each box slot's entry of the sample, n * per_image + s
  torch::Tensor box_valid, mask_valid;
};

/// Lays the sampled RoIs out in the heads' slots: per_batch packs those of all images into the
/// batch-wide bound, fixed_max gives every image its most.
HeadRois head_rois(const SampledRois& sampled, const RoiSlots& slots, const DetectionBatch& batch,
                   const MaskRcnnOptions& o) {
  const auto& roi_sample = sampled.sample;
  const int64_t images = batch.images.size(0);
  const int64_t per_image = roi_sample.index.size(1);
  TORCH_CHECK(per_image == slots.samples_per_image &&
                  sampled.proposals_per_image == slots.proposals_per_image,
              "mask-rcnn: the RoI sets differ from roi_slots'");
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(batch.images.device());
  // The mask head takes the first mask_per_image positives of each image (the sample lists its
  // positives first, in random order): all of them unless mask_rois_per_image is smaller.
  const auto mask_keep =
      roi_sample.positive & torch::arange(per_image, longs).lt(slots.mask_per_image).unsqueeze(0);
  HeadRois h;
  torch::Tensor mask_source;  // flat n * per_image + s
  if (o.roi_heads() == RoiHeadSlots::kPerBatch) {
    std::tie(h.box_source, h.box_valid) = det::pack_slots(roi_sample.valid, slots.box);
    std::tie(mask_source, h.mask_valid) = det::pack_slots(mask_keep, slots.mask);
  } else {
    h.box_source = torch::arange(images * per_image, longs);
    h.box_valid = roi_sample.valid.reshape({-1});
    mask_source = (torch::arange(images, longs).unsqueeze(1) * per_image +
                   torch::arange(slots.mask_per_image, longs).unsqueeze(0))
                      .reshape({-1});
    h.mask_valid = mask_keep.narrow(1, 0, slots.mask_per_image).reshape({-1});
  }
  const int64_t candidates_per_image = sampled.candidates.size(1);
  const int64_t gt_per_image = batch.boxes.size(1);
  const auto flat_candidates = sampled.candidates.reshape({-1, 4});
  const auto flat_match = sampled.match.reshape({-1});
  const auto flat_sample = roi_sample.index.reshape({-1});
  const auto slot_rois = [&](const torch::Tensor& source) {
    SlotRois r;
    r.image = source.div(per_image, "floor");
    const auto candidate = r.image * candidates_per_image + flat_sample.index_select(0, source);
    r.rois = flat_candidates.index_select(0, candidate);
    r.gt = r.image * gt_per_image + flat_match.index_select(0, candidate).clamp_min(0);
    return r;
  };
  h.box = slot_rois(h.box_source);
  h.mask = slot_rois(mask_source);
  return h;
}

/// RoIAlign for both heads (box, mask) from one table of the P2..P5 pixels in their own dtype,
/// released before the heads run (RoIAlign's backward does not keep it).
std::pair<torch::Tensor, torch::Tensor> align_head_rois(const std::vector<torch::Tensor>& features,
                                                        const DetectionPlan& plan,
                                                        const HeadRois& heads,
                                                        const MaskRcnnOptions& o) {
  auto rows =
      plan.rows->pack(std::vector<torch::Tensor>(features.begin(), features.begin() + kRoiLevels));
  const auto& box = heads.box;
  const auto& mask = heads.mask;
  auto box_features = det::roi_align(rows, *plan.rows, box.rois, box.image,
                                     det::roi_levels(box.rois, kFirstRoiLevel, kLastRoiLevel),
                                     o.box_resolution(), o.sampling_ratio());
  auto mask_features = det::roi_align(rows, *plan.rows, mask.rois, mask.image,
                                      det::roi_levels(mask.rois, kFirstRoiLevel, kLastRoiLevel),
                                      o.mask_resolution(), o.sampling_ratio());
  rows.reset();
  return {std::move(box_features), std::move(mask_features)};
}

/// The box head's losses into `losses`: cross-entropy over the sampled RoIs, smooth L1 on the
/// foreground's own class deltas, both divided by the number sampled.
void add_box_head_losses(BoxHead& box_head, const torch::Tensor& box_features,
                         const HeadRois& heads, const det::BalancedSample& roi_sample,
                         const DetectionBatch& batch, const MaskRcnnOptions& o,
                         MaskRcnnLosses& losses) {
  const auto& box = heads.box;
  const auto positive = roi_sample.positive.reshape({-1})
                            .index_select(0, heads.box_source)
                            .logical_and(heads.box_valid);
  const auto labels =
      batch.labels.reshape({-1}).index_select(0, box.gt).masked_fill(positive.logical_not(), 0);
  const auto [class_logits, box_deltas] = box_head->forward(box_features);
  const auto class_ce = F::cross_entropy(class_logits.to(torch::kFloat), labels,
                                         F::CrossEntropyFuncOptions().reduction(torch::kNone));
  losses.classifier = masked_mean(class_ce, heads.box_valid);
  const auto own_deltas = box_deltas.to(torch::kFloat)
                              .view({labels.numel(), o.num_classes(), 4})
                              .gather(1, labels.view({-1, 1, 1}).expand({-1, 1, 4}))
                              .view({-1, 4});
  const auto& w = o.bbox_reg_weights();
  const auto box_targets =
      det::BoxCoder({w[0], w[1], w[2], w[3]})
          .encode(batch.boxes.reshape({-1, 4}).index_select(0, box.gt), box.rois);
  losses.box_reg = masked_smooth_l1_sum(own_deltas, box_targets, positive, 1.0) /
                   heads.box_valid.sum().to(torch::kFloat).clamp_min(1);
}

/// The mask head's loss on the sampled foreground (keep_only_positive_boxes), empty slots
/// masked out.
torch::Tensor mask_head_loss(MaskHead& mask_head, const torch::Tensor& mask_features,
                             const HeadRois& heads, const DetectionBatch& batch) {
  const auto& mask = heads.mask;
  const auto mask_logits =
      mask_head->class_logits(mask_features, batch.labels.reshape({-1}).index_select(0, mask.gt))
          .to(torch::kFloat);  // [slots, M, M]
  const auto mask_targets = ellipse_mask_targets(
      batch.boxes.reshape({-1, 4}).index_select(0, mask.gt), mask.rois, mask_logits.size(-1));
  const auto mask_bce = F::binary_cross_entropy_with_logits(
      mask_logits, mask_targets,
      F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  return masked_mean(mask_bce.mean({1, 2}), heads.mask_valid);
}

}  // namespace

MaskRcnnLosses MaskRcnnImpl::forward(const DetectionBatch& batch, const DetectionPlan& plan) {
  const MaskRcnnOptions& o = options;
  const auto features = fpn->forward(backbone->forward(batch.images));  // P2..P6
  MaskRcnnLosses losses;
  const auto rpn_outputs =
      run_rpn_head(rpn, features, static_cast<int64_t>(o.aspect_ratios().size()));
  add_rpn_losses(rpn_outputs, batch, plan, o, losses);
  const auto sampled = sample_rois(rpn_outputs, batch, plan, o);
  losses.positive_rois = sampled.sample.positive.sum();
  const auto heads =
      head_rois(sampled, roi_slots(batch.images.size(0), batch.boxes.size(1), plan), batch, o);
  const auto [box_features, mask_features] = align_head_rois(features, plan, heads, o);
  losses.box_slots = box_features.size(0);
  losses.mask_slots = mask_features.size(0);
  losses.box_rois = heads.box_valid.sum();
  losses.mask_rois = heads.mask_valid.sum();
  add_box_head_losses(box_head, box_features, heads, sampled.sample, batch, o, losses);
  losses.mask = mask_head_loss(mask_head, mask_features, heads, batch);
  return losses;
}

// ---- The training step ----

namespace {

class MaskRcnnStep final : public train::RuntimeStep {
 public:
  explicit MaskRcnnStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        model_(build(ctx)),
        batch_(synthetic_detection_batch(
            ctx.batch, ctx.model.i64("image_height"), ctx.model.i64("image_width"),
            ctx.model.i64("size_divisibility"), ctx.model.i64("gt_boxes_per_image"),
            ctx.model.f64("gt_min_size"), ctx.model.f64("gt_max_size"),
            ctx.model.i64("num_classes"), ctx.device, ctx.seed)),
        plan_(model_->plan(batch_.image_height, batch_.image_width, batch_.images.size(2),
                           batch_.images.size(3), ctx.device)),
        slots_(model_->roi_slots(ctx.batch, batch_.boxes.size(1), plan_)),
        roi_counts_(
            torch::zeros({2}, torch::TensorOptions().dtype(torch::kLong).device(ctx.device))),
        updater_(runtime_.add("model", make_mask_rcnn_updater(*model_, ctx.optimizer, ctx.batch,
                                                              ctx.precision, ctx.device))) {
    if (ctx.model.flag("channels_last")) {
      batch_.images = batch_.images.contiguous(torch::MemoryFormat::ChannelsLast);
    }
    // The FrozenBatchNorm statistics, from the first images of the batch.
    model_->calibrate_frozen_batchnorm(
        batch_.images.narrow(0, 0, std::min(kCalibrationImages, batch_.images.size(0))));
  }

  double run() override {
    ++counted_steps_;
    const double units = runtime_.run([&] {
      updater_.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = runtime_.autocast();
        const auto losses = model_->forward(batch_, plan_);
        loss = losses.total();
        runtime_.record_loss("loss", loss);
        runtime_.record_loss("loss_objectness", losses.objectness);
        runtime_.record_loss("loss_rpn_box_reg", losses.rpn_box_reg);
        runtime_.record_loss("loss_classifier", losses.classifier);
        runtime_.record_loss("loss_box_reg", losses.box_reg);
        runtime_.record_loss("loss_mask", losses.mask);
        // What the heads' losses counted, summed on the device (a buffer CUDA graph replays
        // add to as well); read after the timed window by runtime_info().
        roi_counts_.add_(torch::stack({losses.box_rois, losses.mask_rois}));
      }
      runtime_.backward(updater_, loss);
      runtime_.update(updater_);
      return static_cast<double>(batch_.images.size(0));
    });
    ran_ = true;
    return units;
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  // docs/workloads/mask-rcnn.md, "FLOPs": the backbone, FPN and RPN head over the batch's
  // images at their padded size, the heads over the RoI slots they ran (every slot is computed,
  // empty ones too; the slots, unlike the images, stop growing where the batch-wide proposal
  // cap binds). Every step of a step object runs the same shapes. Host arithmetic only.
  std::optional<double> step_flops() const override {
    if (!ran_) return std::nullopt;
    return 2 * mask_rcnn_training_macs(model_->options, batch_.images.size(0),
                                       batch_.images.size(2), batch_.images.size(3), slots_.box,
                                       slots_.mask)
                   .total();
  }

  Json batch_info() const override {
    return Json{
        {"images", batch_.images.size(0)},
        {"image_size", {batch_.image_height, batch_.image_width}},
        {"padded_size", {batch_.images.size(2), batch_.images.size(3)}},
        {"gt_boxes_per_image", batch_.boxes.size(1)},
        {"anchors_per_image", plan_.anchors.size(0)},
        {"roi_heads", roi_heads_name()},
        // The heads' batch dimensions; the RoIs they counted are in runtime_info()'s roi_heads.
        {"box_roi_slots", slots_.box},
        {"mask_roi_slots", slots_.mask}};
  }

  void begin_window() override {
    RuntimeStep::begin_window();
    roi_counts_.zero_();
    counted_steps_ = 0;
    window_started_ = true;
  }

  /// The runtime's record, and the RoIs and positives per image the heads' losses counted,
  /// averaged over the timed window: read once, after it (it synchronizes).
  Json runtime_info() const override {
    Json info = RuntimeStep::runtime_info();
    Json heads{{"mode", roi_heads_name()}, {"box_slots", slots_.box}, {"mask_slots", slots_.mask}};
    if (window_started_ && counted_steps_ > 0) {
      const auto counts = roi_counts_.to(torch::kCPU);
      const double images = static_cast<double>(counted_steps_ * batch_.images.size(0));
      heads["steps"] = counted_steps_;
      heads["rois_per_image"] = static_cast<double>(counts[0].item<int64_t>()) / images;
      heads["positives_per_image"] = static_cast<double>(counts[1].item<int64_t>()) / images;
    }
    info["roi_heads"] = heads;
    return info;
  }

 private:
  /// The model on the device (before the optimizer sees its parameters), in training mode.
  static MaskRcnn build(const StepContext& ctx) {
    torch::manual_seed(ctx.seed);
    MaskRcnn model(mask_rcnn_options(ctx.model));
    model->to(ctx.device);
    if (ctx.model.flag("channels_last")) {
      // Convolutions then run (and hand on) NHWC activations.
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters()) {
        if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
      }
    }
    model->train();
    return model;
  }

  const char* roi_heads_name() const {
    return model_->options.roi_heads() == RoiHeadSlots::kPerBatch ? "per_batch" : "fixed_max";
  }

  MaskRcnn model_;
  DetectionBatch batch_;
  DetectionPlan plan_;
  RoiSlots slots_;
  torch::Tensor roi_counts_;  ///< [2] int64: box RoIs, mask positives summed over counted steps
  int64_t counted_steps_ = 0;
  bool window_started_ = false;
  bool ran_ = false;  ///< a run() has finished: step_flops() has a step to describe
  train::Updater& updater_;
};

}  // namespace

Architecture mask_rcnn_architecture() {
  return make_architecture<MaskRcnnStep>(
      "mask-rcnn", "maskrcnn-benchmark Mask R-CNN R-50-FPN: RPN, box and mask heads, SGD",
      mask_rcnn_model_schema(), mask_rcnn_optimizer_schema(),
      [](const Params& model) { return total_parameters(MaskRcnn(mask_rcnn_options(model))); });
}

}  // namespace gpubench::models
