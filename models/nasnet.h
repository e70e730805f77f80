// NASNet-A Large 6@4032 (Zoph et al. 2018) as tensorflow/models research/slim/nets/nasnet builds
// it (nasnet.py 03cdc5fe, nasnet_utils.py 08eebbce) and Cadene (8aae3d8f) / timm port it: input
// 3x331x331, 1000 classes, no auxiliary head, no drop path. Loss: softmax cross-entropy with label
// smoothing 0.1. Optimizer: TF's RMSProp (decay 0.9, momentum 0.9, epsilon 1.0), L2 5e-5, global
// norm clip 10, exponential decay 0.94 every 2 epochs. Spec: shared/specs/image-workloads.md §1.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"

#include <torch/nn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpubench::models {

/// Shape of a NASNet-A ImageNet model, in TF-slim's hyper-parameter names.
///
/// Example:
/// ```
/// NasNet large(NasNetOptions());  // 6@4032: 18 normal cells, 168 filters
/// NasNet tiny(NasNetOptions().num_cells(6).num_conv_filters(8).stem_filters(12));
/// ```
struct NasNetOptions {
  /// Output classes (TF trains 1001 with a background class; Cadene/timm 1000). Default: 1000
  TORCH_ARG(int64_t, num_classes) = 1000;
  /// Normal cells in all three stacks (6 per stack for "6@4032"). Default: 18
  TORCH_ARG(int64_t, num_cells) = 18;
  /// Filters F of the first stack's cells (the penultimate width is 24 F). Default: 168
  TORCH_ARG(int64_t, num_conv_filters) = 168;
  /// Filters of conv0: int(32 * stem_multiplier 3.0). Default: 96
  TORCH_ARG(int64_t, stem_filters) = 96;
  /// Filters grow by this factor at every reduction. Default: 2
  TORCH_ARG(double, filter_scaling_rate) = 2.0;
  /// Reduction cells between the stacks. Default: 2
  TORCH_ARG(int64_t, num_reduction_layers) = 2;
  /// The normal cell after a reduction reads the cell before the reduction as its previous
  /// input (TF's skip_reduction_layer_input, 1 for Large). Default: true
  TORCH_ARG(bool, skip_reduction_layer_input) = true;
  /// Dropout probability before the classifier (1 - dense_dropout_keep_prob). Default: 0.5
  TORCH_ARG(double, dropout) = 0.5;
  /// BatchNorm epsilon. Default: 1e-3
  TORCH_ARG(double, bn_eps) = 1e-3;
  /// BatchNorm running-average momentum in torch's convention (1 - TF-slim's decay 0.9997).
  /// Default: 3e-4
  TORCH_ARG(double, bn_momentum) = 3e-4;
};

/// TF "SAME" padding of one spatial dimension of size `size` for a window `kernel` moved by
/// `stride`: {before, after}, where after - before is 0 or 1.
std::pair<int64_t, int64_t> tf_same_padding(int64_t size, int64_t kernel, int64_t stride);

/// Convolution with TF "SAME" padding: symmetric padding where TF's is symmetric, one extra zero
/// row and column at the bottom and right where TF's is not (as TF pads).
torch::Tensor conv2d_same(const torch::Tensor& x, const torch::Tensor& weight, int64_t stride,
                          int64_t groups = 1);
/// Max pooling with TF "SAME" padding (padded positions never win).
torch::Tensor max_pool2d_same(const torch::Tensor& x, int64_t kernel, int64_t stride);
/// Average pooling with TF "SAME" padding: padded positions are not counted
/// (count_include_pad false), as TF's avg_pool averages over the valid positions only.
torch::Tensor avg_pool2d_same(const torch::Tensor& x, int64_t kernel, int64_t stride);

/// TF separable_conv2d with depth multiplier 1 and no bias: a depthwise k x k convolution
/// (stride here) then a pointwise 1 x 1 convolution to `out` channels, SAME padding.
class SeparableConvImpl : public torch::nn::Module {
 public:
  SeparableConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t stride;
  torch::nn::Conv2d depthwise{nullptr}, pointwise{nullptr};
};
TORCH_MODULE(SeparableConv);

/// TF's "separable_kxk_2" operation (_stacked_separable_conv with two layers):
/// ReLU -> separable (stride) -> BN -> ReLU -> separable -> BN, both separables ending at `out`
/// channels (so the first pointwise already maps in -> out, as in the stem cells).
class SeparableStackImpl : public torch::nn::Module {
 public:
  SeparableStackImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                     const NasNetOptions& options);
  /// `relu_x` is the input after its ReLU: a cell applies one ReLU to a state and shares it among
  /// the branches that read it (the same values as one ReLU per branch, computed once).
  torch::Tensor forward(const torch::Tensor& relu_x);

  SeparableConv separable_1{nullptr}, separable_2{nullptr};
  torch::nn::BatchNorm2d bn_sep_1{nullptr}, bn_sep_2{nullptr};
};
TORCH_MODULE(SeparableStack);

