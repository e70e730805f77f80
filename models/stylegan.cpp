#include "models/stylegan.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/errors.h"
#include "gpubench/config/config.h"
#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace gpubench::models {

// ---- Options ----

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
