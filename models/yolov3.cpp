#include "models/yolov3.h"

#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace gpubench::models {

namespace F = torch::nn::functional;

// ---- Config schema ----

namespace {

// cfg/yolov3.cfg's [yolo] sections.
const std::vector<double> kAnchors = {10, 13, 16,  30,  33, 23,  30,  61,  62,
                                      45, 59, 119, 116, 90, 156, 198, 373, 326};
const std::vector<int64_t> kMasks = {6, 7, 8, 3, 4, 5, 0, 1, 2};
constexpr int64_t kYoloLayers = 3;

ParamSchema model_schema() {
  return {
      {"input_size", ParamKind::kInt, 608, "network width = height [px], a multiple of 32", {}, 32},
      {"classes", ParamKind::kInt, 80, "object classes (COCO: 80)", {}, 1},
      {"width", ParamKind::kInt, 32, "channels of the first convolution (the cfg: 32)", {}, 1},
      {"blocks",
       ParamKind::kIntList,
       Json::array({1, 2, 8, 8, 4}),
       "residual blocks of the five Darknet-53 stages",
       {},
       0},
      {"anchors",
       ParamKind::kNumberList,
       Json(kAnchors),
       "anchor w, h pairs in network pixels (the cfg's anchors)",
       {},
       0},
      {"masks",
       ParamKind::kIntList,
       Json(kMasks),
       "anchor ids of each YOLO layer in output order (the cfg's mask lines)",
       {},
       0},
      {"ignore_thresh",
       ParamKind::kNumber,
       0.7,
       "no objectness loss for predictions with IoU above this with a truth",
       {},
       0},
      {"boxes_per_image", ParamKind::kInt, 8, "synthetic truth boxes in every image", {}, 1},
      {"min_box",
       ParamKind::kNumber,
       0.01,
       "smallest sqrt(w*h) of a truth, fraction of the image",
       {},
       0},
      {"max_box",
       ParamKind::kNumber,
       0.8,
       "largest sqrt(w*h) of a truth, fraction of the image",
       {},
       0},
      {"max_aspect", ParamKind::kNumber, 3.0, "truth aspect w/h within [1/this, this]", {}, 1},
      {"bn_momentum", ParamKind::kNumber, 0.01, "BatchNorm running-average momentum", {}, 0},
      {"bn_eps", ParamKind::kNumber, 1e-5, "BatchNorm epsilon", {}, 0},
  };
}

ParamSchema optimizer_schema() {
  return {
      {"lr", ParamKind::kNumber, 0.001, "learning_rate after burn-in", {}, 0},
      {"momentum", ParamKind::kNumber, 0.9, "SGD momentum", {}, 0},
      {"decay", ParamKind::kNumber, 0.0005, "L2 decay of convolution weights", {}, 0},
      {"burn_in", ParamKind::kInt, 1000, "batches of lr * (batch / burn_in)^power", {}, 0},
      {"power", ParamKind::kNumber, 4.0, "burn-in exponent (darknet's default)", {}, 0},
      {"steps",
       ParamKind::kIntList,
       Json::array({400000, 450000}),
       "batches where the rate is multiplied by the matching scale",
       {},
       0},
      {"scales", ParamKind::kNumberList, Json::array({0.1, 0.1}), "factors at the steps", {}, 0},
      {"first_batch",
       ParamKind::kInt,
       1,
       "darknet batch number of the benchmark's first step (1: darknet's start)",
       {},
       1},
  };
}

/// Anchors per YOLO layer of a `masks` list.
int64_t anchors_per_scale(const std::vector<int64_t>& masks) {
  if (masks.empty() || masks.size() % kYoloLayers != 0) {
    throw std::invalid_argument("yolov3: masks must list the same number of anchors per layer");
  }
  return static_cast<int64_t>(masks.size()) / kYoloLayers;
}

}  // namespace

YoloV3Options yolov3_options(const Params& m) {
  return YoloV3Options()
      .classes(m.i64("classes"))
      .width(m.i64("width"))
      .blocks(m.i64s("blocks"))
      .anchors_per_scale(anchors_per_scale(m.i64s("masks")))
      .bn_momentum(m.f64("bn_momentum"))
      .bn_eps(m.f64("bn_eps"));
}

YoloLossOptions yolov3_loss_options(int64_t input_size, int64_t classes) {
  YoloLossOptions o;
  o.input_size = input_size;
  o.classes = classes;
  o.anchors = kAnchors;
  o.masks = kMasks;
  return o;
}

