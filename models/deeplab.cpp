#include "models/deeplab.h"

#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>
#include <unordered_set>

namespace gpubench::models {

namespace F = torch::nn::functional;

namespace {

constexpr double kPi = 3.14159265358979323846;

torch::nn::BatchNorm2d batch_norm(int64_t channels, double eps, double momentum) {
  return torch::nn::BatchNorm2d(
      torch::nn::BatchNorm2dOptions(channels).eps(eps).momentum(momentum));
}

torch::nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1, bool bias = false) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(bias));
}

/// TF's truncated_normal_initializer: N(0, std) redrawn outside two standard deviations,
/// sampled by the inverse CDF (as torch.nn.init.trunc_normal_).
void truncated_normal_(torch::Tensor w, double std) {
  torch::NoGradGuard no_grad;
  const double lo = 0.5 * (1 + std::erf(-2 / std::sqrt(2.0)));
  const double hi = 0.5 * (1 + std::erf(2 / std::sqrt(2.0)));
  w.uniform_(2 * lo - 1, 2 * hi - 1).erfinv_().mul_(std * std::sqrt(2.0));
}

}  // namespace

// ---- TfSeparableConv2d ----

TfSeparableConv2dImpl::TfSeparableConv2dImpl(const TfSeparableConv2dOptions& o) : options(o) {
  // 'SAME' at stride 1 and fixed_padding at stride > 1 both pad k_eff - 1 in total, the
  // smaller half first; odd effective kernels pad symmetrically, which the conv does itself.
  const int64_t k_eff = o.kernel_size() + (o.kernel_size() - 1) * (o.rate() - 1);
  const int64_t pad_beg = (k_eff - 1) / 2, pad_end = k_eff - 1 - pad_beg;
  if (pad_beg != pad_end) explicit_padding_ = {pad_beg, pad_end, pad_beg, pad_end};
  depthwise = register_module(
      "depthwise",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(o.in_channels(), o.in_channels(), o.kernel_size())
                            .stride(o.stride())
                            .dilation(o.rate())
                            .padding(pad_beg == pad_end ? pad_beg : 0)
                            .groups(o.in_channels())
                            .bias(false)));
  depthwise_bn =
      register_module("depthwise_bn", batch_norm(o.in_channels(), o.bn_eps(), o.bn_momentum()));
  pointwise = register_module("pointwise", conv1x1(o.in_channels(), o.out_channels()));
  pointwise_bn =
      register_module("pointwise_bn", batch_norm(o.out_channels(), o.bn_eps(), o.bn_momentum()));
}

torch::Tensor TfSeparableConv2dImpl::forward(const torch::Tensor& x) {
  auto h = explicit_padding_.empty() ? x : F::pad(x, F::PadFuncOptions(explicit_padding_));
  // In-place ReLUs on BatchNorm outputs: BatchNorm's backward reads its input, not its output.
  h = depthwise_bn(depthwise(h));
  if (options.relu()) h.relu_();
  h = pointwise_bn(pointwise(h));
  if (options.relu()) h.relu_();
  return h;
}

// ---- Xception ----

XceptionModuleImpl::XceptionModuleImpl(const XceptionModuleOptions& o) : options(o) {
  TORCH_CHECK(o.depths().size() == 3 && o.unit_rates().size() == 3,
              "an Xception module has three separable convs");
  int64_t in = o.in_channels();
  TfSeparableConv2d* convs[] = {&conv1, &conv2, &conv3};
  for (int i = 0; i < 3; ++i) {
    *convs[i] = register_module("conv" + std::to_string(i + 1),
                                TfSeparableConv2d(TfSeparableConv2dOptions(in, o.depths()[i])
                                                      .stride(i == 2 ? o.stride() : 1)
                                                      .rate(o.rate() * o.unit_rates()[i])
                                                      .relu(o.relu_inside())
                                                      .bn_eps(o.bn_eps())
                                                      .bn_momentum(o.bn_momentum())));
    in = o.depths()[i];
  }
  if (o.shortcut() == XceptionShortcut::kConv) {
    shortcut_conv =
        register_module("shortcut_conv", conv1x1(o.in_channels(), o.depths()[2], o.stride()));
    shortcut_bn =
        register_module("shortcut_bn", batch_norm(o.depths()[2], o.bn_eps(), o.bn_momentum()));
  } else if (o.shortcut() == XceptionShortcut::kSum) {
    TORCH_CHECK(o.in_channels() == o.depths()[2] && o.stride() == 1,
                "a sum shortcut needs the input's shape");
  }
}

