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

/// maskrcnn-benchmark's PIXEL_MEAN (BGR, 0..255); PIXEL_STD is 1.
constexpr double kPixelMean[3] = {102.9801, 115.9465, 122.7717};

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

// ---- Backbone ----

namespace rcnn {

FrozenBatchNorm2dImpl::FrozenBatchNorm2dImpl(int64_t channels) {
  weight = register_buffer("weight", torch::ones({channels}));
  bias = register_buffer("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
}

std::pair<torch::Tensor, torch::Tensor> FrozenBatchNorm2dImpl::affine() const {
  auto scale = weight * running_var.rsqrt();
  return {scale, bias - running_mean * scale};
}

torch::Tensor FrozenBatchNorm2dImpl::forward(const torch::Tensor& x) {
  const auto [scale, shift] = affine();
  return x * scale.view({1, -1, 1, 1}) + shift.view({1, -1, 1, 1});
}

ConvFrozenBnImpl::ConvFrozenBnImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                   int64_t padding)
    : stride_(stride), padding_(padding) {
  conv = register_module(
      "conv",
      torch::nn::Conv2d(
          torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false)));
  bn = register_module("bn", FrozenBatchNorm2d(out));
  // maskrcnn-benchmark's ResNet: kaiming_uniform_(a=1) on every conv.
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(conv->weight, 1);
}

torch::Tensor ConvFrozenBnImpl::forward(const torch::Tensor& x) {
  if (calibrating) {
    torch::NoGradGuard no_grad;
    const auto y = torch::conv2d(x.to(torch::kFloat), conv->weight, {}, {stride_, stride_},
                                 {padding_, padding_});
    const auto mean = y.mean({0, 2, 3});
    const auto var = (y - mean.view({1, -1, 1, 1})).pow(2).mean({0, 2, 3});
    // FrozenBatchNorm2d has no epsilon: a constant channel must not divide by 0.
    bn->running_mean.copy_(mean);
    bn->running_var.copy_(var.clamp_min(1e-5));
    bn->weight.fill_(calibration_gain);
    bn->bias.zero_();
  }
  // conv(x) * scale + shift == conv(x, weight * scale) + shift.
  const auto [scale, shift] = bn->affine();
  return torch::conv2d(x, conv->weight * scale.view({-1, 1, 1, 1}), shift, {stride_, stride_},
                       {padding_, padding_});
}

BottleneckImpl::BottleneckImpl(int64_t in, int64_t width, int64_t out, int64_t stride,
                               bool stride_in_1x1) {
  const int64_t stride_1x1 = stride_in_1x1 ? stride : 1;
  const int64_t stride_3x3 = stride_in_1x1 ? 1 : stride;
  conv1 = register_module("conv1", ConvFrozenBn(in, width, 1, stride_1x1, 0));
  conv2 = register_module("conv2", ConvFrozenBn(width, width, 3, stride_3x3, 1));
  conv3 = register_module("conv3", ConvFrozenBn(width, out, 1, 1, 0));
  if (in != out) downsample = register_module("downsample", ConvFrozenBn(in, out, 1, stride, 0));
}

torch::Tensor BottleneckImpl::forward(const torch::Tensor& x) {
  auto y = conv1(x).relu_();
  y = conv2(y).relu_();
  y = conv3(y);
  y.add_(downsample ? downsample(x) : x);
  return y.relu_();
}

ResNetBodyImpl::ResNetBodyImpl(const MaskRcnnOptions& o) {
  TORCH_CHECK(o.blocks().size() == 4, "ResNet body: blocks of res2..res5 (4 values)");
  TORCH_CHECK(o.freeze_at() >= 0 && o.freeze_at() <= 5, "freeze_at: 0 (none) to 5 (all)");
  stem = register_module("stem", ConvFrozenBn(3, o.stem_channels(), 7, 2, 3));
  int64_t in = o.stem_channels(), out = o.res2_channels(), width = o.width_per_group();
  for (std::size_t s = 0; s < 4; ++s) {
    torch::nn::Sequential stage;
    for (int64_t b = 0; b < o.blocks()[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(Bottleneck(in, width, out, stride, o.stride_in_1x1()));
      in = out;
    }
    stages.push_back(register_module("layer" + std::to_string(s + 1), stage));
    out *= 2;
    width *= 2;
  }
  // _freeze_backbone: stage 0 is the stem, stage i the i-th residual stage.
  for (int64_t s = 0; s < o.freeze_at(); ++s) {
    const torch::nn::Module& frozen = s == 0 ? static_cast<torch::nn::Module&>(*stem)
                                             : static_cast<torch::nn::Module&>(*stages[s - 1]);
    for (auto p : frozen.parameters()) p.set_requires_grad(false);
  }
}

std::vector<torch::Tensor> ResNetBodyImpl::forward(const torch::Tensor& images) {
  auto x = torch::max_pool2d(stem(images).relu_(), {3, 3}, {2, 2}, {1, 1});
  std::vector<torch::Tensor> out;
  for (auto& stage : stages) {
    x = stage->forward(x);
    out.push_back(x);
  }
  return out;
}

}  // namespace rcnn

