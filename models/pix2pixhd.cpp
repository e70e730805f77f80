#include "models/pix2pixhd.h"

#include "gpubench/config/config.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string>

namespace gpubench::models {

namespace {

namespace nn = torch::nn;

/// A plain Conv2d (the caller pads, as the reference's ReflectionPad2d does).
nn::Conv2d conv2d_layer(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                        int64_t padding = 0) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding));
}

// get_norm_layer('instance'): InstanceNorm2d(affine=False), statistics of the input only.
nn::InstanceNorm2d instance_norm(int64_t channels) {
  return nn::InstanceNorm2d(
      nn::InstanceNorm2dOptions(channels).affine(false).track_running_stats(false));
}

// The reference's activations are in place (ReLU(True), LeakyReLU(0.2, True)): at 2048x1024
// each saved copy would cost hundreds of megabytes.
nn::ReLU relu() { return nn::ReLU(nn::ReLUOptions(/*inplace=*/true)); }

nn::LeakyReLU leaky_relu() {
  return nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2).inplace(true));
}

nn::AvgPool2d pyramid_downsample() {
  return nn::AvgPool2d(nn::AvgPool2dOptions(3).stride(2).padding(1).count_include_pad(false));
}

// ConvTranspose3x3 s2 p1 output_padding 1: exactly doubles height and width.
nn::ConvTranspose2d upsample_conv(int64_t in, int64_t out) {
  return nn::ConvTranspose2d(
      nn::ConvTranspose2dOptions(in, out, 3).stride(2).padding(1).output_padding(1));
}

}  // namespace

// ---- Generator ----

Pix2PixHDResnetBlockImpl::Pix2PixHDResnetBlockImpl(int64_t channels) {
  conv_block = register_module(
      "conv_block", nn::Sequential(nn::ReflectionPad2d(1), conv2d_layer(channels, channels, 3),
                                   instance_norm(channels), relu(), nn::ReflectionPad2d(1),
                                   conv2d_layer(channels, channels, 3), instance_norm(channels)));
}

torch::Tensor Pix2PixHDResnetBlockImpl::forward(const torch::Tensor& x) {
  return x + conv_block->forward(x);
}

GlobalGeneratorImpl::GlobalGeneratorImpl(const GlobalGeneratorOptions& o) {
  TORCH_CHECK(o.blocks() >= 0, "GlobalGenerator: blocks must be >= 0");
  const int64_t ngf = o.ngf();
  model = register_module("model", nn::Sequential());
  model->push_back(nn::ReflectionPad2d(3));
  model->push_back(conv2d_layer(o.input_channels(), ngf, 7));
  model->push_back(instance_norm(ngf));
  model->push_back(relu());
  for (int64_t i = 0; i < o.downsamples(); ++i) {
    const int64_t width = ngf << i;
    model->push_back(conv2d_layer(width, 2 * width, 3, 2, 1));
    model->push_back(instance_norm(2 * width));
    model->push_back(relu());
  }
  const int64_t bottleneck = ngf << o.downsamples();
  for (int64_t i = 0; i < o.blocks(); ++i) model->push_back(Pix2PixHDResnetBlock(bottleneck));
  for (int64_t i = 0; i < o.downsamples(); ++i) {
    const int64_t width = bottleneck >> i;
    model->push_back(upsample_conv(width, width / 2));
    model->push_back(instance_norm(width / 2));
    model->push_back(relu());
  }
  if (o.output_layer()) {
    model->push_back(nn::ReflectionPad2d(3));
    model->push_back(conv2d_layer(ngf, o.output_channels(), 7));
    model->push_back(nn::Tanh());
  }
}

