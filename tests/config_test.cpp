// Config loading: the shipped configs, user overlays in YAML and JSON, precedence, and every
// error path with its message (file, key, bad value, fix).
#include "gpubench/config/config.h"

#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"
#include "gpubench/config/settings.h"
#include "gpubench/device/device.h"
#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gpubench {
namespace {

using testing::TempDir;
using testing::write_file;

ConfigStore builtin() { return ConfigStore::load_builtin(builtin_registry()); }

void apply_yaml(ConfigStore& store, const std::string& yaml, const std::string& file = "my.yaml") {
  store.apply_document(parse_yaml(yaml, file), file);
}

TEST(ConfigTest, ShippedConfigsLoadAndNameRegisteredArchitectures) {
  const ConfigStore store = builtin();
  ASSERT_FALSE(store.model_names().empty());
  EXPECT_EQ(store.model_names().front(), store.suites().at("all").front());
  for (const auto& name : store.model_names()) {
    const ModelConfig& m = store.model(name);
    EXPECT_EQ(m.name, name);
    EXPECT_TRUE(builtin_registry().contains(m.architecture)) << name;
    EXPECT_FALSE(m.trainable_params.empty()) << name;
    EXPECT_FALSE(m.modified) << name;
    EXPECT_EQ(m.sources.size(), 1u);
  }
  const ModelConfig& bert = store.model("bert-base");
  EXPECT_EQ(bert.batch_unit, "sequences");
  EXPECT_EQ(bert.throughput_unit, "examples/s");
  EXPECT_EQ(bert.trainable_params.at("total"), 110106428);
  EXPECT_EQ(bert.model.i64("seq_length"), 128);
  EXPECT_EQ(bert.optimizer.str("name"), "bert-adam");
  ASSERT_TRUE(bert.reference_2020.has_value());
  EXPECT_EQ(bert.reference_2020->throughput.at("quadro-rtx-8000"), 94);
  EXPECT_LT(bert.smoke_model.i64("hidden_size"), bert.model.i64("hidden_size"));
  EXPECT_FALSE(store.model("bert-base-mlm").reference_2020.has_value());
}

TEST(ConfigTest, EveryArchitectureHasAShippedWorkload) {
  const ConfigStore store = builtin();
  for (const auto& arch : builtin_registry().names()) {
    bool used = false;
    for (const auto& name : store.model_names()) used |= store.model(name).architecture == arch;
    EXPECT_TRUE(used) << arch << " has no config under configs/models/";
  }
}

TEST(ConfigTest, UserFileOverridesBuiltInsAndFlagsOverrideTheFile) {
  ConfigStore store = builtin();
  EXPECT_EQ(store.run().timing.min_steps, 2);  // built-in default
  apply_yaml(store, R"(
run:
  precision: amp-bf16
  timing: {min_steps: 20, min_seconds: 1.5}
models:
  bert-base:
    search: {max_batch: 512, headroom: 0.01}
    model: {layers: 6}
)");
  EXPECT_EQ(store.run().precision, Precision::kAmpBf16);
  EXPECT_EQ(store.run().timing.min_steps, 20);
  EXPECT_EQ(store.run().timing.warmup_steps, 3);  // untouched keys keep their defaults
  EXPECT_EQ(store.model("bert-base").search.max_batch, 512);
  EXPECT_EQ(store.model("bert-base").search.first_probe, 16);
  EXPECT_EQ(store.model("bert-base").search.headroom, 0.01);
  EXPECT_EQ(store.model("bert-base").to_json()["search"]["headroom"], 0.01);
  // Elsewhere every probe leaves a quarter of a percent of the memory free.
  EXPECT_EQ(store.model("bert-finetune").search.headroom, 0.0025);
  EXPECT_EQ(store.model("bert-base").model.i64("layers"), 6);
  EXPECT_EQ(store.model("bert-base").model.i64("hidden_size"), 768);
  EXPECT_TRUE(store.model("bert-base").modified);
  EXPECT_EQ(store.model("bert-base").sources.back(), "my.yaml");

  store.apply_document(Json{{"run", {{"timing", {{"min_steps", 5}}}}}}, "command line");
  EXPECT_EQ(store.run().timing.min_steps, 5);
  EXPECT_DOUBLE_EQ(store.run().timing.min_seconds, 1.5);
}

TEST(ConfigTest, YamlAndJsonShareOneSchema) {
  TempDir dir;
  write_file(dir.file("a.yaml"),
             "run:\n  timing: {min_steps: 7}\nmodels:\n  bert-base: {cpu_batch: 3}\n");
  write_file(dir.file("a.json"),
             R"({"run": {"timing": {"min_steps": 7}}, "models": {"bert-base": {"cpu_batch": 3}}})");
  ConfigStore from_yaml = builtin(), from_json = builtin();
  from_yaml.apply_file(dir.file("a.yaml"));
  from_json.apply_file(dir.file("a.json"));
  EXPECT_EQ(from_yaml.run().to_json(), from_json.run().to_json());
  EXPECT_EQ(from_yaml.model("bert-base").cpu_batch, 3);
  EXPECT_EQ(from_json.model("bert-base").cpu_batch, 3);
}

TEST(ConfigTest, ASingleModelFileIsShorthandForModels) {
  ConfigStore store = builtin();
  apply_yaml(store, "name: bert-base\ncpu_batch: 4\n");
  EXPECT_EQ(store.model("bert-base").cpu_batch, 4);
  EXPECT_FALSE(store.model("bert-base").modified);  // batch settings keep the workload itself
}

// FLOPs per unit: stated per workload, null where not derived, kept in the record's config.
TEST(ConfigTest, FlopsPerUnitIsOptionalAndInTheResolvedConfig) {
  ConfigStore store = builtin();
  const ModelConfig& bert = store.model("bert-base");
  ASSERT_TRUE(bert.flops_per_unit.has_value());
  // The stated figure follows the config's shape (docs/workloads/bert-base.md): per layer and
  // token 4h^2 + 2h*ff + 2sh multiply-adds, the MLM head on the masked positions, the pooler;
  // x2 for FLOPs, x3 for forward and backward.
  const double h = static_cast<double>(bert.model.i64("hidden_size"));
  const double layers = static_cast<double>(bert.model.i64("layers"));
  const double ff = static_cast<double>(bert.model.i64("intermediate_size"));
  const double seq = static_cast<double>(bert.model.i64("seq_length"));
  const double vocab = static_cast<double>(bert.model.i64("vocab_size"));
  const double masked = static_cast<double>(bert.model.i64("masked_per_sequence"));
  const double macs = layers * seq * (4 * h * h + 2 * h * ff + 2 * seq * h) +
                      masked * (h * h + h * vocab) + h * h + 2 * h;
  EXPECT_NEAR(*bert.flops_per_unit, 6 * macs, 0.005 * 6 * macs);
  // Every shipped workload states one (derived in docs/workloads/, checked against a count by
  // scripts/dev/flops_analytic.py and FlopCount.WorkloadStep); null is for configs without.
  for (const std::string& name : store.model_names()) {
    EXPECT_TRUE(store.model(name).flops_per_unit.has_value()) << name;
  }
  EXPECT_DOUBLE_EQ(bert.to_json()["flops_per_unit"].get<double>(), *bert.flops_per_unit);
  apply_yaml(store, "name: bert-base\nflops_per_unit: null\n");
  EXPECT_FALSE(store.model("bert-base").flops_per_unit.has_value());
  EXPECT_FALSE(store.model("bert-base").to_json().contains("flops_per_unit"));
  EXPECT_FALSE(store.model("bert-base").modified);  // how it is counted, not what it trains
}

// ---- Errors: each names the file, the key, the bad value and the fix ----

TEST(ConfigTest, UnknownKeysAreRejectedWithADidYouMean) {
  ConfigStore store = builtin();
  EXPECT_THROWS_WITH(apply_yaml(store, "runn: {}\n"), ConfigError,
                     "my.yaml: unknown key 'runn' (did you mean 'run'?)");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {min_step: 3}\n"), ConfigError,
                     "my.yaml: run: unknown key 'min_step'");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {timing: {min_step: 3}}\n"), ConfigError,
                     "my.yaml: run.timing: unknown key 'min_step' (did you mean 'min_steps'?)");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {modle: {}}}\n"), ConfigError,
                     "my.yaml: models.bert-base: unknown key 'modle' (did you mean 'model'?)");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {model: {hiden_size: 3}}}\n"),
                     ConfigError,
                     "my.yaml: models.bert-base.model: unknown key 'hiden_size' (did you mean "
                     "'hidden_size'?)");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {optimizer: {learning_rate: 1}}}\n"),
                     ConfigError, "models.bert-base.optimizer: unknown key 'learning_rate'");
}

