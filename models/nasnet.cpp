#include "models/nasnet.h"

#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpubench::models {

namespace {

torch::nn::BatchNorm2d batch_norm(int64_t channels, const NasNetOptions& o) {
  return torch::nn::BatchNorm2d(
      torch::nn::BatchNorm2dOptions(channels).eps(o.bn_eps()).momentum(o.bn_momentum()));
}

torch::nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

}  // namespace

// ---- TF "SAME" padding ----

std::pair<int64_t, int64_t> tf_same_padding(int64_t size, int64_t kernel, int64_t stride) {
  const int64_t out = (size + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + kernel - size, 0);
  return {total / 2, total - total / 2};
}

torch::Tensor conv2d_same(const torch::Tensor& x, const torch::Tensor& weight, int64_t stride,
                          int64_t groups) {
  const auto [top, bottom] = tf_same_padding(x.size(2), weight.size(2), stride);
  const auto [left, right] = tf_same_padding(x.size(3), weight.size(3), stride);
  // cuDNN pads symmetrically; TF puts the odd pixel at the bottom and right, so that one is
  // added explicitly (only stride-2 convolutions of even sizes need it: reduction_cell_0).
  const auto padded = (bottom != top || right != left)
                          ? torch::constant_pad_nd(x, {0, right - left, 0, bottom - top})
                          : x;
  return torch::conv2d(padded, weight, {}, stride, {top, left}, 1, groups);
}

// Pooling: padding `before` on both sides plus ceil_mode adds exactly the window TF's extra
// bottom/right pixel gives, and PyTorch clips that window to the input, so neither an explicit
// pad nor a mask is needed.
torch::Tensor max_pool2d_same(const torch::Tensor& x, int64_t kernel, int64_t stride) {
  const int64_t top = tf_same_padding(x.size(2), kernel, stride).first;
  const int64_t left = tf_same_padding(x.size(3), kernel, stride).first;
  return torch::max_pool2d(x, kernel, stride, {top, left}, 1, /*ceil_mode=*/true);
}

torch::Tensor avg_pool2d_same(const torch::Tensor& x, int64_t kernel, int64_t stride) {
  const int64_t top = tf_same_padding(x.size(2), kernel, stride).first;
  const int64_t left = tf_same_padding(x.size(3), kernel, stride).first;
  return torch::avg_pool2d(x, kernel, stride, {top, left}, /*ceil_mode=*/true,
                           /*count_include_pad=*/false);
}

// ---- Building blocks ----

SeparableConvImpl::SeparableConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride_)
    : stride(stride_) {
  // The depthwise convolution is applied functionally (its padding depends on the input size);
  // the module only holds its weight.
  depthwise = register_module(
      "depthwise",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(in, in, kernel).groups(in).bias(false)));
  pointwise = register_module("pointwise", conv1x1(in, out));
}

torch::Tensor SeparableConvImpl::forward(const torch::Tensor& x) {
  return pointwise(conv2d_same(x, depthwise->weight, stride, x.size(1)));
}

SeparableStackImpl::SeparableStackImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                       const NasNetOptions& o) {
  separable_1 = register_module("separable_1", SeparableConv(in, out, kernel, stride));
  bn_sep_1 = register_module("bn_sep_1", batch_norm(out, o));
  separable_2 = register_module("separable_2", SeparableConv(out, out, kernel, 1));
  bn_sep_2 = register_module("bn_sep_2", batch_norm(out, o));
}

torch::Tensor SeparableStackImpl::forward(const torch::Tensor& relu_x) {
  // The ReLU between the layers runs in place: BatchNorm's backward needs its input, not its
  // output.
  auto y = bn_sep_1(separable_1(relu_x));
  y.relu_();
  return bn_sep_2(separable_2(y));
}

Conv1x1BnImpl::Conv1x1BnImpl(int64_t in, int64_t out, const NasNetOptions& o) {
  conv = register_module("conv", conv1x1(in, out));
  bn = register_module("bn", batch_norm(out, o));
}

torch::Tensor Conv1x1BnImpl::forward(const torch::Tensor& relu_x) { return bn(conv(relu_x)); }