/// 1 x 1 convolution -> BN of a ReLU'd input: with the network's ReLU, TF's ReLU -> 1x1 -> BN
/// projection of a cell's input to its width.
class Conv1x1BnImpl : public torch::nn::Module {
 public:
  Conv1x1BnImpl(int64_t in, int64_t out, const NasNetOptions& options);
  torch::Tensor forward(const torch::Tensor& relu_x);

  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(Conv1x1Bn);

/// TF factorized_reduction with stride 2 of a ReLU'd input: path 1 is a 1 x 1
/// convolution of every second pixel, path 2 the same of the image shifted by one pixel (zero
/// beyond the edge); each gives out/2 channels, concatenated, then BN.
class FactorizedReductionImpl : public torch::nn::Module {
 public:
  FactorizedReductionImpl(int64_t in, int64_t out, const NasNetOptions& options);
  torch::Tensor forward(const torch::Tensor& relu_x);

  torch::nn::Conv2d path1_conv{nullptr}, path2_conv{nullptr};
  torch::nn::BatchNorm2d final_path_bn{nullptr};
};
TORCH_MODULE(FactorizedReduction);

/// How a cell brings its previous input (the output two cells back) to its own width and
/// resolution (TF NasNetABaseCell._reduce_prev_layer).
enum class PrevPath {
  kIdentity,    ///< used as it is (cell_stem_0, whose previous input is conv0's own output)
  kConv1x1,     ///< ReLU -> 1 x 1 -> BN, when only the width differs
  kFactorized,  ///< ReLU -> factorized reduction, when the resolution differs (a "first cell")
};

/// The prev-input projection of a cell, one of PrevPath's three forms, on the ReLU'd input.
class PrevProjectionImpl : public torch::nn::Module {
 public:
  PrevProjectionImpl(PrevPath path, int64_t in, int64_t out, const NasNetOptions& options);
  torch::Tensor forward(const torch::Tensor& relu_x_prev);

  PrevPath path;
  Conv1x1Bn conv_prev_1x1{nullptr};
  FactorizedReduction factorized{nullptr};
};
TORCH_MODULE(PrevProjection);

/// The NASNet-A normal cell (F = `filters`), h = 1x1(x), hp = prev projection of x_prev (a
/// projection is required: TF would add and concatenate an unprojected x_prev before its ReLU):
///   c0 = sep5(h) + sep3(hp)   c1 = sep5(hp) + sep3(hp)   c2 = avg3(h) + hp
///   c3 = avg3(hp) + avg3(hp)  c4 = sep3(h) + h           out = [hp, c0, c1, c2, c3, c4]: 6 F
/// avg3 is stride 1, SAME, count_include_pad false.
class NormalCellImpl : public torch::nn::Module {
 public:
  NormalCellImpl(int64_t in, int64_t in_prev, int64_t filters, PrevPath prev_path,
                 const NasNetOptions& options);
  torch::Tensor forward(const torch::Tensor& relu_x, const torch::Tensor& relu_x_prev);

  Conv1x1Bn conv_1x1{nullptr};
  PrevProjection prev{nullptr};
  SeparableStack comb_iter_0_left{nullptr}, comb_iter_0_right{nullptr};
  SeparableStack comb_iter_1_left{nullptr}, comb_iter_1_right{nullptr};
  SeparableStack comb_iter_4_left{nullptr};
};
TORCH_MODULE(NormalCell);

/// The NASNet-A reduction cell (also the two stem cells), stride 2 on h and hp:
///   c0 = sep5(h) + sep7(hp)    c1 = max3(h) + sep7(hp)   c2 = avg3(h) + sep5(hp)
///   c3 = avg3/s1(c0) + c1      c4 = sep3(c0) + max3(h)   out = [c1, c2, c3, c4]: 4 F
/// Pools and the strided separables use TF SAME padding (asymmetric on even sizes).
///
/// Both cells take their inputs after ReLU: every reader of a NASNet state (the next cells'
/// projections, the stem's separables, the head) applies a ReLU first, so the network applies
/// it once, in place, to each state.
class ReductionCellImpl : public torch::nn::Module {
 public:
  ReductionCellImpl(int64_t in, int64_t in_prev, int64_t filters, PrevPath prev_path,
                    const NasNetOptions& options);
  torch::Tensor forward(const torch::Tensor& relu_x, const torch::Tensor& relu_x_prev);