// ---- Modules ----

DarknetConvImpl::DarknetConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                 const YoloV3Options& o) {
  conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                                                       .stride(stride)
                                                       .padding(kernel / 2)
                                                       .bias(false)));
  bn = register_module(
      "bn", torch::nn::BatchNorm2d(
                torch::nn::BatchNorm2dOptions(out).eps(o.bn_eps()).momentum(o.bn_momentum())));
}

torch::Tensor DarknetConvImpl::forward(const torch::Tensor& x) {
  // In place: BatchNorm's backward needs its input, not its output.
  auto y = bn(conv(x));
  return torch::leaky_relu_(y, 0.1);
}

DarknetResidualImpl::DarknetResidualImpl(int64_t channels, const YoloV3Options& o) {
  reduce = register_module("reduce", DarknetConv(channels, channels / 2, 1, 1, o));
  expand = register_module("expand", DarknetConv(channels / 2, channels, 3, 1, o));
}

torch::Tensor DarknetResidualImpl::forward(const torch::Tensor& x) { return x + expand(reduce(x)); }

Darknet53Impl::Darknet53Impl(const YoloV3Options& o) {
  TORCH_CHECK(o.blocks().size() == 5, "Darknet-53 has five stages");
  const int64_t w = o.width();
  stem = register_module("stem", DarknetConv(3, w, 3, 1, o));
  stages = register_module("stages", torch::nn::ModuleList());
  int64_t channels = w;
  for (const int64_t blocks : o.blocks()) {
    torch::nn::Sequential stage;
    stage->push_back(DarknetConv(channels, 2 * channels, 3, 2, o));
    channels *= 2;
    for (int64_t b = 0; b < blocks; ++b) stage->push_back(DarknetResidual(channels, o));
    stages->push_back(stage);
  }
}

std::vector<torch::Tensor> Darknet53Impl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> out;
  auto h = stem(x);
  for (std::size_t s = 0; s < stages->size(); ++s) {
    h = stages[s]->as<torch::nn::Sequential>()->forward(h);
    if (s >= 2) out.push_back(h);
  }
  return out;
}

YoloHeadImpl::YoloHeadImpl(int64_t in, int64_t width, int64_t outputs, const YoloV3Options& o) {
  body = register_module("body", torch::nn::Sequential(DarknetConv(in, width, 1, 1, o),
                                                       DarknetConv(width, 2 * width, 3, 1, o),
                                                       DarknetConv(2 * width, width, 1, 1, o),
                                                       DarknetConv(width, 2 * width, 3, 1, o),
                                                       DarknetConv(2 * width, width, 1, 1, o)));
  project = register_module("project", DarknetConv(width, 2 * width, 3, 1, o));
  detect = register_module(
      "detect", torch::nn::Conv2d(torch::nn::Conv2dOptions(2 * width, outputs, 1).bias(true)));
}

std::pair<torch::Tensor, torch::Tensor> YoloHeadImpl::forward(const torch::Tensor& x) {
  auto branch = body->forward(x);
  return {branch, detect(project(branch))};
}

namespace {
/// Nearest-neighbour upsampling by 2 (darknet's [upsample] stride=2).
torch::Tensor upsample2(const torch::Tensor& x) {
  return F::interpolate(x, F::InterpolateFuncOptions()
                               .size(std::vector<int64_t>{2 * x.size(2), 2 * x.size(3)})
                               .mode(torch::kNearest));
}
}  // namespace

YoloV3Impl::YoloV3Impl(const YoloV3Options& o) : options(o) {
  const int64_t w = o.width();  // channels: stage 3 = 8w, stage 4 = 16w, stage 5 = 32w
  const int64_t outputs = o.anchors_per_scale() * (5 + o.classes());
  backbone = register_module("backbone", Darknet53(o));
  head_large = register_module("head_large", YoloHead(32 * w, 16 * w, outputs, o));
  lateral_medium = register_module("lateral_medium", DarknetConv(16 * w, 8 * w, 1, 1, o));
  head_medium = register_module("head_medium", YoloHead(8 * w + 16 * w, 8 * w, outputs, o));
  lateral_small = register_module("lateral_small", DarknetConv(8 * w, 4 * w, 1, 1, o));
  head_small = register_module("head_small", YoloHead(4 * w + 8 * w, 4 * w, outputs, o));

  // make_convolutional_layer: weights scale * N(0, 1) with scale = sqrt(2 / (k * k * c)),
  // biases 0; BatchNorm scales 1.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2d>()) {
      const auto& w_shape = conv->weight.sizes();
      const double fan_in = static_cast<double>(w_shape[1] * w_shape[2] * w_shape[3]);
      conv->weight.normal_(0, std::sqrt(2.0 / fan_in));
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1);
      bn->bias.zero_();
    }
  }
}