FactorizedReductionImpl::FactorizedReductionImpl(int64_t in, int64_t out, const NasNetOptions& o) {
  TORCH_CHECK(out % 2 == 0, "factorized reduction needs an even number of filters, got ", out);
  // Path 1: TF's 1 x 1 average pool with stride 2 keeps every second pixel; a stride-2 1 x 1
  // convolution reads exactly those.
  path1_conv = register_module("path1_conv", conv1x1(in, out / 2, /*stride=*/2));
  path2_conv = register_module("path2_conv", conv1x1(in, out / 2));
  final_path_bn = register_module("final_path_bn", batch_norm(out, o));
}

torch::Tensor FactorizedReductionImpl::forward(const torch::Tensor& relu_x) {
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  auto path1 = path1_conv(relu_x);
  // Path 2: TF pads one zero row and column at the bottom and right, drops the first row and
  // column, and keeps every second pixel: the odd pixels of x, then (on odd sizes) one zero
  // pixel, which stays zero through the bias-free convolution, so it is padded after it.
  auto path2 = path2_conv(relu_x.slice(2, 1, kEnd, 2).slice(3, 1, kEnd, 2));
  const int64_t missing_h = path1.size(2) - path2.size(2);
  const int64_t missing_w = path1.size(3) - path2.size(3);
  if (missing_h > 0 || missing_w > 0) {
    path2 = torch::constant_pad_nd(path2, {0, missing_w, 0, missing_h});
  }
  return final_path_bn(torch::cat({path1, path2}, 1));
}

PrevProjectionImpl::PrevProjectionImpl(PrevPath path_, int64_t in, int64_t out,
                                       const NasNetOptions& o)
    : path(path_) {
  if (path == PrevPath::kConv1x1) {
    conv_prev_1x1 = register_module("conv_prev_1x1", Conv1x1Bn(in, out, o));
  } else if (path == PrevPath::kFactorized) {
    factorized = register_module("factorized", FactorizedReduction(in, out, o));
  }
}

torch::Tensor PrevProjectionImpl::forward(const torch::Tensor& relu_x_prev) {
  switch (path) {
    case PrevPath::kConv1x1:
      return conv_prev_1x1(relu_x_prev);
    case PrevPath::kFactorized:
      return factorized(relu_x_prev);
    case PrevPath::kIdentity:
      break;
  }
  return relu_x_prev;
}

// ---- Cells ----

NormalCellImpl::NormalCellImpl(int64_t in, int64_t in_prev, int64_t filters, PrevPath prev_path,
                               const NasNetOptions& o) {
  TORCH_CHECK(prev_path != PrevPath::kIdentity,
              "a NASNet normal cell needs its previous input projected (", in_prev, " channels, ",
              filters, " filters)");
  const int64_t f = filters;
  conv_1x1 = register_module("conv_1x1", Conv1x1Bn(in, f, o));
  prev = register_module("prev", PrevProjection(prev_path, in_prev, f, o));
  comb_iter_0_left = register_module("comb_iter_0_left", SeparableStack(f, f, 5, 1, o));
  comb_iter_0_right = register_module("comb_iter_0_right", SeparableStack(f, f, 3, 1, o));
  comb_iter_1_left = register_module("comb_iter_1_left", SeparableStack(f, f, 5, 1, o));
  comb_iter_1_right = register_module("comb_iter_1_right", SeparableStack(f, f, 3, 1, o));
  comb_iter_4_left = register_module("comb_iter_4_left", SeparableStack(f, f, 3, 1, o));
}

torch::Tensor NormalCellImpl::forward(const torch::Tensor& relu_x,
                                      const torch::Tensor& relu_x_prev) {
  const auto h = conv_1x1(relu_x);
  const auto hp = prev(relu_x_prev);
  // One ReLU per state, shared by the separable branches that read it.
  const auto relu_h = torch::relu(h), relu_hp = torch::relu(hp);
  // Each sum is formed in place in a fresh branch output (BatchNorm and average pooling do not
  // keep their outputs for backward).
  auto c0 = comb_iter_0_left(relu_h).add_(comb_iter_0_right(relu_hp));
  auto c1 = comb_iter_1_left(relu_hp).add_(comb_iter_1_right(relu_hp));
  auto c2 = avg_pool2d_same(h, 3, 1).add_(hp);
  // avg3(hp) + avg3(hp): the same parameter-free pool of the same state twice, so it runs once.
  auto c3 = avg_pool2d_same(hp, 3, 1).mul_(2);
  auto c4 = comb_iter_4_left(relu_h).add_(h);
  return torch::cat({hp, c0, c1, c2, c3, c4}, 1);
}