LocalEnhancerImpl::LocalEnhancerImpl(const LocalEnhancerOptions& o) : options(o) {
  TORCH_CHECK(o.local_enhancers() >= 1, "LocalEnhancer: local_enhancers must be >= 1");
  const int64_t enhancers = o.local_enhancers();
  GlobalGenerator coarse(GlobalGeneratorOptions(o.input_channels(), o.output_channels())
                             .ngf(o.ngf() << enhancers)
                             .downsamples(o.global_downsamples())
                             .blocks(o.global_blocks())
                             .output_layer(false));
  global = register_module("model", coarse->model);
  for (int64_t n = 1; n <= enhancers; ++n) {
    const int64_t width = o.ngf() << (enhancers - n);
    auto down = nn::Sequential(
        nn::ReflectionPad2d(3), conv2d_layer(o.input_channels(), width, 7), instance_norm(width),
        relu(), conv2d_layer(width, 2 * width, 3, 2, 1), instance_norm(2 * width), relu());
    auto up = nn::Sequential();
    for (int64_t i = 0; i < o.local_blocks(); ++i) up->push_back(Pix2PixHDResnetBlock(2 * width));
    up->push_back(upsample_conv(2 * width, width));
    up->push_back(instance_norm(width));
    up->push_back(relu());
    if (n == enhancers) {
      up->push_back(nn::ReflectionPad2d(3));
      up->push_back(conv2d_layer(o.ngf(), o.output_channels(), 7));
      up->push_back(nn::Tanh());
    }
    const std::string name = "model" + std::to_string(n);
    downsample_paths.push_back(register_module(name + "_1", down));
    upsample_paths.push_back(register_module(name + "_2", up));
  }
  downsample = register_module("downsample", pyramid_downsample());
}

torch::Tensor LocalEnhancerImpl::forward(const torch::Tensor& input) {
  const int64_t enhancers = options.local_enhancers();
  std::vector<torch::Tensor> pyramid{input};
  for (int64_t i = 0; i < enhancers; ++i) pyramid.push_back(downsample(pyramid.back()));
  auto output = global->forward(pyramid.back());
  for (int64_t n = 1; n <= enhancers; ++n) {
    const auto& level = pyramid[enhancers - n];
    output = upsample_paths[n - 1]->forward(downsample_paths[n - 1]->forward(level) + output);
  }
  return output;
}

// ---- Discriminator ----

NLayerDiscriminatorImpl::NLayerDiscriminatorImpl(const PatchDiscriminatorOptions& o) : options(o) {
  TORCH_CHECK(o.layers() >= 1, "NLayerDiscriminator: layers must be >= 1");
  // kw 4, padw = ceil((kw - 1) / 2) = 2, as networks.py computes it.
  constexpr int64_t kKernel = 4, kPad = 2, kMaxWidth = 512;
  std::vector<nn::Sequential> sequence;
  sequence.push_back(
      nn::Sequential(conv2d_layer(o.input_channels(), o.ndf(), kKernel, 2, kPad), leaky_relu()));
  int64_t width = o.ndf();
  for (int64_t n = 1; n < o.layers(); ++n) {
    const int64_t previous = width;
    width = std::min(2 * width, kMaxWidth);
    sequence.push_back(nn::Sequential(conv2d_layer(previous, width, kKernel, 2, kPad),
                                      instance_norm(width), leaky_relu()));
  }
  const int64_t previous = width;
  width = std::min(2 * width, kMaxWidth);
  sequence.push_back(nn::Sequential(conv2d_layer(previous, width, kKernel, 1, kPad),
                                    instance_norm(width), leaky_relu()));
  sequence.push_back(nn::Sequential(conv2d_layer(width, 1, kKernel, 1, kPad)));
  for (std::size_t n = 0; n < sequence.size(); ++n) {
    stages.push_back(register_module("model" + std::to_string(n), sequence[n]));
  }
}

std::vector<torch::Tensor> NLayerDiscriminatorImpl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> outputs;
  torch::Tensor h = x;
  for (auto& stage : stages) {
    h = stage->forward(h);
    if (options.intermediate_features()) outputs.push_back(h);
  }
  if (!options.intermediate_features()) outputs.push_back(h);
  return outputs;
}

