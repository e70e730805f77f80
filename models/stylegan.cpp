#include "models/stylegan.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/errors.h"
#include "gpubench/config/config.h"
#include "gpubench/train/runtime.h"
#include "models/conv_gradfix.h"
#include "models/workload_common.h"

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

StyleGanOptions stylegan_options(const Params& m, Precision precision) {
  const int64_t resolution = m.i64("resolution");
  GPUBENCH_CHECK(resolution >= 4 && (resolution & (resolution - 1)) == 0, ConfigError,
                 "model.resolution = {}: StyleGAN's resolution must be a power of two >= 4 (the "
                 "reference's is 1024)",
                 resolution);
  // fp16_resolutions: "all", or how many of the highest resolutions (4x4 .. resolution: log2 - 1
  // of them) run in fp16.
  const int64_t resolutions = StyleGanOptions().resolution(resolution).resolution_log2() - 1;
  const std::string fp16 = m.str("fp16_resolutions");
  int64_t fp16_count = StyleGanOptions::kAllResolutions;
  if (fp16 != "all") {
    const bool digits =
        !fp16.empty() && fp16.size() <= 3 &&
        std::all_of(fp16.begin(), fp16.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t n = digits ? std::stoll(fp16) : -1;
    GPUBENCH_CHECK(digits && n <= resolutions, ConfigError,
                   "model.fp16_resolutions = '{}': use 'all' (every layer under autocast), or how "
                   "many of the {} highest resolutions run in fp16 under amp-fp16, 0 to {} as a "
                   "quoted string (StyleGAN2-ADA's recipe: '4')",
                   fp16, resolutions, resolutions);
    fp16_count = n;
  }
  const bool recipe = precision == Precision::kAmpFp16;
  return StyleGanOptions()
      .resolution(resolution)
      .num_channels(m.i64("num_channels"))
      .latent_size(m.i64("latent_size"))
      .dlatent_size(m.i64("dlatent_size"))
      .mapping_layers(m.i64("mapping_layers"))
      .mapping_fmaps(m.i64("mapping_fmaps"))
      .mapping_lrmul(m.f64("mapping_lrmul"))
      .fmap_base(m.i64("fmap_base"))
      .fmap_max(m.i64("fmap_max"))
      .fused_scale_min_res(m.i64("fused_scale_min_res"))
      .blur(m.flag("blur"))
      .style_mixing_prob(m.f64("style_mixing_prob"))
      .dlatent_avg_beta(m.f64("dlatent_avg_beta"))
      .mbstd_group_size(m.i64("mbstd_group_size"))
      .mbstd_num_features(m.i64("mbstd_num_features"))
      .fp16_resolutions(recipe ? fp16_count : StyleGanOptions::kAllResolutions)
      .conv_clamp(recipe ? m.f64("conv_clamp") : 0.0);
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

// ---- Loss pieces and data ----

torch::Tensor r1_penalty(const torch::Tensor& real_scores, const torch::Tensor& reals,
                         const train::GradScaler* scaler) {
  const bool scaled = scaler != nullptr && scaler->enabled();
  auto total = real_scores.sum();
  if (scaled) total = scaler->scale(total);
  auto grad = torch::autograd::grad({total}, {reals}, /*grad_outputs=*/{}, /*retain_graph=*/true,
                                    /*create_graph=*/true)[0];
  if (scaled) grad = grad / scaler->scale(torch::ones({}, grad.options().dtype(torch::kFloat)));
  // Squared in fp32 at least (a bf16 or fp16 gradient under AMP), as the reference's fp32().
  return grad.to(at::promote_types(grad.scalar_type(), torch::kFloat)).square().sum({1, 2, 3});
}

SyntheticReals::SyntheticReals(int64_t batch, int64_t channels, int64_t resolution, bool mirror,
                               const torch::Device& device, uint64_t seed)
    : mirror_(mirror) {
  // Drawn on the device: at 1024x1024 a large batch is gigabytes, which the host would take
  // seconds to draw and copy.
  torch::manual_seed(seed + 1);
  images_ = torch::randint(0, 256, {batch, channels, resolution, resolution},
                           torch::TensorOptions().dtype(torch::kByte).device(device));
}

torch::Tensor SyntheticReals::next() const {
  // adjust_dynamic_range([0, 255] -> [-1, 1]), then MirrorAugment.
  auto x = images_.to(torch::kFloat).mul_(2.0 / 255.0).sub_(1.0);
  if (mirror_) {
    const auto keep = torch::rand({x.size(0), 1, 1, 1}, x.options()) < 0.5;
    x = torch::where(keep, x, x.flip({3}));
  }
  return x;
}

// ---- The training step ----

namespace {

ParamSchema stylegan_schema() {
  return {
      {"resolution",
       ParamKind::kInt,
       1024,
       "image side, a power of two (lod 0 of the reference)",
       {},
       4},
      {"num_channels", ParamKind::kInt, 3, "image channels", {}, 1},
      {"latent_size", ParamKind::kInt, 512, "z width", {}, 1},
      {"dlatent_size", ParamKind::kInt, 512, "w width", {}, 1},
      {"mapping_layers", ParamKind::kInt, 8, "dense layers of the mapping network", {}, 1},
      {"mapping_fmaps", ParamKind::kInt, 512, "hidden width of the mapping network", {}, 1},
      {"mapping_lrmul",
       ParamKind::kNumber,
       0.01,
       "learning-rate multiplier of the mapping network",
       {},
       0},
      {"fmap_base",
       ParamKind::kInt,
       8192,
       "feature maps at stage s: min(fmap_base / 2^s, fmap_max)",
       {},
       1},
      {"fmap_max", ParamKind::kInt, 512, "most feature maps of any layer", {}, 1},
      {"fused_scale_min_res",
       ParamKind::kInt,
       128,
       "blocks at this resolution and above fuse x2 resampling into the conv",
       {},
       1},
      {"blur", ParamKind::kBool, true, "[1,2,1] blur after upscaling and before downscaling convs"},
      {"style_mixing_prob", ParamKind::kNumber, 0.9, "probability of mixing two dlatents", {}, 0},
      {"dlatent_avg_beta",
       ParamKind::kNumber,
       0.995,
       "decay of the tracked mean of w; 1 = off",
       {},
       0},
      {"mbstd_group_size",
       ParamKind::kInt,
       4,
       "minibatch-stddev group size; < 2 = no layer",
       {},
       0},
      {"mbstd_num_features", ParamKind::kInt, 1, "maps the minibatch-stddev layer appends", {}, 1},
      {"r1_gamma",
       ParamKind::kNumber,
       10.0,
       "weight of the R1 penalty on reals (x gamma / 2)",
       {},
       0},
      {"r1_pass",
       ParamKind::kString,
       "auto",
       "precision of D's pass over the reals that R1 differentiates twice: fp32, autocast, or "
       "auto (fp32 under amp-fp16, autocast otherwise)",
       {"auto", "fp32", "autocast"}},
      {"fp16_resolutions", ParamKind::kString, "4",
       "amp-fp16 only: how many of the highest resolutions of G's synthesis and of D run in "
       "fp16, as a quoted count ('4': StyleGAN2-ADA's num_fp16_res); the rest, the mapping and "
       "D's 4x4 epilogue in fp32; 'all': every layer under autocast (v1 as it is)"},
      {"conv_clamp",
       ParamKind::kNumber,
       256.0,
       "amp-fp16 only: clamp every convolution's output to +-this after its bias and activation "
       "(StyleGAN2-ADA's conv_clamp, 256); 0 = off",
       {},
       0},
      {"mirror_augment", ParamKind::kBool, true, "mirror each real left-right with p 1/2"},
      {"g_smoothing_kimg",
       ParamKind::kNumber,
       10.0,
       "half-life of the Gs moving average of G, in thousands of images; 0 = copy",
       {},
       0},
  };
}

ParamSchema stylegan_optimizer_schema() {
  return {
      {"lr", ParamKind::kNumber, 0.003, "Adam rate of G and D (the reference's at 1024)", {}, 0},
      {"beta1", ParamKind::kNumber, 0.0, "first-moment decay", {}, 0},
      {"beta2", ParamKind::kNumber, 0.99, "second-moment decay", {}, 0},
      {"eps", ParamKind::kNumber, 1e-8, "added to the denominator", {}, 0},
  };
}

/// Turns requires_grad off for a network's parameters while it lives, so that backward runs
/// through the network to its input without computing its weight gradients (TF's
/// tf.gradients(G_loss, G.trainables) does the same).
class FrozenParameters {
 public:
  explicit FrozenParameters(std::vector<torch::Tensor> params) : params_(std::move(params)) {
    for (auto& p : params_) p.requires_grad_(false);
  }
  ~FrozenParameters() {
    for (auto& p : params_) p.requires_grad_(true);
  }
  FrozenParameters(const FrozenParameters&) = delete;
  FrozenParameters& operator=(const FrozenParameters&) = delete;

 private:
  std::vector<torch::Tensor> params_;
};

class StyleGanStep final : public train::RuntimeStep {
 public:
  explicit StyleGanStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        options_(checked_options(ctx)),
        batch_(ctx.batch),
        r1_gamma_(ctx.model.f64("r1_gamma")),
        r1_fp32_(r1_pass_in_fp32(ctx.model.str("r1_pass"), ctx.precision)),
        generator_(build<StyleGanGenerator>(ctx, options_, 0)),
        discriminator_(build<StyleGanDiscriminator>(ctx, options_, 1)),
        reals_(ctx.batch, options_.num_channels(), options_.resolution(),
               ctx.model.flag("mirror_augment"), ctx.device, ctx.seed),
        d_updater_(runtime_.add("discriminator", adam_updater(*discriminator_, ctx))),
        g_updater_(runtime_.add("generator", adam_updater(*generator_, ctx))) {
    // Gs, the moving average of G that the reference keeps for evaluation: every parameter and
    // buffer (dlatent_avg) of G. Not trained, so not among parameters().
    torch::NoGradGuard no_grad;
    for (const auto& t : generator_->parameters()) generator_tensors_.push_back(t);
    for (const auto& t : generator_->buffers()) generator_tensors_.push_back(t);
    for (const auto& t : generator_tensors_) gs_.push_back(t.detach().clone());
    const double kimg = ctx.model.f64("g_smoothing_kimg");
    gs_beta_ = kimg > 0 ? std::pow(0.5, static_cast<double>(batch_) / (kimg * 1000.0)) : 0.0;
    // The latents of every step come from the device's generator, seeded here.
    torch::manual_seed(ctx.seed + 2);
    if (activation_trace_active()) {
      runtime_.disable_graphs("the activation trace (GPUBENCH_TRACE_ACTIVATIONS) reads the device");
    }
  }

  double run() override {
    trace_iteration_begins();
    return runtime_.run([&] {
      discriminator_step();
      update_gs();
      generator_step();
      return static_cast<double>(batch_);
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"generator", generator_->parameters()},
            {"discriminator", discriminator_->parameters()}};
  }

  Json batch_info() const override {
    return Json{{"images", batch_},
                {"resolution", options_.resolution()},
                {"mbstd_group", std::min(options_.mbstd_group_size(), batch_)},
                {"r1_pass", r1_fp32_ ? "fp32" : "autocast"},
                // The fp16 recipe as it applies to this run (amp-fp16 only; else all and 0).
                {"fp16_resolutions",
                 options_.fp16_everywhere() ? Json("all") : Json(options_.fp16_resolutions())},
                {"conv_clamp", options_.conv_clamp()}};
  }

 private:
  static StyleGanOptions checked_options(const StepContext& ctx) {
    const auto options = stylegan_options(ctx.model, ctx.precision);
    GPUBENCH_CHECK(stylegan_batch_ok(ctx.batch, options.mbstd_group_size()), ConfigError,
                   "stylegan: batch {} does not split into minibatch-stddev groups of {} (the "
                   "reference groups min({}, batch) images); use a batch below {} or a multiple "
                   "of it",
                   ctx.batch, options.mbstd_group_size(), options.mbstd_group_size(),
                   options.mbstd_group_size());
    return options;
  }

  /// A network on the device (before its optimizer sees its parameters), in training mode.
  template <typename Net>
  static Net build(const StepContext& ctx, const StyleGanOptions& options, uint64_t salt) {
    torch::manual_seed(ctx.seed * 7919 + salt);
    Net net(options);
    net->to(ctx.device);
    net->train();
    return net;
  }

  torch::Tensor latents() const {
    return torch::randn({batch_, options_.latent_size()},
                        torch::TensorOptions().device(runtime_.device()));
  }

  /// D_logistic_simplegp: softplus(D(G(z))) + softplus(-D(reals)) + gamma/2 * R1, mean over the
  /// minibatch; G runs forward only (the reference differentiates this loss w.r.t. D's
  /// variables alone).
  void discriminator_step() {
    d_updater_.zero_grad();
    const auto reals = reals_.next().requires_grad_(true);
    torch::Tensor real_scores, fake_scores;
    {
      const auto autocast = runtime_.autocast();
      torch::Tensor fakes;
      {
        torch::NoGradGuard no_grad;
        trace_pass("d-step G(z)");
        fakes = generator_(latents());
      }
      trace_pass("d-step D(reals)");
      if (!r1_fp32_) real_scores = discriminator_(reals).to(torch::kFloat);
      trace_pass("d-step D(fakes)");
      fake_scores = discriminator_(fakes).to(torch::kFloat);
    }
    // Under amp-fp16 the reals' pass runs in fp32: one loss scale cannot serve both the input
    // gradient (which underflows at small scales, and whose quantisation error the division by
    // the scale then blows up in the double backward) and the weight gradients.
    trace_pass("d-step D(reals) fp32");
    if (r1_fp32_) real_scores = discriminator_(reals).to(torch::kFloat);
    // The gradient call runs outside autocast, as PyTorch's AMP recipe for gradient penalties;
    // an fp32 pass needs no scaling.
    const auto penalty = r1_penalty(real_scores, reals, r1_fp32_ ? nullptr : &d_updater_.scaler());
    // The loss's backward must reach D's weights, not the reals' gradient buffer.
    reals.requires_grad_(false);
    torch::Tensor loss;
    {
      const auto autocast = runtime_.autocast();
      loss = (torch::softplus(fake_scores) + torch::softplus(-real_scores) +
              penalty.view({-1, 1}) * (r1_gamma_ * 0.5))
                 .mean();
    }
    runtime_.record_loss("d", loss);
    runtime_.record_loss("r1", penalty.detach().mean());
    const bool trace = activation_trace_active();
    if (trace) {
      trace_pass("d-step loss");
      trace_activation("loss.d", loss);
      trace_activation("loss.r1", penalty);
    }
    runtime_.backward(d_updater_, loss);
    runtime_.update(d_updater_);
    if (trace) trace_parameters("D", *discriminator_, d_updater_);
  }

  /// Gs <- lerp(G, Gs, beta), with beta = 0.5^(batch / (g_smoothing_kimg * 1000)): one
  /// multi-tensor lerp over every tensor of G.
  void update_gs() {
    torch::NoGradGuard no_grad;
    compat::foreach_lerp_(gs_, generator_tensors_, 1.0 - gs_beta_);
  }

  /// G_logistic_nonsaturating: softplus(-D(G(z))), mean; backward through D to G only.
  void generator_step() {
    g_updater_.zero_grad();
    FrozenParameters frozen(discriminator_->parameters());
    torch::Tensor loss;
    {
      const auto autocast = runtime_.autocast();
      trace_pass("g-step G(z)");
      const auto fakes = generator_(latents());
      trace_pass("g-step D(G(z))");
      const auto scores = discriminator_(fakes).to(torch::kFloat);
      loss = torch::softplus(-scores).mean();
    }
    runtime_.record_loss("g", loss);
    const bool trace = activation_trace_active();
    if (trace) {
      trace_pass("g-step loss");
      trace_activation("loss.g", loss);
    }
    runtime_.backward(g_updater_, loss);
    runtime_.update(g_updater_);
    if (trace) trace_parameters("G", *generator_, g_updater_);
  }

  StyleGanOptions options_;
  int64_t batch_;
  double r1_gamma_;
  bool r1_fp32_;  ///< D's reals pass (and R1's double backward) outside autocast, in fp32
  StyleGanGenerator generator_;
  StyleGanDiscriminator discriminator_;
  SyntheticReals reals_;
  train::Updater &d_updater_, &g_updater_;
  std::vector<torch::Tensor> generator_tensors_, gs_;
  double gs_beta_ = 0;
};

}  // namespace

Architecture stylegan_architecture() {
  return make_architecture<StyleGanStep>(
      "stylegan",
      "StyleGAN v1 (NVlabs): style-based G and D_basic at full resolution, logistic + R1",
      stylegan_schema(), stylegan_optimizer_schema(), [](const Params& model) {
        const auto options = stylegan_options(model);
        StyleGanGenerator g(options);
        StyleGanDiscriminator d(options);
        return gan_parameters(g, d);
      });
}

}  // namespace gpubench::models