torch::Tensor XceptionModuleImpl::forward(const torch::Tensor& x, torch::Tensor* tap) {
  const bool pre_relu = !options.relu_inside();
  // The module input feeds the shortcut, and a tapped output feeds the decoder: their ReLUs
  // must not overwrite them. The other inputs are BatchNorm outputs used nowhere else.
  auto h = pre_relu ? torch::relu(x) : x;
  h = conv1(h);
  if (pre_relu) h.relu_();
  h = conv2(h);
  if (tap != nullptr) *tap = h;
  if (pre_relu) h = tap != nullptr ? torch::relu(h) : h.relu_();
  h = conv3(h);
  switch (options.shortcut()) {
    case XceptionShortcut::kConv:
      return h + shortcut_bn(shortcut_conv(x));
    case XceptionShortcut::kSum:
      return h + x;
    case XceptionShortcut::kNone:
      break;
  }
  return h;
}

XceptionImpl::XceptionImpl(const XceptionOptions& o) : options(o) {
  TORCH_CHECK(o.output_stride() == 8 || o.output_stride() == 16 || o.output_stride() == 32,
              "Xception's output stride is 8, 16 or 32, not ", o.output_stride());
  const double eps = o.bn_eps(), momentum = o.bn_momentum();
  // conv1_1 is conv2d_same at stride 2: fixed padding 1 on each side, then VALID.
  conv1_1 = register_module(
      "conv1_1",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2).padding(1).bias(false)));
  bn1_1 = register_module("bn1_1", batch_norm(32, eps, momentum));
  conv1_2 = register_module(
      "conv1_2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)));
  bn1_2 = register_module("bn1_2", batch_norm(64, eps, momentum));

  // stack_blocks_dense after the stride-2 stem: once the target stride is reached, a unit's
  // stride becomes a rate for the units after it.
  const int64_t target = o.output_stride() / 2;
  int64_t current = 1, rate = 1;
  blocks = register_module("blocks", torch::nn::ModuleList());
  auto add = [&](XceptionModuleOptions unit) {
    unit.bn_eps(eps).bn_momentum(momentum);
    if (current == target) {
      const int64_t stride = unit.stride();
      unit.stride(1).rate(rate);
      rate *= stride;
    } else {
      current *= unit.stride();
    }
    blocks->push_back(XceptionModule(unit));
  };
  using S = XceptionShortcut;
  add(XceptionModuleOptions(64, {128, 128, 128}).shortcut(S::kConv).stride(2));
  add(XceptionModuleOptions(128, {256, 256, 256}).shortcut(S::kConv).stride(2));
  add(XceptionModuleOptions(256, {728, 728, 728}).shortcut(S::kConv).stride(2));
  for (int64_t i = 0; i < o.middle_blocks(); ++i) {
    add(XceptionModuleOptions(728, {728, 728, 728}).shortcut(S::kSum));
  }
  add(XceptionModuleOptions(728, {728, 1024, 1024}).shortcut(S::kConv).stride(2));
  add(XceptionModuleOptions(1024, {1536, 1536, 2048})
          .shortcut(S::kNone)
          .relu_inside(true)
          .unit_rates(o.multi_grid()));
  TORCH_CHECK(current == target, "output stride ", o.output_stride(), " cannot be reached");
}

std::pair<torch::Tensor, torch::Tensor> XceptionImpl::forward(const torch::Tensor& x) {
  auto h = bn1_1(conv1_1(x)).relu_();
  h = bn1_2(conv1_2(h)).relu_();
  torch::Tensor low_level;
  for (size_t i = 0; i < blocks->size(); ++i) {
    // Entry block 2 holds the decoder's end point.
    h = blocks[i]->as<XceptionModule>()->forward(h, i == 1 ? &low_level : nullptr);
  }
  return {h, low_level};
}