std::vector<torch::Tensor> YoloV3Impl::forward(const torch::Tensor& x) {
  const auto features = backbone->forward(x);  // layers 36, 61, 74
  auto [branch_large, out_large] = head_large->forward(features[2]);
  // [route] -4, 1x1, [upsample], [route] -1, 61: the upsampled map first.
  auto medium_in = torch::cat({upsample2(lateral_medium(branch_large)), features[1]}, 1);
  auto [branch_medium, out_medium] = head_medium->forward(medium_in);
  auto small_in = torch::cat({upsample2(lateral_small(branch_medium)), features[0]}, 1);
  auto out_small = head_small->forward(small_in).second;
  return {out_large, out_medium, out_small};
}

// ---- The loss ----

namespace {

/// IoU of centre-format boxes, broadcasting (darknet's box_iou: no overlap -> 0).
torch::Tensor box_iou(const torch::Tensor& ax, const torch::Tensor& ay, const torch::Tensor& aw,
                      const torch::Tensor& ah, const torch::Tensor& bx, const torch::Tensor& by,
                      const torch::Tensor& bw, const torch::Tensor& bh) {
  auto overlap = [](const torch::Tensor& c1, const torch::Tensor& s1, const torch::Tensor& c2,
                    const torch::Tensor& s2) {
    return (torch::min(c1 + s1 / 2, c2 + s2 / 2) - torch::max(c1 - s1 / 2, c2 - s2 / 2))
        .clamp_min(0);
  };
  auto inter = overlap(ax, aw, bx, bw) * overlap(ay, ah, by, bh);
  return inter / (aw * ah + bw * bh - inter);
}

}  // namespace

YoloLoss::YoloLoss(YoloLossOptions options, const torch::Device& device)
    : options_(std::move(options)) {
  const auto& o = options_;
  TORCH_CHECK(o.anchors.size() % 2 == 0 && !o.anchors.empty(), "anchors come in w, h pairs");
  TORCH_CHECK(o.masks.size() % o.strides.size() == 0, "every YOLO layer has as many anchors");
  anchors_per_scale_ = static_cast<int64_t>(o.masks.size() / o.strides.size());
  const int64_t total_anchors = static_cast<int64_t>(o.anchors.size() / 2);
  const double size = static_cast<double>(o.input_size);

  std::vector<float> all_w(total_anchors), all_h(total_anchors);
  for (int64_t a = 0; a < total_anchors; ++a) {
    all_w[a] = static_cast<float>(o.anchors[2 * a] / size);
    all_h[a] = static_cast<float>(o.anchors[2 * a + 1] / size);
  }
  std::vector<uint8_t> owned(total_anchors, 0);
  std::vector<int64_t> first(total_anchors, 0), grid_of(total_anchors, 1);

  std::vector<torch::Tensor> cx, cy, grid, aw, ah;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  int64_t offset = 0;
  for (std::size_t layer = 0; layer < o.strides.size(); ++layer) {
    TORCH_CHECK(o.input_size % o.strides[layer] == 0, "input_size must divide by every stride");
    const int64_t g = o.input_size / o.strides[layer];
    const int64_t cells = g * g;
    for (int64_t k = 0; k < anchors_per_scale_; ++k) {
      const int64_t a = o.masks[layer * anchors_per_scale_ + k];
      TORCH_CHECK(a >= 0 && a < total_anchors, "mask names an anchor that does not exist");
      owned[a] = 1;
      first[a] = offset;
      grid_of[a] = g;
      // Prediction a * g * g + row * g + column: columns vary fastest.
      cx.push_back(torch::arange(g, f32).repeat({g}));
      cy.push_back(torch::arange(g, f32).repeat_interleave(g));
      grid.push_back(torch::full({cells}, static_cast<float>(g), f32));
      aw.push_back(torch::full({cells}, all_w[a], f32));
      ah.push_back(torch::full({cells}, all_h[a], f32));
      offset += cells;
    }
  }
  predictions_ = offset;
  cell_x_ = torch::cat(cx).to(device);
  cell_y_ = torch::cat(cy).to(device);
  grid_ = torch::cat(grid).to(device);
  anchor_w_ = torch::cat(aw).to(device);
  anchor_h_ = torch::cat(ah).to(device);
  all_anchor_w_ = torch::tensor(all_w, f32).to(device);
  all_anchor_h_ = torch::tensor(all_h, f32).to(device);
  anchor_owned_ =
      torch::tensor(std::vector<int64_t>(owned.begin(), owned.end())).to(torch::kBool).to(device);
  anchor_offset_ = torch::tensor(first).to(device);
  anchor_grid_ = torch::tensor(grid_of).to(device);
}

