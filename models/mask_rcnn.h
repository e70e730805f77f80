// Mask R-CNN R-50-FPN as facebookresearch/maskrcnn-benchmark (57eec25b) trains it with
// configs/e2e_mask_rcnn_R_50_FPN_1x.yaml: 800x1333 images padded to 800x1344, 81 classes, the
// sum of five losses (RPN objectness BCE and smooth L1, box CE and smooth L1, mask BCE), SGD
// with momentum 0.9 (biases at twice the rate, without decay) after a linear warm-up.
// Spec: shared/specs/image-workloads.md §6; detection operators in models/detection_ops.h.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"
#include "models/detection_ops.h"

#include <torch/nn.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace gpubench::models {

/// How many RoIs the box and mask heads run (their batch dimension, fixed on the host).
enum class RoiHeadSlots {
  /// maskrcnn-benchmark's work: a batch-wide bound on the RoIs the sampler can return
  /// (roi_slot_bound), the sampled RoIs of all images packed into it, image after image.
  kPerBatch,
  /// The most an image can have, for every image: roi_batch_per_image box RoIs and
  /// mask_rois_per_image mask RoIs each, the empty ones masked out of the losses.
  kFixedMax,
};

/// The shape of the network and the training-time target and proposal settings, with
/// maskrcnn-benchmark's defaults for e2e_mask_rcnn_R_50_FPN_1x.
///
/// Example:
/// ```
/// MaskRcnn model(MaskRcnnOptions().num_classes(81));
/// ```
struct MaskRcnnOptions {
  /// Classes including background. Default: 81 (COCO)
  TORCH_ARG(int64_t, num_classes) = 81;
  /// Bottleneck blocks of res2..res5 (RESNETS, R-50). Default: {3, 4, 6, 3}
  TORCH_ARG(std::vector<int64_t>, blocks) = std::vector<int64_t>({3, 4, 6, 3});
  /// Stem output channels. Default: 64
  TORCH_ARG(int64_t, stem_channels) = 64;
  /// res2 output channels (doubling per stage). Default: 256
  TORCH_ARG(int64_t, res2_channels) = 256;
  /// res2 bottleneck width (doubling per stage). Default: 64
  TORCH_ARG(int64_t, width_per_group) = 64;
  /// The MSRA layout: a downsampling block strides in its first 1x1 conv. Default: true
  TORCH_ARG(bool, stride_in_1x1) = true;
  /// FREEZE_CONV_BODY_AT: the stem (1) and res2 (2) get no gradient. Default: 2
  TORCH_ARG(int64_t, freeze_at) = 2;
  /// FPN width. Default: 256
  TORCH_ARG(int64_t, fpn_channels) = 256;
  /// One anchor size per level P2..P6, in pixels. Default: {32, 64, 128, 256, 512}
  TORCH_ARG(std::vector<double>, anchor_sizes) = std::vector<double>({32, 64, 128, 256, 512});
  /// Anchor aspect ratios (height / width). Default: {0.5, 1, 2}
  TORCH_ARG(std::vector<double>, aspect_ratios) = std::vector<double>({0.5, 1, 2});
  /// Anchors crossing the image border by more than this are ignored. Default: 0
  TORCH_ARG(double, straddle_thresh) = 0;
  /// RPN matcher: anchors at IoU >= fg are positive. Default: 0.7
  TORCH_ARG(double, rpn_fg_iou) = 0.7;
  /// RPN matcher: anchors at IoU < bg are negative. Default: 0.3
  TORCH_ARG(double, rpn_bg_iou) = 0.3;
  /// Anchors sampled per image for the RPN losses. Default: 256
  TORCH_ARG(int64_t, rpn_batch_per_image) = 256;
  /// Largest positive share of the RPN sample. Default: 0.5
  TORCH_ARG(double, rpn_positive_fraction) = 0.5;
  /// Top-scoring anchors per image and level before NMS (PRE_NMS_TOP_N_TRAIN). Default: 2000
  TORCH_ARG(int64_t, pre_nms_top_n) = 2000;
  /// Proposals kept per image and level after NMS (POST_NMS_TOP_N_TRAIN). Default: 2000
  TORCH_ARG(int64_t, post_nms_top_n) = 2000;
  /// Proposals kept over all levels (FPN_POST_NMS_TOP_N_TRAIN). Default: 2000
  TORCH_ARG(int64_t, fpn_post_nms_top_n) = 2000;
  /// FPN_POST_NMS_PER_BATCH: the fpn_post_nms_top_n cut is over the whole batch (the
  /// reference's Detectron-compatible training behaviour), not per image. Default: true
  TORCH_ARG(bool, fpn_post_nms_per_batch) = true;
  /// RPN NMS IoU threshold. Default: 0.7
  TORCH_ARG(double, nms_thresh) = 0.7;
  /// Proposals narrower or shorter than this are dropped. Default: 0
  TORCH_ARG(double, min_size) = 0;
  /// RoI matcher: proposals at IoU >= fg are foreground. Default: 0.5
  TORCH_ARG(double, roi_fg_iou) = 0.5;
  /// RoI matcher: proposals at IoU < bg are background. Default: 0.5
  TORCH_ARG(double, roi_bg_iou) = 0.5;
  /// RoIs sampled per image for the box head. Default: 512
  TORCH_ARG(int64_t, roi_batch_per_image) = 512;
  /// Largest foreground share of the RoI sample. Default: 0.25
  TORCH_ARG(double, roi_positive_fraction) = 0.25;
  /// Box-head box-coder weights. Default: {10, 10, 5, 5}
  TORCH_ARG(std::vector<double>, bbox_reg_weights) = std::vector<double>({10, 10, 5, 5});
  /// Box-head RoIAlign output side. Default: 7
  TORCH_ARG(int64_t, box_resolution) = 7;
  /// RoIAlign samples per bin side (both heads). Default: 2
  TORCH_ARG(int64_t, sampling_ratio) = 2;
  /// Width of the box head's two fully connected layers. Default: 1024
  TORCH_ARG(int64_t, mlp_dim) = 1024;
  /// Mask-head RoIAlign output side; the predicted masks are twice this. Default: 14
  TORCH_ARG(int64_t, mask_resolution) = 14;
  /// Mask-head 3x3 conv widths. Default: {256, 256, 256, 256}
  TORCH_ARG(std::vector<int64_t>, mask_conv_layers) = std::vector<int64_t>({256, 256, 256, 256});
  /// Mask-head RoI slots per image: every sampled positive when it equals
  /// floor(roi_batch_per_image x roi_positive_fraction). Default: 128
  TORCH_ARG(int64_t, mask_rois_per_image) = 128;
  /// RoI slots of the heads. Default: kPerBatch
  TORCH_ARG(RoiHeadSlots, roi_heads) = RoiHeadSlots::kPerBatch;
};