// ---- ASPP ----

AsppImpl::AsppImpl(const AsppOptions& o) : options(o) {
  const int64_t in = o.in_channels(), ch = o.channels();
  const double eps = o.bn_eps(), momentum = o.bn_momentum();
  conv1x1 = register_module("conv1x1", models::conv1x1(in, ch));
  bn1x1 = register_module("bn1x1", batch_norm(ch, eps, momentum));
  atrous = register_module("atrous", torch::nn::ModuleList());
  for (const int64_t rate : o.rates()) {
    if (o.separable()) {
      atrous->push_back(TfSeparableConv2d(
          TfSeparableConv2dOptions(in, ch).rate(rate).relu(true).bn_eps(eps).bn_momentum(
              momentum)));
    } else {
      atrous->push_back(torch::nn::Sequential(
          torch::nn::Conv2d(
              torch::nn::Conv2dOptions(in, ch, 3).padding(rate).dilation(rate).bias(false)),
          batch_norm(ch, eps, momentum)));
    }
  }
  pooling_conv = register_module("pooling_conv", models::conv1x1(in, ch));
  pooling_bn = register_module("pooling_bn", batch_norm(ch, eps, momentum));
  const auto branch_count = static_cast<int64_t>(o.rates().size()) + 2;
  project = register_module("project", models::conv1x1(branch_count * ch, ch));
  project_bn = register_module("project_bn", batch_norm(ch, eps, momentum));
  dropout = register_module("dropout", torch::nn::Dropout(o.dropout()));
}

std::vector<torch::Tensor> AsppImpl::branches(const torch::Tensor& x) {
  const int64_t height = x.size(2), width = x.size(3);
  // Global average pooling (TF: a VALID average pool over the whole map), 1x1 conv, BN, ReLU;
  // bilinear resizing of a 1x1 map is a broadcast under either corner convention. It is
  // materialized in the features' memory format so the concatenation keeps that format.
  auto pooled = pooling_bn(pooling_conv(x.mean({2, 3}, /*keepdim=*/true))).relu_();
  pooled = pooled.expand({-1, -1, height, width}).contiguous(x.suggest_memory_format());
  std::vector<torch::Tensor> out;
  if (options.pooling_first()) out.push_back(pooled);
  out.push_back(bn1x1(conv1x1(x)).relu_());
  for (const auto& branch : *atrous) {
    if (auto* separable = branch->as<TfSeparableConv2d>()) {
      out.push_back(separable->forward(x));
    } else {
      out.push_back(branch->as<torch::nn::Sequential>()->forward(x).relu_());
    }
  }
  if (!options.pooling_first()) out.push_back(pooled);
  return out;
}

torch::Tensor AsppImpl::forward(const torch::Tensor& x) {
  return dropout(project_bn(project(torch::cat(branches(x), 1))).relu_());
}

// ---- DeepLabv3+ (TF, Xception-65) ----