// ---- FPN and RPN head ----

FpnImpl::FpnImpl(const std::vector<int64_t>& in_channels, int64_t channels) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < in_channels.size(); ++i) {
    const auto name = std::to_string(i + 2);
    inner.push_back(register_module(
        "inner" + name, torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels[i], channels, 1))));
    layer.push_back(register_module(
        "layer" + name,
        torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, channels, 3).padding(1))));
  }
  // conv_with_kaiming_uniform: kaiming_uniform_(a=1), zero bias.
  for (auto* convs : {&inner, &layer}) {
    for (auto& conv : *convs) {
      torch::nn::init::kaiming_uniform_(conv->weight, 1);
      conv->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> FpnImpl::forward(const std::vector<torch::Tensor>& features) {
  const std::size_t levels = features.size();
  std::vector<torch::Tensor> results(levels);
  auto last = inner[levels - 1](features[levels - 1]);
  results[levels - 1] = layer[levels - 1](last);
  for (std::size_t i = levels - 1; i-- > 0;) {
    auto lateral = inner[i](features[i]);
    // F.interpolate(scale_factor=2, mode="nearest"): source pixel floor(dst / 2).
    auto top_down =
        F::interpolate(last, F::InterpolateFuncOptions()
                                 .size(std::vector<int64_t>{lateral.size(2), lateral.size(3)})
                                 .mode(torch::kNearest));
    last = lateral + top_down;
    results[i] = layer[i](last);
  }
  // LastLevelMaxPool: P6 = max_pool2d(P5, kernel 1, stride 2).
  results.push_back(torch::max_pool2d(results.back(), {1, 1}, {2, 2}, {0, 0}));
  return results;
}

RpnHeadImpl::RpnHeadImpl(int64_t channels, int64_t anchors) {
  conv = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, channels, 3).padding(1)));
  cls_logits = register_module("cls_logits",
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, anchors, 1)));
  bbox_pred = register_module(
      "bbox_pred", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 4 * anchors, 1)));
  torch::NoGradGuard no_grad;
  for (auto* c : {&conv, &cls_logits, &bbox_pred}) {
    (*c)->weight.normal_(0, 0.01);
    (*c)->bias.zero_();
  }
}

std::pair<torch::Tensor, torch::Tensor> RpnHeadImpl::forward(const torch::Tensor& x) {
  const auto t = conv(x).relu_();
  return {cls_logits(t), bbox_pred(t)};
}

// ---- RoI heads ----

BoxHeadImpl::BoxHeadImpl(int64_t in_features, int64_t mlp_dim, int64_t classes) {
  fc6 = register_module("fc6", torch::nn::Linear(in_features, mlp_dim));
  fc7 = register_module("fc7", torch::nn::Linear(mlp_dim, mlp_dim));
  cls_score = register_module("cls_score", torch::nn::Linear(mlp_dim, classes));
  bbox_pred = register_module("bbox_pred", torch::nn::Linear(mlp_dim, 4 * classes));
  torch::NoGradGuard no_grad;
  for (auto* fc : {&fc6, &fc7}) {  // make_fc: kaiming_uniform_(a=1)
    torch::nn::init::kaiming_uniform_((*fc)->weight, 1);
    (*fc)->bias.zero_();
  }
  cls_score->weight.normal_(0, 0.01);
  bbox_pred->weight.normal_(0, 0.001);
  cls_score->bias.zero_();
  bbox_pred->bias.zero_();
}

std::pair<torch::Tensor, torch::Tensor> BoxHeadImpl::forward(const torch::Tensor& x) {
  auto h = fc6(x.flatten(1)).relu_();
  h = fc7(h).relu_();
  return {cls_score(h), bbox_pred(h)};
}

