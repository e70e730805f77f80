// StyleGAN v1 as NVlabs/stylegan 1e0d5c7 builds it (training/networks_stylegan.py: G_style =
// G_mapping + G_synthesis, and D_basic), trained at its final resolution only (lod 0, no
// progressive growing). Input z [N, 512] -> images [N, 3, 1024, 1024]; reals in [-1, 1].
// Loss (training/loss.py): non-saturating logistic for G, logistic + R1 (gamma 10, a double
// backward through D) for D. Adam lr 0.003, betas (0, 0.99), eps 1e-8 for each network, one D
// step then one G step per iteration. Spec: shared/specs/image-workloads.md §5.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"
#include "models/activation_trace.h"

#include <torch/nn.h>

#include <cstdint>
#include <string>

namespace gpubench::models {

/// Shape of a StyleGAN generator and discriminator (the reference's G_style / D_basic keyword
/// arguments; the defaults are its 1024x1024 FFHQ configuration).
///
/// Example:
/// ```
/// StyleGanOptions small = StyleGanOptions().resolution(32).fmap_base(128).fmap_max(32);
/// StyleGanGenerator g(small);
/// StyleGanDiscriminator d(small);
/// ```
struct StyleGanOptions {
  /// log2(resolution).
  int64_t resolution_log2() const;
  /// Synthesis layers, two per resolution from 4x4 up (18 at 1024), each with its own style.
  int64_t num_layers() const;
  /// Feature maps at stage `stage` (the reference's nf()).
  int64_t nf(int64_t stage) const;
  /// Whether the block at 2^res x 2^res uses the fused up- or down-scaling convolution.
  bool fused_at(int64_t res) const;
  /// Whether layers run in the caller's precision everywhere (fp16_resolutions = kAll), or the
  /// StyleGAN2-ADA recipe places them (only the highest resolutions under autocast).
  bool fp16_everywhere() const { return fp16_resolutions_ == kAllResolutions; }
  /// Whether the block at 2^res x 2^res (G's synthesis block, or D's block that takes 2^res
  /// down to 2^(res-1)) runs under the caller's autocast: always with fp16_everywhere(), else
  /// when res is one of the fp16_resolutions highest and at least 3 (StyleGAN2-ADA's
  /// fp16_resolution = max(2^(log2 + 1 - num_fp16_res), 8)).
  bool fp16_at(int64_t res) const;

  /// fp16_resolutions: every layer under the caller's autocast (what v1 under AMP does).
  static constexpr int64_t kAllResolutions = -1;