DeepLabV3PlusImpl::DeepLabV3PlusImpl(const DeepLabV3PlusOptions& o) : options(o) {
  constexpr int64_t kDepth = 256;             // aspp_convs_filters and decoder depth
  constexpr int64_t kLowLevelChannels = 256;  // entry block 2's output
  constexpr int64_t kProjection = 48;         // decoder feature_projection0
  const double eps = o.head_bn_eps(), momentum = o.head_bn_momentum();
  backbone = register_module("backbone", Xception(o.backbone()));
  aspp = register_module("aspp", Aspp(AsppOptions(2048, o.atrous_rates())
                                          .channels(kDepth)
                                          .separable(true)
                                          .pooling_first(true)
                                          .dropout(o.aspp_dropout())
                                          .bn_eps(eps)
                                          .bn_momentum(momentum)));
  if (o.decoder()) {
    projection = register_module("projection", conv1x1(kLowLevelChannels, kProjection));
    projection_bn = register_module("projection_bn", batch_norm(kProjection, eps, momentum));
    decoder_conv0 = register_module(
        "decoder_conv0", TfSeparableConv2d(TfSeparableConv2dOptions(kDepth + kProjection, kDepth)
                                               .relu(true)
                                               .bn_eps(eps)
                                               .bn_momentum(momentum)));
    decoder_conv1 = register_module(
        "decoder_conv1",
        TfSeparableConv2d(
            TfSeparableConv2dOptions(kDepth, kDepth).relu(true).bn_eps(eps).bn_momentum(momentum)));
  }
  logits = register_module("logits", conv1x1(kDepth, o.num_classes(), 1, /*bias=*/true));

  // TF's initializers: truncated normal 0.09 in the backbone (xception_arg_scope), Glorot
  // uniform (slim's default) for the ASPP and decoder 1x1 convs, truncated normal 0.33
  // (depthwise) and 0.06 (pointwise) in the head's separable convs (split_separable_conv2d),
  // 0.01 for the logits; biases 0; BatchNorm at identity.
  torch::NoGradGuard no_grad;
  for (auto& p : backbone->named_parameters()) {
    if (p.value().dim() == 4) truncated_normal_(p.value(), 0.09);
  }
  auto head_init = [](torch::nn::Module& head) {
    for (auto& m : head.modules(/*include_self=*/true)) {
      if (auto* separable = m->as<TfSeparableConv2d>()) {
        truncated_normal_(separable->depthwise->weight, 0.33);
        truncated_normal_(separable->pointwise->weight, 0.06);
      }
    }
  };
  for (auto* conv : {&aspp->conv1x1, &aspp->pooling_conv, &aspp->project, &projection}) {
    if (*conv) torch::nn::init::xavier_uniform_((*conv)->weight);
  }
  head_init(*aspp);
  if (decoder_conv0) {
    head_init(*decoder_conv0);
    head_init(*decoder_conv1);
  }
  truncated_normal_(logits->weight, 0.01);
  logits->bias.zero_();
}

torch::Tensor DeepLabV3PlusImpl::decoder_logits(const torch::Tensor& x) {
  auto [features, low_level] = backbone(x);
  auto h = aspp(features);
  if (options.decoder()) {
    auto projected = projection_bn(projection(low_level)).relu_();
    h = F::interpolate(h, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{projected.size(2), projected.size(3)})
                              .mode(torch::kBilinear)
                              .align_corners(true));
    h = decoder_conv1(decoder_conv0(torch::cat({h, projected}, 1)));
  }
  return logits(h);
}

torch::Tensor DeepLabV3PlusImpl::forward(const torch::Tensor& x) {
  return F::interpolate(decoder_logits(x), F::InterpolateFuncOptions()
                                               .size(std::vector<int64_t>{x.size(2), x.size(3)})
                                               .mode(torch::kBilinear)
                                               .align_corners(true));
}

// ---- DeepLabV3 (torchvision, ResNet) ----

DeepLabV3Impl::DeepLabV3Impl(const DeepLabV3Options& o) : options(o) {
  constexpr int64_t kDepth = 256;
  backbone = register_module("backbone", ResNet(ResNetOptions(o.backbone()).num_classes(0)));
  aspp = register_module("aspp", Aspp(AsppOptions(backbone->out_channels(), o.atrous_rates())
                                          .channels(kDepth)
                                          .dropout(o.aspp_dropout())
                                          .bn_eps(o.backbone().bn_eps())
                                          .bn_momentum(o.backbone().bn_momentum())));
  head_conv = register_module(
      "head_conv",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(kDepth, kDepth, 3).padding(1).bias(false)));
  head_bn = register_module("head_bn",
                            batch_norm(kDepth, o.backbone().bn_eps(), o.backbone().bn_momentum()));
  classifier = register_module("classifier", conv1x1(kDepth, o.num_classes(), 1, /*bias=*/true));
}

torch::Tensor DeepLabV3Impl::forward(const torch::Tensor& x) {
  auto h = head_bn(head_conv(aspp(backbone(x)))).relu_();
  return F::interpolate(classifier(h), F::InterpolateFuncOptions()
                                           .size(std::vector<int64_t>{x.size(2), x.size(3)})
                                           .mode(torch::kBilinear)
                                           .align_corners(false));
}