MaskHeadImpl::MaskHeadImpl(int64_t in_channels, const std::vector<int64_t>& conv_layers,
                           int64_t classes) {
  TORCH_CHECK(!conv_layers.empty(), "mask head: at least one conv layer");
  int64_t in = in_channels;
  for (std::size_t i = 0; i < conv_layers.size(); ++i) {
    convs.push_back(register_module(
        "fcn" + std::to_string(i + 1),
        torch::nn::Conv2d(torch::nn::Conv2dOptions(in, conv_layers[i], 3).padding(1))));
    in = conv_layers[i];
  }
  deconv = register_module(
      "conv5_mask",
      torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(in, in, 2).stride(2)));
  logits = register_module("mask_fcn_logits",
                           torch::nn::Conv2d(torch::nn::Conv2dOptions(in, classes, 1)));
  // make_conv3x3 and MaskRCNNC4Predictor: kaiming_normal_(fan_out, relu), zero bias.
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    if (p.key().find("bias") != std::string::npos) {
      p.value().zero_();
    } else {
      torch::nn::init::kaiming_normal_(p.value(), 0, torch::kFanOut, torch::kReLU);
    }
  }
}

torch::Tensor MaskHeadImpl::features(const torch::Tensor& x) {
  auto h = x;
  for (auto& conv : convs) h = conv(h).relu_();
  return deconv(h).relu_();
}

torch::Tensor MaskHeadImpl::forward(const torch::Tensor& x) { return logits(features(x)); }

torch::Tensor MaskHeadImpl::class_logits(const torch::Tensor& x, const torch::Tensor& labels) {
  const auto h = features(x);
  const int64_t rois = h.size(0), channels = h.size(1);
  // The 1x1 conv restricted to each RoI's class: a [1, C] x [C, H*W] product per RoI.
  const auto weight = logits->weight.view({-1, channels}).index_select(0, labels);  // [R, C]
  const auto bias = logits->bias.index_select(0, labels).view({rois, 1, 1});
  const auto out = torch::bmm(weight.unsqueeze(1), h.flatten(2));  // [R, 1, H*W]
  return out.view({rois, h.size(2), h.size(3)}) + bias;
}

// ---- Synthetic data ----

DetectionBatch synthetic_detection_batch(int64_t batch, int64_t image_height, int64_t image_width,
                                         int64_t size_divisibility, int64_t boxes_per_image,
                                         double min_box_size, double max_box_size, int64_t classes,
                                         const torch::Device& device, uint64_t seed) {
  TORCH_CHECK(min_box_size >= 1 && max_box_size >= min_box_size, "box sizes: 1 <= min <= max");
  const auto round_up = [&](int64_t v) {
    return (v + size_divisibility - 1) / size_divisibility * size_divisibility;
  };
  DetectionBatch b;
  b.image_height = image_height;
  b.image_width = image_width;
  torch::manual_seed(seed + 1);
  // Pixels on the device (large), normalized as the reference's transform does; zero padding
  // to the divisible size as ImageList pads.
  const auto options = torch::TensorOptions().device(device);
  auto pixels = torch::rand({batch, 3, image_height, image_width}, options) * 255.0;
  for (int64_t c = 0; c < 3; ++c) pixels.select(1, c).sub_(kPixelMean[c]);
  b.images = torch::zeros({batch, 3, round_up(image_height), round_up(image_width)}, options);
  b.images.narrow(2, 0, image_height).narrow(3, 0, image_width).copy_(pixels);
  // Boxes on the host (small): log-uniform sqrt(area) and aspect ratio, placed inside.
  const auto uniform = [&](double lo, double hi) {
    return torch::rand({batch, boxes_per_image}, torch::kDouble) * (hi - lo) + lo;
  };
  const auto side = uniform(std::log(min_box_size), std::log(max_box_size)).exp();
  const auto root_aspect = uniform(std::log(0.5), std::log(2.0)).mul(0.5).exp();  // sqrt(h / w)
  const auto w = (side / root_aspect).clamp(1, static_cast<double>(image_width));
  const auto h = (side * root_aspect).clamp(1, static_cast<double>(image_height));
  const auto x0 = uniform(0, 1) * (static_cast<double>(image_width) - w);
  const auto y0 = uniform(0, 1) * (static_cast<double>(image_height) - h);
  // The pixel extent [x0, x0 + w) as a legacy box, as COCO's xywh is converted.
  b.boxes = torch::stack({x0, y0, x0 + w - 1, y0 + h - 1}, -1).to(torch::kFloat).to(device);
  b.labels = torch::randint(1, classes, {batch, boxes_per_image}, torch::kLong).to(device);
  return b;
}

