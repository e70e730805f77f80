#include "gpubench/config/config.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/config/settings.h"
#include "gpubench/train/registry.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace gpubench {

// ---- Reading files ----

namespace {

Json yaml_scalar(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return nullptr;
  }
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  static const std::regex kInt(R"([-+]?[0-9]+)");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  // strtod, not stod: a number beyond a double (1e999) reads as infinity and an underflow as
  // 0 or a denormal, which the typed readers then judge; stod threw std::out_of_range, which
  // escaped as an internal error (found by fuzzing, issue 14).
  const auto to_double = [&text] { return std::strtod(text.c_str(), nullptr); };
  if (std::regex_match(text, kInt)) {
    try {
      return static_cast<int64_t>(std::stoll(text));
    } catch (const std::out_of_range&) {
      return to_double();
    }
  }
  if (std::regex_match(text, kFloat)) return to_double();
  if (text == ".inf" || text == "+.inf") return std::numeric_limits<double>::infinity();
  if (text == "-.inf") return -std::numeric_limits<double>::infinity();
  if (text == ".nan") return std::numeric_limits<double>::quiet_NaN();
  return text;
}

Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return yaml_scalar(node);
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yaml_to_json(item));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& item : node) out[item.first.as<std::string>()] = yaml_to_json(item.second);
      return out;
    }
  }
  return nullptr;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Json parse_yaml(const std::string& text, const std::string& file) {
  try {
    Json out = yaml_to_json(YAML::Load(text));
    return out.is_null() ? Json::object() : out;
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}: not valid YAML: {} (fix the syntax at that line)",
                                  file, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

Json parse_json(const std::string& text, const std::string& file) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw ConfigError(fmt::format("{}:{}:{}: not valid JSON: {} (fix the syntax at that line)",
                                  file, line, column, e.what()));
  } catch (const nlohmann::json::exception& e) {
    // out_of_range 406: a number beyond a double (1e400), found by fuzzing (issue 14).
    throw ConfigError(fmt::format("{}: not valid JSON: {}", file, e.what()));
  }
}

