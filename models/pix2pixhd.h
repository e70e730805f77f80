// Pix2PixHD (Wang et al. 2018) as NVIDIA/pix2pixHD 14b3b3c7 trains Cityscapes at 2048x1024
// (scripts/train_1024p_24G.sh): the LocalEnhancer generator (ngf 32, the global generator inside),
// three PatchGAN discriminators with intermediate features, on 35 one-hot labels + the instance
// edge map (36 x 1024 x 2048). Loss: LSGAN + 10 x D feature matching + 10 x VGG19 perceptual
// (frozen VGG19, random weights here). Adam 2e-4 (0.5, 0.999) for G and D; one G step, then one D
// step per iteration. Spec: shared/specs/image-workloads.md §4.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"

#include <torch/nn.h>

#include <cstdint>
#include <vector>

namespace gpubench::models {

/// One residual block of the generators: [ReflPad1, Conv3x3, IN, ReLU, ReflPad1, Conv3x3, IN]
/// plus the identity.
class Pix2PixHDResnetBlockImpl : public torch::nn::Module {
 public:
  explicit Pix2PixHDResnetBlockImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Sequential conv_block{nullptr};
};
TORCH_MODULE(Pix2PixHDResnetBlock);

/// Shape of a GlobalGenerator (networks.py).
///
/// Example:
/// ```
/// GlobalGenerator g(GlobalGeneratorOptions(36, 3).ngf(64).downsamples(4).blocks(9));
/// ```
struct GlobalGeneratorOptions {
  GlobalGeneratorOptions(int64_t input_channels, int64_t output_channels)
      : input_channels_(input_channels), output_channels_(output_channels) {}
  /// Channels of the label input (one-hot classes + edge map).
  TORCH_ARG(int64_t, input_channels);
  /// Channels of the image output.
  TORCH_ARG(int64_t, output_channels);
  /// Width of the first convolution; doubles with every downsampling. Default: 64
  TORCH_ARG(int64_t, ngf) = 64;
  /// Stride-2 convolutions (and as many transposed ones). Default: 3
  TORCH_ARG(int64_t, downsamples) = 3;
  /// Residual blocks at the bottleneck. Default: 9
  TORCH_ARG(int64_t, blocks) = 9;
  /// Build the final ReflPad3 + Conv7x7 + Tanh; a LocalEnhancer drops them
  /// (`model_global[:-3]`). Default: true
  TORCH_ARG(bool, output_layer) = true;
};

/// The global generator: ReflPad3 + Conv7x7 + IN + ReLU, `downsamples` x [Conv3x3 s2, IN, ReLU],
/// `blocks` residual blocks, `downsamples` x [ConvT3x3 s2, IN, ReLU], then (optionally)
/// ReflPad3 + Conv7x7 + Tanh.
class GlobalGeneratorImpl : public torch::nn::Module {
 public:
  explicit GlobalGeneratorImpl(const GlobalGeneratorOptions& options);
  torch::Tensor forward(const torch::Tensor& x) { return model->forward(x); }

  torch::nn::Sequential model{nullptr};
};
TORCH_MODULE(GlobalGenerator);

/// Shape of a LocalEnhancer (networks.py; pix2pixHD's --netG local).
///
/// Example:
/// ```
/// LocalEnhancer g(LocalEnhancerOptions(36, 3).ngf(32).global_downsamples(4));
/// ```
struct LocalEnhancerOptions {
  LocalEnhancerOptions(int64_t input_channels, int64_t output_channels)
      : input_channels_(input_channels), output_channels_(output_channels) {}
  /// Channels of the label input (one-hot classes + edge map).
  TORCH_ARG(int64_t, input_channels);
  /// Channels of the image output.
  TORCH_ARG(int64_t, output_channels);
  /// Width at full resolution; the global generator has ngf * 2^local_enhancers. Default: 32
  TORCH_ARG(int64_t, ngf) = 32;
  /// Stride-2 convolutions of the global generator (--n_downsample_global). Default: 4
  TORCH_ARG(int64_t, global_downsamples) = 4;
  /// Residual blocks of the global generator (--n_blocks_global). Default: 9
  TORCH_ARG(int64_t, global_blocks) = 9;
  /// Enhancers, each doubling the resolution (--n_local_enhancers). Default: 1
  TORCH_ARG(int64_t, local_enhancers) = 1;
  /// Residual blocks per enhancer (--n_blocks_local). Default: 3
  TORCH_ARG(int64_t, local_blocks) = 3;
};

/// The coarse-to-fine generator: the global generator (without its output layer) runs on the
/// input downsampled local_enhancers times by AvgPool(3, 2, 1, count_include_pad=false); each
/// enhancer n adds its downsampling path on the input at its scale (model{n}_1) to the coarser
/// output and upsamples the sum (model{n}_2); the last ends in ReflPad3 + Conv7x7 + Tanh.
class LocalEnhancerImpl : public torch::nn::Module {
 public:
  explicit LocalEnhancerImpl(const LocalEnhancerOptions& options);
  /// [B, input_channels, H, W] -> [B, output_channels, H, W] in [-1, 1]. H and W are multiples
  /// of 2^(global_downsamples + local_enhancers).
  torch::Tensor forward(const torch::Tensor& input);