TEST(ConfigTest, WrongTypesAndValuesNameTheKeyAndTheValue) {
  ConfigStore store = builtin();
  EXPECT_THROWS_WITH(
      apply_yaml(store, "run: {timing: {min_steps: ten}}\n"), ConfigError,
      "my.yaml: run.timing.min_steps: expected an integer from 1 to 1000000, got 'ten'");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {timing: {min_seconds: -1}}\n"), ConfigError,
                     "run.timing.min_seconds: expected a number >= 0, got -1");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {timing: {noise_target: 2}}\n"), ConfigError,
                     "run.timing.noise_target: expected a number from 0 to 1, got 2");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {precision: fp8}\n"), ConfigError,
                     "my.yaml: run.precision: expected one of fp32, tf32, amp-bf16, amp-fp16, got "
                     "'fp8' (did you mean 'fp32'?)");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {cudnn_benchmark: maybe}\n"), ConfigError,
                     "run.cudnn_benchmark: expected true or false, got 'maybe'");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {cpu_batch: 0}}\n"), ConfigError,
                     "models.bert-base.cpu_batch: expected an integer >= 1, got 0");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {flops_per_unit: -5}}\n"), ConfigError,
                     "models.bert-base.flops_per_unit: expected a number >= 1, got -5");
  EXPECT_THROWS_WITH(
      apply_yaml(store, "models: {bert-base: {search: {min_batch: 8, max_batch: 4}}}\n"),
      ConfigError, "min_batch (8) is above max_batch (4)");
  // Search settings that leave nothing to search, refused before any job or probe.
  EXPECT_THROWS_WITH(
      apply_yaml(store, "models: {bert-base: {search: {granularity: 0}}}\n"), ConfigError,
      "models.bert-base.search.granularity: expected an integer >= 1, got 0");
  EXPECT_THROWS_WITH(
      apply_yaml(store, "models: {bert-base: {search: {max_batch: 64, granularity: 128}}}\n"),
      ConfigError, "granularity (128) is above max_batch (64)");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {search: {cudnn_benchmark: 1}}}\n"),
                     ConfigError,
                     "models.bert-base.search.cudnn_benchmark: expected true or false, got 1");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {search: {headroom: 0.7}}}\n"),
                     ConfigError, "models.bert-base.search.headroom: expected a number from 0 to 0.5");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {search: {headroom: -0.01}}}\n"),
                     ConfigError, "models.bert-base.search.headroom: expected a number from 0 to 0.5");
  EXPECT_NO_THROW(apply_yaml(store, "models: {bert-base: {search: {headroom: 0}}}\n"));
  EXPECT_NO_THROW(apply_yaml(store, "models: {bert-base: {search: {headroom: 0.5}}}\n"));
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {expandable_segments: on}\n"), ConfigError,
                     "run.expandable_segments: expected true or false, got 'on'");
  EXPECT_THROWS_WITH(apply_yaml(store, "run: {cudnn_benchmark_limit: -1}\n"), ConfigError,
                     "run.cudnn_benchmark_limit: expected an integer from 0 to 10000, got -1");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {model: {gelu: relu}}}\n"), ConfigError,
                     "models.bert-base.model.gelu: expected one of tanh, erf, got 'relu'");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {model: {layers: 2.5}}}\n"),
                     ConfigError,
                     "models.bert-base.model.layers: expected an integer >= 1, got 2.5");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {model: {layers: '12'}}}\n"),
                     ConfigError, "got '12'");  // quoted: a string, not a number
  EXPECT_THROWS_WITH(apply_yaml(store, "models: []\n"), ConfigError,
                     "my.yaml: models: expected a mapping of model name to settings, got []");
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-base: {architecture: nasnet}}\n"),
                     ConfigError, "'architecture' cannot be changed by a user config");
}