  /// Output (and real image) side, a power of two >= 4. Default: 1024
  TORCH_ARG(int64_t, resolution) = 1024;
  /// Image channels. Default: 3
  TORCH_ARG(int64_t, num_channels) = 3;
  /// z width. Default: 512
  TORCH_ARG(int64_t, latent_size) = 512;
  /// w width (the dlatent that every synthesis layer's style reads). Default: 512
  TORCH_ARG(int64_t, dlatent_size) = 512;
  /// Dense layers of the mapping network. Default: 8
  TORCH_ARG(int64_t, mapping_layers) = 8;
  /// Width of the hidden mapping layers. Default: 512
  TORCH_ARG(int64_t, mapping_fmaps) = 512;
  /// Learning-rate multiplier of the mapping layers (weights and biases). Default: 0.01
  TORCH_ARG(double, mapping_lrmul) = 0.01;
  /// Feature maps at stage s: min(fmap_base / 2^s, fmap_max). Default: 8192
  TORCH_ARG(int64_t, fmap_base) = 8192;
  /// Default: 512
  TORCH_ARG(int64_t, fmap_max) = 512;
  /// Blocks at this resolution and above fuse the x2 resampling into their convolution (the
  /// reference's fused_scale='auto': 128). Default: 128
  TORCH_ARG(int64_t, fused_scale_min_res) = 128;
  /// [1, 2, 1] low-pass filter after every upscaling conv and before every downscaling one.
  /// Default: true
  TORCH_ARG(bool, blur) = true;
  /// Probability that a training forward mixes two dlatents. Default: 0.9
  TORCH_ARG(double, style_mixing_prob) = 0.9;
  /// Decay of the tracked mean of w (dlatent_avg) in training forwards; 1 = off. Default: 0.995
  TORCH_ARG(double, dlatent_avg_beta) = 0.995;
  /// Images per minibatch-stddev group (the layer uses min(this, batch)); < 2 = no layer.
  /// Default: 4
  TORCH_ARG(int64_t, mbstd_group_size) = 4;
  /// Feature maps the minibatch-stddev layer appends. Default: 1
  TORCH_ARG(int64_t, mbstd_num_features) = 1;
  /// StyleGAN2-ADA's num_fp16_res: only G's synthesis blocks and D's blocks at the N highest
  /// resolutions run under the caller's autocast; the mapping, the 4x4 synthesis block, the
  /// lower blocks and D's 4x4 epilogue run with autocast off, in fp32. kAllResolutions: no
  /// such split. Default: kAllResolutions
  TORCH_ARG(int64_t, fp16_resolutions) = kAllResolutions;
  /// StyleGAN2-ADA's conv_clamp: every convolution's output is clamped to +-conv_clamp after
  /// its bias and activation (G: before the instance norm; ToRGB: after its bias); 0 = off.
  /// Default: 0
  TORCH_ARG(double, conv_clamp) = 0.0;
};

/// StyleGanOptions from a resolved `model:` section for a run at `precision`; throws if the
/// resolution is not a power of two, or fp16_resolutions is neither "all" nor a count of
/// resolutions. The fp16 recipe (fp16_resolutions, conv_clamp) applies under amp-fp16 only:
/// at any other precision the options say every layer, no clamp (the reference's math).
StyleGanOptions stylegan_options(const Params& model, Precision precision = Precision::kFp32);

/// Fully connected layer with equalized learning rate (the reference's dense + apply_bias with
/// use_wscale): the weight is stored with std 1/lrmul and multiplied by
/// gain / sqrt(fan_in) * lrmul on every forward, the zero-initialized bias by lrmul, so Adam sees
/// the same scale for every layer.
class EqualizedLinearImpl : public torch::nn::Module {
 public:
  EqualizedLinearImpl(int64_t in, int64_t out, double gain, double lrmul = 1.0);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  ///< [out, in], stored unscaled
  torch::Tensor bias;    ///< [out]
  double weight_scale;   ///< gain / sqrt(in) * lrmul
  double bias_scale;     ///< lrmul
};
TORCH_MODULE(EqualizedLinear);

/// Convolution with equalized learning rate (conv2d / upscale2d_conv2d / conv2d_downscale2d):
/// an odd k x k weight stored as N(0, 1) and multiplied by gain / sqrt(in * k * k) on every
/// forward, with 'same' padding and an optional zero-initialized bias.
class EqualizedConv2dImpl : public torch::nn::Module {
 public:
  EqualizedConv2dImpl(int64_t in, int64_t out, int64_t kernel, double gain, bool bias = true);

  /// Stride-1 convolution; adds the bias when `add_bias` (and the layer has one).
  torch::Tensor forward(const torch::Tensor& x, bool add_bias = true);
  /// x2 nearest upscale, then the convolution; `fused`: one stride-2 transposed convolution with
  /// the (k+1) x (k+1) kernel the reference builds from the weight (the sum of its four 1-pixel
  /// shifts), which equals the unfused path with the kernel flipped.
  torch::Tensor forward_up(const torch::Tensor& x, bool fused, bool add_bias = true);
  /// The convolution, then a 2x2 average; `fused`: one stride-2 convolution with a quarter of
  /// the shift-summed kernel, which equals the unfused path exactly.
  torch::Tensor forward_down(const torch::Tensor& x, bool fused, bool add_bias = true);

  torch::Tensor weight;  ///< [out, in, k, k], stored unscaled
  torch::Tensor bias;    ///< [out] or undefined
  double weight_scale;   ///< gain / sqrt(in * k * k)
};
TORCH_MODULE(EqualizedConv2d);

/// The reference's blur2d: a depthwise 3x3 convolution with [1,2,1] x [1,2,1] / 16 and 'same'
/// padding. The filter is a buffer, not a parameter.
class Blur2dImpl : public torch::nn::Module {
 public:
  explicit Blur2dImpl(int64_t channels);
  /// Blurs x (as one single-channel gradfix convolution over the N x C planes); adds `bias`
  /// ([C], or undefined) after it.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias = {});