MultiscaleDiscriminatorImpl::MultiscaleDiscriminatorImpl(const PatchDiscriminatorOptions& o)
    : options(o) {
  TORCH_CHECK(o.scales() >= 1, "MultiscaleDiscriminator: scales must be >= 1");
  for (int64_t i = 0; i < o.scales(); ++i) {
    discriminators.push_back(register_module("scale" + std::to_string(i), NLayerDiscriminator(o)));
  }
  downsample = register_module("downsample", pyramid_downsample());
}

std::vector<std::vector<torch::Tensor>> MultiscaleDiscriminatorImpl::forward(
    const torch::Tensor& x) {
  const int64_t scales = options.scales();
  std::vector<std::vector<torch::Tensor>> result;
  torch::Tensor level = x;
  for (int64_t i = 0; i < scales; ++i) {
    result.push_back(discriminators[scales - 1 - i]->forward(level));
    if (i != scales - 1) level = downsample(level);
  }
  return result;
}

// ---- VGG19 ----

Vgg19FeaturesImpl::Vgg19FeaturesImpl() {
  // torchvision's vgg19 configuration "E" up to conv5_1 (features[0:30]); 0 is a 2x2 max pool.
  constexpr std::array<int64_t, 17> kConfig = {64,  64, 0,   128, 128, 0,   256, 256, 256,
                                               256, 0,  512, 512, 512, 512, 0,   512};
  constexpr std::array<int64_t, 5> kSliceEnds = {2, 7, 12, 21, 30};  // after relu{1..5}_1
  std::vector<nn::Sequential> parts(kSliceEnds.size());
  int64_t index = 0, in = 3;
  std::size_t slice = 0;
  auto add = [&](auto module) {
    while (slice < parts.size() && index >= kSliceEnds[slice]) ++slice;
    TORCH_CHECK(slice < parts.size(), "VGG19 slices: too many layers");
    parts[slice]->push_back(std::to_string(index), module);
    ++index;
  };
  for (const int64_t width : kConfig) {
    if (width == 0) {
      add(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
    } else {
      add(conv2d_layer(in, width, 3, 1, 1));
      add(relu());
      in = width;
    }
  }
  TORCH_CHECK(index == kSliceEnds.back(), "VGG19 slices: built ", index, " layers");
  slices = register_module("slices", nn::ModuleList());
  for (auto& part : parts) slices->push_back(part);

  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
      nn::init::zeros_(c->bias);
    }
  }
  for (auto& p : parameters()) p.requires_grad_(false);
}

std::vector<torch::Tensor> Vgg19FeaturesImpl::forward(const torch::Tensor& x) {
  std::vector<torch::Tensor> outputs;
  torch::Tensor h = x;
  for (const auto& slice : *slices) {
    h = slice->as<nn::Sequential>()->forward(h);
    outputs.push_back(h);
  }
  return outputs;
}

void init_pix2pixhd_weights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      c->weight.normal_(0.0, 0.02);
    } else if (auto* t = m->as<nn::ConvTranspose2d>()) {
      t->weight.normal_(0.0, 0.02);
    }
  }
}

// ---- Inputs ----

torch::Tensor instance_edges(const torch::Tensor& instance) {
  TORCH_CHECK(instance.dim() == 4, "instance_edges: expected [B, 1, H, W]");
  const int64_t height = instance.size(2), width = instance.size(3);
  auto edge = torch::zeros(instance.sizes(), instance.options().dtype(torch::kBool));
  if (width > 1) {
    auto differs = instance.narrow(3, 1, width - 1) != instance.narrow(3, 0, width - 1);
    edge.narrow(3, 1, width - 1).logical_or_(differs);
    edge.narrow(3, 0, width - 1).logical_or_(differs);
  }
  if (height > 1) {
    auto differs = instance.narrow(2, 1, height - 1) != instance.narrow(2, 0, height - 1);
    edge.narrow(2, 1, height - 1).logical_or_(differs);
    edge.narrow(2, 0, height - 1).logical_or_(differs);
  }
  return edge.to(torch::kFloat);
}

