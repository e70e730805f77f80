// LayerNorm(residual + dropout(x)): how every post-norm sub-layer of BERT, fairseq's transformer
// and XLM ends (issue 44 item 4). The plain path is ATen's dropout, add and layer_norm; the fused
// one (runtime.fused_norm) is one autograd function: on CUDA one kernel forward and one backward
// (src/train/residual_norm_kernel.cu), on the CPU the same formulas in double.
#pragma once

#include <torch/torch.h>

namespace gpubench::train {

/// One LayerNorm over the last dimension: its affine weight and bias and its epsilon.
struct NormParams {
  torch::Tensor weight;
  torch::Tensor bias;
  double eps = 1e-5;
};

/// LayerNorm(residual + dropout(x, p, training)) over the last dimension, x and residual of one
/// shape. `fused` false: the ATen ops, exactly what `norm(residual + dropout(x))` computes.
/// `fused` true, where fused_residual_norm_runs(): one autograd function with the same math
/// (LayerNorm's statistics in fp32, the output in the type ATen's would have, fp32 under CUDA
/// autocast); its dropout keeps elements by a mask drawn with bernoulli_, which on CUDA is
/// another draw of the generator than ATen's fused dropout's (the same probability, other
/// elements), and on the CPU the same draw as ATen's dropout. Elsewhere the ATen ops.
torch::Tensor residual_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, double p,
                                  bool training, const NormParams& norm, bool fused);

/// Whether the fused function runs for these: x and residual of one shape whose rows are at most
/// 1024 wide, of fp32, fp16 or bf16, the residual of x's type or fp32, fp32 weight and bias, and
/// on CUDA a build with gpubench's kernels; on the CPU not under autocast.
bool fused_residual_norm_runs(const torch::Tensor& x, const torch::Tensor& residual,
                              const NormParams& norm);

/// The fused function with its keep-mask given: LayerNorm(residual + x * mask * scale), `mask`
/// uint8 of x's shape (1 keeps) or undefined for no dropout. residual_layer_norm draws the mask;
/// tests give the same one to both paths. Throws where fused_residual_norm_runs() is false.
torch::Tensor fused_residual_layer_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                        const torch::Tensor& mask, double scale,
                                        const NormParams& norm);

/// Whether this build has the fused residual norm's CUDA kernels.
bool have_residual_norm_kernels();

/// How many times the fused function has run in this process (forward calls, a CUDA graph's
/// replays not counted): the record says the fused norm ran only where this grew.
int64_t fused_residual_norm_calls();

}  // namespace gpubench::train
