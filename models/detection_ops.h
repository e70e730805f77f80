// The detection operators of maskrcnn-benchmark (facebookresearch/maskrcnn-benchmark 57eec25b),
// rebuilt from libtorch operations with fixed shapes so that a training step never waits for
// the host: legacy (+1 pixel) box IoU and box coder, Detectron anchors, the IoU matcher, the
// balanced positive/negative sampler, batched greedy NMS and legacy RoIAlign (aligned=False).
// Variable-size sets (proposals, samples) are padded to a size known on the host and carry a
// validity mask. Spec: shared/specs/image-workloads.md §6.
#pragma once

#include <torch/types.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpubench::models::detection {

/// Pairwise IoU of boxes (x1, y1, x2, y2) with maskrcnn-benchmark's legacy areas
/// ((x2 - x1 + 1) * (y2 - y1 + 1)): a [..., M, 4] and b [..., K, 4] (broadcast over the leading
/// dimensions) -> [..., M, K] float.
torch::Tensor box_iou(const torch::Tensor& a, const torch::Tensor& b);

/// maskrcnn-benchmark's BoxCoder: deltas (dx, dy, dw, dh) of a box relative to a reference box,
/// scaled by `weights`, with legacy +1 widths; decoding clamps dw and dh at `clip`.
///
/// Example:
/// ```
/// BoxCoder rpn({1, 1, 1, 1}), roi({10, 10, 5, 5});
/// auto deltas = roi.encode(gt_boxes, proposals);  // [..., 4]
/// ```
class BoxCoder {
 public:
  explicit BoxCoder(std::array<double, 4> weights, double clip = std::log(1000.0 / 16));
  /// Deltas that take `references` [..., 4] to `targets` [..., 4].
  torch::Tensor encode(const torch::Tensor& targets, const torch::Tensor& references) const;
  /// Boxes [..., 4] from `deltas` [..., 4] applied to `references` [..., 4].
  torch::Tensor decode(const torch::Tensor& deltas, const torch::Tensor& references) const;

 private:
  std::array<double, 4> weights_;
  double clip_;
};

/// Detectron's generate_anchors for one FPN level: the anchors of one cell at `stride` with one
/// `size` and each of `aspect_ratios` (rounded widths, legacy +1 corners): [ratios, 4] float.
torch::Tensor cell_anchors(int64_t stride, double size, const std::vector<double>& aspect_ratios);

/// The cell anchors shifted over a `height` x `width` grid at `stride`, ordered (y, x, anchor)
/// as the RPN head's outputs are flattened: [height * width * A, 4].
torch::Tensor grid_anchors(const torch::Tensor& cell, int64_t stride, int64_t height,
                           int64_t width);

/// Anchors inside the (unpadded) image within `straddle_thresh` pixels; the RPN ignores the
/// others. [A] bool.
torch::Tensor visible_anchors(const torch::Tensor& anchors, int64_t image_height,
                              int64_t image_width, double straddle_thresh);

/// Matcher codes for predictions without a ground-truth match.
constexpr int64_t kBelowLowThreshold = -1;
constexpr int64_t kBetweenThresholds = -2;

/// maskrcnn-benchmark's Matcher: each prediction gets the ground truth it overlaps most, or
/// kBelowLowThreshold (best IoU < low) or kBetweenThresholds (low <= IoU < high). With
/// allow_low_quality_matches, every prediction that ties for a ground truth's highest IoU keeps
/// its match anyway.
struct Matcher {
  double high_threshold = 0.7;
  double low_threshold = 0.3;
  bool allow_low_quality_matches = false;

  /// quality [..., G, P] (IoU of G ground truths with P predictions) -> [..., P] int64.
  torch::Tensor operator()(const torch::Tensor& quality) const;
};

/// A fixed-size balanced sample per image (padded; `*_valid` marks the real entries).
struct BalancedSample {
  /// The sampled positives, in random order: [N, P] int64 indices and bool validity, where
  /// P = min(floor(batch * positive_fraction), candidates).
  torch::Tensor positive_index, positive_valid;
  /// Every sampled index, valid positives first, then valid negatives, then padding:
  /// [N, min(batch, candidates)] indices, validity, and whether the entry is a valid positive.
  torch::Tensor index, valid, positive;
};

/// maskrcnn-benchmark's BalancedPositiveNegativeSampler without host synchronization: per image
/// (row of `positive` / `negative`, [N, C] bool) a uniformly random subset of
/// min(floor(batch * positive_fraction), #positives) positives and
/// min(batch - sampled positives, #negatives) negatives. Draws from the device generator.
BalancedSample balanced_sample(const torch::Tensor& positive, const torch::Tensor& negative,
                               int64_t batch_per_image, double positive_fraction);

/// Greedy non-maximum suppression of G independent box sets at once (images x levels): boxes
/// [G, n, 4], each set sorted by decreasing score, and valid [G, n] bool. A valid box is kept
/// unless a kept box before it in its set overlaps it with legacy IoU > threshold, exactly as
/// maskrcnn-benchmark's nms kernel and its host scan decide. It builds the suppression matrix
/// [G, n, n], then scans it in n - 1 fixed device steps of two small kernels each (all sets
/// advance together); nothing is read back. Keeps its scan buffers for the next call of the
/// same shape, so a training step pays only for the kernels.
///
/// Example:
/// ```
/// BatchedNms nms;
/// auto keep = nms(boxes.view({images * levels, 2000, 4}), valid, 0.7);  // [G, 2000] bool
/// ```
class BatchedNms {
 public:
  torch::Tensor operator()(const torch::Tensor& boxes, const torch::Tensor& valid,
                           double threshold);