/// The most RoIs an RoI head can get over a batch of `images` images that have at most
/// `per_image` sampled each, when each image's candidates are its `gt_per_image` ground-truth
/// boxes (add_gt_proposals) and its share of at most `proposals` proposals over the batch:
/// images x g + min(proposals, images x (per_image - g)), g = min(per_image, gt_per_image).
/// At batch 16 with 7 boxes per image and 2000 proposals: 2112 of 512 per image (box head),
/// 2048 of 128 per image (mask head).
int64_t roi_slot_bound(int64_t images, int64_t per_image, int64_t gt_per_image, int64_t proposals);

/// The sizes of one batch's RoI sets, all known on the host.
struct RoiSlots {
  int64_t proposals_per_image = 0;  ///< proposal slots per image (rpn_proposals' K)
  int64_t proposals = 0;            ///< the most valid proposals over the batch
  int64_t samples_per_image = 0;    ///< the sampler's slots per image (<= roi_batch_per_image)
  int64_t mask_per_image = 0;       ///< positives per image the mask head may take
  int64_t box = 0;                  ///< RoIs the box head runs over the batch
  int64_t mask = 0;                 ///< RoIs the mask head runs over the batch
};

/// The multiply-adds of one training step by part (docs/workloads/mask-rcnn.md, "FLOPs"): every
/// convolution and matrix product's forward, plus one forward's worth for each of the input and
/// weight gradients its backward computes (none for frozen weights or an input that needs no
/// gradient: the images, and the frozen stages' outputs). RoIAlign, NMS, box coding and the
/// losses are not counted.
struct MaskRcnnMacs {
  double backbone = 0;   ///< ResNet body over the images
  double fpn = 0;        ///< laterals and 3x3 outputs on C2..C5
  double rpn = 0;        ///< RPN head on P2..P6
  double box_head = 0;   ///< fc6, fc7, scores and deltas over the box slots
  double mask_head = 0;  ///< 3x3 convs, transposed conv, own-class logits over the mask slots
  double total() const { return backbone + fpn + rpn + box_head + mask_head; }
};

