// YOLOv3 as pjreddie/darknet's cfg/yolov3.cfg defines it (f86901f6; darknet f6afaabc): Darknet-53
// and three YOLO layers (9 anchors, 80 classes) on 3x608x608 images; the loss whose gradient is
// src/yolo_layer.c's forward_yolo_layer delta (best-of-9 anchor, ignore 0.7, logistic x/y/obj/
// class, log-space w/h scaled by 2 - w*h); darknet's SGD (momentum, decay, burn-in then steps).
// Spec: shared/specs/image-workloads.md §3.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"

#include <torch/nn.h>

#include <cstdint>
#include <vector>

namespace gpubench::models {

/// Shape of a YOLOv3 network.
///
/// Example:
/// ```
/// YoloV3 net(YoloV3Options().classes(80).width(32));
/// ```
struct YoloV3Options {
  /// Object classes; every YOLO layer predicts anchors_per_scale x (5 + classes). Default: 80
  TORCH_ARG(int64_t, classes) = 80;
  /// Channels of the first convolution; every other width scales with it (the cfg: 32).
  /// Default: 32
  TORCH_ARG(int64_t, width) = 32;
  /// Residual blocks of the five Darknet-53 stages. Default: {1, 2, 8, 8, 4}
  TORCH_ARG(std::vector<int64_t>, blocks) = std::vector<int64_t>({1, 2, 8, 8, 4});
  /// Anchors per YOLO layer (the cfg's mask lists have 3 each). Default: 3
  TORCH_ARG(int64_t, anchors_per_scale) = 3;
  /// BatchNorm running-average momentum (darknet: rolling = .99 rolling + .01 mean).
  /// Default: 0.01
  TORCH_ARG(double, bn_momentum) = 0.01;
  /// BatchNorm epsilon (darknet's cuDNN path: .00001). Default: 1e-5
  TORCH_ARG(double, bn_eps) = 1e-5;
};

/// darknet's [convolutional] with batch_normalize=1 and activation=leaky: a k x k convolution
/// without bias (padding k/2), BatchNorm, LeakyReLU 0.1.
class DarknetConvImpl : public torch::nn::Module {
 public:
  DarknetConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                  const YoloV3Options& options);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(DarknetConv);

/// A Darknet-53 residual block: 1x1 to half the channels, 3x3 back, [shortcut] from=-3.
class DarknetResidualImpl : public torch::nn::Module {
 public:
  DarknetResidualImpl(int64_t channels, const YoloV3Options& options);
  torch::Tensor forward(const torch::Tensor& x);

  DarknetConv reduce{nullptr}, expand{nullptr};
};
TORCH_MODULE(DarknetResidual);

/// Darknet-53 without its classifier (the cfg's layers 0-74): a 3x3 stem, then five stages of
/// a stride-2 3x3 convolution and residual blocks.
class Darknet53Impl : public torch::nn::Module {
 public:
  explicit Darknet53Impl(const YoloV3Options& options);
  /// x: [N, 3, S, S] -> the outputs of stages 3, 4 and 5 (the cfg's layers 36, 61 and 74) at
  /// strides 8, 16 and 32, with 8, 16 and 32 times `width` channels.
  std::vector<torch::Tensor> forward(const torch::Tensor& x);

  DarknetConv stem{nullptr};
  torch::nn::ModuleList stages{nullptr};  ///< each a Sequential: downsample, residual blocks
};
TORCH_MODULE(Darknet53);

/// The convolutions before one YOLO layer: 1x1 w, 3x3 2w, 1x1 w, 3x3 2w, 1x1 w (the branch the
/// next scale routes from), then 3x3 2w and the linear 1x1 detection convolution with bias.
class YoloHeadImpl : public torch::nn::Module {
 public:
  YoloHeadImpl(int64_t in, int64_t width, int64_t outputs, const YoloV3Options& options);
  /// Returns {branch [N, width, H, W], raw detection output [N, outputs, H, W]}.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x);

  torch::nn::Sequential body{nullptr};
  DarknetConv project{nullptr};
  torch::nn::Conv2d detect{nullptr};
};
TORCH_MODULE(YoloHead);

/// darknet's yolov3.cfg: Darknet-53, then detection at stride 32; route back, 1x1, nearest
/// upsample x2, concatenate with layer 61 and detect at stride 16; the same again with layer 36
/// at stride 8. Weights initialized as darknet does (He normal convolutions, BN scale 1,
/// biases 0).
class YoloV3Impl : public torch::nn::Module {
 public:
  explicit YoloV3Impl(const YoloV3Options& options);
  /// x: [N, 3, S, S] with S a multiple of 32 -> the raw outputs of the three YOLO layers in the
  /// cfg's order (strides 32, 16, 8), each [N, anchors_per_scale * (5 + classes), S/s, S/s].
  std::vector<torch::Tensor> forward(const torch::Tensor& x);