  torch::Tensor kernel;  ///< [C, 1, 3, 3]
};
TORCH_MODULE(Blur2d);

/// Nearest-neighbour x2 upscale of [N, C, H, W] (the reference's tile-based upscale2d).
torch::Tensor upscale2d(const torch::Tensor& x);

/// The mapping network: pixel norm of z, then `mapping_layers` dense layers (lr multiplier
/// `mapping_lrmul`) with LeakyReLU 0.2. z [N, latent] -> w [N, dlatent].
class MappingNetworkImpl : public torch::nn::Module {
 public:
  explicit MappingNetworkImpl(const StyleGanOptions& options);
  torch::Tensor forward(const torch::Tensor& z);

  torch::nn::ModuleList dense{nullptr};
};
TORCH_MODULE(MappingNetwork);

/// What follows every synthesis convolution (layer_epilogue) except its bias, which the
/// convolution adds: per-channel scaled noise, LeakyReLU 0.2, instance norm (eps 1e-8), and the
/// style modulation (AdaIN) x * (1 + ys) + yb with [ys, yb] = dense(w) (gain 1).
class LayerEpilogueImpl : public torch::nn::Module {
 public:
  /// `label` names the layer in the activation trace; `clamp` > 0 clamps the activation (before
  /// the instance norm) to +-clamp.
  LayerEpilogueImpl(int64_t channels, int64_t dlatent_size, std::string label = "",
                    double clamp = 0.0);
  /// `x`: the layer's convolution output with its bias already added, [N, C, H, W]; modified in
  /// place before the instance norm. `dlatent`: [N, dlatent]. Draws fresh noise N(0, 1) of shape
  /// [N, 1, H, W] on x's device (the reference's randomize_noise=True).
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& dlatent);

  torch::Tensor noise_strength;  ///< [C], zero-initialized
  EqualizedLinear style{nullptr};
  std::string label;
  double clamp = 0.0;
};
TORCH_MODULE(LayerEpilogue);

/// The synthesis network: learned 4x4 constant, then per resolution an upscaling 3x3 conv
/// (fused at fused_scale_min_res and above) + blur and a 3x3 conv, each followed by its epilogue,
/// and ToRGB (1x1, gain 1) at the final resolution. The ToRGB layers of the coarser levels of
/// detail exist, as in the reference's graph, but a lod-0 forward does not use them.
class SynthesisNetworkImpl : public torch::nn::Module {
 public:
  explicit SynthesisNetworkImpl(const StyleGanOptions& options);
  /// dlatents [N, num_layers, dlatent] -> images [N, num_channels, resolution, resolution].
  torch::Tensor forward(const torch::Tensor& dlatents);

  StyleGanOptions options;
  torch::Tensor const_input;  ///< [1, nf(1), 4, 4], ones
  torch::Tensor const_bias;   ///< [nf(1)], the 4x4/Const layer's bias
  EqualizedConv2d conv4{nullptr};
  torch::nn::ModuleList up_convs{nullptr};   ///< resolution 8, 16, ...: Conv0_up
  torch::nn::ModuleList blurs{nullptr};      ///< after each Conv0_up (empty without blur)
  torch::nn::ModuleList convs{nullptr};      ///< resolution 8, 16, ...: Conv1
  torch::nn::ModuleList epilogues{nullptr};  ///< one per layer
  torch::nn::ModuleList to_rgb{nullptr};     ///< index = lod; to_rgb[0] is the one used
};
TORCH_MODULE(SynthesisNetwork);

/// dlatents [N, num_layers, D] for the style-mixing regularization, decided on the device: with
/// probability `prob` layers below a cutoff drawn uniformly from [1, num_layers) take w1 and the
/// rest w2; otherwise every layer takes w1. One decision per minibatch, as the reference.
torch::Tensor mix_styles(const torch::Tensor& w1, const torch::Tensor& w2, int64_t num_layers,
                         double prob);

/// G_style: mapping, then synthesis. A training forward tracks the mean of w (dlatent_avg) and
/// mixes styles with a second z drawn inside; the truncation trick is only for evaluation in the
/// reference (is_training disables it), and a training step never evaluates, so it is not
/// built.
class StyleGanGeneratorImpl : public torch::nn::Module {
 public:
  explicit StyleGanGeneratorImpl(const StyleGanOptions& options);
  /// z [N, latent] -> images [N, C, R, R].
  torch::Tensor forward(const torch::Tensor& z);

