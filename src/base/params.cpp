#include "gpubench/base/params.h"

#include "gpubench/base/errors.h"

namespace gpubench {

const ParamSpec* ParamSchema::find(const std::string& key) const {
  for (const auto& spec : specs_) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

ParamSchema ParamSchema::with(std::initializer_list<ParamSpec> more) const {
  std::vector<ParamSpec> specs = specs_;
  specs.insert(specs.end(), more.begin(), more.end());
  return ParamSchema(std::move(specs));
}

std::vector<std::string> ParamSchema::keys() const {
  std::vector<std::string> out;
  for (const auto& spec : specs_) out.push_back(spec.key);
  return out;
}

Json ParamSchema::defaults() const {
  Json out = Json::object();
  for (const auto& spec : specs_) out[spec.key] = spec.default_value;
  return out;
}

namespace {
void validate_value(const ParamSpec& spec, const Json& value, const Where& where) {
  const double min = spec.min.value_or(-std::numeric_limits<double>::infinity());
  switch (spec.kind) {
    case ParamKind::kBool:
      read_bool(value, where);
      break;
    case ParamKind::kInt:
      read_int(value, where,
               spec.min ? static_cast<int64_t>(*spec.min) : std::numeric_limits<int64_t>::min());
      break;
    case ParamKind::kNumber:
      read_number(value, where, min);
      break;
    case ParamKind::kString:
      if (spec.choices.empty()) {
        read_string(value, where);
      } else {
        read_choice(value, where, spec.choices);
      }
      break;
    case ParamKind::kStringList:
      if (!value.is_array()) throw_bad_value(where, "a list of strings", value);
      for (std::size_t i = 0; i < value.size(); ++i) {
        const Where item{where.file, where.path + "[" + std::to_string(i) + "]"};
        if (spec.choices.empty()) {
          read_string(value[i], item);
        } else {
          read_choice(value[i], item, spec.choices);
        }
      }
      break;
    case ParamKind::kIntList:
    case ParamKind::kNumberList: {
      const bool ints = spec.kind == ParamKind::kIntList;
      if (!value.is_array()) {
        throw_bad_value(where, ints ? "a list of integers" : "a list of numbers", value);
      }
      for (std::size_t i = 0; i < value.size(); ++i) {
        const Where item{where.file, where.path + "[" + std::to_string(i) + "]"};
        if (ints) {
          read_int(
              value[i], item,
              spec.min ? static_cast<int64_t>(*spec.min) : std::numeric_limits<int64_t>::min());
        } else {
          read_number(value[i], item, min);
        }
      }
      break;
    }
  }
}
}  // namespace

void validate_params(const ParamSchema& schema, const Json& values, const Where& where) {
  check_keys(values, where, schema.keys());
  for (const auto& item : values.items()) {
    validate_value(*schema.find(item.key()), item.value(), where.at(item.key()));
  }
}

Params::Params(const ParamSchema& schema, const Json& values, const Where& where)
    : values_(schema.defaults()) {
  validate_params(schema, values, where);
  for (const auto& item : values.items()) values_[item.key()] = item.value();
}

const Json& Params::get(const std::string& key) const {
  auto found = values_.find(key);
  GPUBENCH_ASSERT(found != values_.end() && "parameter not declared in the schema");
  return *found;
}

int64_t Params::i64(const std::string& key) const {
  const Json& v = get(key);
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}
double Params::f64(const std::string& key) const { return get(key).get<double>(); }
bool Params::flag(const std::string& key) const { return get(key).get<bool>(); }
std::string Params::str(const std::string& key) const { return get(key).get<std::string>(); }

std::vector<int64_t> Params::i64s(const std::string& key) const {
  std::vector<int64_t> out;
  for (const auto& v : get(key)) {
    out.push_back(v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>()));
  }
  return out;
}

std::vector<std::string> Params::strs(const std::string& key) const {
  std::vector<std::string> out;
  for (const auto& v : get(key)) out.push_back(v.get<std::string>());
  return out;
}

std::vector<double> Params::f64s(const std::string& key) const {
  std::vector<double> out;
  for (const auto& v : get(key)) out.push_back(v.get<double>());
  return out;
}

}  // namespace gpubench
