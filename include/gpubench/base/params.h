// Architecture parameters: each architecture declares the keys of its `model:` and
// `optimizer:` config sections (type, default, doc); configs are validated against that schema
// and the model code reads typed values from the resolved Params.
#pragma once

#include "gpubench/base/json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// The type of one parameter.
enum class ParamKind { kBool, kInt, kNumber, kString, kIntList, kNumberList, kStringList };

/// One declared parameter.
struct ParamSpec {
  std::string key;                   ///< "hidden_size"
  ParamKind kind = ParamKind::kInt;  ///< what values are accepted
  Json default_value;                ///< used when no config sets it
  std::string doc;                   ///< one line, with the unit
  std::vector<std::string> choices;  ///< for kString(List): the allowed values; empty = any
  std::optional<double> min;         ///< for numbers and ints: smallest allowed value
};

/// The declared parameters of one config section, in declaration order.
class ParamSchema {
 public:
  ParamSchema() = default;
  ParamSchema(std::initializer_list<ParamSpec> specs) : specs_(specs) {}
  explicit ParamSchema(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {}

  /// This schema with more keys appended (a workload extending a shared schema).
  ParamSchema with(std::initializer_list<ParamSpec> more) const;

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec* find(const std::string& key) const;
  std::vector<std::string> keys() const;
  /// Every key at its default.
  Json defaults() const;

 private:
  std::vector<ParamSpec> specs_;
};

/// Resolved, validated values of one section. Reading a key the schema does not declare is a
/// gpubench bug and throws std::logic_error.
class Params {
 public:
  Params() = default;
  /// Validates `values` (a partial object) against `schema` and fills in defaults.
  Params(const ParamSchema& schema, const Json& values, const Where& where);

  int64_t i64(const std::string& key) const;
  double f64(const std::string& key) const;
  bool flag(const std::string& key) const;
  std::string str(const std::string& key) const;
  std::vector<int64_t> i64s(const std::string& key) const;
  std::vector<double> f64s(const std::string& key) const;
  std::vector<std::string> strs(const std::string& key) const;

  /// Every key with its resolved value, for records and `--config-dump`.
  const Json& json() const { return values_; }

 private:
  const Json& get(const std::string& key) const;
  Json values_ = Json::object();
};

/// Throws ConfigError unless `values` is an object of declared keys with values of the
/// declared kinds.
void validate_params(const ParamSchema& schema, const Json& values, const Where& where);

}  // namespace gpubench
