// Numeric precision of a run: the math mode (TF32 on or off), autocast around forward and loss,
// and dynamic loss scaling for fp16.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

namespace gpubench {

/// How a training step computes.
enum class Precision {
  kFp32,     ///< strict fp32, TF32 off: comparable with the 2020 cards (the default)
  kTf32,     ///< fp32 storage, TF32 tensor-core math in matmuls and convolutions
  kAmpBf16,  ///< autocast to bfloat16 around forward and loss
  kAmpFp16,  ///< autocast to float16 around forward and loss, dynamic loss scaling
};

/// "fp32", "tf32", "amp-bf16", "amp-fp16".
std::string to_string(Precision precision);
/// Every accepted name, in declaration order.
const std::vector<std::string>& precision_names();
/// Parses a precision name; throws ConfigError naming `where` with a did-you-mean.
Precision parse_precision(const std::string& name, const std::string& where);

bool is_amp(Precision precision);
/// The autocast dtype of an AMP precision (kBFloat16 or kHalf); kFloat otherwise.
torch::ScalarType amp_dtype(Precision precision);

/// Sets the process-wide math mode for `precision`: TF32 in cuBLAS and cuDNN on only for tf32,
/// cuDNN autotuning (benchmark mode) as asked. Call once per worker before building a step.
void apply_math_mode(Precision precision, bool cudnn_benchmark);

/// RAII: autocast on `device` for an AMP precision, nothing otherwise. Wrap the forward pass
/// and the loss only. Leaving the scope clears the cast-weight cache, as Python's autocast does,
/// so the next step sees the updated weights.
class AutocastGuard {
 public:
  AutocastGuard(Precision precision, const torch::Device& device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  torch::DeviceType device_type_ = torch::kCPU;
  bool previous_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kFloat;
};

}  // namespace gpubench
