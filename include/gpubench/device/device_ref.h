// A reference to a device as plans, job specs and data-parallel plans name it: "cpu" or
// "cuda:N". One parser (with an error naming the text) and one formatter; torch-free.
#pragma once

#include "gpubench/base/errors.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace gpubench {

/// "cpu", or CUDA device N ("cuda:N").
struct DeviceRef {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = -1;  ///< the CUDA ordinal; -1 for the CPU

  static DeviceRef cpu() { return {}; }
  static DeviceRef cuda(int index) { return {Kind::cuda, index}; }
  bool is_cuda() const { return kind == Kind::cuda; }
  /// "cpu" or "cuda:N": what plans and specs hold, and what torch::Device reads.
  std::string str() const { return is_cuda() ? fmt::format("cuda:{}", index) : "cpu"; }

  bool operator==(const DeviceRef& other) const {
    return kind == other.kind && index == other.index;
  }
  bool operator!=(const DeviceRef& other) const { return !(*this == other); }
};

/// The device `text` names: exactly "cpu" or "cuda:N" (N a CUDA ordinal, digits only); none for
/// anything else ("cuda" without its ordinal, "cuda:-1", "GPU0").
inline std::optional<DeviceRef> parse_device_ref(std::string_view text) {
  if (text == "cpu") return DeviceRef::cpu();
  constexpr std::string_view kCuda = "cuda:";
  if (text.substr(0, kCuda.size()) != kCuda) return std::nullopt;
  const std::string_view digits = text.substr(kCuda.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  int index = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return DeviceRef::cuda(index);
}

/// The device `text` names, or a ConfigError naming `field` and the text: "device 'cuda' is not
/// a device; it is 'cpu' or 'cuda:N' (N a CUDA ordinal: 0, 1, ...)".
inline DeviceRef require_device_ref(std::string_view text, std::string_view field) {
  if (const auto ref = parse_device_ref(text)) return *ref;
  throw ConfigError(fmt::format(
      "{} '{}' is not a device; it is 'cpu' or 'cuda:N' (N a CUDA ordinal: 0, 1, ...)", field,
      text));
}

}  // namespace gpubench