torch::Tensor encode_label_input(const torch::Tensor& label, const torch::Tensor& instance,
                                 int64_t classes) {
  TORCH_CHECK(label.dim() == 4 && label.size(1) == 1, "encode_label_input: label is [B, 1, H, W]");
  const int64_t extra = instance.defined() ? 1 : 0;
  // One buffer for both parts: the reference's torch.cat would briefly hold a second copy of a
  // 36-channel full-resolution tensor.
  auto input = torch::zeros({label.size(0), classes + extra, label.size(2), label.size(3)},
                            label.options().dtype(torch::kFloat));
  input.narrow(1, 0, classes).scatter_(1, label, 1.0);
  if (extra) input.narrow(1, classes, 1).copy_(instance_edges(instance));
  return input;
}

CityscapesBatch::CityscapesBatch(int64_t batch, int64_t height, int64_t width, int64_t classes,
                                 int64_t regions, const torch::Device& device, uint64_t seed) {
  TORCH_CHECK(batch > 0 && height > 0 && width > 0 && classes > 0 && regions > 0,
              "CityscapesBatch: sizes must be positive");
  // The small per-cell draws come from the CPU generator (the same on every device); only the
  // per-pixel noise is drawn on the device.
  torch::manual_seed(seed + 1);
  auto seed_y = (torch::rand({batch, regions}) * height).to(device);
  auto seed_x = (torch::rand({batch, regions}) * width).to(device);
  auto cell_class = torch::randint(0, classes, {batch, regions}, torch::kLong).to(device);
  auto cell_color = (torch::rand({batch, regions, 3}) * 1.6 - 0.8).to(device);

  // Nearest seed per pixel (Voronoi cells), one seed at a time so memory stays at a few
  // [B, 1, H, W] maps even at 2048x1024.
  const auto floats = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto ys = (torch::arange(height, floats) + 0.5).view({1, 1, height, 1});
  auto xs = (torch::arange(width, floats) + 0.5).view({1, 1, 1, width});
  auto best =
      torch::full({batch, 1, height, width}, std::numeric_limits<float>::infinity(), floats);
  auto nearest = torch::zeros({batch, 1, height, width}, floats.dtype(torch::kLong));
  for (int64_t k = 0; k < regions; ++k) {
    auto dy = ys - seed_y.select(1, k).view({batch, 1, 1, 1});
    auto dx = xs - seed_x.select(1, k).view({batch, 1, 1, 1});
    auto distance = dy * dy + dx * dx;
    auto closer = distance < best;
    best = torch::where(closer, distance, best);
    nearest.masked_fill_(closer, k);
  }
  const auto cell_of_pixel = nearest.view({batch, height * width});
  label = cell_class.gather(1, cell_of_pixel).view({batch, 1, height, width});

  // Cityscapes: label ids 24-33 (person .. bicycle) have instances, encoded class * 1000 + n.
  const int64_t first_thing = std::max<int64_t>(0, classes - 11);
  const int64_t last_thing = std::max<int64_t>(0, classes - 2);
  auto is_thing = (cell_class >= first_thing) & (cell_class <= last_thing);
  auto cell_index = torch::arange(regions, cell_class.options()).unsqueeze(0);
  auto cell_instance = torch::where(is_thing, cell_class * 1000 + cell_index, cell_class);
  instance = cell_instance.gather(1, cell_of_pixel).view({batch, 1, height, width}).to(torch::kInt);

  auto colors =
      cell_color.gather(1, cell_of_pixel.unsqueeze(-1).expand({batch, height * width, 3}));
  image = colors.permute({0, 2, 1}).reshape({batch, 3, height, width});
  image = (image + 0.1 * torch::randn({batch, 3, height, width}, floats)).clamp_(-1.0, 1.0);
}

// ---- Losses ----

torch::Tensor lsgan_loss(const std::vector<std::vector<torch::Tensor>>& predictions,
                         bool target_is_real) {
  torch::Tensor total;
  for (const auto& scale : predictions) {
    const auto& prediction = scale.back();
    auto target = target_is_real ? torch::ones_like(prediction) : torch::zeros_like(prediction);
    auto loss = torch::mse_loss(prediction, target);
    total = total.defined() ? total + loss : loss;
  }
  return total;
}