  YoloV3Options options;
  Darknet53 backbone{nullptr};
  YoloHead head_large{nullptr}, head_medium{nullptr}, head_small{nullptr};
  DarknetConv lateral_medium{nullptr}, lateral_small{nullptr};
};
TORCH_MODULE(YoloV3);

// ---- The loss ----

/// What forward_yolo_layer needs to know about the three YOLO layers.
struct YoloLossOptions {
  int64_t input_size = 608;  ///< network width = height [px]
  int64_t classes = 80;
  /// Anchor (w, h) pairs in network pixels, all layers together (the cfg's `anchors`).
  std::vector<double> anchors;
  /// The anchor ids of each YOLO layer, in output order (the cfg's `mask` lines, concatenated).
  std::vector<int64_t> masks;
  std::vector<int64_t> strides{32, 16, 8};  ///< of each YOLO layer, in output order
  double ignore_thresh = 0.7;               ///< no objectness loss above this IoU with a truth
};

/// The cfg's anchors and masks.
YoloLossOptions yolov3_loss_options(int64_t input_size, int64_t classes);

/// The targets of one batch, computed on the device without host synchronization. A
/// "prediction" is one anchor of one cell of one YOLO layer; they are numbered layer by layer in
/// output order and, within a layer, as darknet stores them (anchor, row, column).
struct YoloTargets {
  torch::Tensor best_anchor;  ///< [N, G] int64: the best of all anchors by shape IoU
  /// [N, G] int64: the prediction this truth trains, or P when its best anchor is in no layer
  torch::Tensor slot;
  /// [N, G] bool: this truth sets the box target at its slot (in darknet's loop over truths a
  /// later truth at the same slot overwrites an earlier one's box deltas)
  torch::Tensor winner;
  torch::Tensor box;        ///< [N, G, 4]: tx, ty (offsets in the cell), tw, th (log space)
  torch::Tensor box_scale;  ///< [N, G]: 2 - w * h
  /// [N, G, C]: the classes of every truth at this truth's slot (darknet's delta_yolo_class
  /// keeps the earlier truths' positives)
  torch::Tensor class_target;
  torch::Tensor obj_target;  ///< [N, P]: 1 at the slots of truths, 0 elsewhere
  /// [N, P]: 0 where a non-slot prediction's box has IoU > ignore_thresh with some truth
  torch::Tensor obj_weight;
};

/// The loss terms of one batch, each summed over predictions and divided by the images.
struct YoloLossTerms {
  torch::Tensor total, xy, wh, obj, cls;
};

/// forward_yolo_layer's loss for the three layers at once. darknet writes deltas (target -
/// output after the logistic) straight into the gradient of the raw outputs, so the equivalent
/// loss is logistic cross-entropy on x, y (weighted by 2 - w*h), objectness and each class,
/// and (2 - w*h) / 2 * squared error on the raw w, h; summed, then divided by the images, which
/// is darknet's learning_rate / batch.
class YoloLoss {
 public:
  YoloLoss(YoloLossOptions options, const torch::Device& device);

  /// The raw outputs of every layer, [N, anchors * (5 + C), H, W] in output order ->
  /// [N, P, 5 + C] in float32 (the loss runs in float32 under autocast).
  torch::Tensor flatten(const std::vector<torch::Tensor>& outputs) const;
  /// Targets for `predictions` [N, P, 5 + C] (detached here) and truths: `boxes` [N, G, 4]
  /// (x, y, w, h as fractions of the image, x and y the centre; G >= 1 real boxes in every
  /// image, no padding), `classes` [N, G] int64 in [0, C).
  YoloTargets targets(const torch::Tensor& predictions, const torch::Tensor& boxes,
                      const torch::Tensor& classes) const;
  /// The loss of raw layer outputs against the truths.
  YoloLossTerms forward(const std::vector<torch::Tensor>& outputs, const torch::Tensor& boxes,
                        const torch::Tensor& classes) const;

  /// Predictions over all layers.
  int64_t predictions() const { return predictions_; }
  const YoloLossOptions& options() const { return options_; }

 private:
  YoloLossOptions options_;
  int64_t anchors_per_scale_ = 0;
  int64_t predictions_ = 0;
  // Per prediction [P]: cell column and row, grid side, anchor w and h (fractions of the image).
  torch::Tensor cell_x_, cell_y_, grid_, anchor_w_, anchor_h_;
  // Per anchor [A]: w and h (fractions), whether a layer owns it, the index of its first
  // prediction (row 0, column 0) and its layer's grid side.
  torch::Tensor all_anchor_w_, all_anchor_h_, anchor_owned_, anchor_offset_, anchor_grid_;
};

/// Synthetic detection data, generated once on the device: images uniform in [0, 1] and a fixed
/// number of truth boxes per image. Box sizes: sqrt(w*h) log-uniform in [min_size, max_size],
/// aspect w/h log-uniform in [1/max_aspect, max_aspect], sides capped at 1; centres uniform
/// where the whole box stays inside the image; classes uniform in [0, classes). The boxes depend
/// on the seed only, not on the device.
struct YoloBatch {
  YoloBatch(int64_t batch, int64_t input_size, int64_t boxes_per_image, int64_t classes,
                 double min_size, double max_size, double max_aspect, const torch::Device& device,
                 uint64_t seed);

  torch::Tensor images;   ///< [N, 3, S, S] float
  torch::Tensor boxes;    ///< [N, G, 4] float: x, y, w, h as fractions, (x, y) the centre
  torch::Tensor classes;  ///< [N, G] int64
};

/// darknet's SGD over `model`: L2 decay on convolution weights only (biases and BN scales are
/// not decayed), momentum, and get_current_rate's "steps" policy with burn-in, where the
/// benchmark's first step is darknet batch `first_batch`.
train::Updater make_yolov3_updater(const torch::nn::Module& model, const Params& optimizer,
                                   Precision precision, const torch::Device& device);

/// YoloV3Options from a resolved `model:` section.
YoloV3Options yolov3_options(const Params& model);

/// The registry entry: workload yolov3.
Architecture yolov3_architecture();

}  // namespace gpubench::models