// ---- Loss and data ----

torch::Tensor segmentation_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                         int64_t ignore_label) {
  auto total = F::cross_entropy(
      logits.to(torch::kFloat), labels,
      F::CrossEntropyFuncOptions().ignore_index(ignore_label).reduction(torch::kSum));
  // TF's _div_maybe_zero: 0 when every pixel is ignored; otherwise the mean over the others,
  // which is also torch's reduction='mean' with ignore_index.
  auto present = labels.ne(ignore_label).sum().clamp_min(1);
  return total / present;
}

SegmentationBatch::SegmentationBatch(int64_t batch, int64_t size, int64_t classes,
                                     int64_t max_objects, int64_t ignore_band, int64_t ignore_label,
                                     InputRange range, const torch::Device& device, uint64_t seed) {
  TORCH_CHECK(classes >= 2 && max_objects >= 1, "need a foreground class and an object");
  TORCH_CHECK(ignore_band == 0 || ignore_band % 2 == 1, "ignore_band is 0 or odd");
  torch::manual_seed(seed + 1);
  // The objects' shapes are drawn on the CPU (the same on every device), then rasterized on
  // the device.
  const auto n = static_cast<double>(size);
  const auto long_options = torch::TensorOptions().dtype(torch::kLong);
  auto count = torch::randint(1, max_objects + 1, {batch, 1}, long_options);
  auto object_class = torch::randint(1, classes, {batch, max_objects}, long_options);
  auto center_y = torch::rand({batch, max_objects}) * n;
  auto center_x = torch::rand({batch, max_objects}) * n;
  // Semi-axes from 5% to 35% of the side: PASCAL objects range from small to image-filling.
  auto axis_a = (0.05 + 0.3 * torch::rand({batch, max_objects})) * n;
  auto axis_b = (0.05 + 0.3 * torch::rand({batch, max_objects})) * n;
  auto angle = torch::rand({batch, max_objects}) * kPi;
  auto present = torch::arange(max_objects).unsqueeze(0) < count;
  auto colours = torch::rand({classes, 3});

  const auto on = torch::TensorOptions().device(device);
  auto object = [&](const torch::Tensor& t, int64_t k) {
    return t.select(1, k).to(device).view({batch, 1, 1});
  };
  auto ys = torch::arange(size, on.dtype(torch::kFloat)).view({1, size, 1});
  auto xs = torch::arange(size, on.dtype(torch::kFloat)).view({1, 1, size});
  auto cos = angle.cos(), sin = angle.sin();
  // Painter's order: a later object covers an earlier one. One object at a time keeps the
  // temporaries at [N, S, S].
  auto label = torch::zeros({batch, size, size}, on.dtype(torch::kLong));
  for (int64_t k = 0; k < max_objects; ++k) {
    auto dy = ys - object(center_y, k), dx = xs - object(center_x, k);
    auto u = (dx * object(cos, k) + dy * object(sin, k)) / object(axis_a, k);
    auto v = (dy * object(cos, k) - dx * object(sin, k)) / object(axis_b, k);
    auto inside = (u * u + v * v <= 1) & object(present, k);
    label = torch::where(inside, object(object_class, k), label);
  }
  // The void band: pixels with a different label within ignore_band / 2 (Chebyshev).
  labels = label;
  if (ignore_band > 0) {
    auto as_float = label.to(torch::kFloat).unsqueeze(1);
    const int64_t pad = ignore_band / 2;
    auto high = torch::max_pool2d(as_float, {ignore_band, ignore_band}, {1, 1}, {pad, pad});
    auto low = -torch::max_pool2d(-as_float, {ignore_band, ignore_band}, {1, 1}, {pad, pad});
    labels = label.masked_fill(high.ne(low).squeeze(1), ignore_label);
  }

  // Image: the class colour (60%) plus uniform noise (40%) in [0, 1], then the model's scaling.
  auto base = colours.to(device).index_select(0, label.view(-1)).view({batch, size, size, 3});
  images = 0.6 * base.permute({0, 3, 1, 2}) + 0.4 * torch::rand({batch, 3, size, size}, on);
  if (range == InputRange::kXception) {
    images = images.mul_(2).sub_(1);
  } else {
    auto mean = torch::tensor({0.485, 0.456, 0.406}, on.dtype(torch::kFloat)).view({1, 3, 1, 1});
    auto stdev = torch::tensor({0.229, 0.224, 0.225}, on.dtype(torch::kFloat)).view({1, 3, 1, 1});
    images = (images - mean) / stdev;
  }
  images = images.contiguous();
}