ReductionCellImpl::ReductionCellImpl(int64_t in, int64_t in_prev, int64_t filters,
                                     PrevPath prev_path, const NasNetOptions& o) {
  // An unprojected previous input (cell_stem_0's) keeps its width into the first separables.
  const int64_t f = filters, fp = prev_path == PrevPath::kIdentity ? in_prev : filters;
  conv_1x1 = register_module("conv_1x1", Conv1x1Bn(in, f, o));
  prev = register_module("prev", PrevProjection(prev_path, in_prev, f, o));
  comb_iter_0_left = register_module("comb_iter_0_left", SeparableStack(f, f, 5, 2, o));
  comb_iter_0_right = register_module("comb_iter_0_right", SeparableStack(fp, f, 7, 2, o));
  comb_iter_1_right = register_module("comb_iter_1_right", SeparableStack(fp, f, 7, 2, o));
  comb_iter_2_right = register_module("comb_iter_2_right", SeparableStack(fp, f, 5, 2, o));
  comb_iter_4_left = register_module("comb_iter_4_left", SeparableStack(f, f, 3, 1, o));
}

torch::Tensor ReductionCellImpl::forward(const torch::Tensor& relu_x,
                                         const torch::Tensor& relu_x_prev) {
  const auto h = conv_1x1(relu_x);
  const auto hp = prev(relu_x_prev);
  // The reduction cell reads hp only through separables, so an unprojected (already ReLU'd)
  // previous input needs no second ReLU.
  const auto relu_h = torch::relu(h);
  const auto relu_hp = prev->path == PrevPath::kIdentity ? hp : torch::relu(hp);
  auto c0 = comb_iter_0_left(relu_h).add_(comb_iter_0_right(relu_hp));
  // comb_iter_1's left and comb_iter_4's right are the same max pool of h: computed once.
  const auto max_h = max_pool2d_same(h, 3, 2);
  auto c1 = comb_iter_1_right(relu_hp).add_(max_h);
  auto c2 = avg_pool2d_same(h, 3, 2).add_(comb_iter_2_right(relu_hp));
  auto c3 = avg_pool2d_same(c0, 3, 1).add_(c1);
  auto c4 = comb_iter_4_left(torch::relu(c0)).add_(max_h);
  return torch::cat({c1, c2, c3, c4}, 1);
}

// ---- The network ----

namespace {
/// TF's calc_reduction_layers: the normal-cell indices that a reduction cell precedes.
std::vector<int64_t> reduction_layers(int64_t num_cells, int64_t num_reductions) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= num_reductions; ++i) {
    out.push_back(
        static_cast<int64_t>(static_cast<double>(i) / static_cast<double>(num_reductions + 1) *
                             static_cast<double>(num_cells)));
  }
  return out;
}
}  // namespace