  Conv1x1Bn conv_1x1{nullptr};
  PrevProjection prev{nullptr};
  SeparableStack comb_iter_0_left{nullptr}, comb_iter_0_right{nullptr};
  SeparableStack comb_iter_1_right{nullptr}, comb_iter_2_right{nullptr};
  SeparableStack comb_iter_4_left{nullptr};
};
TORCH_MODULE(ReductionCell);

/// NASNet-A for ImageNet: conv0 (3 x 3 stride 2 VALID) + BN, cell_stem_0 and cell_stem_1
/// (reduction cells at F/4 and F/2), then num_cells normal cells in num_reduction_layers + 1
/// stacks with a reduction cell before each later stack, wired as TF's _build_nasnet_base; the
/// head is ReLU -> global average pool -> dropout -> linear.
class NasNetImpl : public torch::nn::Module {
 public:
  explicit NasNetImpl(const NasNetOptions& options);
  /// images [N, 3, H, W] -> logits [N, num_classes].
  torch::Tensor forward(const torch::Tensor& images);
  /// ReLU of the last cell's output, as the head reads it: [N, 24 F, 11, 11] at 331.
  torch::Tensor features(const torch::Tensor& images);

  /// One cell of the network, in the order it runs. The network's states are conv0's output
  /// (state 0) and each step's output (state i + 1 for step i), each kept after its ReLU; step
  /// i reads state i.
  struct Step {
    std::string name;        ///< "cell_stem_0", "cell_3", "reduction_cell_1", ...
    bool reduction = false;  ///< a reduction (or stem) cell
    int64_t prev = -1;       ///< the state it reads as previous input; -1: none (its input)
    PrevPath prev_path = PrevPath::kIdentity;
    int64_t filters = 0;       ///< F of the cell
    int64_t out_channels = 0;  ///< 4 F (reduction) or 6 F (normal)
    std::size_t index = 0;     ///< into reduction_cells or normal_cells
  };
  const std::vector<Step>& steps() const { return steps_; }

  NasNetOptions options;
  torch::nn::Conv2d conv0{nullptr};
  torch::nn::BatchNorm2d conv0_bn{nullptr};
  std::vector<ReductionCell> reduction_cells;  ///< cell_stem_0, cell_stem_1, reduction_cell_*
  std::vector<NormalCell> normal_cells;        ///< cell_0 ... cell_{num_cells - 1}
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear last_linear{nullptr};

 private:
  std::vector<Step> steps_;
  std::vector<std::size_t> last_use_;  // per state: the last step that reads it
};
TORCH_MODULE(NasNet);

/// TF-slim's NASNet initialization: every convolution and the classifier get
/// variance_scaling_initializer(factor 2, FAN_OUT): a normal truncated at two standard
/// deviations with stddev sqrt(1.3 * 2 / fan_out) (fan_out = k * k * out / groups, so k * k
/// for a depthwise kernel); biases zero, BatchNorm scale 1 and offset 0.
void init_nasnet_weights(torch::nn::Module& module);

/// A synthetic ImageNet batch as inception preprocessing leaves it, generated once on the
/// device from `seed`: images uniform in [-1, 1] (pixels scaled to 2 x / 255 - 1), labels
/// uniform over the classes.
struct ImageBatch {
  ImageBatch(int64_t batch, int64_t image_size, int64_t classes, bool channels_last,
             const torch::Device& device, uint64_t seed);

  torch::Tensor images;  ///< [N, 3, S, S] float, channels-last when asked
  torch::Tensor labels;  ///< [N] int64 in [0, classes)
};

/// The keys of the nasnet `model:` section (NasNetOptions plus input size, label smoothing and
/// memory format).
ParamSchema nasnet_model_schema();
/// NasNetOptions from a resolved `model:` section.
NasNetOptions nasnet_options(const Params& model);

/// The keys of the nasnet `optimizer:` section: TF RMSProp, L2 weight decay on convolution and
/// classifier weights, global-norm clipping, exponential learning-rate decay per epochs.
ParamSchema nasnet_optimizer_schema();
/// The optimizer, clipping and schedule of a nasnet `optimizer:` section over `module`'s
/// parameters; `batch` sets the decay's steps per epoch.
train::Updater make_nasnet_updater(const torch::nn::Module& module, const Params& optimizer,
                                   int64_t batch, Precision precision, const torch::Device& device);

/// The registry entry: workload nasnet-large.
Architecture nasnet_architecture();

}  // namespace gpubench::models