torch::Tensor YoloLoss::flatten(const std::vector<torch::Tensor>& outputs) const {
  TORCH_CHECK(outputs.size() == options_.strides.size(), "one output per YOLO layer");
  const int64_t entries = 5 + options_.classes;
  std::vector<torch::Tensor> parts;
  for (const auto& out : outputs) {
    const int64_t n = out.size(0), cells = out.size(2) * out.size(3);
    // [N, A*D, H, W] -> [N, A, D, H*W] -> [N, A * H*W, D]
    parts.push_back(out.view({n, anchors_per_scale_, entries, cells})
                        .transpose(2, 3)
                        .reshape({n, anchors_per_scale_ * cells, entries}));
  }
  return torch::cat(parts, 1).to(torch::kFloat);
}

YoloTargets YoloLoss::targets(const torch::Tensor& predictions, const torch::Tensor& boxes,
                              const torch::Tensor& classes) const {
  torch::NoGradGuard no_grad;
  const int64_t n = boxes.size(0), truths = boxes.size(1), p = predictions_;
  TORCH_CHECK(predictions.size(1) == p, "predictions do not match the layers");
  const auto b = boxes.to(torch::kFloat);
  const auto x = b.select(2, 0), y = b.select(2, 1), w = b.select(2, 2), h = b.select(2, 3);
  YoloTargets t;

  // Positive assignment: the best of all anchors by shape IoU (both boxes at the origin);
  // argmax keeps the first of equal maxima, as darknet's strict `iou > best_iou`.
  const auto w3 = w.unsqueeze(-1), h3 = h.unsqueeze(-1);
  const auto inter = torch::min(w3, all_anchor_w_) * torch::min(h3, all_anchor_h_);
  t.best_anchor = (inter / (w3 * h3 + all_anchor_w_ * all_anchor_h_ - inter)).argmax(-1);
  const auto owned = anchor_owned_.take(t.best_anchor);
  const auto grid_long = anchor_grid_.take(t.best_anchor);
  const auto g = grid_long.to(torch::kFloat);
  // i = (int)(truth.x * l.w); a centre on the far edge stays in the last cell.
  const auto col = (x * g).floor().minimum(g - 1);
  const auto row = (y * g).floor().minimum(g - 1);
  const auto slot =
      anchor_offset_.take(t.best_anchor) + row.to(torch::kLong) * grid_long + col.to(torch::kLong);
  t.slot = torch::where(owned, slot, torch::full_like(slot, p));
  t.box = torch::stack({x * g - col, y * g - row, torch::log(w / all_anchor_w_.take(t.best_anchor)),
                        torch::log(h / all_anchor_h_.take(t.best_anchor))},
                       -1);
  t.box_scale = 2 - w * h;

  // Truths sharing a slot: darknet visits truths in order, so the last one's box deltas stand
  // and every one's class stays positive.
  const auto owned_other = owned.unsqueeze(1);                                   // [N, 1, G]
  const auto same = (t.slot.unsqueeze(2) == t.slot.unsqueeze(1)) & owned_other;  // [N, G, G]
  const auto order = torch::arange(truths, slot.options());
  const auto later = order.unsqueeze(0) > order.unsqueeze(1);  // [t, u]: u after t
  t.winner = owned & (same & later).any(-1).logical_not();
  // One-hot by comparison: at::one_hot reads the class range on the host.
  const auto one_hot =
      classes.unsqueeze(-1) == torch::arange(options_.classes, classes.options());  // [N, G, C]
  t.class_target = (same.unsqueeze(-1) & one_hot.unsqueeze(1)).any(2).to(torch::kFloat);

  // Background: every prediction's decoded box against every truth of its image.
  const auto pred = predictions.detach();
  const auto px = ((cell_x_ + torch::sigmoid(pred.select(2, 0))) / grid_).unsqueeze(-1);
  const auto py = ((cell_y_ + torch::sigmoid(pred.select(2, 1))) / grid_).unsqueeze(-1);
  const auto pw = (torch::exp(pred.select(2, 2)) * anchor_w_).unsqueeze(-1);
  const auto ph = (torch::exp(pred.select(2, 3)) * anchor_h_).unsqueeze(-1);
  const auto best_iou = box_iou(px, py, pw, ph, x.unsqueeze(1), y.unsqueeze(1), w.unsqueeze(1),
                                h.unsqueeze(1))
                            .amax(-1);  // [N, P]
  // One column past the predictions takes the truths no layer owns.
  t.obj_target = torch::zeros({n, p + 1}, b.options()).scatter_(1, t.slot, 1.0).narrow(1, 0, p);
  t.obj_weight =
      torch::maximum((best_iou <= options_.ignore_thresh).to(torch::kFloat), t.obj_target);
  return t;
}

