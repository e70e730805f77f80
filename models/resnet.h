// ResNet (He et al. 2015) as torchvision.models.resnet builds it (pytorch/vision, v0.15+ layout:
// stride in the 3x3 conv, "v1.5"), with the options detection and segmentation backbones need:
// dilation instead of stride per stage (replace_stride_with_dilation), frozen BatchNorm, frozen
// leading stages and the stride in the first 1x1 (MSRA / maskrcnn-benchmark style). Input
// [N, 3, H, W]; with num_classes > 0 it ends in global pooling and a linear classifier.
#pragma once

#include <torch/nn.h>

#include <cstdint>
#include <vector>

namespace gpubench::models {

/// The shape of a ResNet and how its stages are built.
///
/// Example:
/// ```
/// // torchvision deeplabv3_resnet101's backbone: output stride 8, no classifier.
/// ResNet backbone(resnet_options(101).num_classes(0).replace_stride_with_dilation(
///     {false, true, true}));
/// ```
struct ResNetOptions {
  explicit ResNetOptions(std::vector<int64_t> layers) : layers_(std::move(layers)) {}
  /// Blocks in each of the four stages (ResNet-101: {3, 4, 23, 3}).
  TORCH_ARG(std::vector<int64_t>, layers);
  /// Bottleneck blocks (1x1, 3x3, 1x1; expansion 4) or basic blocks (two 3x3). Default: true
  TORCH_ARG(bool, bottleneck) = true;
  /// Classes of the final linear layer; 0 builds neither pooling nor classifier (a backbone).
  /// Default: 1000
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// For stages 2, 3 and 4: replace the stride 2 with dilation (torchvision's
  /// replace_stride_with_dilation). Default: {false, false, false}
  TORCH_ARG(std::vector<bool>, replace_stride_with_dilation) = std::vector<bool>(3, false);
  /// Put a bottleneck's stride in its first 1x1 conv instead of the 3x3 (MSRA / Caffe ResNet,
  /// maskrcnn-benchmark's STRIDE_IN_1X1). Default: false
  TORCH_ARG(bool, stride_in_1x1) = false;
  /// Frozen BatchNorm: fixed scale and shift buffers, no trainable parameters. Default: false
  TORCH_ARG(bool, frozen_bn) = false;
  /// Leading stages whose parameters get no gradient: 0 none, 1 the stem, 2 the stem and
  /// stage 1 (maskrcnn-benchmark's FREEZE_CONV_BODY_AT=2), up to 5. Default: 0
  TORCH_ARG(int64_t, frozen_stages) = 0;
  /// BatchNorm epsilon. Default: 1e-5
  TORCH_ARG(double, bn_eps) = 1e-5;
  /// BatchNorm running-statistics momentum (PyTorch convention). Default: 0.1
  TORCH_ARG(double, bn_momentum) = 0.1;
  /// Start the last BatchNorm of each residual branch at zero (torchvision's
  /// zero_init_residual). Default: false
  TORCH_ARG(bool, zero_init_residual) = false;
};

/// The torchvision layout of ResNet-18, 34, 50, 101 or 152.
ResNetOptions resnet_options(int64_t depth);

/// BatchNorm with fixed statistics and affine parameters, all buffers (torchvision.ops and
/// maskrcnn-benchmark's FrozenBatchNorm2d): y = x * w / sqrt(var + eps) + (b - mean * scale).
class FrozenBatchNorm2dImpl : public torch::nn::Module {
 public:
  explicit FrozenBatchNorm2dImpl(int64_t channels, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias, running_mean, running_var;
  double eps;
};
TORCH_MODULE(FrozenBatchNorm2d);

/// One residual block: bottleneck (1x1 -> 3x3 -> 1x1, 4x expansion) or basic (3x3 -> 3x3), with
/// a projection shortcut (1x1 conv + norm) when the shape changes.
class ResNetBlockImpl : public torch::nn::Module {
 public:
  /// `width`: channels of the inner convs; the block outputs width * expansion.
  ResNetBlockImpl(const ResNetOptions& options, int64_t in_channels, int64_t width, int64_t stride,
                  int64_t dilation);
  torch::Tensor forward(const torch::Tensor& x);

  /// Output channels per unit of width: 4 for bottlenecks, 1 for basic blocks.
  static int64_t expansion(bool bottleneck) { return bottleneck ? 4 : 1; }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};  ///< conv3: bottleneck only
  torch::nn::AnyModule bn1, bn2, bn3;
  torch::nn::Conv2d downsample_conv{nullptr};  ///< null when the shortcut is the identity
  torch::nn::AnyModule downsample_bn;
};
TORCH_MODULE(ResNetBlock);

/// The network: stem (7x7 conv stride 2, norm, ReLU, 3x3 max pool stride 2), four stages, and
/// (with num_classes > 0) global average pooling and a linear classifier.
class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  /// Logits [N, num_classes], or the last stage's features without a classifier.
  torch::Tensor forward(const torch::Tensor& x);
  /// The outputs of stages 1 to 4 (C2..C5 in detection terms).
  std::vector<torch::Tensor> stages(const torch::Tensor& x);

  /// Channels of the last stage's output (2048 for bottleneck ResNets).
  int64_t out_channels() const;

  ResNetOptions options;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::AnyModule bn1;
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};  ///< null without a classifier
};
TORCH_MODULE(ResNet);

}  // namespace gpubench::models