TEST(ConfigTest, ExpandableSegmentsAreOnByDefaultAndARunSettingOfTheRecord) {
  ConfigStore store = builtin();
  EXPECT_TRUE(store.run().expandable_segments);
  EXPECT_EQ(store.run().to_json().at("expandable_segments"), true);
  apply_yaml(store, "run: {expandable_segments: false}\n");
  EXPECT_FALSE(store.run().expandable_segments);
  EXPECT_EQ(store.run().to_json().at("expandable_segments"), false);
}

TEST(ConfigTest, TheAllocatorOptionKeepsTheUsersOtherOptionsAndOverridesOnlyItsOwn) {
  EXPECT_EQ(allocator_options_with("", true), "expandable_segments:True");
  EXPECT_EQ(allocator_options_with("", false), "expandable_segments:False");
  // The user's other options stay, in order; a value of their own for this one gives way to
  // the run setting, which the record states.
  EXPECT_EQ(allocator_options_with("max_split_size_mb:128", true),
            "max_split_size_mb:128,expandable_segments:True");
  EXPECT_EQ(allocator_options_with(" expandable_segments:True , garbage_collection_threshold:0.6",
                                   false),
            "garbage_collection_threshold:0.6,expandable_segments:False");
  EXPECT_EQ(allocator_options_with("expandable_segments:False,,", true),
            "expandable_segments:True");
}

