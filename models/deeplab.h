// DeepLab semantic segmentation, two builds (spec: shared/specs/image-workloads.md §2):
// - deeplabv3: tensorflow/models research/deeplab (core/xception.py 015d6ed6, model.py 05ccaf88)
//   with xception_65, ASPP (separable, rates 6/12/18, image pooling), the DeepLabv3+ decoder
//   at stride 4 and output stride 16; per-pixel softmax cross-entropy ignoring 255 on logits
//   upsampled to the label size; MomentumOptimizer 0.9, poly rate, L2 4e-5 off depthwise.
// - deeplabv3-resnet101: torchvision deeplabv3_resnet101 (ResNet-101 at output stride 8 and
//   DeepLabHead, no aux head); references/segmentation/train.py's cross-entropy (ignore 255),
//   SGD momentum 0.9, weight decay 1e-4 and poly rate.
// Input [N, 3, S, S] (S = 513), labels [N, S, S] in [0, 21) or 255.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"
#include "models/resnet.h"

#include <torch/nn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpubench::models {

/// Converts a TF BatchNorm decay (moving = decay * moving + (1 - decay) * batch) to PyTorch's
/// momentum (the weight of the batch statistic).
inline double bn_momentum_from_decay(double decay) { return 1.0 - decay; }

// ---- TF DeepLab building blocks ----

/// TF DeepLab's split separable convolution: depthwise k x k (rate, stride) -> BN [-> ReLU] ->
/// pointwise 1x1 -> BN [-> ReLU], no biases. Padding is TF's: 'SAME' at stride 1, explicit
/// fixed padding (pad_beg = (k_eff - 1) / 2, pad_end = the rest) then VALID at stride > 1
/// (xception.py separable_conv2d_same).
///
/// Example:
/// ```
/// TfSeparableConv2d aspp1(TfSeparableConv2dOptions(2048, 256).rate(6).relu(true));
/// ```
struct TfSeparableConv2dOptions {
  TfSeparableConv2dOptions(int64_t in_channels, int64_t out_channels)
      : in_channels_(in_channels), out_channels_(out_channels) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  /// Depthwise kernel size. Default: 3
  TORCH_ARG(int64_t, kernel_size) = 3;
  /// Depthwise stride. Default: 1
  TORCH_ARG(int64_t, stride) = 1;
  /// Depthwise atrous rate (dilation). Default: 1
  TORCH_ARG(int64_t, rate) = 1;
  /// ReLU after each BN (activation_fn_in_separable_conv, and every DeepLab head separable
  /// conv); without it the caller applies ReLU to the input. Default: false
  TORCH_ARG(bool, relu) = false;
  /// BatchNorm epsilon. Default: 1e-3 (xception_arg_scope)
  TORCH_ARG(double, bn_eps) = 1e-3;
  /// BatchNorm momentum, PyTorch convention (TF decay 0.9997). Default: 3e-4
  TORCH_ARG(double, bn_momentum) = 3e-4;
};