  LocalEnhancerOptions options;
  torch::nn::Sequential global{nullptr};  ///< the GlobalGenerator's layers, output layer dropped
  std::vector<torch::nn::Sequential> downsample_paths;  ///< model{n}_1, n = 1..local_enhancers
  std::vector<torch::nn::Sequential> upsample_paths;    ///< model{n}_2
  torch::nn::AvgPool2d downsample{nullptr};
};
TORCH_MODULE(LocalEnhancer);

/// Shape of a PatchGAN discriminator (networks.py NLayerDiscriminator) and of the multiscale
/// stack of them.
///
/// Example:
/// ```
/// MultiscaleDiscriminator d(PatchDiscriminatorOptions(39).ndf(64).layers(3).scales(3));
/// ```
struct PatchDiscriminatorOptions {
  explicit PatchDiscriminatorOptions(int64_t input_channels) : input_channels_(input_channels) {}
  /// Channels of concat(label input, image).
  TORCH_ARG(int64_t, input_channels);
  /// Width of the first convolution; doubles per layer up to 512. Default: 64
  TORCH_ARG(int64_t, ndf) = 64;
  /// Stride-2 convolutions (--n_layers_D); the network has layers + 2 convolutions. Default: 3
  TORCH_ARG(int64_t, layers) = 3;
  /// Discriminators, each on the input downsampled once more (--num_D). Default: 3
  TORCH_ARG(int64_t, scales) = 3;
  /// Return every layer's output for feature matching (getIntermFeat = not --no_ganFeat_loss),
  /// else only the last. Default: true
  TORCH_ARG(bool, intermediate_features) = true;
};

/// One PatchGAN: Conv4x4 s2 p2 + LReLU(0.2); (layers - 1) x [Conv4x4 s2 p2, IN, LReLU];
/// Conv4x4 s1 p2, IN, LReLU; Conv4x4 s1 p2 to one channel. Every stage is its own Sequential so
/// its output can be returned.
class NLayerDiscriminatorImpl : public torch::nn::Module {
 public:
  explicit NLayerDiscriminatorImpl(const PatchDiscriminatorOptions& options);
  /// The outputs of the layers + 2 stages (only the last without intermediate features).
  std::vector<torch::Tensor> forward(const torch::Tensor& x);

  PatchDiscriminatorOptions options;
  std::vector<torch::nn::Sequential> stages;  ///< model0 .. model{layers + 1}
};
TORCH_MODULE(NLayerDiscriminator);

/// `scales` independent PatchGANs. As in networks.py, the i-th output (input downsampled i times
/// by AvgPool(3, 2, 1, count_include_pad=false)) comes from discriminator scales - 1 - i.
class MultiscaleDiscriminatorImpl : public torch::nn::Module {
 public:
  explicit MultiscaleDiscriminatorImpl(const PatchDiscriminatorOptions& options);
  /// Per scale, finest first: the stage outputs of that scale's discriminator.
  std::vector<std::vector<torch::Tensor>> forward(const torch::Tensor& x);

