// A fully connected layer whose forward is ATen's linear, as Python's torch.nn.Linear runs it.
//
// libtorch's C++ torch::nn::Linear (torch::nn::functional::linear) fuses the bias only for 2-D
// inputs: for a [batch, length, features] input it runs a matmul and then a separate broadcast
// add of the bias. ATen's linear (what Python's F.linear calls) folds a contiguous input to 2-D
// and runs one addmm, with the bias added in the GEMM's epilogue. Profiled on the H200
// (2026-12-02, amp-bf16): the separate adds took 16.7 of 114 ms of device time in two
// bert-base-mlm steps at batch 128 and 15.3 of 136 ms in two transformer-big steps at 16000
// tokens, time the Python references do not spend (docs/results/2026-12-02-h200-fp32-suite).
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/torch.h>

namespace gpubench::models {

/// torch::nn::LinearImpl (same parameters, names and initialization) with at::linear's forward.
/// `m->as<torch::nn::Linear>()` still finds it.
class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& input) { return torch::linear(input, weight, bias); }
};
TORCH_MODULE(Linear);

}  // namespace gpubench::models