Pix2PixHDLosses pix2pixhd_losses(LocalEnhancerImpl& generator,
                                 MultiscaleDiscriminatorImpl& discriminator, Vgg19FeaturesImpl* vgg,
                                 const torch::Tensor& input, const torch::Tensor& image,
                                 const Pix2PixHDLossOptions& options) {
  Pix2PixHDLosses out;
  auto fake = generator.forward(input);
  // discriminate() detaches the image it is given: D's loss on the fake never reaches G.
  out.d_fake = lsgan_loss(discriminator.forward(torch::cat({input, fake.detach()}, 1)), false);
  const auto pred_real = discriminator.forward(torch::cat({input, image.detach()}, 1));
  out.d_real = lsgan_loss(pred_real, true);
  const auto pred_fake = discriminator.forward(torch::cat({input, fake}, 1));
  out.g_gan = lsgan_loss(pred_fake, true);
  out.g = out.g_gan;

  if (options.feature_matching) {
    // Every layer but the last, weighted 1/num_D * 4/(n_layers_D + 1) * lambda_feat.
    const double weight = options.lambda_feat * (4.0 / (options.discriminator_layers + 1)) /
                          static_cast<double>(pred_fake.size());
    out.g_feat = torch::zeros({}, input.options().dtype(torch::kFloat));
    for (std::size_t i = 0; i < pred_fake.size(); ++i) {
      for (std::size_t j = 0; j + 1 < pred_fake[i].size(); ++j) {
        out.g_feat =
            out.g_feat + weight * torch::l1_loss(pred_fake[i][j], pred_real[i][j].detach());
      }
    }
    out.g = out.g + out.g_feat;
  }

  if (options.vgg) {
    TORCH_CHECK(vgg != nullptr, "pix2pixhd_losses: the VGG loss needs the VGG19");
    static constexpr std::array<double, 5> kWeights = {1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0};
    const auto fake_features = vgg->forward(fake);
    std::vector<torch::Tensor> real_features;
    {
      // The real features are targets (VGGLoss detaches them): no graph through them.
      torch::NoGradGuard no_grad;
      real_features = vgg->forward(image);
    }
    torch::Tensor total;
    for (std::size_t k = 0; k < fake_features.size(); ++k) {
      auto term = kWeights[k] * torch::l1_loss(fake_features[k], real_features[k]);
      total = total.defined() ? total + term : term;
    }
    out.g_vgg = total * options.lambda_feat;
    out.g = out.g + out.g_vgg;
  }
  out.d = (out.d_fake + out.d_real) * 0.5;
  return out;
}

// ---- The training step ----