YoloLossTerms YoloLoss::forward(const std::vector<torch::Tensor>& outputs,
                                const torch::Tensor& boxes, const torch::Tensor& classes) const {
  const auto pred = flatten(outputs);
  const auto t = targets(pred, boxes, classes);
  const int64_t n = pred.size(0), p = pred.size(1), entries = pred.size(2);
  const int64_t truths = boxes.size(1), c = options_.classes;
  const auto sum = at::Reduction::Sum;

  YoloLossTerms terms;
  terms.obj = torch::binary_cross_entropy_with_logits(pred.select(2, 4), t.obj_target, t.obj_weight,
                                                      {}, sum);
  // The predictions at the truths' slots (an unowned truth reads slot P - 1 at weight 0).
  const auto index = torch::arange(n, t.slot.options()).unsqueeze(1) * p + t.slot.clamp_max(p - 1);
  const auto pos =
      pred.reshape({n * p, entries}).index_select(0, index.view(-1)).view({n, truths, entries});
  const auto winner = t.winner.to(torch::kFloat).unsqueeze(-1);
  const auto box_weight = winner * t.box_scale.unsqueeze(-1);  // [N, G, 1]
  terms.xy = torch::binary_cross_entropy_with_logits(pos.narrow(2, 0, 2), t.box.narrow(2, 0, 2),
                                                     box_weight.expand({n, truths, 2}), {}, sum);
  terms.wh = 0.5 * ((pos.narrow(2, 2, 2) - t.box.narrow(2, 2, 2)).pow(2) * box_weight).sum();
  terms.cls = torch::binary_cross_entropy_with_logits(pos.narrow(2, 5, c), t.class_target,
                                                      winner.expand({n, truths, c}), {}, sum);
  const double images = static_cast<double>(n);
  terms.obj = terms.obj / images;
  terms.xy = terms.xy / images;
  terms.wh = terms.wh / images;
  terms.cls = terms.cls / images;
  terms.total = terms.xy + terms.wh + terms.obj + terms.cls;
  return terms;
}

// ---- Synthetic data ----

YoloBatch::YoloBatch(int64_t batch, int64_t input_size, int64_t boxes_per_image,
                               int64_t classes_count, double min_size, double max_size,
                               double max_aspect, const torch::Device& device, uint64_t seed) {
  TORCH_CHECK(min_size > 0 && min_size <= max_size && max_size <= 1, "box sizes out of range");
  // The truths on the CPU generator, so they are the same on every device.
  auto gen = torch::make_generator<at::CPUGeneratorImpl>(seed + 1);
  auto uniform = [&](std::vector<int64_t> shape, double lo, double hi) {
    return torch::empty(shape, torch::kFloat).uniform_(lo, hi, gen);
  };
  const std::vector<int64_t> shape{batch, boxes_per_image};
  const auto side = torch::exp(uniform(shape, std::log(min_size), std::log(max_size)));
  const auto aspect = torch::exp(uniform(shape, -std::log(max_aspect), std::log(max_aspect)));
  const auto w = (side * aspect.sqrt()).clamp_max(1.0);
  const auto h = (side / aspect.sqrt()).clamp_max(1.0);
  const auto x = w / 2 + uniform(shape, 0, 1) * (1 - w);
  const auto y = h / 2 + uniform(shape, 0, 1) * (1 - h);
  boxes = torch::stack({x, y, w, h}, -1).to(device);
  classes = torch::empty(shape, torch::kLong).random_(0, classes_count, gen).to(device);
  // The images straight on the device: at a large batch they are gigabytes.
  torch::manual_seed(seed + 2);
  images = torch::rand({batch, 3, input_size, input_size}, torch::TensorOptions().device(device));
}