torch::Tensor ellipse_mask_targets(const torch::Tensor& gt_boxes, const torch::Tensor& rois,
                                   int64_t resolution) {
  const auto g = gt_boxes.to(torch::kFloat), r = rois.to(torch::kFloat);
  const auto c = [](const torch::Tensor& t, int64_t k) { return t.select(-1, k).unsqueeze(-1); };
  // The ellipse inscribed in the ground truth's pixel extent [x1, x2 + 1] x [y1, y2 + 1].
  const auto cx = (c(g, 0) + c(g, 2) + 1) * 0.5, rx = (c(g, 2) - c(g, 0) + 1) * 0.5;
  const auto cy = (c(g, 1) + c(g, 3) + 1) * 0.5, ry = (c(g, 3) - c(g, 1) + 1) * 0.5;
  // Cell centres of the crop (Polygons.crop + resize: width max(x2 - x1, 1)).
  const auto u = (torch::arange(resolution, r.options()) + 0.5) / static_cast<double>(resolution);
  const auto xs = c(r, 0) + u * (c(r, 2) - c(r, 0)).clamp_min(1);  // [..., res]
  const auto ys = c(r, 1) + u * (c(r, 3) - c(r, 1)).clamp_min(1);
  const auto dx = ((xs - cx) / rx).pow(2), dy = ((ys - cy) / ry).pow(2);
  return (dy.unsqueeze(-1) + dx.unsqueeze(-2)).le(1).to(torch::kFloat);
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

// ---- Config ----

ParamSchema mask_rcnn_model_schema() {
  const auto ints = [](std::vector<int64_t> v) { return Json(v); };
  const auto reals = [](std::vector<double> v) { return Json(v); };
  return {
      {"image_height",
       ParamKind::kInt,
       800,
       "image height before padding (MIN_SIZE_TRAIN)",
       {},
       32},
      {"image_width", ParamKind::kInt, 1333, "image width before padding (MAX_SIZE_TRAIN)", {}, 32},
      {"size_divisibility",
       ParamKind::kInt,
       32,
       "images are zero-padded to a multiple of this",
       {},
       32},
      {"num_classes", ParamKind::kInt, 81, "classes including background", {}, 2},
      {"blocks", ParamKind::kIntList, ints({3, 4, 6, 3}), "bottlenecks in res2..res5"},
      {"stem_channels", ParamKind::kInt, 64, "stem output channels", {}, 1},
      {"res2_channels", ParamKind::kInt, 256, "res2 output channels, doubling per stage", {}, 1},
      {"width_per_group", ParamKind::kInt, 64, "res2 bottleneck width, doubling per stage", {}, 1},
      {"stride_in_1x1", ParamKind::kBool, true, "MSRA layout: the stride in the first 1x1 conv"},
      {"freeze_at", ParamKind::kInt, 2, "FREEZE_CONV_BODY_AT: 1 = stem, 2 = stem and res2", {}, 0},
      {"fpn_channels", ParamKind::kInt, 256, "FPN width", {}, 1},
      {"anchor_sizes", ParamKind::kNumberList, reals({32, 64, 128, 256, 512}),
       "one per P2..P6, pixels"},
      {"aspect_ratios", ParamKind::kNumberList, reals({0.5, 1, 2}), "anchor height / width"},
      {"straddle_thresh", ParamKind::kNumber, 0.0,
       "anchors crossing the border by more are ignored"},
      {"rpn_fg_iou", ParamKind::kNumber, 0.7, "RPN positive IoU", {}, 0},
      {"rpn_bg_iou", ParamKind::kNumber, 0.3, "RPN negative IoU (below)", {}, 0},
      {"rpn_batch_per_image", ParamKind::kInt, 256, "anchors sampled per image", {}, 1},
      {"rpn_positive_fraction", ParamKind::kNumber, 0.5, "largest positive share", {}, 0},
      {"pre_nms_top_n",
       ParamKind::kInt,
       2000,
       "per image and level before NMS (PRE_NMS_TOP_N_TRAIN)",
       {},
       1},
      {"post_nms_top_n",
       ParamKind::kInt,
       2000,
       "per image and level after NMS (POST_NMS_TOP_N_TRAIN)",
       {},
       1},
      {"fpn_post_nms_top_n",
       ParamKind::kInt,
       2000,
       "proposals kept over the levels (FPN_POST_NMS_TOP_N_TRAIN)",
       {},
       1},
      {"fpn_post_nms_per_batch", ParamKind::kBool, true,
       "FPN_POST_NMS_PER_BATCH: that cut is over the batch"},
      {"nms_thresh", ParamKind::kNumber, 0.7, "RPN NMS IoU", {}, 0},
      {"min_size",
       ParamKind::kNumber,
       0.0,
       "proposals smaller than this (pixels) are dropped",
       {},
       0},
      {"roi_fg_iou", ParamKind::kNumber, 0.5, "RoI foreground IoU", {}, 0},
      {"roi_bg_iou", ParamKind::kNumber, 0.5, "RoI background IoU (below)", {}, 0},
      {"roi_batch_per_image", ParamKind::kInt, 512, "RoIs sampled per image", {}, 1},
      {"roi_positive_fraction", ParamKind::kNumber, 0.25, "largest foreground share", {}, 0},
      {"bbox_reg_weights", ParamKind::kNumberList, reals({10, 10, 5, 5}), "box-head coder weights"},
      {"box_resolution", ParamKind::kInt, 7, "box-head RoIAlign side", {}, 1},
      {"sampling_ratio", ParamKind::kInt, 2, "RoIAlign samples per bin side", {}, 1},
      {"mlp_dim", ParamKind::kInt, 1024, "box-head fc6/fc7 width", {}, 1},
      {"mask_resolution",
       ParamKind::kInt,
       14,
       "mask-head RoIAlign side (masks are twice it)",
       {},
       1},
      {"mask_conv_layers", ParamKind::kIntList, ints({256, 256, 256, 256}),
       "mask-head 3x3 conv widths"},
      {"mask_rois_per_image",
       ParamKind::kInt,
       128,
       "mask-head RoI slots per image (128: every sampled positive)",
       {},
       1},
      {"roi_heads",
       ParamKind::kString,
       "per_batch",
       "RoI slots of the box and mask heads: per_batch (a batch-wide bound on what the sampler "
       "can return, as maskrcnn-benchmark's work) or fixed_max (every image's most)",
       {"per_batch", "fixed_max"}},
      {"gt_boxes_per_image", ParamKind::kInt, 7, "synthetic ground-truth objects per image", {}, 1},
      {"gt_min_size", ParamKind::kNumber, 16.0, "smallest synthetic sqrt(box area), pixels", {}, 1},
      {"gt_max_size", ParamKind::kNumber, 512.0, "largest synthetic sqrt(box area), pixels", {}, 1},
      {"channels_last", ParamKind::kBool, false,
       "conv weights and images in NHWC: the same math, often faster tensor-core convolutions"},
  };
}

MaskRcnnOptions mask_rcnn_options(const Params& m) {
  return MaskRcnnOptions()
      .num_classes(m.i64("num_classes"))
      .blocks(m.i64s("blocks"))
      .stem_channels(m.i64("stem_channels"))
      .res2_channels(m.i64("res2_channels"))
      .width_per_group(m.i64("width_per_group"))
      .stride_in_1x1(m.flag("stride_in_1x1"))
      .freeze_at(m.i64("freeze_at"))
      .fpn_channels(m.i64("fpn_channels"))
      .anchor_sizes(m.f64s("anchor_sizes"))
      .aspect_ratios(m.f64s("aspect_ratios"))
      .straddle_thresh(m.f64("straddle_thresh"))
      .rpn_fg_iou(m.f64("rpn_fg_iou"))
      .rpn_bg_iou(m.f64("rpn_bg_iou"))
      .rpn_batch_per_image(m.i64("rpn_batch_per_image"))
      .rpn_positive_fraction(m.f64("rpn_positive_fraction"))
      .pre_nms_top_n(m.i64("pre_nms_top_n"))
      .post_nms_top_n(m.i64("post_nms_top_n"))
      .fpn_post_nms_top_n(m.i64("fpn_post_nms_top_n"))
      .fpn_post_nms_per_batch(m.flag("fpn_post_nms_per_batch"))
      .nms_thresh(m.f64("nms_thresh"))
      .min_size(m.f64("min_size"))
      .roi_fg_iou(m.f64("roi_fg_iou"))
      .roi_bg_iou(m.f64("roi_bg_iou"))
      .roi_batch_per_image(m.i64("roi_batch_per_image"))
      .roi_positive_fraction(m.f64("roi_positive_fraction"))
      .bbox_reg_weights(m.f64s("bbox_reg_weights"))
      .box_resolution(m.i64("box_resolution"))
      .sampling_ratio(m.i64("sampling_ratio"))
      .mlp_dim(m.i64("mlp_dim"))
      .mask_resolution(m.i64("mask_resolution"))
      .mask_conv_layers(m.i64s("mask_conv_layers"))
      .mask_rois_per_image(m.i64("mask_rois_per_image"))
      .roi_heads(m.str("roi_heads") == "fixed_max" ? RoiHeadSlots::kFixedMax
                                                   : RoiHeadSlots::kPerBatch);
}

ParamSchema mask_rcnn_optimizer_schema() {
  return {
      {"name", ParamKind::kString, "sgd", "torch.optim.SGD as make_optimizer builds it", {"sgd"}},
      {"base_lr", ParamKind::kNumber, 0.02, "SOLVER.BASE_LR for ims_per_batch images", {}, 0},
      {"ims_per_batch",
       ParamKind::kInt,
       16,
       "SOLVER.IMS_PER_BATCH: the rate scales linearly down to smaller batches",
       {},
       1},
      {"momentum", ParamKind::kNumber, 0.9, "SOLVER.MOMENTUM", {}, 0},
      {"weight_decay", ParamKind::kNumber, 1e-4, "SOLVER.WEIGHT_DECAY (L2, on weights)", {}, 0},
      {"bias_lr_factor", ParamKind::kNumber, 2.0, "SOLVER.BIAS_LR_FACTOR", {}, 0},
      {"weight_decay_bias", ParamKind::kNumber, 0.0, "SOLVER.WEIGHT_DECAY_BIAS", {}, 0},
      {"warmup_factor", ParamKind::kNumber, 1.0 / 3, "SOLVER.WARMUP_FACTOR", {}, 0},
      {"warmup_iters", ParamKind::kInt, 500, "SOLVER.WARMUP_ITERS", {}, 0},
      {"warmup_method",
       ParamKind::kString,
       "linear",
       "SOLVER.WARMUP_METHOD",
       {"linear", "constant"}},
      {"steps", ParamKind::kIntList, Json(std::vector<int64_t>{60000, 80000}),
       "SOLVER.STEPS (rate x gamma at each)"},
      {"gamma", ParamKind::kNumber, 0.1, "SOLVER.GAMMA", {}, 0},
  };
}

train::Updater make_mask_rcnn_updater(const torch::nn::Module& model, const Params& o,
                                      int64_t batch, Precision precision,
                                      const torch::Device& device) {
  // make_optimizer: biases at bias_lr_factor x the rate with their own decay; the rest plain.
  train::ParamGroup weights{{}, o.f64("weight_decay")}, biases{{}, o.f64("weight_decay_bias")};
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    const bool is_bias = item.key().find("bias") != std::string::npos;
    (is_bias ? biases : weights).params.push_back(item.value());
  }
  train::SgdOptions sgd;
  sgd.momentum = o.f64("momentum");
  // Goyal et al.'s linear scaling down to smaller batches, as maskrcnn-benchmark's README does
  // it (2 images: BASE_LR 0.0025); never up: the reference never trains above BASE_LR, and with
  // its short warm-up from 1/3 a rate scaled up to a large batch diverges within a few
  // iterations (docs/workloads/mask-rcnn.md, "Solver").
  const int64_t ims = o.i64("ims_per_batch");
  const double lr = o.f64("base_lr") * static_cast<double>(std::min(batch, ims)) /
                    static_cast<double>(ims);
  sgd.lr = lr;
  auto optimizer =
      std::make_unique<train::ScaledLrSgd>(std::vector<train::ParamGroup>{weights, biases},
                                           std::vector<double>{1.0, o.f64("bias_lr_factor")}, sgd);
  return train::Updater(
      std::move(optimizer), precision, device, /*clip_norm=*/0,
      train::warmup_multistep(lr, o.i64s("steps"), o.f64("gamma"), o.f64("warmup_factor"),
                              o.i64("warmup_iters"), o.str("warmup_method") == "linear"));
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
    return runtime_.run([&] {
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
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
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
