#include "gpubench/base/precision.h"

#include "gpubench/base/compat.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <ATen/Context.h>

namespace gpubench {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"fp32", "tf32", "amp-bf16", "amp-fp16"};
  return names;
}

std::string to_string(Precision precision) {
  return precision_names().at(static_cast<std::size_t>(precision));
}

Precision parse_precision(const std::string& name, const std::string& where) {
  const auto& names = precision_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<Precision>(i);
  }
  throw ConfigError(fmt::format("{}: unknown precision '{}'{}; choose one of {}", where, name,
                                did_you_mean(name, names), join(names, ", ")));
}

bool is_amp(Precision precision) {
  return precision == Precision::kAmpBf16 || precision == Precision::kAmpFp16;
}

torch::ScalarType amp_dtype(Precision precision) {
  switch (precision) {
    case Precision::kAmpBf16:
      return torch::kBFloat16;
    case Precision::kAmpFp16:
      return torch::kHalf;
    default:
      return torch::kFloat;
  }
}

void apply_math_mode(Precision precision, bool cudnn_benchmark) {
  auto& context = at::globalContext();
  // fp32 is strict fp32 (PyTorch's own default lets cuDNN convolutions use TF32); the AMP modes
  // keep their fp32 islands strict too, so only `tf32` turns tensor-core fp32 math on.
  const bool tf32 = precision == Precision::kTf32;
  context.setAllowTF32CuBLAS(tf32);
  context.setAllowTF32CuDNN(tf32);
  context.setBenchmarkCuDNN(cudnn_benchmark);
}

AutocastGuard::AutocastGuard(Precision precision, const torch::Device& device) {
  if (!is_amp(precision)) return;
  active_ = true;
  device_type_ = device.type();
  previous_enabled_ = compat::autocast_enabled(device_type_);
  previous_dtype_ = compat::autocast_dtype(device_type_);
  compat::set_autocast(device_type_, true, amp_dtype(precision));
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast(device_type_, previous_enabled_, previous_dtype_);
}

}  // namespace gpubench
