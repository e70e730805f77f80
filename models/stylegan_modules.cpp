// StyleGAN's parts (models/stylegan.h): the options' geometry, the equalized-learning-rate
// layers and the blur, the mapping and synthesis networks and the generator, and the
// discriminator with its minibatch-stddev layer. The loss pieces, the synthetic reals, the config
// and the training step are in stylegan.cpp.
#include "models/stylegan.h"

#include "gpubench/base/compat.h"
#include "models/conv_gradfix.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace gpubench::models {

namespace {

constexpr double kLeakySlope = 0.2;               // every LeakyReLU of G and D
constexpr double kReluGain = 1.4142135623730951;  // sqrt(2): He gain of the LeakyReLU layers
constexpr double kEpsilon = 1e-8;                 // pixel norm, instance norm, minibatch stddev

/// LeakyReLU 0.2 in place.
torch::Tensor lrelu_inplace(torch::Tensor x) { return torch::leaky_relu_(x, kLeakySlope); }

/// LeakyReLU 0.2 in place, then (clamp > 0) the StyleGAN2-ADA clamp to +-clamp. The clamp is out
/// of place: the in-place LeakyReLU's backward reads its result.
torch::Tensor lrelu_clamp(torch::Tensor x, double clamp) {
  lrelu_inplace(x);
  return clamp > 0 ? x.clamp(-clamp, clamp) : x;
}

/// Autocast off, on every device type where it is on, while it lives (when `active`); the
/// layers outside the fp16 recipe's set. Restored as it was after.
class AutocastOff {
 public:
  explicit AutocastOff(bool active) {
    if (!active) return;
    for (const auto type : {torch::kCUDA, torch::kCPU}) {
      if (!compat::autocast_enabled(type)) continue;
      saved_.emplace_back(type, compat::autocast_dtype(type));
      compat::set_autocast(type, false, saved_.back().second);
    }
  }
  ~AutocastOff() {
    for (const auto& [type, dtype] : saved_) compat::set_autocast(type, true, dtype);
  }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  std::vector<std::pair<torch::DeviceType, torch::ScalarType>> saved_;
};

/// x in fp32 when `fp32` (the input of a layer that runs outside autocast), else x.
torch::Tensor fp32_if(const torch::Tensor& x, bool fp32) {
  return fp32 && x.scalar_type() != torch::kFloat ? x.to(torch::kFloat) : x;
}

/// The four 1-pixel shifts of the zero-padded kernel, summed: [..., k, k] -> [..., k+1, k+1].
/// This is how the reference turns the 3x3 kernel of a resampling conv into the 4x4 kernel of
/// its fused stride-2 form.
torch::Tensor shift_sum(const torch::Tensor& w) {
  const auto padded = torch::constant_pad_nd(w, {1, 1, 1, 1});
  const int64_t k = w.size(-1) + 1;
  auto shifted = [&](int64_t row, int64_t col) {
    return padded.narrow(-2, row, k).narrow(-1, col, k);
  };
  return shifted(1, 1) + shifted(0, 1) + shifted(1, 0) + shifted(0, 0);
}

}  // namespace

// ---- Options ----

int64_t StyleGanOptions::resolution_log2() const {
  int64_t log2 = 0;
  while ((int64_t{1} << (log2 + 1)) <= resolution_) ++log2;
  return log2;
}

int64_t StyleGanOptions::num_layers() const { return 2 * resolution_log2() - 2; }

int64_t StyleGanOptions::nf(int64_t stage) const {
  const auto maps = static_cast<int64_t>(static_cast<double>(fmap_base_) /
                                         std::pow(2.0, static_cast<double>(stage)));
  return std::min(maps, fmap_max_);
}

bool StyleGanOptions::fused_at(int64_t res) const {
  return (int64_t{1} << res) >= fused_scale_min_res_;
}

bool StyleGanOptions::fp16_at(int64_t res) const {
  if (fp16_everywhere()) return true;
  return res >= std::max<int64_t>(resolution_log2() + 1 - fp16_resolutions_, 3);
}