/// The training multiply-adds of a step of `images` images padded to `padded_height` x
/// `padded_width` whose heads run `box_slots` and `mask_slots` RoIs (RoiSlots::box and ::mask:
/// the heads compute every slot, empty ones included), from the shapes alone.
MaskRcnnMacs mask_rcnn_training_macs(const MaskRcnnOptions& options, int64_t images,
                                     int64_t padded_height, int64_t padded_width, int64_t box_slots,
                                     int64_t mask_slots);

// The backbone pieces live in their own namespace until they are merged with a general ResNet
// (models/resnet.h, written for deeplab at the same time), so the two cannot collide.
namespace rcnn {

/// maskrcnn-benchmark's FrozenBatchNorm2d: a per-channel affine map from fixed statistics
/// (buffers, no parameters), x * weight / sqrt(running_var) + bias - running_mean * scale
/// (no epsilon).
class FrozenBatchNorm2dImpl : public torch::nn::Module {
 public:
  explicit FrozenBatchNorm2dImpl(int64_t channels);
  /// The per-channel (scale, shift) the statistics define.
  std::pair<torch::Tensor, torch::Tensor> affine() const;
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias, running_mean, running_var;
};
TORCH_MODULE(FrozenBatchNorm2d);

/// A bias-free convolution followed by FrozenBatchNorm2d, computed as one convolution with the
/// affine map folded into its weight and bias (the same function, one pass over the output).
class ConvFrozenBnImpl : public torch::nn::Module {
 public:
  ConvFrozenBnImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d conv{nullptr};
  FrozenBatchNorm2d bn{nullptr};
  /// While set, forward() first sets the statistics from this convolution's output on its
  /// input (per-channel mean and biased variance; bias 0, weight calibration_gain), so that the
  /// output has mean 0 and standard deviation calibration_gain on that data, as a BatchNorm
  /// that has seen it. See MaskRcnnImpl::calibrate_frozen_batchnorm.
  bool calibrating = false;
  /// The output standard deviation calibration aims at. Default: 1
  double calibration_gain = 1.0;

 private:
  int64_t stride_, padding_;
};
TORCH_MODULE(ConvFrozenBn);

/// The ResNet bottleneck (1x1, 3x3, 1x1, identity or projection shortcut), every conv with a
/// FrozenBatchNorm2d; the stride sits in the first 1x1 or in the 3x3.
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t in, int64_t width, int64_t out, int64_t stride, bool stride_in_1x1);
  torch::Tensor forward(const torch::Tensor& x);

  ConvFrozenBn conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  ConvFrozenBn downsample{nullptr};  ///< null when the shortcut is the identity
};
TORCH_MODULE(Bottleneck);

/// maskrcnn-benchmark's ResNet body (StemWithFixedBatchNorm + four stages): returns C2..C5 at
/// strides 4, 8, 16, 32. The stem and the first freeze_at - 1 stages get no gradient.
class ResNetBodyImpl : public torch::nn::Module {
 public:
  explicit ResNetBodyImpl(const MaskRcnnOptions& options);
  std::vector<torch::Tensor> forward(const torch::Tensor& images);

  ConvFrozenBn stem{nullptr};
  std::vector<torch::nn::Sequential> stages;  ///< res2..res5 ("layer1".."layer4"), Bottlenecks
};
TORCH_MODULE(ResNetBody);

}  // namespace rcnn

/// FPN without normalization: 1x1 laterals and 3x3 outputs (with bias), nearest x2 top-down,
/// and P6 as a stride-2 max-pool of P5 (LastLevelMaxPool). Returns P2..P6.
class FpnImpl : public torch::nn::Module {
 public:
  FpnImpl(const std::vector<int64_t>& in_channels, int64_t channels);
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& features);

  std::vector<torch::nn::Conv2d> inner, layer;  ///< per input level, finest first
};
TORCH_MODULE(Fpn);

/// The RPN head shared by every level: 3x3 conv + ReLU, then objectness (A channels) and box
/// deltas (4A channels, anchor-major) by 1x1 convs.
class RpnHeadImpl : public torch::nn::Module {
 public:
  RpnHeadImpl(int64_t channels, int64_t anchors);
  /// Objectness logits [N, A, H, W] and deltas [N, 4A, H, W] of one level.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x);

  torch::nn::Conv2d conv{nullptr}, cls_logits{nullptr}, bbox_pred{nullptr};
};
TORCH_MODULE(RpnHead);

/// FPN2MLPFeatureExtractor + FPNPredictor: flatten, fc6 + ReLU, fc7 + ReLU, class logits and
/// class-specific box deltas.
class BoxHeadImpl : public torch::nn::Module {
 public:
  BoxHeadImpl(int64_t in_features, int64_t mlp_dim, int64_t classes);
  /// RoI features [R, C, r, r] -> class logits [R, classes], deltas [R, 4 * classes].
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x);

  torch::nn::Linear fc6{nullptr}, fc7{nullptr}, cls_score{nullptr}, bbox_pred{nullptr};
};
TORCH_MODULE(BoxHead);