NasNetImpl::NasNetImpl(const NasNetOptions& o) : options(o) {
  conv0 = register_module(
      "conv0",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, o.stem_filters(), 3).stride(2).bias(false)));
  conv0_bn = register_module("conv0_bn", batch_norm(o.stem_filters(), o));

  // Channels and resolution level (reductions so far) of every state, to choose each cell's
  // previous-input path as TF's _reduce_prev_layer does from the shapes.
  struct State {
    int64_t channels;
    int64_t level;
  };
  std::vector<State> states{{o.stem_filters(), 0}};
  auto add = [&](const std::string& name, bool reduction, int64_t prev, double scaling) {
    const State cur = states.back();
    Step step;
    step.name = name;
    step.reduction = reduction;
    step.prev = prev;
    step.filters = static_cast<int64_t>(static_cast<double>(o.num_conv_filters()) * scaling);
    int64_t in_prev = cur.channels;
    if (prev >= 0) {
      const State& p = states[static_cast<std::size_t>(prev)];
      in_prev = p.channels;
      step.prev_path = p.level != cur.level         ? PrevPath::kFactorized
                       : p.channels != step.filters ? PrevPath::kConv1x1
                                                    : PrevPath::kIdentity;
    }
    if (reduction) {
      step.index = reduction_cells.size();
      step.out_channels = 4 * step.filters;
      reduction_cells.push_back(register_module(
          name, ReductionCell(cur.channels, in_prev, step.filters, step.prev_path, o)));
    } else {
      step.index = normal_cells.size();
      step.out_channels = 6 * step.filters;
      normal_cells.push_back(register_module(
          name, NormalCell(cur.channels, in_prev, step.filters, step.prev_path, o)));
    }
    steps_.push_back(step);
    states.push_back({step.out_channels, cur.level + (reduction ? 1 : 0)});
  };
  auto last_but_one = [&] { return static_cast<int64_t>(states.size()) - 2; };

  // _imagenet_stem: two reduction cells at F / rate^2 and F / rate; cell_stem_0 has no previous
  // input (TF passes None and the cell reads conv0's output for it, unprojected).
  double scaling = 1.0 / (o.filter_scaling_rate() * o.filter_scaling_rate());
  add("cell_stem_0", true, -1, scaling);
  scaling *= o.filter_scaling_rate();
  add("cell_stem_1", true, last_but_one(), scaling);

  // _build_nasnet_base's loop.
  const auto reductions = reduction_layers(o.num_cells(), o.num_reduction_layers());
  scaling = 1.0;
  for (int64_t cell = 0; cell < o.num_cells(); ++cell) {
    int64_t prev = last_but_one();  // skip_reduction_layer_input: read before the reduction
    const auto r = std::find(reductions.begin(), reductions.end(), cell);
    if (r != reductions.end()) {
      scaling *= o.filter_scaling_rate();
      add("reduction_cell_" + std::to_string(r - reductions.begin()), true, last_but_one(),
          scaling);
    }
    if (!o.skip_reduction_layer_input()) prev = last_but_one();
    add("cell_" + std::to_string(cell), false, prev, scaling);
  }

  // Each state is released once its last reader has run (the caller's tensors aside).
  last_use_.assign(states.size(), steps_.size());
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    last_use_[i] = i;
    if (steps_[i].prev >= 0) {
      auto& use = last_use_[static_cast<std::size_t>(steps_[i].prev)];
      use = std::max(use, i);
    }
  }

  dropout = register_module("dropout", torch::nn::Dropout(o.dropout()));
  last_linear =
      register_module("last_linear", torch::nn::Linear(states.back().channels, o.num_classes()));
}

torch::Tensor NasNetImpl::features(const torch::Tensor& images) {
  std::vector<torch::Tensor> states;
  states.reserve(steps_.size() + 1);
  // Every reader of a state takes its ReLU, so each state is kept after one in-place ReLU
  // (neither BatchNorm nor concatenation keeps its output for backward): one pass and one saved
  // copy per state instead of one per reader.
  states.push_back(conv0_bn(conv0(images)).relu_());
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    const auto& x = states[i];
    const auto& x_prev = step.prev >= 0 ? states[static_cast<std::size_t>(step.prev)] : x;
    states.push_back((step.reduction ? reduction_cells[step.index]->forward(x, x_prev)
                                     : normal_cells[step.index]->forward(x, x_prev))
                         .relu_());
    for (std::size_t s = 0; s <= i; ++s) {
      if (last_use_[s] == i) states[s] = torch::Tensor();
    }
  }
  return states.back();
}

torch::Tensor NasNetImpl::forward(const torch::Tensor& images) {
  return last_linear(dropout(features(images).mean({2, 3})));
}

void init_nasnet_weights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  // Inverse-CDF sampling of a normal truncated at +-2 standard deviations, as
  // tf.truncated_normal draws (it resamples outside the bounds).
  const double bound = std::erf(2.0 / std::sqrt(2.0));
  auto truncated_normal = [&](torch::Tensor& w, double fan_out) {
    const double stddev = std::sqrt(1.3 * 2.0 / fan_out);
    w.uniform_(-bound, bound).erfinv_().mul_(stddev * std::sqrt(2.0));
  };
  for (auto& m : module.modules(/*include_self=*/true)) {
    if (auto* conv = m->as<torch::nn::Conv2d>()) {
      const auto& w = conv->weight;
      const double fan_out = static_cast<double>(w.size(0) * w.size(2) * w.size(3)) /
                             static_cast<double>(conv->options.groups());
      truncated_normal(conv->weight, fan_out);
    } else if (auto* linear = m->as<torch::nn::Linear>()) {
      truncated_normal(linear->weight, static_cast<double>(linear->weight.size(0)));
      linear->bias.zero_();
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1);
      bn->bias.zero_();
    }
  }
}

