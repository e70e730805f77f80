// Mask R-CNN's parts (models/mask_rcnn.h): the frozen-BatchNorm ResNet-50 body, the FPN, the RPN
// head, the box and mask heads, the synthetic detection batch, and the config (model and solver
// schemas, the options, the SGD updater). The detector's forward and the training step are in
// mask_rcnn.cpp.
#include "models/mask_rcnn.h"

#include "gpubench/config/config.h"
#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace gpubench::models {

namespace F = torch::nn::functional;

namespace {

/// maskrcnn-benchmark's PIXEL_MEAN (BGR, 0..255); PIXEL_STD is 1.
constexpr double kPixelMean[3] = {102.9801, 115.9465, 122.7717};

}  // namespace

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

}  // namespace gpubench::models