/// MaskRCNNFPNFeatureExtractor + MaskRCNNC4Predictor: 3x3 convs + ReLU, a 2x2 stride-2
/// transposed conv + ReLU, and a 1x1 conv to one mask per class.
class MaskHeadImpl : public torch::nn::Module {
 public:
  MaskHeadImpl(int64_t in_channels, const std::vector<int64_t>& conv_layers, int64_t classes);
  /// The features before the last 1x1 conv: [R, C, 2r, 2r] from RoI features [R, C', r, r].
  torch::Tensor features(const torch::Tensor& x);
  /// Every class's mask logits [R, classes, 2r, 2r], as the reference computes them.
  torch::Tensor forward(const torch::Tensor& x);
  /// Only the logits of each RoI's own class, [R, 2r, 2r] for labels [R]: the channels the loss
  /// reads, and so the same values and gradients as forward() followed by indexing.
  torch::Tensor class_logits(const torch::Tensor& x, const torch::Tensor& labels);

  std::vector<torch::nn::Conv2d> convs;
  torch::nn::ConvTranspose2d deconv{nullptr};
  torch::nn::Conv2d logits{nullptr};
};
TORCH_MODULE(MaskHead);

/// Constants of one padded input size: the anchors of every level and the RoIAlign layout.
/// Built once (it copies small tables to the device), outside the training step.
struct DetectionPlan {
  int64_t image_height = 0, image_width = 0;             ///< real (unpadded) image size
  int64_t padded_height = 0, padded_width = 0;           ///< the batch's size
  std::vector<std::pair<int64_t, int64_t>> level_sizes;  ///< P2..P6 (height, width)
  std::vector<int64_t> level_anchors;                    ///< anchors per image on each level
  torch::Tensor anchors;                                 ///< [A, 4] every level's anchors, P2 first
  torch::Tensor visible;                           ///< [A] bool: inside the image (straddle_thresh)
  std::unique_ptr<detection::FeatureRows> rows;    ///< P2..P5 as RoIAlign reads them
  std::unique_ptr<detection::BatchedNms> nms;      ///< the RPN's NMS, with its scan buffers
};

/// A batch of images with ground truth, as maskrcnn-benchmark's data loader hands it over.
struct DetectionBatch {
  torch::Tensor images;  ///< [N, 3, padded_h, padded_w] float: BGR pixels minus the mean, 0 pad
  torch::Tensor boxes;   ///< [N, G, 4] float (x1, y1, x2, y2), legacy inclusive corners
  torch::Tensor labels;  ///< [N, G] int64 in [1, classes)
  int64_t image_height = 0, image_width = 0;  ///< before padding
};

/// Synthetic COCO-like ground truth, generated once from a seed: uniform pixel values in
/// [0, 255] minus maskrcnn-benchmark's PIXEL_MEAN, zero padding to a multiple of
/// `size_divisibility`; `boxes_per_image` boxes per image whose sqrt(area) is log-uniform in
/// [min_box_size, max_box_size] and aspect ratio log-uniform in [1/2, 2], inside the image;
/// uniform classes in [1, classes). Each box's mask is the filled ellipse inscribed in it (see
/// ellipse_mask_targets), so no bitmap is stored.
DetectionBatch synthetic_detection_batch(int64_t batch, int64_t image_height, int64_t image_width,
                                         int64_t size_divisibility, int64_t boxes_per_image,
                                         double min_box_size, double max_box_size, int64_t classes,
                                         const torch::Device& device, uint64_t seed);

/// maskrcnn-benchmark's project_masks_on_boxes for the ellipse masks: the ground-truth mask
/// (the ellipse inscribed in the pixel extent [x1, x2 + 1] x [y1, y2 + 1] of `gt_boxes`
/// [..., 4]) cropped to `rois` [..., 4] and rasterized at resolution x resolution, a cell in
/// when its centre is (crop width max(x2 - x1, 1), as Polygons.crop). [..., res, res] float.
torch::Tensor ellipse_mask_targets(const torch::Tensor& gt_boxes, const torch::Tensor& rois,
                                   int64_t resolution);