// ---- Config ----

ParamSchema nasnet_model_schema() {
  return {
      {"image_size",
       ParamKind::kInt,
       331,
       "input height and width (build_nasnet_large: 331)",
       {},
       16},
      {"num_classes",
       ParamKind::kInt,
       1000,
       "classes (TF's 1001 includes a background class)",
       {},
       2},
      {"num_cells", ParamKind::kInt, 18, "normal cells over all stacks (6 per stack)", {}, 1},
      {"num_conv_filters",
       ParamKind::kInt,
       168,
       "filters F of the first stack (24 F at the end)",
       {},
       4},
      {"stem_filters", ParamKind::kInt, 96, "conv0 filters: int(32 * stem_multiplier 3)", {}, 1},
      {"filter_scaling_rate",
       ParamKind::kNumber,
       2.0,
       "filters grow by this at each reduction",
       {},
       1},
      {"num_reduction_layers", ParamKind::kInt, 2, "reduction cells between the stacks", {}, 0},
      {"skip_reduction_layer_input", ParamKind::kBool, true,
       "the cell after a reduction reads the cell before it as previous input"},
      {"dropout",
       ParamKind::kNumber,
       0.5,
       "before the classifier: 1 - dense_dropout_keep_prob",
       {},
       0},
      {"bn_eps", ParamKind::kNumber, 1e-3, "BatchNorm epsilon", {}, 0},
      {"bn_momentum",
       ParamKind::kNumber,
       3e-4,
       "BatchNorm running-average momentum, torch convention (1 - TF decay 0.9997)",
       {},
       0},
      {"label_smoothing", ParamKind::kNumber, 0.1, "cross-entropy label smoothing", {}, 0},
      {"memory_format",
       ParamKind::kString,
       "channels_last",
       "activation and weight layout: channels_last (NHWC) or contiguous (NCHW); same math",
       {"channels_last", "contiguous"}},
      {"probe_memory_format",
       ParamKind::kString,
       "same",
       "layout the max-batch search's probes build with (same: memory_format); the timed run "
       "keeps memory_format and confirms the batch",
       {"same", "channels_last", "contiguous"}},
  };
}

NasNetOptions nasnet_options(const Params& m) {
  return NasNetOptions()
      .num_classes(m.i64("num_classes"))
      .num_cells(m.i64("num_cells"))
      .num_conv_filters(m.i64("num_conv_filters"))
      .stem_filters(m.i64("stem_filters"))
      .filter_scaling_rate(m.f64("filter_scaling_rate"))
      .num_reduction_layers(m.i64("num_reduction_layers"))
      .skip_reduction_layer_input(m.flag("skip_reduction_layer_input"))
      .dropout(m.f64("dropout"))
      .bn_eps(m.f64("bn_eps"))
      .bn_momentum(m.f64("bn_momentum"));
}

ParamSchema nasnet_optimizer_schema() {
  return {
      {"name",
       ParamKind::kString,
       "tf-rmsprop",
       "tf-rmsprop: tf.train.RMSPropOptimizer (eps inside the root, mean square starts at 1)",
       {"tf-rmsprop"}},
      {"lr", ParamKind::kNumber, 0.01, "initial learning rate", {}, 0},
      {"decay", ParamKind::kNumber, 0.9, "RMSProp mean-square decay (rho)", {}, 0},
      {"momentum", ParamKind::kNumber, 0.9, "RMSProp momentum", {}, 0},
      {"eps", ParamKind::kNumber, 1.0, "RMSProp epsilon (under the root)", {}, 0},
      {"weight_decay",
       ParamKind::kNumber,
       5e-5,
       "L2 on convolution and classifier weights (not BatchNorm, not biases)",
       {},
       0},
      {"clip_norm", ParamKind::kNumber, 10.0, "global gradient-norm clip; 0 = off", {}, 0},
      {"lr_decay_factor", ParamKind::kNumber, 0.94, "exponential decay factor", {}, 0},
      {"epochs_per_decay", ParamKind::kNumber, 2.0, "epochs between decays (staircase)", {}, 0},
      {"examples_per_epoch", ParamKind::kInt, 1281167, "ImageNet training images", {}, 1},
  };
}