class TfSeparableConv2dImpl : public torch::nn::Module {
 public:
  explicit TfSeparableConv2dImpl(const TfSeparableConv2dOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  TfSeparableConv2dOptions options;
  torch::nn::Conv2d depthwise{nullptr}, pointwise{nullptr};
  torch::nn::BatchNorm2d depthwise_bn{nullptr}, pointwise_bn{nullptr};

 private:
  std::vector<int64_t> explicit_padding_;  // F::pad's {left, right, top, bottom}; empty: none
};
TORCH_MODULE(TfSeparableConv2d);

/// How an Xception module's input reaches its output.
enum class XceptionShortcut {
  kConv,  ///< 1x1 conv (stride s) + BN, added
  kSum,   ///< the input itself, added
  kNone,  ///< no shortcut
};

/// An Xception module (xception.py xception_module): three separable convs (stride on the
/// third), each preceded by a ReLU on its input unless `relu_inside`, plus the shortcut.
struct XceptionModuleOptions {
  XceptionModuleOptions(int64_t in_channels, std::vector<int64_t> depths)
      : in_channels_(in_channels), depths_(std::move(depths)) {}
  TORCH_ARG(int64_t, in_channels);
  /// Output channels of the three separable convs.
  TORCH_ARG(std::vector<int64_t>, depths);
  TORCH_ARG(XceptionShortcut, shortcut) = XceptionShortcut::kConv;
  /// Stride of the third separable conv and of the shortcut conv. Default: 1
  TORCH_ARG(int64_t, stride) = 1;
  /// Atrous rate of the module (times `unit_rates`). Default: 1
  TORCH_ARG(int64_t, rate) = 1;
  /// Per-conv rate multipliers (multi-grid). Default: {1, 1, 1}
  TORCH_ARG(std::vector<int64_t>, unit_rates) = std::vector<int64_t>{1, 1, 1};
  /// activation_fn_in_separable_conv: ReLU after each BN instead of before each conv.
  /// Default: false
  TORCH_ARG(bool, relu_inside) = false;
  TORCH_ARG(double, bn_eps) = 1e-3;
  TORCH_ARG(double, bn_momentum) = 3e-4;
};

class XceptionModuleImpl : public torch::nn::Module {
 public:
  explicit XceptionModuleImpl(const XceptionModuleOptions& options);
  /// `tap`, when given, receives the second separable conv's output (DeepLab's decoder
  /// end point `separable_conv2_pointwise`).
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* tap = nullptr);

  XceptionModuleOptions options;
  TfSeparableConv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Conv2d shortcut_conv{nullptr};  ///< kConv only
  torch::nn::BatchNorm2d shortcut_bn{nullptr};
};
TORCH_MODULE(XceptionModule);

/// Xception-65 as DeepLab modifies it (xception_65): entry conv1_1 3x3/2 32 and conv1_2 3x3 64,
/// entry blocks [128]x3 /2, [256]x3 /2, [728]x3 /2 (conv shortcuts), the middle flow of
/// `middle_blocks` x [728]x3 (sum shortcuts), exit blocks [728, 1024, 1024] /2 (conv shortcut)
/// and [1536, 1536, 2048] (no shortcut, ReLU inside). Strides past `output_stride` become
/// atrous rates (stack_blocks_dense).
struct XceptionOptions {
  /// Middle-flow modules. Default: 16
  TORCH_ARG(int64_t, middle_blocks) = 16;
  /// Output stride: 8, 16 or 32. Default: 16
  TORCH_ARG(int64_t, output_stride) = 16;
  /// Exit block 2's per-conv rate multipliers. Default: {1, 1, 1}
  TORCH_ARG(std::vector<int64_t>, multi_grid) = std::vector<int64_t>{1, 1, 1};
  TORCH_ARG(double, bn_eps) = 1e-3;
  TORCH_ARG(double, bn_momentum) = 3e-4;
};

class XceptionImpl : public torch::nn::Module {
 public:
  explicit XceptionImpl(const XceptionOptions& options);
  /// Returns {features [N, 2048, S/os, S/os], low-level features [N, 256, S/4, S/4]} (entry
  /// block 2's second separable conv, the DeepLabv3+ decoder's input).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x);

  XceptionOptions options;
  torch::nn::Conv2d conv1_1{nullptr}, conv1_2{nullptr};
  torch::nn::BatchNorm2d bn1_1{nullptr}, bn1_2{nullptr};
  torch::nn::ModuleList blocks{nullptr};  ///< entry 1-3, middle, exit 1-2, in order
};
TORCH_MODULE(Xception);

// ---- ASPP, shared by both builds ----

