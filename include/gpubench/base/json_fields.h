// Readers of a typed record field's keys (records/result.cpp, records/window_fields.cpp,
// measure/timing.cpp's ComputeRecord): a value of the wrong type is a ConfigError naming
// FIELD.KEY and the value, where nlohmann's type_error would name neither. An absent key is none.
#pragma once

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace gpubench {

inline void require_object(const Json& json, const std::string& field) {
  GPUBENCH_CHECK(json.is_object(), ConfigError, "{}: expected an object, got {}", field,
                 json.type_name());
}

/// `value`, read from the place `where` ("clocks.power_w.mean", "ranks[0].step_time_ms[3]"):
/// the value, or a ConfigError naming the place and the value.
inline double number_value(const Json& value, const std::string& where) {
  GPUBENCH_CHECK(value.is_number(), ConfigError, "{}: expected a number, got {}", where,
                 quote_value(value));
  return value.get<double>();
}

inline int64_t integer_value(const Json& value, const std::string& where) {
  GPUBENCH_CHECK(
      value.is_number_integer() &&
          !(value.is_number_unsigned() &&
            value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())),
      ConfigError, "{}: expected an integer, got {}", where, quote_value(value));
  return value.get<int64_t>();
}

inline std::string string_value(const Json& value, const std::string& where) {
  GPUBENCH_CHECK(value.is_string(), ConfigError, "{}: expected a string, got {}", where,
                 quote_value(value));
  return value.get<std::string>();
}

inline bool bool_value(const Json& value, const std::string& where) {
  GPUBENCH_CHECK(value.is_boolean(), ConfigError, "{}: expected true or false, got {}", where,
                 quote_value(value));
  return value.get<bool>();
}

inline std::optional<double> optional_number(const Json& object, const char* key,
                                             const std::string& field) {
  if (!object.contains(key)) return std::nullopt;
  return number_value(object[key], field + "." + key);
}

inline std::optional<int64_t> optional_integer(const Json& object, const char* key,
                                               const std::string& field) {
  if (!object.contains(key)) return std::nullopt;
  return integer_value(object[key], field + "." + key);
}

inline std::optional<std::string> optional_string(const Json& object, const char* key,
                                                  const std::string& field) {
  if (!object.contains(key)) return std::nullopt;
  return string_value(object[key], field + "." + key);
}

inline std::optional<bool> optional_bool(const Json& object, const char* key,
                                         const std::string& field) {
  if (!object.contains(key)) return std::nullopt;
  return bool_value(object[key], field + "." + key);
}

}  // namespace gpubench