// ---- Optimizer ----

ParamSchema deeplab_optimizer_schema() {
  return {
      {"lr", ParamKind::kNumber, 0.007, "base learning rate of the poly schedule", {}, 0},
      {"momentum", ParamKind::kNumber, 0.9, "SGD momentum", {}, 0},
      {"weight_decay", ParamKind::kNumber, 4e-5, "L2 coefficient, added to the gradient", {}, 0},
      {"decay_on",
       ParamKind::kString,
       "conv-weights",
       "conv-weights: conv weights except depthwise (TF DeepLab); all: every parameter "
       "(torchvision reference)",
       {"conv-weights", "all"}},
      {"total_steps", ParamKind::kInt, 30000, "steps of the poly decay to 0", {}, 1},
      {"power", ParamKind::kNumber, 0.9, "poly exponent", {}, 0},
  };
}

train::Updater make_deeplab_updater(const torch::nn::Module& module, const Params& o,
                                    Precision precision, const torch::Device& device) {
  std::vector<train::ParamGroup> groups;
  const double wd = o.f64("weight_decay");
  if (o.str("decay_on") == "all") {
    groups.push_back({module.parameters(), wd});
  } else {
    // TF DeepLab regularizes every conv2d weight (slim.l2_regularizer) but not depthwise
    // weights (regularize_depthwise=False), BatchNorm parameters or biases.
    std::unordered_set<const void*> decayed;
    for (const auto& m : module.modules(/*include_self=*/true)) {
      if (const auto* c = m->as<torch::nn::Conv2d>()) {
        if (c->options.groups() == 1) decayed.insert(c->weight.unsafeGetTensorImpl());
      }
    }
    train::ParamGroup decay{{}, wd}, no_decay{{}, 0.0};
    for (const auto& p : module.parameters()) {
      if (!p.requires_grad()) continue;
      (decayed.count(p.unsafeGetTensorImpl()) ? decay : no_decay).params.push_back(p);
    }
    groups = {decay, no_decay};
  }
  train::SgdOptions sgd;
  sgd.lr = o.f64("lr");
  sgd.momentum = o.f64("momentum");
  return train::Updater(std::make_unique<train::Sgd>(std::move(groups), sgd), precision, device,
                        /*clip_norm=*/0, train::poly(sgd.lr, o.i64("total_steps"), o.f64("power")));
}

// ---- The training steps ----