// The one reader of the allocator's option list: what the worker keeps of the user's options and
// what the record's modified mark looks at are the same pairs.
TEST(ConfigTest, AllocatorOptionsAreReadOnceTrimmedAndFilteredByTheirKey) {
  EXPECT_EQ(env::allocator_options_without(" a:1 , expandable_segments:True,,b:2 ",
                                           "expandable_segments"),
            (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_TRUE(env::allocator_options_without("expandable_segments:False", "expandable_segments")
                  .empty());
  EXPECT_TRUE(env::allocator_options_without(" , ,", "expandable_segments").empty());
  // A key that only begins like it is another option.
  EXPECT_EQ(env::allocator_options_without("expandable_segments_x:1", "expandable_segments"),
            (std::vector<std::string>{"expandable_segments_x:1"}));
}

/// A valid value of `setting` other than `current`: the smallest in range, else one above it.
Json other_value(const settings::Setting& setting, const Json& current) {
  switch (setting.type) {
    case settings::Type::kBool:
      return !current.get<bool>();
    case settings::Type::kPrecision:
      for (const auto& name : precision_names()) {
        if (name != current.get<std::string>()) return name;
      }
      break;
    case settings::Type::kInt:
      return static_cast<int64_t>(current == Json(setting.min) ? setting.min + 1 : setting.min);
    case settings::Type::kNumber:
    case settings::Type::kOptionalNumber:
      // An unset optional number (the price) may have an exclusive minimum: one above it.
      if (current.is_null()) return setting.min + 1;
      return current == Json(setting.min) ? setting.min + 1 : setting.min;
  }
  return nullptr;
}

// Every row of the run settings' table reaches the config reader and the resolved settings: a
// new setting is a row, not another branch of the reader.
TEST(ConfigTest, EveryRunSettingOfTheTableIsReadFromItsKey) {
  const Json defaults = RunSettings().to_json();
  for (const settings::Setting& s : settings::table()) {
    const std::string key(s.key);
    for (const std::string section : {"timing", "cpu_timing"}) {
      if (!s.timing() && section == "cpu_timing") continue;
      const Json current = s.timing() ? defaults[section][key] : defaults[key];
      const Json value = other_value(s, current);
      Json run = Json::object();
      if (s.timing()) {
        run[section][key] = value;
      } else {
        run[key] = value;
      }
      ConfigStore store = builtin();
      store.apply_document({{"run", run}}, "my.yaml");
      const Json resolved = store.run().to_json();
      EXPECT_EQ(s.timing() ? resolved[section][key] : resolved[key], value)
          << s.config_key() << " in " << section;
      EXPECT_NE(value, current) << s.config_key();
    }
  }
}

// Each flag of the table becomes its key in the command line's overlay, and for a timing
// setting on both devices.
TEST(ConfigTest, EveryRunSettingFlagBecomesItsConfigKey) {
  const Json defaults = RunSettings().to_json();
  for (const settings::Setting* s : settings::flags()) {
    const std::string key(s->key);
    const Json current = s->timing() ? defaults["timing"][key] : defaults[key];
    Json value = other_value(*s, current);
    // --noise 0 is no percentage the flag takes; its value is in percent.
    if (s->flag.min_exclusive && std::isfinite(s->flag.max)) value = s->flag.max / s->flag.scale;
    const Json flag_value =
        value.is_number_float() ? Json(value.get<double>() * s->flag.scale) : value;
    const Json overlay = settings::flag_overlay({{std::string(s->flag.name), flag_value}});
    ConfigStore store = builtin();
    store.apply_document(overlay, "command line");
    const Json resolved = store.run().to_json();
    if (s->timing()) {
      EXPECT_EQ(resolved["timing"][key], value) << s->flag.name;
      EXPECT_EQ(resolved["cpu_timing"][key], value) << s->flag.name;
    } else {
      EXPECT_EQ(resolved[key], value) << s->flag.name;
    }
  }
}

TEST(ConfigTest, UnknownModelInAUserFileIsNamed) {
  ConfigStore store = builtin();
  EXPECT_THROWS_WITH(apply_yaml(store, "models: {bert-bsae: {cpu_batch: 2}}\n"),
                     UnknownWorkloadError,
                     "my.yaml: models.bert-bsae: unknown model 'bert-bsae' (did you mean "
                     "'bert-base'?)");
  EXPECT_THROWS_WITH(store.model("bert"), UnknownWorkloadError,
                     "unknown model 'bert' (did you mean 'bert-base'?)");
}

TEST(ConfigTest, MalformedFilesGiveTheLine) {
  TempDir dir;
  write_file(dir.file("bad.yaml"), "run:\n  timing: {min_steps: 3\n");
  write_file(dir.file("bad.json"), "{\n  \"run\": {\"timing\": 3,}\n}\n");
  EXPECT_THROWS_WITH(load_config_file(dir.file("bad.yaml")), ConfigError, "bad.yaml:3:");
  EXPECT_THROWS_WITH(load_config_file(dir.file("bad.yaml")), ConfigError, "not valid YAML");
  EXPECT_THROWS_WITH(load_config_file(dir.file("bad.json")), ConfigError, "bad.json:2:");
  EXPECT_THROWS_WITH(load_config_file(dir.file("bad.json")), ConfigError, "not valid JSON");
  EXPECT_THROWS_WITH(load_config_file(dir.file("missing.yaml")), ConfigError,
                     "missing.yaml' cannot be read (check the path");
}

TEST(ConfigTest, WrongTypedJsonIsRejectedLikeYaml) {
  TempDir dir;
  write_file(dir.file("t.json"), R"({"run": {"timing": {"warmup_steps": "3"}}})");
  ConfigStore store = builtin();
  EXPECT_THROWS_WITH(
      store.apply_file(dir.file("t.json")), ConfigError,
      "t.json: run.timing.warmup_steps: expected an integer from 0 to 100000, got '3'");
}

TEST(ConfigTest, YamlScalarsBecomeTypedJson) {
  const Json j = parse_yaml("a: 3\nb: 1.5e-4\nc: true\nd: hello\ne: '7'\nf: ~\ng: [1, 2]\n", "x");
  EXPECT_TRUE(j["a"].is_number_integer());
  EXPECT_DOUBLE_EQ(j["b"].get<double>(), 1.5e-4);
  EXPECT_TRUE(j["c"].get<bool>());
  EXPECT_EQ(j["d"], "hello");
  EXPECT_TRUE(j["e"].is_string());
  EXPECT_TRUE(j["f"].is_null());
  EXPECT_EQ(j["g"], Json::array({1, 2}));
}

TEST(ConfigTest, ModelConfigsMustAgreeWithTheReferenceTable) {
  ConfigStore store = builtin();
  EXPECT_THROWS_WITH(
      apply_yaml(store, R"(
models:
  bert-base:
    reference_2020:
      row: BERT Base
      max_batch: {rtx-2060: 8, rtx-2070: 16, rtx-2080: 16, gtx-1080-ti: 32, rtx-2080-ti: 32,
                  titan-rtx: 64, quadro-rtx-6000: 64, quadro-rtx-8000: 128}
      throughput: {rtx-2060: 34, rtx-2070: 47, rtx-2080: 58, gtx-1080-ti: 60, rtx-2080-ti: 83,
                   titan-rtx: 102, quadro-rtx-6000: 98, quadro-rtx-8000: 95}
)"),
      ConfigError,
      "models.bert-base.reference_2020.throughput.quadro-rtx-8000: 95 disagrees with the "
      "reference table's 94 for row 'BERT Base'");
}

}  // namespace
}  // namespace gpubench