/// RPNPostProcessor in training mode, without gradient: per image and level the
/// pre_nms_top_n best anchors by objectness (logits [N, A]), decoded from `deltas` [N, A, 4] and
/// clipped to the image, NMS, at most post_nms_top_n kept; then the fpn_post_nms_top_n best
/// over the batch (fpn_post_nms_per_batch) or per image. Returns proposals [N, K, 4] and their
/// validity [N, K], K = min(fpn_post_nms_top_n, 5 x candidates per level).
std::pair<torch::Tensor, torch::Tensor> rpn_proposals(const torch::Tensor& objectness,
                                                      const torch::Tensor& deltas,
                                                      const DetectionPlan& plan,
                                                      const MaskRcnnOptions& options);

/// The five training losses of one iteration (0-dim float tensors).
struct MaskRcnnLosses {
  torch::Tensor objectness, rpn_box_reg, classifier, box_reg, mask;
  /// Sampled foreground RoIs over the batch, 0-dim int64.
  torch::Tensor positive_rois;
  /// Sampled RoIs the box head's losses count over the batch, 0-dim int64.
  torch::Tensor box_rois;
  /// Positives the mask head's loss counts over the batch (the sampled foreground, unless
  /// mask_rois_per_image is below the positive share), 0-dim int64.
  torch::Tensor mask_rois;
  /// RoIs the box and mask heads ran: their batch dimension (RoiSlots::box and ::mask).
  int64_t box_slots = 0, mask_slots = 0;
  torch::Tensor total() const { return objectness + rpn_box_reg + classifier + box_reg + mask; }
};

/// The whole detector.
class MaskRcnnImpl : public torch::nn::Module {
 public:
  explicit MaskRcnnImpl(const MaskRcnnOptions& options);

  /// The constants for images of `image_height` x `image_width` padded to `padded_height` x
  /// `padded_width`, on `device`.
  DetectionPlan plan(int64_t image_height, int64_t image_width, int64_t padded_height,
                     int64_t padded_width, const torch::Device& device) const;

  /// The RoI set sizes of a batch of `images` with `gt_per_image` ground-truth boxes each under
  /// `plan` (options().roi_heads decides the heads' slots).
  RoiSlots roi_slots(int64_t images, int64_t gt_per_image, const DetectionPlan& plan) const;

  /// Sets the statistics of every FrozenBatchNorm2d of the backbone from its convolution's
  /// output on `images` (one pass through the backbone without gradient, each layer measured on
  /// its input with the layers before it already calibrated): mean 0 and standard deviation 1,
  /// except the last of each residual branch, which gets 1 / sqrt(residual blocks) (0.25 for
  /// R-50), so the backbone hands the heads normalized features and its residual stream does
  /// not grow with depth, as in the reference's ImageNet-pretrained backbone. With random
  /// weights and the identity statistics the features are some 100 times too large, and with
  /// unit-gain branches the random backbone is too sensitive to its weights: either way training
  /// at the reference's rate diverges within a few iterations (docs/workloads/mask-rcnn.md,
  /// "Weights").
  void calibrate_frozen_batchnorm(const torch::Tensor& images);

  /// One training forward pass and its losses, as GeneralizedRCNN.forward in training mode:
  /// backbone and FPN, RPN losses, proposals (no gradient), RoI sampling, box head on the
  /// sampled RoIs, mask head on the sampled positives. Fixed shapes throughout (roi_slots):
  /// nothing is read back to the host.
  MaskRcnnLosses forward(const DetectionBatch& batch, const DetectionPlan& plan);

  MaskRcnnOptions options;
  rcnn::ResNetBody backbone{nullptr};
  Fpn fpn{nullptr};
  RpnHead rpn{nullptr};
  BoxHead box_head{nullptr};
  MaskHead mask_head{nullptr};
};
TORCH_MODULE(MaskRcnn);

/// The keys of a mask-rcnn workload's `model:` section.
ParamSchema mask_rcnn_model_schema();
/// MaskRcnnOptions from a resolved `model:` section.
MaskRcnnOptions mask_rcnn_options(const Params& model);
/// The keys of the `optimizer:` section: maskrcnn-benchmark's SOLVER.
ParamSchema mask_rcnn_optimizer_schema();
/// maskrcnn-benchmark's make_optimizer and make_lr_scheduler over `model`'s trainable
/// parameters, the base rate scaled linearly down to `batch` images when the batch is smaller
/// than IMS_PER_BATCH (BASE_LR is for IMS_PER_BATCH), and BASE_LR itself for larger batches.
train::Updater make_mask_rcnn_updater(const torch::nn::Module& model, const Params& optimizer,
                                      int64_t batch, Precision precision,
                                      const torch::Device& device);

/// The registry entry: workload mask-rcnn.
Architecture mask_rcnn_architecture();

}  // namespace gpubench::models
