#include "tests/fuzz/registry_snapshot.h"

#include <stdexcept>

namespace gpubench::fuzz {

namespace {

const char* const kKinds[] = {"bool",     "int",         "number",     "string",
                              "int_list", "number_list", "string_list"};

Json schema_to_json(const ParamSchema& schema) {
  Json out = Json::array();
  for (const auto& spec : schema.specs()) {
    out.push_back({{"key", spec.key},
                   {"kind", kKinds[static_cast<int>(spec.kind)]},
                   {"default", spec.default_value},
                   {"choices", spec.choices},
                   {"min", spec.min ? Json(*spec.min) : Json(nullptr)}});
  }
  return out;
}

ParamSchema schema_from_json(const Json& json) {
  std::vector<ParamSpec> specs;
  for (const auto& item : json) {
    ParamSpec spec;
    spec.key = item.at("key").get<std::string>();
    const auto kind = item.at("kind").get<std::string>();
    for (int k = 0; k < 7; ++k) {
      if (kind == kKinds[k]) spec.kind = static_cast<ParamKind>(k);
    }
    spec.default_value = item.at("default");
    spec.choices = item.at("choices").get<std::vector<std::string>>();
    if (item.at("min").is_number()) spec.min = item.at("min").get<double>();
    specs.push_back(std::move(spec));
  }
  return ParamSchema(std::move(specs));
}

}  // namespace

Json registry_to_json(const Registry& registry) {
  Json out = Json::array();
  for (const auto& name : registry.names()) {
    const Architecture& a = registry.get(name);
    out.push_back({{"name", a.name},
                   {"model_schema", schema_to_json(a.model_schema)},
                   {"optimizer_schema", schema_to_json(a.optimizer_schema)}});
  }
  return {{"architectures", out}};
}

void add_snapshot_architectures(const Json& snapshot, Registry& registry) {
  for (const auto& item : snapshot.at("architectures")) {
    Architecture a;
    a.name = item.at("name").get<std::string>();
    a.summary = "(schema snapshot)";
    a.model_schema = schema_from_json(item.at("model_schema"));
    a.optimizer_schema = schema_from_json(item.at("optimizer_schema"));
    a.prepare = [](const StepContext&) -> std::unique_ptr<TrainStep> {
      throw std::logic_error("the fuzz/sanitizer build has no model code");
    };
    a.count_parameters = [](const Params&) -> std::map<std::string, int64_t> {
      throw std::logic_error("the fuzz/sanitizer build has no model code");
    };
    registry.add(std::move(a));
  }
}

}  // namespace gpubench::fuzz