namespace {

/// Keys every DeepLab workload's `model:` section has: sizes, the synthetic data, the layout.
std::vector<ParamSpec> common_model_keys() {
  return {
      {"image_size", ParamKind::kInt, 513, "square crop side in pixels (train_crop_size)", {}, 33},
      {"num_classes", ParamKind::kInt, 21, "classes including background (PASCAL VOC: 21)", {}, 2},
      {"atrous_rates", ParamKind::kIntList, Json::array({6, 12, 18}), "ASPP 3x3 branch rates"},
      {"aspp_dropout", ParamKind::kNumber, 0.1, "dropout after the ASPP projection", {}, 0},
      {"ignore_label", ParamKind::kInt, 255, "label value the loss skips", {}, 0},
      {"max_objects",
       ParamKind::kInt,
       4,
       "synthetic data: objects per image, 1 to this many",
       {},
       1},
      {"ignore_band",
       ParamKind::kInt,
       5,
       "synthetic data: width in pixels of the ignore band around object boundaries (odd; 0 = "
       "none)",
       {},
       0},
      {"memory_format",
       ParamKind::kString,
       "auto",
       "activation and weight layout: channels-last, contiguous (NCHW), or auto (channels-last "
       "under tf32 and AMP, where cuDNN's tensor-core kernels are NHWC; NCHW in strict fp32)",
       {"auto", "channels-last", "contiguous"}},
      {"probe_memory_format",
       ParamKind::kString,
       "same",
       "layout the max-batch search's probes build with (same: memory_format); the timed run "
       "keeps memory_format and confirms the batch",
       {"same", "auto", "channels-last", "contiguous"}},
  };
}

ParamSchema xception_schema() {
  auto keys = common_model_keys();
  const std::vector<ParamSpec> more = {
      {"output_stride", ParamKind::kInt, 16, "backbone output stride: 8, 16 or 32", {}, 8},
      {"middle_blocks",
       ParamKind::kInt,
       16,
       "Xception middle-flow modules (xception_65: 16)",
       {},
       0},
      {"multi_grid", ParamKind::kIntList, Json::array({1, 1, 1}), "exit block 2 rate multipliers"},
      {"decoder", ParamKind::kBool, true, "DeepLabv3+ decoder at stride 4"},
      {"backbone_bn_eps", ParamKind::kNumber, 1e-3, "Xception BatchNorm epsilon", {}, 0},
      {"head_bn_eps", ParamKind::kNumber, 1e-5, "ASPP and decoder BatchNorm epsilon", {}, 0},
      {"bn_decay", ParamKind::kNumber, 0.9997, "TF BatchNorm moving-average decay", {}, 0},
  };
  keys.insert(keys.end(), more.begin(), more.end());
  return ParamSchema(keys);
}

ParamSchema resnet_schema() {
  auto keys = common_model_keys();
  for (auto& k : keys) {
    if (k.key == "atrous_rates") k.default_value = Json::array({12, 24, 36});
    if (k.key == "aspp_dropout") k.default_value = 0.5;
  }
  const std::vector<ParamSpec> more = {
      {"resnet_layers", ParamKind::kIntList, Json::array({3, 4, 23, 3}),
       "bottleneck blocks per stage (ResNet-101)"},
      {"output_stride",
       ParamKind::kInt,
       8,
       "8: dilation in stages 3 and 4 (torchvision [False, True, True]); 16: stage 4; 32: none",
       {},
       8},
      {"bn_eps", ParamKind::kNumber, 1e-5, "BatchNorm epsilon", {}, 0},
      {"bn_momentum", ParamKind::kNumber, 0.1, "BatchNorm momentum (PyTorch convention)", {}, 0},
  };
  keys.insert(keys.end(), more.begin(), more.end());
  return ParamSchema(keys);
}

DeepLabV3PlusOptions xception_options(const Params& m) {
  const double momentum = bn_momentum_from_decay(m.f64("bn_decay"));
  return DeepLabV3PlusOptions(m.i64("num_classes"))
      .backbone(XceptionOptions()
                    .middle_blocks(m.i64("middle_blocks"))
                    .output_stride(m.i64("output_stride"))
                    .multi_grid(m.i64s("multi_grid"))
                    .bn_eps(m.f64("backbone_bn_eps"))
                    .bn_momentum(momentum))
      .atrous_rates(m.i64s("atrous_rates"))
      .decoder(m.flag("decoder"))
      .aspp_dropout(m.f64("aspp_dropout"))
      .head_bn_eps(m.f64("head_bn_eps"))
      .head_bn_momentum(momentum);
}

DeepLabV3Options resnet_deeplab_options(const Params& m) {
  const int64_t os = m.i64("output_stride");
  TORCH_CHECK(os == 8 || os == 16 || os == 32, "output_stride is 8, 16 or 32, not ", os);
  auto backbone = ResNetOptions(m.i64s("resnet_layers"))
                      .replace_stride_with_dilation({false, os <= 8, os <= 16})
                      .bn_eps(m.f64("bn_eps"))
                      .bn_momentum(m.f64("bn_momentum"));
  return DeepLabV3Options(backbone, m.i64("num_classes"))
      .atrous_rates(m.i64s("atrous_rates"))
      .aspp_dropout(m.f64("aspp_dropout"));
}

bool use_channels_last(const std::string& memory_format, Precision precision) {
  if (memory_format == "auto") return precision != Precision::kFp32;
  return memory_format == "channels-last";
}

/// Every 4-d parameter and buffer in channels-last order (Python's
/// model.to(memory_format=torch.channels_last)).
void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

/// One DeepLab training step: forward to logits at the label size, the ignore-255 loss,
/// backward, SGD. `Model` is DeepLabV3Plus or DeepLabV3.
template <typename Model>
class SegmentationStep final : public train::RuntimeStep {
 public:
  SegmentationStep(const StepContext& ctx, Model model, InputRange range)
      : RuntimeStep(ctx),
        ignore_label_(ctx.model.i64("ignore_label")),
        channels_last_(use_channels_last(ctx.model.str("memory_format"), ctx.precision)),
        model_(place(std::move(model), ctx.device)),
        batch_(ctx.batch, ctx.model.i64("image_size"), ctx.model.i64("num_classes"),
               ctx.model.i64("max_objects"), ctx.model.i64("ignore_band"), ignore_label_, range,
               ctx.device, ctx.seed),
        updater_(runtime_.add(
            "model", make_deeplab_updater(*model_, ctx.optimizer, ctx.precision, ctx.device))) {
    if (channels_last_) {
      batch_.images = batch_.images.contiguous(torch::MemoryFormat::ChannelsLast);
    }
    ignore_share_ = batch_.labels.eq(ignore_label_).to(torch::kFloat).mean().item<double>();
  }