namespace {

ParamSchema pix2pixhd_schema() {
  return {
      {"label_classes", ParamKind::kInt, 35, "semantic classes (Cityscapes label ids: 35)", {}, 1},
      {"instance_edges", ParamKind::kBool, true,
       "append the instance boundary map to the one-hot labels (not --no_instance)"},
      {"output_channels", ParamKind::kInt, 3, "image channels", {}, 1},
      {"height", ParamKind::kInt, 1024, "image height [pixels]", {}, 1},
      {"width", ParamKind::kInt, 2048, "image width [pixels]", {}, 1},
      {"ngf", ParamKind::kInt, 32, "generator width at full resolution", {}, 1},
      {"global_downsamples", ParamKind::kInt, 4, "n_downsample_global", {}, 1},
      {"global_blocks", ParamKind::kInt, 9, "n_blocks_global", {}, 0},
      {"local_enhancers", ParamKind::kInt, 1, "n_local_enhancers", {}, 1},
      {"local_blocks", ParamKind::kInt, 3, "n_blocks_local", {}, 0},
      {"ndf", ParamKind::kInt, 64, "discriminator width of the first layer", {}, 1},
      {"discriminator_layers", ParamKind::kInt, 3, "n_layers_D", {}, 1},
      {"discriminators", ParamKind::kInt, 3, "num_D: discriminator scales", {}, 1},
      {"feature_matching", ParamKind::kBool, true,
       "D feature-matching loss and intermediate D features (not --no_ganFeat_loss)"},
      {"vgg_loss", ParamKind::kBool, true, "VGG19 perceptual loss (not --no_vgg_loss)"},
      {"lambda_feat", ParamKind::kNumber, 10.0, "weight of feature matching and VGG", {}, 0},
      {"regions", ParamKind::kInt, 64, "synthetic data: Voronoi cells per image", {}, 1},
  };
}

ParamSchema pix2pixhd_optimizer_schema() {
  return {
      {"lr", ParamKind::kNumber, 2e-4, "Adam learning rate of G and D (constant for niter)", {}, 0},
      {"beta1", ParamKind::kNumber, 0.5, "first-moment decay", {}, 0},
      {"beta2", ParamKind::kNumber, 0.999, "second-moment decay", {}, 0},
      {"eps", ParamKind::kNumber, 1e-8, "added to the denominator", {}, 0},
  };
}

int64_t input_channels(const Params& m) {
  return m.i64("label_classes") + (m.flag("instance_edges") ? 1 : 0);
}

LocalEnhancerOptions generator_options(const Params& m) {
  return LocalEnhancerOptions(input_channels(m), m.i64("output_channels"))
      .ngf(m.i64("ngf"))
      .global_downsamples(m.i64("global_downsamples"))
      .global_blocks(m.i64("global_blocks"))
      .local_enhancers(m.i64("local_enhancers"))
      .local_blocks(m.i64("local_blocks"));
}

PatchDiscriminatorOptions discriminator_options(const Params& m) {
  return PatchDiscriminatorOptions(input_channels(m) + m.i64("output_channels"))
      .ndf(m.i64("ndf"))
      .layers(m.i64("discriminator_layers"))
      .scales(m.i64("discriminators"))
      .intermediate_features(m.flag("feature_matching"));
}

class Pix2PixHDStep final : public train::RuntimeStep {
 public:
  explicit Pix2PixHDStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        classes_(ctx.model.i64("label_classes")),
        with_instances_(ctx.model.flag("instance_edges")),
        loss_options_(loss_options(ctx.model)),
        generator_(build_generator(ctx)),
        discriminator_(build_discriminator(ctx)),
        vgg_(build_vgg(ctx)),
        batch_(ctx.batch, ctx.model.i64("height"), ctx.model.i64("width"), classes_,
               ctx.model.i64("regions"), ctx.device, ctx.seed),
        g_updater_(runtime_.add("generator", adam_updater(*generator_, ctx))),
        d_updater_(runtime_.add("discriminator", adam_updater(*discriminator_, ctx))) {}

  double run() override {
    return runtime_.run([&] {
      // Last step's gradients are dead; dropping them now rather than at backward (as train.py
      // does) keeps G's 0.7 GB of gradients out of the forward's peak.
      g_updater_.zero_grad();
      d_updater_.zero_grad();
      Pix2PixHDLosses losses;
      {
        const auto autocast = runtime_.autocast();
        const auto input = encode_label_input(
            batch_.label, with_instances_ ? batch_.instance : torch::Tensor(), classes_);
        losses = pix2pixhd_losses(*generator_, *discriminator_, vgg_ ? vgg_.get() : nullptr, input,
                                  batch_.image, loss_options_);
      }
      record(losses);
      // train.py: loss_G backward and Adam_G step, then loss_D backward and Adam_D step. loss_G
      // also reached D's parameters (through D(fake)); those gradients are zeroed first.
      runtime_.backward(g_updater_, losses.g);
      runtime_.update(g_updater_);
      d_updater_.zero_grad();
      runtime_.backward(d_updater_, losses.d);
      runtime_.update(d_updater_);
      return static_cast<double>(batch_.image.size(0));
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"generator", generator_->parameters()},
            {"discriminator", discriminator_->parameters()}};
  }

