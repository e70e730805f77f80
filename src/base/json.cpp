#include "gpubench/base/json.h"
#include "gpubench/base/json_int.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <cmath>

namespace gpubench {

Where Where::at(const std::string& key) const {
  return {file, path.empty() ? key : path + "." + key};
}

std::string Where::str() const { return path.empty() ? file : file + ": " + path; }

std::string quote_value(const Json& value) {
  if (value.is_string()) return "'" + value.get<std::string>() + "'";
  if (value.is_null()) return "nothing";
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    // JSON has no NaN or infinity (dump() writes null); say what YAML's .nan / .inf meant.
    const double v = value.get<double>();
    return std::isnan(v) ? ".nan (not a number)" : v > 0 ? ".inf (infinity)" : "-.inf (infinity)";
  }
  return dump_json(value);
}

void throw_bad_value(const Where& where, const std::string& expected, const Json& got,
                     const std::string& fix) {
  std::string message =
      fmt::format("{}: expected {}, got {}", where.str(), expected, quote_value(got));
  if (!fix.empty()) message += " (" + fix + ")";
  throw ConfigError(message);
}

void check_keys(const Json& value, const Where& where, const std::vector<std::string>& allowed) {
  if (!value.is_object()) throw_bad_value(where, "a mapping of keys to values", value);
  for (const auto& item : value.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) != allowed.end()) continue;
    const auto suggestion = closest_match(item.key(), allowed);
    throw ConfigError(
        fmt::format("{}: unknown key '{}'{}; the keys here are: {}",
                    where.str().empty() ? "config" : where.str(), item.key(),
                    suggestion ? fmt::format(" (did you mean '{}'?)", *suggestion) : std::string(),
                    join(allowed, ", ")));
  }
}

const Json& require_key(const Json& object, const std::string& key, const Where& where) {
  auto found = object.find(key);
  if (found == object.end()) {
    throw ConfigError(fmt::format("{}: missing required key '{}'",
                                  where.str().empty() ? "config" : where.str(), key));
  }
  return *found;
}

namespace {
std::string range_text(double min, double max, bool integer) {
  auto show = [&](double v) {
    return integer ? fmt::format("{}", static_cast<int64_t>(v)) : format_number(v);
  };
  const bool has_min = std::isfinite(min) && min > -9.2e18;
  const bool has_max = std::isfinite(max) && max < 9.2e18;
  if (has_min && has_max) return fmt::format(" from {} to {}", show(min), show(max));
  if (has_min) return fmt::format(" >= {}", show(min));
  if (has_max) return fmt::format(" <= {}", show(max));
  return "";
}
}  // namespace

int value_int(const Json& object, const char* key, int fallback) {
  if (object.is_object()) {
    const auto found = object.find(key);
    if (found != object.end() && found->is_number()) {
      const double v = found->get<double>();
      GPUBENCH_CHECK(std::isfinite(v) && v >= std::numeric_limits<int>::min() &&
                         v <= std::numeric_limits<int>::max(),
                     ConfigError, "'{}': the number {} is out of range (expected an integer)", key,
                     dump_json(*found));
    }
  }
  return object.value(key, fallback);
}

int64_t read_int(const Json& value, const Where& where, int64_t min, int64_t max) {
  const std::string expected =
      "an integer" + range_text(static_cast<double>(min), static_cast<double>(max), true);
  int64_t result = 0;
  if (value.is_number_integer()) {
    result = value.get<int64_t>();
  } else if (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>() &&
             std::fabs(value.get<double>()) < 9e15) {
    result = static_cast<int64_t>(value.get<double>());  // 1e4 in YAML reads as a float
  } else {
    throw_bad_value(where, expected, value);
  }
  if (result < min || result > max) throw_bad_value(where, expected, value);
  return result;
}

double read_number(const Json& value, const Where& where, double min, double max) {
  const std::string expected = "a number" + range_text(min, max, false);
  if (!value.is_number()) throw_bad_value(where, expected, value);
  const double result = value.get<double>();
  if (!std::isfinite(result) || result < min || result > max) {
    throw_bad_value(where, expected, value);
  }
  return result;
}

bool read_bool(const Json& value, const Where& where) {
  if (!value.is_boolean()) throw_bad_value(where, "true or false", value);
  return value.get<bool>();
}

std::string read_string(const Json& value, const Where& where) {
  if (!value.is_string()) throw_bad_value(where, "a string", value);
  return value.get<std::string>();
}

std::string read_choice(const Json& value, const Where& where,
                        const std::vector<std::string>& choices) {
  const std::string expected = "one of " + join(choices, ", ");
  if (!value.is_string()) throw_bad_value(where, expected, value);
  const auto text = value.get<std::string>();
  if (std::find(choices.begin(), choices.end(), text) != choices.end()) return text;
  const auto suggestion = closest_match(text, choices);
  throw_bad_value(where, expected, value,
                  suggestion ? fmt::format("did you mean '{}'?", *suggestion) : std::string());
}

std::string dump_json(const Json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

void merge_into(Json& base, const Json& patch) {
  if (!base.is_object() || !patch.is_object()) {
    base = patch;
    return;
  }
  for (const auto& item : patch.items()) {
    auto found = base.find(item.key());
    if (found == base.end()) {
      base[item.key()] = item.value();
    } else {
      merge_into(*found, item.value());
    }
  }
}

std::string json_digest(const Json& value) {
  // nlohmann::json (not the ordered Json) keeps its keys sorted.
  const std::string text = nlohmann::json::parse(dump_json(value)).dump();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return fmt::format("{:016x}", hash);
}

const Json* json_at(const Json& json, std::initializer_list<const char*> path) {
  const Json* at = &json;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::optional<double> number_at(const Json& json, std::initializer_list<const char*> path) {
  const Json* at = json_at(json, path);
  if (at == nullptr || !at->is_number()) return std::nullopt;
  return at->get<double>();
}

}  // namespace gpubench