  double run() override {
    return runtime_.run([&] {
      updater_.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = runtime_.autocast();
        loss = segmentation_cross_entropy(model_->forward(batch_.images), batch_.labels,
                                          ignore_label_);
      }
      runtime_.record_loss("loss", loss);
      runtime_.backward(updater_, loss);
      runtime_.update(updater_);
      return static_cast<double>(batch_.images.size(0));
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  Json batch_info() const override {
    return Json{{"images", batch_.images.size(0)},
                {"image_size", batch_.images.size(2)},
                {"ignore_share", ignore_share_},
                {"channels_last", channels_last_}};
  }

 private:
  /// The model on the device in its layout (before the optimizer sees its parameters), in
  /// training mode.
  Model place(Model model, const torch::Device& device) const {
    model->to(device);
    if (channels_last_) to_channels_last(*model);
    model->train();
    return model;
  }

  int64_t ignore_label_;
  bool channels_last_;
  Model model_;
  SegmentationBatch batch_;
  train::Updater& updater_;
  double ignore_share_ = 0;
};

/// The registry entry of a DeepLab build: `Model` built from `options(model params)`, trained
/// on images scaled for `range`.
template <typename Model, typename Options>
Architecture segmentation_architecture(std::string name, std::string summary, ParamSchema schema,
                                       Options (*options)(const Params&), InputRange range) {
  return make_architecture(
      std::move(name), std::move(summary), std::move(schema), deeplab_optimizer_schema(),
      [options, range](const StepContext& ctx) -> std::unique_ptr<TrainStep> {
        torch::manual_seed(ctx.seed);
        return std::make_unique<SegmentationStep<Model>>(ctx, Model(options(ctx.model)), range);
      },
      [options](const Params& model) { return total_parameters(Model(options(model))); });
}

}  // namespace

Architecture deeplab_xception_architecture() {
  return segmentation_architecture<DeepLabV3Plus>(
      "deeplab-xception",
      "TF DeepLabv3+: Xception-65, separable ASPP, decoder; pixel cross-entropy", xception_schema(),
      &xception_options, InputRange::kXception);
}

Architecture deeplab_resnet_architecture() {
  return segmentation_architecture<DeepLabV3>(
      "deeplab-resnet",
      "torchvision DeepLabV3: dilated ResNet, DeepLabHead (ASPP); pixel cross-entropy",
      resnet_schema(), &resnet_deeplab_options, InputRange::kImageNet);
}

}  // namespace gpubench::models