/// Atrous spatial pyramid pooling: a 1x1 branch, one 3x3 branch per rate (dense, as
/// torchvision, or TF DeepLab's separable dw -> BN -> ReLU -> pw -> BN -> ReLU), an image
/// pooling branch (global average, 1x1 conv, BN, ReLU, broadcast back), every branch `channels`
/// wide with BN and ReLU, concatenated and projected by 1x1 conv + BN + ReLU + dropout.
///
/// Example:
/// ```
/// Aspp torchvision(AsppOptions(2048, {12, 24, 36}));
/// Aspp tf(AsppOptions(2048, {6, 12, 18}).separable(true).pooling_first(true).dropout(0.1)
///             .bn_momentum(3e-4));
/// ```
struct AsppOptions {
  AsppOptions(int64_t in_channels, std::vector<int64_t> rates)
      : in_channels_(in_channels), rates_(std::move(rates)) {}
  TORCH_ARG(int64_t, in_channels);
  /// Atrous rates of the 3x3 branches.
  TORCH_ARG(std::vector<int64_t>, rates);
  /// Width of every branch and of the projection. Default: 256
  TORCH_ARG(int64_t, channels) = 256;
  /// Separable 3x3 branches (TF aspp_with_separable_conv). Default: false
  TORCH_ARG(bool, separable) = false;
  /// Concatenate the image-pooling branch first (TF) rather than last (torchvision).
  /// Default: false
  TORCH_ARG(bool, pooling_first) = false;
  /// Dropout after the projection (TF keep_prob 0.9 = 0.1). Default: 0.5
  TORCH_ARG(double, dropout) = 0.5;
  TORCH_ARG(double, bn_eps) = 1e-5;
  TORCH_ARG(double, bn_momentum) = 0.1;
};

class AsppImpl : public torch::nn::Module {
 public:
  explicit AsppImpl(const AsppOptions& options);
  /// [N, in_channels, H, W] -> [N, channels, H, W].
  torch::Tensor forward(const torch::Tensor& x);
  /// The branch outputs before concatenation, in concatenation order (for tests).
  std::vector<torch::Tensor> branches(const torch::Tensor& x);

  AsppOptions options;
  torch::nn::Conv2d conv1x1{nullptr}, pooling_conv{nullptr}, project{nullptr};
  torch::nn::BatchNorm2d bn1x1{nullptr}, pooling_bn{nullptr}, project_bn{nullptr};
  torch::nn::ModuleList atrous{nullptr};  ///< one module per rate (dense: conv + BN in a
                                          ///< Sequential; separable: TfSeparableConv2d)
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Aspp);

// ---- The two models ----

/// TF DeepLabv3+ with an Xception-65 backbone (model.py with model_variant xception_65,
/// decoder_output_stride 4): backbone, ASPP, decoder (1x1 projection of the low-level features
/// to 48, ASPP output resized to their size (align_corners), concat, two separable convs 256),
/// 1x1 logits with bias.
struct DeepLabV3PlusOptions {
  explicit DeepLabV3PlusOptions(int64_t num_classes) : num_classes_(num_classes) {}
  TORCH_ARG(int64_t, num_classes);
  TORCH_ARG(XceptionOptions, backbone);
  TORCH_ARG(std::vector<int64_t>, atrous_rates) = std::vector<int64_t>{6, 12, 18};
  /// Build the decoder (decoder_output_stride 4); without it logits come from ASPP.
  /// Default: true
  TORCH_ARG(bool, decoder) = true;
  /// ASPP projection dropout. Default: 0.1 (keep_prob 0.9)
  TORCH_ARG(double, aspp_dropout) = 0.1;
  /// ASPP and decoder BatchNorm epsilon. Default: 1e-5
  TORCH_ARG(double, head_bn_eps) = 1e-5;
  TORCH_ARG(double, head_bn_momentum) = 3e-4;
};

class DeepLabV3PlusImpl : public torch::nn::Module {
 public:
  explicit DeepLabV3PlusImpl(const DeepLabV3PlusOptions& options);
  /// Logits at the decoder's resolution (S/4 + 1 for S = 4k + 1), before upsampling.
  torch::Tensor decoder_logits(const torch::Tensor& x);
  /// Logits bilinearly upsampled (align_corners) to the input size, as TF's loss does with
  /// upsample_logits before comparing them with the labels.
  torch::Tensor forward(const torch::Tensor& x);