 private:
  /// Buffers and their per-step views for G sets of n boxes on `device`.
  void prepare(int64_t groups, int64_t n, const torch::Device& device);
  /// Leaves the removed flags of every box in removed_.
  void scan(const torch::Tensor& boxes, const torch::Tensor& valid, double threshold);

  torch::Tensor removed_, scratch_;  // [G, n] bool
  // Step i: removed_[:, i], removed_[:, i+1:] and scratch_[:, :n-i-1].
  std::vector<torch::Tensor> removed_i_, removed_after_i_, scratch_i_;
};

/// BatchedNms without kept buffers.
torch::Tensor batched_nms(const torch::Tensor& boxes, const torch::Tensor& valid, double threshold);

/// maskrcnn-benchmark's LevelMapper: the FPN level of each box [..., 4] as an index from 0 (level
/// k_min) to k_max - k_min, floor(canonical_level + log2(sqrt(area) / canonical_scale + eps))
/// clamped (legacy +1 area). Computed with comparisons, so a non-finite box maps to level 0.
torch::Tensor roi_levels(const torch::Tensor& boxes, int64_t k_min, int64_t k_max,
                         double canonical_scale = 224, int64_t canonical_level = 4,
                         double eps = 1e-6);

/// The layout of several feature maps [N, C, H_l, W_l] (the FPN levels RoIAlign reads) as one
/// table of pixel rows [N * sum(H_l * W_l), C]: level after level, each level's pixels in
/// (image, y, x) order, a row holding one pixel's C channels. RoIAlign then gathers its bilinear
/// taps as rows, for any RoI on any level and image, with one weighted gather (embedding_bag) in
/// the maps' own dtype. The device tables are built once, outside the training step.
///
/// Example:
/// ```
/// FeatureRows layout({{200, 336}, {100, 168}, {50, 84}, {25, 42}},
///                    {0.25, 0.125, 0.0625, 0.03125}, torch::kCUDA);
/// auto rows = layout.pack({p2, p3, p4, p5});  // [N * 89,250, 256], bf16 under autocast
/// auto x = roi_align(rows, layout, rois, image, roi_levels(rois, 2, 5), 7, 2);  // [R, 256, 7, 7]
/// ```
class FeatureRows {
 public:
  /// Plans the table for levels of the given (height, width), read at the given spatial scales
  /// (feature pixels per image pixel); the tables live on `device`.
  FeatureRows(std::vector<std::pair<int64_t, int64_t>> sizes, std::vector<double> scales,
              const torch::Device& device);

  /// The levels' pixels as rows [N * pixels_per_image(), C], in the maps' dtype (float where
  /// libtorch has no embedding_bag in it: compat::embedding_bag_dtype). One copy of the maps,
  /// differentiable; its backward hands each level its rows of the gradient as a view, and
  /// roi_align does not keep the table for backward, so it lives only until the last RoIAlign.
  torch::Tensor pack(const std::vector<torch::Tensor>& levels) const;

  int64_t levels() const { return static_cast<int64_t>(sizes_.size()); }
  /// (height, width) of each level.
  const std::vector<std::pair<int64_t, int64_t>>& sizes() const { return sizes_; }
  /// sum(H_l * W_l): the rows of one image.
  int64_t pixels_per_image() const { return pixels_; }
  /// Per level, float [L, 3]: scale, height, width.
  const torch::Tensor& geometry() const { return geometry_; }
  /// Per level, int64 [L, 3]: the level's first row per image (times N: its first row in the
  /// table), pixels per image (H * W), width.
  const torch::Tensor& layout() const { return layout_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> sizes_;
  int64_t pixels_ = 0;
  torch::Tensor geometry_, layout_;
};

/// maskrcnn-benchmark's legacy ROIAlign (aligned=False) of `rois` [R, 4] (image coordinates)
/// on the packed levels `rows` (FeatureRows::pack): RoI r reads image `image`[r] on level
/// `level`[r] (int64, 0-based) at that level's scale, output_size x output_size bins of
/// sampling_ratio^2 bilinear samples each (a sample more than one pixel outside the level reads
/// 0, one within a pixel reads the border). Each bin is one weighted sum of its
/// 4 x sampling_ratio^2 taps, accumulated by embedding_bag (in float on CUDA) and stored in the
/// table's dtype; backward scatters the same weights into the table's gradient. Returns
/// [R, C, output_size, output_size] in the table's dtype.
torch::Tensor roi_align(const torch::Tensor& rows, const FeatureRows& layout,
                        const torch::Tensor& rois, const torch::Tensor& image,
                        const torch::Tensor& level, int64_t output_size, int64_t sampling_ratio);

/// Single-level RoIAlign of `rois` [N, R, 4] on `features` [N, C, H, W] at `scale` (RoIs of
/// image n read image n): [N * R, C, output_size, output_size].
torch::Tensor roi_align(const torch::Tensor& features, const torch::Tensor& rois, double scale,
                        int64_t output_size, int64_t sampling_ratio);

/// The entries of `keep` [N, S] (bool) packed into `slots` slots, image after image and in
/// order within an image, without reading the count on the host: the flat index (n * S + s)
/// of each slot's entry [slots] int64, and whether the slot holds one [slots] bool (the first
/// count(keep) do; the rest point at entry 0). `slots` must be at least the count, which the
/// caller bounds; entries beyond `slots` would be dropped.
std::pair<torch::Tensor, torch::Tensor> pack_slots(const torch::Tensor& keep, int64_t slots);

/// maskrcnn-benchmark's smooth_l1_loss, elementwise: 0.5 x^2 / beta below beta, |x| - beta / 2
/// above.
torch::Tensor smooth_l1(const torch::Tensor& input, const torch::Tensor& target, double beta);

}  // namespace gpubench::models::detection