Json load_config_file(const std::string& path) {
  std::error_code ec;
  GPUBENCH_CHECK(!std::filesystem::is_directory(path, ec), ConfigError,
                 "config file '{}' is a folder; give a YAML or JSON file in it (such as "
                 "configs/models/bert-base.yaml) or a file of your own",
                 path);
  std::ifstream in(path, std::ios::binary);
  GPUBENCH_CHECK(in.good(), ConfigError,
                 "config file '{}' cannot be read (check the path; shipped configs need no "
                 "--config)",
                 path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  Json document =
      ends_with(path, ".json") ? parse_json(buffer.str(), path) : parse_yaml(buffer.str(), path);
  // An empty file (or only comments, or {}) would run as if no --config had been given.
  GPUBENCH_CHECK(!document.is_null() && !(document.is_object() && document.empty()), ConfigError,
                 "config file '{}' has no settings in it (write the keys to change, such as "
                 "'run: {{timing: {{min_seconds: 10}}}}', or leave out --config)",
                 path);
  return document;
}

// ---- Model documents ----

namespace {

const std::vector<std::string> kModelKeys = {
    "name",       "architecture",    "family",           "description",
    "batch_unit", "throughput_unit", "trainable_params", "cpu_batch",
    "search",     "model",           "optimizer",        "smoke",
    "runtime",    "reference_2020",  "flops_per_unit"};
const std::vector<std::string> kRequiredModelKeys = {
    "name", "architecture", "family", "batch_unit", "throughput_unit", "trainable_params"};
const std::vector<std::string> kFamilies = {"image", "language"};
const std::vector<std::string> kBatchUnits = {"images", "sequences", "tokens"};
const std::vector<std::string> kThroughputUnits = {"images/s", "examples/s", "words/s"};

SearchSettings read_search(const Json& value, const Where& where) {
  check_keys(value, where,
             {"min_batch", "max_batch", "granularity", "first_probe", "max_probes",
              "cudnn_benchmark", "headroom"});
  SearchSettings s;
  if (value.contains("min_batch"))
    s.min_batch = read_int(value["min_batch"], where.at("min_batch"), 1);
  if (value.contains("max_batch"))
    s.max_batch = read_int(value["max_batch"], where.at("max_batch"), 1);
  if (value.contains("granularity")) {
    s.granularity = read_int(value["granularity"], where.at("granularity"), 1);
  }
  if (value.contains("first_probe")) {
    s.first_probe = read_int(value["first_probe"], where.at("first_probe"), 0);
  }
  if (value.contains("max_probes")) {
    s.max_probes = static_cast<int>(read_int(value["max_probes"], where.at("max_probes"), 2, 100));
  }
  if (value.contains("cudnn_benchmark")) {
    s.cudnn_benchmark = read_bool(value["cudnn_benchmark"], where.at("cudnn_benchmark"));
  }
  if (value.contains("headroom")) {
    s.headroom = read_number(value["headroom"], where.at("headroom"), 0, 0.5);
  }
  GPUBENCH_CHECK(s.min_batch <= s.max_batch, ConfigError,
                 "{}: min_batch ({}) is above max_batch ({}); make min_batch <= max_batch",
                 where.str(), s.min_batch, s.max_batch);
  // A granularity no candidate above min_batch is a multiple of leaves nothing to search.
  GPUBENCH_CHECK(s.granularity <= s.max_batch, ConfigError,
                 "{}: granularity ({}) is above max_batch ({}): no batch above min_batch would "
                 "be a multiple of it; make granularity <= max_batch",
                 where.str(), s.granularity, s.max_batch);
  return s;
}

std::map<std::string, int64_t> read_param_targets(const Json& value, const Where& where) {
  std::map<std::string, int64_t> out;
  if (value.is_object()) {
    GPUBENCH_CHECK(!value.empty(), ConfigError,
                   "{}: expected a count or a mapping of network to count", where.str());
    for (const auto& item : value.items()) {
      out[item.key()] = read_int(item.value(), where.at(item.key()), 0);
    }
  } else {
    out["total"] = read_int(value, where, 0);
  }
  return out;
}

std::map<std::string, double> read_gpu_values(const Json& value, const Where& where,
                                              const ReferenceTable& reference) {
  check_keys(value, where, reference.gpu_ids());
  std::map<std::string, double> out;
  for (const auto& item : value.items()) {
    out[item.key()] = read_number(item.value(), where.at(item.key()), 0);
  }
  return out;
}

ModelReference read_model_reference(const Json& value, const Where& where,
                                    const ReferenceTable& reference) {
  check_keys(value, where, {"row", "max_batch", "throughput"});
  ModelReference out;
  std::vector<std::string> rows;
  for (const auto& row : reference.rows()) rows.push_back(row.model);
  out.row = read_choice(require_key(value, "row", where), where.at("row"), rows);
  const ReferenceRow& row = *reference.find_row(out.row);
  out.max_batch =
      read_gpu_values(require_key(value, "max_batch", where), where.at("max_batch"), reference);
  out.throughput =
      read_gpu_values(require_key(value, "throughput", where), where.at("throughput"), reference);
  // The numbers are stated in the model's config for the reader; the table is the source of
  // truth, so they must agree GPU for GPU.
  for (std::size_t i = 0; i < reference.gpus().size(); ++i) {
    const std::string& id = reference.gpus()[i].id;
    for (const auto& [field, stated, table] :
         {std::tuple{"max_batch", &out.max_batch, &row.max_batch},
          std::tuple{"throughput", &out.throughput, &row.throughput}}) {
      auto found = stated->find(id);
      GPUBENCH_CHECK(found != stated->end(), ConfigError,
                     "{}: missing the 2020 value for GPU '{}' (copy it from the reference table)",
                     where.at(field).str(), id);
      GPUBENCH_CHECK(found->second == (*table)[i], ConfigError,
                     "{}: {} disagrees with the reference table's {} for row '{}' (fix one of "
                     "them)",
                     where.at(field).at(id).str(), format_number(found->second),
                     format_number((*table)[i]), out.row);
    }
  }
  return out;
}

/// Validates a model document (or, with `partial`, an overlay of one) without building it.
void validate_model_document(const Json& doc, const Where& where, const Registry& registry,
                             const ReferenceTable& reference, const std::string& architecture,
                             bool partial) {
  check_keys(doc, where, kModelKeys);
  if (!partial) {
    for (const auto& key : kRequiredModelKeys) require_key(doc, key, where);
  }
  if (doc.contains("name")) read_string(doc["name"], where.at("name"));
  if (doc.contains("architecture")) {
    read_choice(doc["architecture"], where.at("architecture"), registry.names());
  }
  if (doc.contains("family")) read_choice(doc["family"], where.at("family"), kFamilies);
  if (doc.contains("description")) read_string(doc["description"], where.at("description"));
  if (doc.contains("batch_unit"))
    read_choice(doc["batch_unit"], where.at("batch_unit"), kBatchUnits);
  if (doc.contains("throughput_unit")) {
    read_choice(doc["throughput_unit"], where.at("throughput_unit"), kThroughputUnits);
  }
  if (doc.contains("trainable_params")) {
    read_param_targets(doc["trainable_params"], where.at("trainable_params"));
  }
  if (doc.contains("cpu_batch")) read_int(doc["cpu_batch"], where.at("cpu_batch"), 1);
  if (doc.contains("flops_per_unit") && !doc["flops_per_unit"].is_null()) {
    read_number(doc["flops_per_unit"], where.at("flops_per_unit"), 1);
  }
  if (doc.contains("search")) read_search(doc["search"], where.at("search"));
  const Architecture& arch = registry.get(architecture);
  if (doc.contains("model")) validate_params(arch.model_schema, doc["model"], where.at("model"));
  if (doc.contains("optimizer")) {
    validate_params(arch.optimizer_schema, doc["optimizer"], where.at("optimizer"));
  }
  if (doc.contains("runtime")) {
    validate_params(RuntimeSettings::schema(), doc["runtime"], where.at("runtime"));
  }
  if (doc.contains("smoke")) {
    const Where smoke = where.at("smoke");
    check_keys(doc["smoke"], smoke, {"batch", "model", "optimizer"});
    if (doc["smoke"].contains("batch")) read_int(doc["smoke"]["batch"], smoke.at("batch"), 1);
    if (doc["smoke"].contains("model")) {
      validate_params(arch.model_schema, doc["smoke"]["model"], smoke.at("model"));
    }
    if (doc["smoke"].contains("optimizer")) {
      validate_params(arch.optimizer_schema, doc["smoke"]["optimizer"], smoke.at("optimizer"));
    }
  }
  if (doc.contains("reference_2020")) {
    read_model_reference(doc["reference_2020"], where.at("reference_2020"), reference);
  }
}

ModelConfig build_model_config(const Json& doc, const Where& where, const Registry& registry,
                               const ReferenceTable& reference) {
  ModelConfig c;
  c.name = doc.at("name").get<std::string>();
  c.architecture = doc.at("architecture").get<std::string>();
  c.family = doc.at("family").get<std::string>();
  c.description = doc.value("description", std::string());
  c.batch_unit = doc.at("batch_unit").get<std::string>();
  c.throughput_unit = doc.at("throughput_unit").get<std::string>();
  c.trainable_params = read_param_targets(doc.at("trainable_params"), where.at("trainable_params"));
  c.cpu_batch = doc.contains("cpu_batch") ? doc["cpu_batch"].get<int64_t>() : c.cpu_batch;
  if (doc.contains("search")) c.search = read_search(doc["search"], where.at("search"));
  if (doc.contains("flops_per_unit") && !doc["flops_per_unit"].is_null()) {
    c.flops_per_unit = doc["flops_per_unit"].get<double>();
  }
  const Architecture& arch = registry.get(c.architecture);
  const Json model = doc.value("model", Json::object());
  c.model = Params(arch.model_schema, model, where.at("model"));
  c.optimizer =
      Params(arch.optimizer_schema, doc.value("optimizer", Json::object()), where.at("optimizer"));
  Json smoke_model = model;
  Json smoke_optimizer = doc.value("optimizer", Json::object());
  if (doc.contains("smoke")) {
    const Json& smoke = doc["smoke"];
    if (smoke.contains("batch")) c.smoke_batch = smoke["batch"].get<int64_t>();
    if (smoke.contains("model")) merge_into(smoke_model, smoke["model"]);
    if (smoke.contains("optimizer")) merge_into(smoke_optimizer, smoke["optimizer"]);
  }
  c.smoke_model = Params(arch.model_schema, smoke_model, where.at("smoke.model"));
  c.smoke_optimizer = Params(arch.optimizer_schema, smoke_optimizer, where.at("smoke.optimizer"));
  c.runtime =
      Params(RuntimeSettings::schema(), doc.value("runtime", Json::object()), where.at("runtime"));
  if (doc.contains("reference_2020")) {
    c.reference_2020 =
        read_model_reference(doc["reference_2020"], where.at("reference_2020"), reference);
  }
  return c;
}

std::string builtin_label(std::string_view path) { return std::string(path) + " (built in)"; }

}  // namespace

Json RunSettings::to_json() const { return settings::run_json(*this); }

Json ModelConfig::to_json() const {
  Json params = Json::object();
  for (const auto& [network, count] : trainable_params) params[network] = count;
  Json out = {{"name", name},
              {"architecture", architecture},
              {"family", family},
              {"description", description},
              {"batch_unit", batch_unit},
              {"throughput_unit", throughput_unit},
              {"trainable_params", params},
              {"cpu_batch", cpu_batch},
              {"search",
               {{"min_batch", search.min_batch},
                {"max_batch", search.max_batch},
                {"granularity", search.granularity},
                {"first_probe", search.first_probe},
                {"max_probes", search.max_probes},
                {"cudnn_benchmark", search.cudnn_benchmark},
                {"headroom", search.headroom}}},
              {"model", model.json()},
              {"optimizer", optimizer.json()},
              {"smoke",
               {{"batch", smoke_batch},
                {"model", smoke_model.json()},
                {"optimizer", smoke_optimizer.json()}}},
              {"runtime", runtime.json()}};
  if (flops_per_unit) out["flops_per_unit"] = *flops_per_unit;
  if (reference_2020) {
    Json max_batch = Json::object(), throughput = Json::object();
    for (const auto& [gpu, value] : reference_2020->max_batch) max_batch[gpu] = value;
    for (const auto& [gpu, value] : reference_2020->throughput) throughput[gpu] = value;
    out["reference_2020"] = {
        {"row", reference_2020->row}, {"max_batch", max_batch}, {"throughput", throughput}};
  }
  out["sources"] = sources;
  out["modified"] = modified;
  return out;
}

// ---- The store ----

ConfigStore ConfigStore::load_builtin(const Registry& registry) {
  ConfigStore store(registry);
  std::vector<std::pair<std::string, Json>> models;
  bool have_reference = false;
  for (const auto& [path, text] : embedded_config_files()) {
    const std::string label = builtin_label(path);
    const bool json = ends_with(std::string(path), ".json");
    Json doc = json ? parse_json(std::string(text), label) : parse_yaml(std::string(text), label);
    if (path.find("configs/measured/") == 0) {
      store.card_numbers_ = parse_card_numbers(doc, {label, ""});
    } else if (path.find("configs/reference/") == 0) {
      store.reference_ = ReferenceTable::parse(doc, {label, ""});
      have_reference = true;
    } else if (path == "configs/suites.yaml") {
      check_keys(doc, {label, ""}, {"suites"});
      for (const auto& item : require_key(doc, "suites", {label, ""}).items()) {
        const Where at{label, "suites." + item.key()};
        if (!item.value().is_array()) throw_bad_value(at, "a list of model names", item.value());
        auto& list = store.suites_[item.key()];
        for (std::size_t i = 0; i < item.value().size(); ++i) {
          list.push_back(read_string(item.value()[i], {label, fmt::format("{}[{}]", at.path, i)}));
        }
      }
    } else {
      models.emplace_back(label, std::move(doc));
    }
  }
  GPUBENCH_ASSERT(have_reference);
  for (const auto& [label, doc] : models) store.add_model(doc, label);

  // Order: the `all` suite, then the twins, then anything else shipped.
  std::vector<std::string> order;
  for (const char* suite : {"all", "twins"}) {
    for (const auto& name : store.suites_[suite]) {
      GPUBENCH_CHECK(store.raw_.count(name), ConfigError,
                     "configs/suites.yaml (built in): suites.{}: '{}' has no config under "
                     "configs/models/{}",
                     suite, name, did_you_mean(name, store.order_));
      if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
    }
  }
  for (const auto& [suite, names] : store.suites_) {
    for (const auto& name : names) {
      GPUBENCH_CHECK(store.raw_.count(name), ConfigError,
                     "configs/suites.yaml (built in): suites.{}: '{}' has no config{}", suite, name,
                     did_you_mean(name, store.order_));
    }
  }
  for (const auto& name : store.order_) {
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  }
  store.order_ = order;
  return store;
}

void ConfigStore::add_model(const Json& doc, const std::string& file) {
  const Where where{file, ""};
  const std::string architecture = read_choice(require_key(doc, "architecture", where),
                                               where.at("architecture"), registry_->names());
  validate_model_document(doc, where, *registry_, reference_, architecture, /*partial=*/false);
  const std::string name = doc.at("name").get<std::string>();
  GPUBENCH_CHECK(!raw_.count(name), ConfigError, "{}: model '{}' is defined twice", file, name);
  raw_[name] = doc;
  sources_[name] = {file};
  order_.push_back(name);
  rebuild_model(name);
}

void ConfigStore::rebuild_model(const std::string& name) {
  ModelConfig config =
      build_model_config(raw_.at(name), {sources_.at(name).back(), ""}, *registry_, reference_);
  config.sources = sources_.at(name);
  const Json sections = {{"model", config.model.json()}, {"optimizer", config.optimizer.json()}};
  if (!shipped_.count(name)) shipped_[name] = sections;
  config.modified = sections != shipped_.at(name);
  models_[name] = std::move(config);
}

void ConfigStore::apply_file(const std::string& path) {
  apply_document(load_config_file(path), path);
}

void ConfigStore::apply_document(const Json& input, const std::string& file) {
  Json document = input;
  // A single model's config at the top level (`name: bert-base` plus its keys) is shorthand
  // for `models: {bert-base: {...}}`.
  if (document.is_object() && document.contains("name") && !document.contains("models")) {
    const std::string name = read_string(document["name"], {file, "name"});
    Json models = Json::object();
    Json rest = document;
    rest.erase("name");
    models[name] = rest;
    document = Json{{"models", models}};
  }
  const Where root{file, ""};
  check_keys(document, root, {"run", "models"});
  if (document.contains("run")) settings::apply_run_section(run_, document["run"], root.at("run"));
  if (!document.contains("models")) return;
  const Json& models = document["models"];
  if (!models.is_object())
    throw_bad_value(root.at("models"), "a mapping of model name to settings", models);
  for (const auto& item : models.items()) {
    const std::string& name = item.key();
    if (!raw_.count(name)) {
      throw UnknownWorkloadError(
          fmt::format("{}: models.{}: unknown model '{}'{} (run "
                      "'gpubench list' for the names)",
                      file, name, name, did_you_mean(name, order_)));
    }
    const Where where = root.at("models").at(name);
    Json& base = raw_[name];
    const Json& patch = item.value();
    if (patch.is_object()) {
      for (const char* fixed : {"name", "architecture"}) {
        GPUBENCH_CHECK(!patch.contains(fixed) || patch[fixed] == base[fixed], ConfigError,
                       "{}: '{}' cannot be changed by a user config (it is {})",
                       where.at(fixed).str(), fixed, quote_value(base[fixed]));
      }
    }
    validate_model_document(patch, where, *registry_, reference_,
                            base["architecture"].get<std::string>(), /*partial=*/true);
    merge_into(base, patch);
    sources_[name].push_back(file);
    rebuild_model(name);
  }
}

std::vector<std::string> ConfigStore::model_names() const { return order_; }

bool ConfigStore::has_model(const std::string& name) const { return models_.count(name) > 0; }

const ModelConfig& ConfigStore::model(const std::string& name) const {
  auto found = models_.find(name);
  if (found == models_.end()) {
    throw UnknownWorkloadError(
        fmt::format("unknown model '{}'{} (run 'gpubench list' for the "
                    "names)",
                    name, did_you_mean(name, order_)));
  }
  return found->second;
}

}  // namespace gpubench