train::Updater make_nasnet_updater(const torch::nn::Module& module, const Params& o, int64_t batch,
                                   Precision precision, const torch::Device& device) {
  // slim's l2_regularizer sits on the weights of conv2d, separable_conv2d (depthwise and
  // pointwise) and fully_connected: here every parameter of more than one dimension. BatchNorm
  // scales and offsets and the classifier bias are not regularized.
  train::ParamGroup decayed{{}, o.f64("weight_decay")}, undecayed{{}, 0.0};
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) (p.dim() > 1 ? decayed : undecayed).params.push_back(p);
  }
  train::TfRmsPropOptions rms;
  rms.lr = o.f64("lr");
  rms.decay = o.f64("decay");
  rms.momentum = o.f64("momentum");
  rms.eps = o.f64("eps");
  // train_image_classifier.py: decay_steps = int(examples_per_epoch / batch_size *
  // num_epochs_per_decay), staircase.
  const auto decay_steps = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(o.i64("examples_per_epoch")) /
                              static_cast<double>(batch) * o.f64("epochs_per_decay")));
  return train::Updater(
      std::make_unique<train::TfRmsProp>(std::vector<train::ParamGroup>{decayed, undecayed}, rms),
      precision, device, o.f64("clip_norm"),
      train::exponential_decay(rms.lr, o.f64("lr_decay_factor"), decay_steps, /*staircase=*/true));
}

// ---- The training step ----

ImageBatch::ImageBatch(int64_t batch, int64_t image_size, int64_t classes, bool channels_last,
                       const torch::Device& device, uint64_t seed) {
  torch::manual_seed(seed + 1);
  const auto options = torch::TensorOptions().device(device);
  images = torch::rand({batch, 3, image_size, image_size}, options).mul_(2).sub_(1);
  if (channels_last) images = images.contiguous(torch::MemoryFormat::ChannelsLast);
  labels = torch::randint(0, classes, {batch}, options.dtype(torch::kLong));
}

namespace {

/// Converts every 4-d parameter to the channels-last layout in place (the module keeps the
/// same parameter objects, so an optimizer built afterwards sees them).
void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

class NasNetStep final : public train::RuntimeStep {
 public:
  explicit NasNetStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        label_smoothing_(ctx.model.f64("label_smoothing")),
        model_(build(ctx)),
        batch_(ctx.batch, ctx.model.i64("image_size"), ctx.model.i64("num_classes"),
               ctx.model.str("memory_format") == "channels_last", ctx.device, ctx.seed),
        updater_(runtime_.add("model", make_nasnet_updater(*model_, ctx.optimizer, ctx.batch,
                                                           ctx.precision, ctx.device))) {}

  double run() override {
    return runtime_.run([&] {
      updater_.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = runtime_.autocast();
        const auto logits = model_->forward(batch_.images);
        loss = torch::nn::functional::cross_entropy(
            logits.to(torch::kFloat), batch_.labels,
            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing_));
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
                {"classes", model_->options.num_classes()}};
  }

 private:
  /// The model on the device, initialized there (fast), in its layout and in training mode.
  static NasNet build(const StepContext& ctx) {
    torch::manual_seed(ctx.seed);
    NasNet model(nasnet_options(ctx.model));
    model->to(ctx.device);
    // Initialized before the layout changes, so both layouts draw the same weights.
    init_nasnet_weights(*model);
    if (ctx.model.str("memory_format") == "channels_last") to_channels_last(*model);
    model->train();
    return model;
  }

  double label_smoothing_;
  NasNet model_;
  ImageBatch batch_;
  train::Updater& updater_;
};

}  // namespace

Architecture nasnet_architecture() {
  return make_architecture<NasNetStep>(
      "nasnet", "NASNet-A ImageNet classifier (TF-slim graph, Cadene/timm port), TF RMSProp",
      nasnet_model_schema(), nasnet_optimizer_schema(),
      [](const Params& model) { return total_parameters(NasNet(nasnet_options(model))); });
}

}  // namespace gpubench::models