// ---- Optimizer ----

train::Updater make_yolov3_updater(const torch::nn::Module& model, const Params& o,
                                   Precision precision, const torch::Device& device) {
  // update_convolutional_layer decays `weights` only; biases and BN scales are not decayed.
  train::ParamGroup decayed{{}, o.f64("decay")}, plain{{}, 0.0};
  for (const auto& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() == 4 ? decayed : plain).params.push_back(p);
  }
  train::SgdOptions sgd;
  sgd.lr = o.f64("lr");
  sgd.momentum = o.f64("momentum");
  const auto steps = o.i64s("steps");
  const auto scales = o.f64s("scales");
  if (steps.size() != scales.size()) {
    throw std::invalid_argument("yolov3: optimizer.steps and optimizer.scales differ in length");
  }
  const auto darknet =
      train::darknet_steps(sgd.lr, o.i64("burn_in"), o.f64("power"), steps, scales);
  const int64_t first = o.i64("first_batch");
  return train::Updater(
      std::make_unique<train::Sgd>(std::vector<train::ParamGroup>{decayed, plain}, sgd), precision,
      device, /*clip_norm=*/0,
      [darknet, first](int64_t step) { return darknet(first + step - 1); });
}

// ---- The training step ----

namespace {

class YoloV3Step final : public train::RuntimeStep {
 public:
  explicit YoloV3Step(const StepContext& ctx)
      : RuntimeStep(ctx),
        model_(build(ctx)),
        loss_fn_(loss_options(ctx.model), ctx.device),
        batch_(ctx.batch, ctx.model.i64("input_size"), ctx.model.i64("boxes_per_image"),
               ctx.model.i64("classes"), ctx.model.f64("min_box"), ctx.model.f64("max_box"),
               ctx.model.f64("max_aspect"), ctx.device, ctx.seed),
        updater_(runtime_.add(
            "model", make_yolov3_updater(*model_, ctx.optimizer, ctx.precision, ctx.device))) {}

  double run() override {
    return runtime_.run([&] {
      updater_.zero_grad();
      YoloLossTerms terms;
      {
        const auto autocast = runtime_.autocast();
        terms = loss_fn_.forward(model_->forward(batch_.images), batch_.boxes, batch_.classes);
      }
      runtime_.record_loss("loss", terms.total);
      runtime_.record_loss("xy", terms.xy);
      runtime_.record_loss("wh", terms.wh);
      runtime_.record_loss("obj", terms.obj);
      runtime_.record_loss("cls", terms.cls);
      runtime_.backward(updater_, terms.total);
      runtime_.update(updater_);
      return static_cast<double>(batch_.images.size(0));
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  Json batch_info() const override {
    return Json{{"images", batch_.images.size(0)},
                {"input_size", batch_.images.size(2)},
                {"boxes_per_image", batch_.boxes.size(1)}};
  }

 private:
  static YoloV3 build(const StepContext& ctx) {
    torch::manual_seed(ctx.seed);
    YoloV3 model(yolov3_options(ctx.model));
    model->to(ctx.device);
    model->train();
    return model;
  }

  static YoloLossOptions loss_options(const Params& m) {
    YoloLossOptions o;
    o.input_size = m.i64("input_size");
    o.classes = m.i64("classes");
    o.anchors = m.f64s("anchors");
    o.masks = m.i64s("masks");
    o.ignore_thresh = m.f64("ignore_thresh");
    return o;
  }

  YoloV3 model_;
  YoloLoss loss_fn_;
  YoloBatch batch_;
  train::Updater& updater_;
};

}  // namespace

Architecture yolov3_architecture() {
  return make_architecture<YoloV3Step>(
      "yolov3", "darknet yolov3.cfg: Darknet-53 + three YOLO layers, forward_yolo_layer's loss",
      model_schema(), optimizer_schema(),
      [](const Params& model) { return total_parameters(YoloV3(yolov3_options(model))); });
}

}  // namespace gpubench::models