  DeepLabV3PlusOptions options;
  Xception backbone{nullptr};
  Aspp aspp{nullptr};
  torch::nn::Conv2d projection{nullptr};  ///< decoder feature_projection0 (null without decoder)
  torch::nn::BatchNorm2d projection_bn{nullptr};
  TfSeparableConv2d decoder_conv0{nullptr}, decoder_conv1{nullptr};
  torch::nn::Conv2d logits{nullptr};
};
TORCH_MODULE(DeepLabV3Plus);

/// torchvision DeepLabV3: a ResNet backbone (no classifier) and DeepLabHead (ASPP, 3x3 conv,
/// BN, ReLU, 1x1 classifier); the logits are upsampled (bilinear, align_corners false) to the
/// input size. No auxiliary head.
struct DeepLabV3Options {
  DeepLabV3Options(ResNetOptions backbone, int64_t num_classes)
      : backbone_(std::move(backbone)), num_classes_(num_classes) {}
  TORCH_ARG(ResNetOptions, backbone);
  TORCH_ARG(int64_t, num_classes);
  TORCH_ARG(std::vector<int64_t>, atrous_rates) = std::vector<int64_t>{12, 24, 36};
  TORCH_ARG(double, aspp_dropout) = 0.5;
};

class DeepLabV3Impl : public torch::nn::Module {
 public:
  explicit DeepLabV3Impl(const DeepLabV3Options& options);
  /// Logits at the input size.
  torch::Tensor forward(const torch::Tensor& x);

  DeepLabV3Options options;
  ResNet backbone{nullptr};
  Aspp aspp{nullptr};
  torch::nn::Conv2d head_conv{nullptr}, classifier{nullptr};
  torch::nn::BatchNorm2d head_bn{nullptr};
};
TORCH_MODULE(DeepLabV3);

// ---- Training ----

/// Per-pixel softmax cross-entropy over the pixels whose label is not `ignore_label`, averaged
/// over those pixels (TF: sum / num_present, 0 when none; torch: reduction mean with
/// ignore_index). logits [N, C, H, W] at the labels' size, labels [N, H, W] int64. No host read.
torch::Tensor segmentation_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                         int64_t ignore_label);

/// How the synthetic images are scaled.
enum class InputRange {
  kXception,  ///< [-1, 1]: DeepLab's xception preprocessing (2 * x / 255 - 1)
  kImageNet,  ///< (x - mean) / std with torchvision's ImageNet statistics
};

/// Synthetic PASCAL-like segmentation data, generated once on the device and deterministic
/// from the seed: each image holds 1 to `max_objects` overlapping ellipses of random class in
/// [1, classes) on background 0; a void band of `ignore_band` pixels around every object
/// boundary is labelled `ignore_label` (as VOC's annotation borders); the image is a per-class
/// colour plus noise, scaled as the model's preprocessing does.
struct SegmentationBatch {
  SegmentationBatch(int64_t batch, int64_t size, int64_t classes, int64_t max_objects,
                    int64_t ignore_band, int64_t ignore_label, InputRange range,
                    const torch::Device& device, uint64_t seed);

  torch::Tensor images;  ///< [N, 3, S, S] float
  torch::Tensor labels;  ///< [N, S, S] int64 in [0, classes) or ignore_label
};

/// The `optimizer:` keys both builds share: SGD with momentum, L2 weight decay on the
/// gradient (over conv weights without depthwise, TF DeepLab, or over every parameter,
/// torchvision), poly learning rate.
ParamSchema deeplab_optimizer_schema();
/// The optimizer and schedule of an `optimizer:` section over `module`'s parameters.
train::Updater make_deeplab_updater(const torch::nn::Module& module, const Params& optimizer,
                                    Precision precision, const torch::Device& device);

/// Registry entries: deeplabv3 (TF Xception-65 DeepLabv3+) and deeplabv3-resnet101
/// (torchvision).
Architecture deeplab_xception_architecture();
Architecture deeplab_resnet_architecture();

}  // namespace gpubench::models