  Json batch_info() const override {
    return Json{{"images", batch_.image.size(0)},
                {"height", batch_.image.size(2)},
                {"width", batch_.image.size(3)},
                {"input_channels", classes_ + (with_instances_ ? 1 : 0)},
                {"vgg19_weights", "random (frozen)"}};
  }

 private:
  static Pix2PixHDLossOptions loss_options(const Params& m) {
    Pix2PixHDLossOptions o;
    o.lambda_feat = m.f64("lambda_feat");
    o.feature_matching = m.flag("feature_matching");
    o.vgg = m.flag("vgg_loss");
    o.discriminator_layers = m.i64("discriminator_layers");
    if (o.vgg) {
      TORCH_CHECK(m.i64("output_channels") == 3, "pix2pixhd: the VGG loss needs 3-channel images");
    }
    const int64_t multiple = int64_t{1} << (m.i64("global_downsamples") + m.i64("local_enhancers"));
    TORCH_CHECK(m.i64("height") % multiple == 0 && m.i64("width") % multiple == 0,
                "pix2pixhd: height and width must be multiples of ", multiple,
                " (2^(global_downsamples + local_enhancers))");
    return o;
  }

  // G is built after seeding, D and the VGG from where the previous build left the generator.
  static std::string key(const char* what, const StepContext& ctx) {
    return train::reuse_key(what, ctx.model.json().dump(), ctx.seed);
  }

  static LocalEnhancer build_generator(const StepContext& ctx) {
    return train::build_model<LocalEnhancer>(key("pix2pixhd-g", ctx), ctx.device, ctx.seed, [&] {
      LocalEnhancer g(generator_options(ctx.model));
      init_pix2pixhd_weights(*g);
      return g;
    });
  }

  static MultiscaleDiscriminator build_discriminator(const StepContext& ctx) {
    return train::build_model<MultiscaleDiscriminator>(
        key("pix2pixhd-d", ctx), ctx.device, std::nullopt, [&] {
          MultiscaleDiscriminator d(discriminator_options(ctx.model));
          init_pix2pixhd_weights(*d);
          return d;
        });
  }

  static Vgg19Features build_vgg(const StepContext& ctx) {
    if (!ctx.model.flag("vgg_loss")) return Vgg19Features(nullptr);
    auto vgg = train::build_model<Vgg19Features>(key("pix2pixhd-vgg", ctx), ctx.device,
                                                 std::nullopt, [] { return Vgg19Features(); });
    vgg->eval();
    return vgg;
  }

  void record(const Pix2PixHDLosses& l) {
    runtime_.record_loss("g_gan", l.g_gan);
    runtime_.record_loss("d_real", l.d_real);
    runtime_.record_loss("d_fake", l.d_fake);
    runtime_.record_loss("g", l.g);
    runtime_.record_loss("d", l.d);
    if (l.g_feat.defined()) runtime_.record_loss("g_feat", l.g_feat);
    if (l.g_vgg.defined()) runtime_.record_loss("g_vgg", l.g_vgg);
  }

  int64_t classes_;
  bool with_instances_;
  Pix2PixHDLossOptions loss_options_;
  LocalEnhancer generator_;
  MultiscaleDiscriminator discriminator_;
  Vgg19Features vgg_;
  CityscapesBatch batch_;
  train::Updater &g_updater_, &d_updater_;
};

}  // namespace

Architecture pix2pixhd_architecture() {
  return make_architecture<Pix2PixHDStep>(
      "pix2pixhd",
      "NVIDIA pix2pixHD: LocalEnhancer G + multiscale PatchGAN D, LSGAN + feature matching + "
      "VGG19 loss",
      pix2pixhd_schema(), pix2pixhd_optimizer_schema(), [](const Params& model) {
        LocalEnhancer g(generator_options(model));
        MultiscaleDiscriminator d(discriminator_options(model));
        return gan_parameters(g, d);
      });
}

}  // namespace gpubench::models