// ---- Layers ----

EqualizedLinearImpl::EqualizedLinearImpl(int64_t in, int64_t out, double gain, double lrmul)
    : weight_scale(gain / std::sqrt(static_cast<double>(in)) * lrmul), bias_scale(lrmul) {
  weight = register_parameter("weight", torch::randn({out, in}) / lrmul);
  bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor EqualizedLinearImpl::forward(const torch::Tensor& x) {
  return torch::linear(x, weight * weight_scale, bias_scale == 1.0 ? bias : bias * bias_scale);
}

EqualizedConv2dImpl::EqualizedConv2dImpl(int64_t in, int64_t out, int64_t kernel, double gain,
                                         bool with_bias)
    : weight_scale(gain / std::sqrt(static_cast<double>(in * kernel * kernel))) {
  TORCH_CHECK(kernel >= 1 && kernel % 2 == 1, "EqualizedConv2d needs an odd kernel");
  weight = register_parameter("weight", torch::randn({out, in, kernel, kernel}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

// The stride-1 and downscaling convolutions run through gradfix_conv2d: the discriminator's R1
// penalty differentiates them twice, and libtorch's own double backward of a convolution uses
// the output gradient as a kernel the size of the feature map (models/conv_gradfix.h).
torch::Tensor EqualizedConv2dImpl::forward(const torch::Tensor& x, bool add_bias) {
  const int64_t pad = weight.size(-1) / 2;
  return gradfix_conv2d(x, weight * weight_scale, add_bias ? bias : torch::Tensor(), 1, pad);
}

torch::Tensor EqualizedConv2dImpl::forward_up(const torch::Tensor& x, bool fused, bool add_bias) {
  const int64_t pad = weight.size(-1) / 2;
  const auto b = add_bias ? bias : torch::Tensor();
  if (!fused) return torch::conv2d(upscale2d(x), weight * weight_scale, b, 1, pad);
  // conv_transpose2d takes [in, out, k, k]. Padding (k - 1) / 2 on the (k+1)-kernel gives
  // exactly 2H outputs, TF's 'SAME' for conv2d_transpose with stride 2.
  const auto kernel = shift_sum((weight * weight_scale).transpose(0, 1));
  return torch::conv_transpose2d(x, kernel, b, 2, pad);
}

torch::Tensor EqualizedConv2dImpl::forward_down(const torch::Tensor& x, bool fused, bool add_bias) {
  const int64_t pad = weight.size(-1) / 2;
  const auto b = add_bias ? bias : torch::Tensor();
  // The 2x2 average of a constant bias is the bias, so adding it before the average is the
  // reference's apply_bias after it.
  if (!fused) return torch::avg_pool2d(gradfix_conv2d(x, weight * weight_scale, b, 1, pad), 2);
  return gradfix_conv2d(x, shift_sum(weight * weight_scale) * 0.25, b, 2, pad);
}

Blur2dImpl::Blur2dImpl(int64_t channels) {
  const auto taps = torch::tensor({1.0f, 2.0f, 1.0f});
  const auto filter = torch::outer(taps, taps) / 16.0;
  kernel = register_buffer("kernel", filter.expand({channels, 1, 3, 3}).contiguous());
}

// Every channel has the same filter, so the depthwise convolution is one single-channel
// convolution over [N * C, 1, H, W] (the same sums), and that one runs through gradfix_conv2d:
// libtorch's own double backward of a grouped convolution loops over the groups with the
// feature map as the kernel, which took 18.3 of the 19.2 s of a batch-16 step of the R1
// penalty on the H200 (docs/workloads/stylegan.md, "Step speed").
torch::Tensor Blur2dImpl::forward(const torch::Tensor& x, const torch::Tensor& bias) {
  const auto sizes = x.sizes();
  const auto planes = x.reshape({sizes[0] * sizes[1], 1, sizes[2], sizes[3]});
  auto y = gradfix_conv2d(planes, kernel.narrow(0, 0, 1), torch::Tensor(), 1, 1).view(sizes);
  return bias.defined() ? y + bias.view({1, -1, 1, 1}).to(y.scalar_type()) : y;
}

torch::Tensor upscale2d(const torch::Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.reshape({n, c, h, 1, w, 1}).expand({n, c, h, 2, w, 2}).reshape({n, c, 2 * h, 2 * w});
}

// ---- Generator ----

MappingNetworkImpl::MappingNetworkImpl(const StyleGanOptions& o) {
  dense = register_module("dense", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.mapping_layers(); ++i) {
    const int64_t in = i == 0 ? o.latent_size() : o.mapping_fmaps();
    const int64_t out = i == o.mapping_layers() - 1 ? o.dlatent_size() : o.mapping_fmaps();
    dense->push_back(EqualizedLinear(in, out, kReluGain, o.mapping_lrmul()));
  }
}

torch::Tensor MappingNetworkImpl::forward(const torch::Tensor& z) {
  auto x = z * torch::rsqrt(z.square().mean(1, /*keepdim=*/true) + kEpsilon);
  for (const auto& layer : *dense) x = lrelu_inplace(layer->as<EqualizedLinear>()->forward(x));
  return x;
}

LayerEpilogueImpl::LayerEpilogueImpl(int64_t channels, int64_t dlatent_size, std::string label,
                                     double clamp)
    : label(std::move(label)), clamp(clamp) {
  noise_strength = register_parameter("noise_strength", torch::zeros({channels}));
  style = register_module("style", EqualizedLinear(dlatent_size, 2 * channels, /*gain=*/1.0));
}

torch::Tensor LayerEpilogueImpl::forward(torch::Tensor x, const torch::Tensor& dlatent) {
  const int64_t n = x.size(0), c = x.size(1);
  const bool trace = activation_trace_active();
  if (trace) trace_activation(label + ".conv", x);
  // In place on the convolution's output, which its backward does not read: one activation
  // buffer for noise, bias and LeakyReLU instead of three. The strengths are cast to x's dtype
  // first so that under autocast the full-size kernel reads and writes one dtype.
  const auto noise = torch::randn({n, 1, x.size(2), x.size(3)}, x.options());
  x.addcmul_(noise, noise_strength.to(x.scalar_type()).view({1, c, 1, 1}));
  x = lrelu_clamp(std::move(x), clamp);
  if (trace) trace_activation(label + ".act", x);
  x = torch::instance_norm(x, {}, {}, {}, {}, /*use_input_stats=*/true, /*momentum=*/0.0, kEpsilon,
                           /*cudnn_enabled=*/true);
  if (trace) trace_activation(label + ".norm", x);
  const auto s = style(dlatent).view({n, 2, c, 1, 1});
  if (trace) trace_activation(label + ".style", s);
  auto y = torch::addcmul(s.select(1, 1), x, s.select(1, 0) + 1);
  if (trace) trace_activation(label + ".out", y);
  return y;
}

SynthesisNetworkImpl::SynthesisNetworkImpl(const StyleGanOptions& o) : options(o) {
  const int64_t log2 = o.resolution_log2();
  const int64_t d = o.dlatent_size();
  const_input = register_parameter("const_input", torch::ones({1, o.nf(1), 4, 4}));
  const_bias = register_parameter("const_bias", torch::zeros({o.nf(1)}));
  conv4 = register_module("conv4", EqualizedConv2d(o.nf(1), o.nf(1), 3, kReluGain));
  up_convs = register_module("up_convs", torch::nn::ModuleList());
  blurs = register_module("blurs", torch::nn::ModuleList());
  convs = register_module("convs", torch::nn::ModuleList());
  for (int64_t res = 3; res <= log2; ++res) {
    up_convs->push_back(EqualizedConv2d(o.nf(res - 2), o.nf(res - 1), 3, kReluGain));
    if (o.blur()) blurs->push_back(Blur2d(o.nf(res - 1)));
    convs->push_back(EqualizedConv2d(o.nf(res - 1), o.nf(res - 1), 3, kReluGain));
  }
  epilogues = register_module("epilogues", torch::nn::ModuleList());
  for (int64_t layer = 0; layer < o.num_layers(); ++layer) {
    // Layer 2k and 2k+1 are the two of resolution 2^(k+2): the constant (or the upscaling
    // conv) and the 3x3 conv.
    const int64_t side = int64_t{4} << (layer / 2);
    const char* which = layer == 0       ? "const"
                        : layer == 1     ? "conv"
                        : layer % 2 == 0 ? "conv0_up"
                                         : "conv1";
    epilogues->push_back(
        LayerEpilogue(o.nf(layer / 2 + 1), d, fmt::format("G.{}.{}", side, which), o.conv_clamp()));
  }
  to_rgb = register_module("to_rgb", torch::nn::ModuleList());
  for (int64_t res = log2; res >= 2; --res) {
    to_rgb->push_back(EqualizedConv2d(o.nf(res - 1), o.num_channels(), 1, /*gain=*/1.0));
  }
}

torch::Tensor SynthesisNetworkImpl::forward(const torch::Tensor& dlatents) {
  const int64_t n = dlatents.size(0);
  auto epilogue = [&](int64_t layer, torch::Tensor x) {
    return epilogues[layer]->as<LayerEpilogue>()->forward(std::move(x), dlatents.select(1, layer));
  };
  torch::Tensor x;
  {
    // The 4x4 block (fp32 under the fp16 recipe; the caller's precision otherwise).
    const AutocastOff fp32(!options.fp16_at(2));
    // The constant plus its bias, tiled over the minibatch (a fresh tensor the epilogue may
    // modify in place).
    x = (const_input + const_bias.view({1, -1, 1, 1})).repeat({n, 1, 1, 1});
    x = epilogue(0, x);
    x = epilogue(1, conv4(x));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(up_convs->size()); ++i) {
    const int64_t res = i + 3;
    // The fp16 recipe's blocks run under the caller's autocast; the others with it off, their
    // input in fp32 (in G the fp32 blocks come first, so this cast never narrows).
    const AutocastOff fp32(!options.fp16_at(res));
    x = fp32_if(x, !options.fp16_at(res));
    auto* up = up_convs[i]->as<EqualizedConv2d>();
    const bool fused = options.fused_at(res);
    if (options.blur()) {
      // The bias follows the blur in the reference; the blur adds it in the same kernel.
      x = blurs[i]->as<Blur2d>()->forward(up->forward_up(x, fused, /*add_bias=*/false), up->bias);
    } else {
      x = up->forward_up(x, fused);
    }
    x = epilogue(2 * res - 4, x);
    x = epilogue(2 * res - 3, convs[i]->as<EqualizedConv2d>()->forward(x));
  }
  // ToRGB belongs to the last block (its precision); under the fp16 recipe the images leave G
  // in fp32, as StyleGAN2-ADA's.
  const int64_t log2 = options.resolution_log2();
  torch::Tensor images;
  {
    const AutocastOff fp32(!options.fp16_at(log2));
    images = to_rgb[0]->as<EqualizedConv2d>()->forward(fp32_if(x, !options.fp16_at(log2)));
  }
  if (options.conv_clamp() > 0) images = images.clamp(-options.conv_clamp(), options.conv_clamp());
  if (!options.fp16_everywhere()) images = fp32_if(images, true);
  if (activation_trace_active()) trace_activation("G.torgb", images);
  return images;
}

torch::Tensor mix_styles(const torch::Tensor& w1, const torch::Tensor& w2, int64_t num_layers,
                         double prob) {
  const auto device = w1.device();
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  // Drawn on the device: cutoff ~ U{1, ..., num_layers - 1} with probability prob, else
  // num_layers (no mixing). No host read.
  auto cutoff = torch::randint(1, num_layers, torch::IntArrayRef{}, long_options);
  const auto keep = torch::rand({}, torch::TensorOptions().device(device)) >= prob;
  cutoff = cutoff.masked_fill(keep, num_layers);
  const auto first = (torch::arange(num_layers, long_options) < cutoff).view({1, num_layers, 1});
  return torch::where(first, w1.unsqueeze(1), w2.unsqueeze(1));
}

StyleGanGeneratorImpl::StyleGanGeneratorImpl(const StyleGanOptions& o) : options(o) {
  mapping = register_module("mapping", MappingNetwork(o));
  synthesis = register_module("synthesis", SynthesisNetwork(o));
  dlatent_avg = register_buffer("dlatent_avg", torch::zeros({o.dlatent_size()}));
}

torch::Tensor StyleGanGeneratorImpl::forward(const torch::Tensor& z) {
  const int64_t n = z.size(0), layers = options.num_layers();
  const bool mixing = is_training() && options.style_mixing_prob() > 0;
  torch::Tensor w, dlatents;
  {
    // The mapping runs in fp32 under the fp16 recipe (StyleGAN2-ADA's mapping is never fp16).
    const bool fp32 = !options.fp16_everywhere();
    const AutocastOff off(fp32);
    if (mixing) {
      // The reference maps the second z in a second call; one call on both halves is the same
      // arithmetic per row with half the launches.
      const auto both = mapping(fp32_if(torch::cat({z, torch::randn_like(z)}), fp32));
      w = both.narrow(0, 0, n);
      dlatents = mix_styles(w, both.narrow(0, n, n), layers, options.style_mixing_prob());
    } else {
      w = mapping(fp32_if(z, fp32));
      dlatents = w.unsqueeze(1).expand({n, layers, w.size(1)});
    }
  }
  if (activation_trace_active()) trace_activation("G.mapping", w);
  if (is_training() && options.dlatent_avg_beta() < 1) {
    torch::NoGradGuard no_grad;
    dlatent_avg.lerp_(w.detach().mean(0).to(dlatent_avg.scalar_type()),
                      1.0 - options.dlatent_avg_beta());
  }
  return synthesis(dlatents);
}

// ---- Discriminator ----

torch::Tensor minibatch_stddev(const torch::Tensor& x, int64_t group_size, int64_t num_features) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t group = std::min(group_size, n);
  TORCH_CHECK(n % group == 0, "minibatch stddev: a minibatch of ", n,
              " images does not split into groups of ", group);
  TORCH_CHECK(c % num_features == 0, "minibatch stddev: ", c, " channels do not split into ",
              num_features, " features");
  // [G, M, F, C/F, H, W]: image g * M + m is member g of group m. Statistics in fp32 at least,
  // as the reference casts them.
  const auto dtype = at::promote_types(x.scalar_type(), torch::kFloat);
  auto y = x.to(dtype).reshape({group, -1, num_features, c / num_features, h, w});
  y = y - y.mean(0, /*keepdim=*/true);
  y = torch::sqrt(y.square().mean(0) + kEpsilon);  // [M, F, C/F, H, W]
  y = y.mean({2, 3, 4});                           // [M, F]
  y = y.to(x.scalar_type()).view({-1, num_features, 1, 1}).repeat({group, 1, h, w});
  return torch::cat({x, y}, 1);
}

bool r1_pass_in_fp32(const std::string& setting, Precision precision) {
  if (setting == "auto") return precision == Precision::kAmpFp16;
  return setting == "fp32";
}

bool stylegan_batch_ok(int64_t batch, int64_t group_size) {
  return batch >= 1 && (group_size < 2 || batch < group_size || batch % group_size == 0);
}

StyleGanDiscriminatorImpl::StyleGanDiscriminatorImpl(const StyleGanOptions& o) : options(o) {
  const int64_t log2 = o.resolution_log2();
  from_rgb = register_module("from_rgb", torch::nn::ModuleList());
  for (int64_t res = log2; res >= 2; --res) {
    from_rgb->push_back(EqualizedConv2d(o.num_channels(), o.nf(res - 1), 1, kReluGain));
  }
  conv0 = register_module("conv0", torch::nn::ModuleList());
  blurs = register_module("blurs", torch::nn::ModuleList());
  conv1_down = register_module("conv1_down", torch::nn::ModuleList());
  for (int64_t res = log2; res >= 3; --res) {
    conv0->push_back(EqualizedConv2d(o.nf(res - 1), o.nf(res - 1), 3, kReluGain));
    if (o.blur()) blurs->push_back(Blur2d(o.nf(res - 1)));
    conv1_down->push_back(EqualizedConv2d(o.nf(res - 1), o.nf(res - 2), 3, kReluGain));
  }
  const int64_t stddev_maps = o.mbstd_group_size() > 1 ? o.mbstd_num_features() : 0;
  conv4 = register_module("conv4", EqualizedConv2d(o.nf(1) + stddev_maps, o.nf(1), 3, kReluGain));
  dense0 = register_module("dense0", EqualizedLinear(o.nf(1) * 16, o.nf(0), kReluGain));
  dense1 = register_module("dense1", EqualizedLinear(o.nf(0), 1, /*gain=*/1.0));
}

torch::Tensor StyleGanDiscriminatorImpl::forward(const torch::Tensor& images) {
  // LeakyReLU in place: convolutions and dense layers do not read their outputs in backward,
  // and the activation's own backward (and its double backward) needs only its result.
  // Under the fp16 recipe each block runs under the caller's autocast or, outside the fp16
  // set, with it off and its input in fp32; the clamp follows every convolution.
  const double clamp = options.conv_clamp();
  const bool trace = activation_trace_active();
  const int64_t log2 = options.resolution_log2();
  torch::Tensor x;
  {
    // FromRGB belongs to the first block.
    const AutocastOff fp32(!options.fp16_at(log2));
    x = lrelu_clamp(
        from_rgb[0]->as<EqualizedConv2d>()->forward(fp32_if(images, !options.fp16_at(log2))),
        clamp);
  }
  if (trace) trace_activation(fmt::format("D.{}.from_rgb", int64_t{1} << log2), x);
  for (int64_t i = 0; i < static_cast<int64_t>(conv0->size()); ++i) {
    const int64_t res = log2 - i;
    const AutocastOff fp32(!options.fp16_at(res));
    x = fp32_if(x, !options.fp16_at(res));
    x = lrelu_clamp(conv0[i]->as<EqualizedConv2d>()->forward(x), clamp);
    if (trace) trace_activation(fmt::format("D.{}.conv0", int64_t{1} << res), x);
    if (options.blur()) x = blurs[i]->as<Blur2d>()->forward(x);
    x = lrelu_clamp(conv1_down[i]->as<EqualizedConv2d>()->forward_down(x, options.fused_at(res)),
                    clamp);
    if (trace) trace_activation(fmt::format("D.{}.conv1_down", int64_t{1} << res), x);
  }
  // The 4x4 epilogue: fp32 under the fp16 recipe (StyleGAN2-ADA's DiscriminatorEpilogue).
  const AutocastOff fp32(!options.fp16_at(2));
  x = fp32_if(x, !options.fp16_at(2));
  if (options.mbstd_group_size() > 1) {
    x = minibatch_stddev(x, options.mbstd_group_size(), options.mbstd_num_features());
    if (trace) trace_activation("D.mbstd", x);
  }
  x = lrelu_clamp(conv4(x), clamp);
  if (trace) trace_activation("D.conv4", x);
  x = lrelu_inplace(dense0(x.flatten(1)));
  if (trace) trace_activation("D.dense0", x);
  auto scores = dense1(x);
  if (trace) trace_activation("D.dense1", scores);
  return scores;
}

}  // namespace gpubench::models