  PatchDiscriminatorOptions options;
  std::vector<NLayerDiscriminator> discriminators;  ///< scale0 .. scale{scales - 1}
  torch::nn::AvgPool2d downsample{nullptr};
};
TORCH_MODULE(MultiscaleDiscriminator);

/// torchvision vgg19().features[0:30] cut into pix2pixHD's five slices (ending at relu1_1,
/// relu2_1, relu3_1, relu4_1, relu5_1), frozen (requires_grad false). pix2pixHD loads ImageNet
/// weights; nothing can be downloaded here, so the weights are random with torchvision's VGG
/// initialization (Kaiming normal, fan_out; zero biases): the cost is the same.
class Vgg19FeaturesImpl : public torch::nn::Module {
 public:
  Vgg19FeaturesImpl();
  /// The five slice outputs for images [B, 3, H, W] (fed in [-1, 1], no ImageNet normalization,
  /// as pix2pixHD does).
  std::vector<torch::Tensor> forward(const torch::Tensor& x);

  torch::nn::ModuleList slices{nullptr};
};
TORCH_MODULE(Vgg19Features);

/// pix2pixHD's weights_init on a generator or discriminator: every Conv2d and ConvTranspose2d
/// weight from N(0, 0.02); biases keep PyTorch's default initialization.
void init_pix2pixhd_weights(torch::nn::Module& module);

/// get_edges: 1 where any 4-neighbour of a pixel has a different instance id, else 0.
/// `instance` is [B, 1, H, W] (any integer type); the result is float [B, 1, H, W].
torch::Tensor instance_edges(const torch::Tensor& instance);

/// encode_input: one-hot labels ([B, 1, H, W] int64 ids in [0, classes) -> [B, classes, H, W]
/// by scatter_), then the instance edge map as one more channel when `instance` is defined.
torch::Tensor encode_label_input(const torch::Tensor& label, const torch::Tensor& instance,
                                 int64_t classes);

/// Synthetic Cityscapes-like samples, generated once on the device and deterministic from the
/// seed: each image is cut into `regions` Voronoi cells, each with a random class; cells of the
/// ten instance classes (Cityscapes ids 24-33, person to bicycle, i.e. classes - 11 to classes - 2)
/// are instances with id class * 1000 + cell, the others have id = class (Cityscapes'
/// instanceIds encoding, so neighbouring cells of one stuff class share an id and no edge); the
/// image is a colour per cell plus noise, clamped to [-1, 1].
struct CityscapesBatch {
  CityscapesBatch(int64_t batch, int64_t height, int64_t width, int64_t classes, int64_t regions,
                  const torch::Device& device, uint64_t seed);

  torch::Tensor label;     ///< [B, 1, H, W] int64 in [0, classes)
  torch::Tensor instance;  ///< [B, 1, H, W] int32 instance ids
  torch::Tensor image;     ///< [B, 3, H, W] float in [-1, 1]
};

/// Loss weights and switches of the pix2pixHD objective.
struct Pix2PixHDLossOptions {
  double lambda_feat = 10;           ///< weight of feature matching and of the VGG loss
  bool feature_matching = true;      ///< D feature matching (not --no_ganFeat_loss)
  bool vgg = true;                   ///< VGG perceptual loss (not --no_vgg_loss)
  int64_t discriminator_layers = 3;  ///< n_layers_D: feature matching weighs 4 / (n + 1)
};

/// The five losses of Pix2PixHDModel.forward and the two sums train.py backpropagates.
struct Pix2PixHDLosses {
  torch::Tensor g_gan, g_feat, g_vgg, d_real, d_fake;  ///< g_feat / g_vgg undefined when off
  torch::Tensor g;                                     ///< g_gan + g_feat + g_vgg
  torch::Tensor d;                                     ///< 0.5 * (d_fake + d_real)
};

/// LSGAN (GANLoss with use_lsgan): the sum over scales of MSE(last output, 1 or 0).
torch::Tensor lsgan_loss(const std::vector<std::vector<torch::Tensor>>& predictions,
                         bool target_is_real);

/// Pix2PixHDModel.forward: fake = G(input); D on (input, fake.detach()) -> d_fake, on
/// (input, image) -> d_real, on (input, fake) -> g_gan; feature matching of the fake pass
/// against the detached real pass; VGG L1 with weights 1/32, 1/16, 1/8, 1/4, 1 against the
/// detached real features. `vgg` may be null when options.vgg is false.
Pix2PixHDLosses pix2pixhd_losses(LocalEnhancerImpl& generator,
                                 MultiscaleDiscriminatorImpl& discriminator, Vgg19FeaturesImpl* vgg,
                                 const torch::Tensor& input, const torch::Tensor& image,
                                 const Pix2PixHDLossOptions& options);

/// The registry entry: workload pix2pixhd.
Architecture pix2pixhd_architecture();

}  // namespace gpubench::models