  StyleGanOptions options;
  MappingNetwork mapping{nullptr};
  SynthesisNetwork synthesis{nullptr};
  torch::Tensor dlatent_avg;  ///< buffer [dlatent], not trainable
};
TORCH_MODULE(StyleGanGenerator);

/// The minibatch standard-deviation layer: images are split into groups of min(group_size, N)
/// (image i is in group i mod N/G), and each image gets `num_features` extra maps holding the
/// mean over its channel group and pixels of the per-element std over its image group
/// (sqrt(var + 1e-8)). N must be a multiple of the group size.
torch::Tensor minibatch_stddev(const torch::Tensor& x, int64_t group_size, int64_t num_features);

/// True when D_basic's minibatch-stddev layer accepts a minibatch of `batch` images: below the
/// group size, or a multiple of it.
bool stylegan_batch_ok(int64_t batch, int64_t group_size);

/// Whether D's pass over the reals, which the R1 penalty differentiates twice, runs in fp32
/// outside autocast: `setting` is the model's r1_pass ("auto", "fp32" or "autocast"); auto is
/// fp32 under amp-fp16 alone (docs/workloads/stylegan.md, "amp-fp16 and the R1 penalty").
bool r1_pass_in_fp32(const std::string& setting, Precision precision);

/// D_basic: FromRGB (1x1) at full resolution, per resolution down to 8 a 3x3 conv, blur, and a
/// downscaling 3x3 conv (fused at fused_scale_min_res and above, else conv + 2x2 average), then
/// at 4x4 the minibatch-stddev layer, a 3x3 conv and two dense layers to one score. LeakyReLU
/// 0.2 throughout. The FromRGB layers of the coarser levels of detail exist but are unused.
class StyleGanDiscriminatorImpl : public torch::nn::Module {
 public:
  explicit StyleGanDiscriminatorImpl(const StyleGanOptions& options);
  /// images [N, C, R, R] -> scores [N, 1].
  torch::Tensor forward(const torch::Tensor& images);

  StyleGanOptions options;
  torch::nn::ModuleList from_rgb{nullptr};    ///< index = lod; from_rgb[0] is the one used
  torch::nn::ModuleList conv0{nullptr};       ///< resolution R, R/2, ..., 8
  torch::nn::ModuleList blurs{nullptr};       ///< before each Conv1_down (empty without blur)
  torch::nn::ModuleList conv1_down{nullptr};  ///< resolution R, R/2, ..., 8
  EqualizedConv2d conv4{nullptr};
  EqualizedLinear dense0{nullptr}, dense1{nullptr};
};
TORCH_MODULE(StyleGanDiscriminator);

/// The per-image R1 penalty of D_logistic_simplegp, ||d sum(D(reals)) / d reals||^2, with the
/// graph kept (create_graph) so that backward through it reaches D's weights (the double
/// backward). `reals` must require grad; `real_scores` = D(reals). When `scaler` is enabled
/// (amp-fp16) the sum is scaled before the gradient and the gradient unscaled after, as the
/// reference's apply_loss_scaling / undo_loss_scaling.
torch::Tensor r1_penalty(const torch::Tensor& real_scores, const torch::Tensor& reals,
                         const train::GradScaler* scaler = nullptr);

/// Synthetic FFHQ-like reals: uint8 images [N, C, R, R] as the TFRecords hold them, drawn once on
/// `device` from `seed`, and the reference's per-step processing (process_reals): mapped to
/// [-1, 1], then each image mirrored left-right with probability 1/2 when `mirror`.
class SyntheticReals {
 public:
  SyntheticReals(int64_t batch, int64_t channels, int64_t resolution, bool mirror,
                 const torch::Device& device, uint64_t seed);
  /// This step's reals in [-1, 1], float32, a fresh leaf.
  torch::Tensor next() const;
  const torch::Tensor& stored() const { return images_; }

 private:
  torch::Tensor images_;  // uint8
  bool mirror_;
};

/// The registry entry: workload stylegan.
Architecture stylegan_architecture();

}  // namespace gpubench::models
