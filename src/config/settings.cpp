#include "gpubench/config/settings.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>

namespace gpubench::settings {

namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();

// ---- Fields as JSON ----

template <typename T>
Json field_json(const T& value) {
  if constexpr (std::is_same_v<T, Precision>) {
    return to_string(value);
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    return value ? Json(*value) : Json(nullptr);
  } else {
    return value;
  }
}

template <typename T>
T field_value(const Json& value) {
  if constexpr (std::is_same_v<T, Precision>) {
    return parse_precision(value.get<std::string>(), "run.precision");
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    return value.is_null() ? std::nullopt : std::optional<double>(value.get<double>());
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(value.get<int64_t>());
  } else {
    return value.get<T>();
  }
}

template <typename>
struct MemberOf;
template <typename Owner, typename T>
struct MemberOf<T Owner::*> {
  using owner = Owner;
  using type = T;
};

template <auto Member>
Json get_field(const typename MemberOf<decltype(Member)>::owner& owner) {
  return field_json(owner.*Member);
}

template <auto Member>
void set_field(typename MemberOf<decltype(Member)>::owner& owner, const Json& value) {
  owner.*Member = field_value<typename MemberOf<decltype(Member)>::type>(value);
}

template <auto Member>
Access run_field() {
  return {&get_field<Member>, &set_field<Member>, nullptr, nullptr};
}

template <auto Member>
Access timing_field() {
  return {nullptr, nullptr, &get_field<Member>, &set_field<Member>};
}

// ---- The table ----

std::vector<Setting> make_table() {
  return {
      {"precision",
       Type::kPrecision,
       kNone,
       kNone,
       run_field<&RunSettings::precision>(),
       {"--precision", group::kWhat, "",
        "fp32: strict, TF32 off, as the 2020 cards (default: {default}); tf32: TF32 tensor cores; "
        "amp-bf16, amp-fp16: autocast (fp16 with loss scaling)"}},
      {"warmup_steps",
       Type::kInt,
       0,
       100000,
       timing_field<&TimingSettings::warmup_steps>(),
       {"--warmup-steps", group::kTiming, "N",
        "Minimum warm-up steps (default: {gpu} on a GPU, {cpu} on the CPU; the warm-up also "
        "waits for steady step times)",
        "an integer >= 0", 0}},
      {"max_warmup_steps", Type::kInt, 0, 100000,
       timing_field<&TimingSettings::max_warmup_steps>()},
      {"max_warmup_seconds", Type::kNumber, 0, kNone,
       timing_field<&TimingSettings::max_warmup_seconds>()},
      {"steady_tolerance", Type::kNumber, 0, 1, timing_field<&TimingSettings::steady_tolerance>()},
      {"min_steps",
       Type::kInt,
       1,
       1000000,
       timing_field<&TimingSettings::min_steps>(),
       {"--min-steps", group::kTiming, "N",
        "Minimum timed steps (default: {gpu} on a GPU, {cpu} on the CPU)",
        "an integer >= 1", 1}},
      {"min_seconds",
       Type::kNumber,
       0,
       kNone,
       timing_field<&TimingSettings::min_seconds>(),
       {"--min-seconds", group::kTiming, "S",
        "Minimum timed seconds (default: {gpu} on a GPU, {cpu} on the CPU)",
        "a number >= 0", 0}},
      {"max_seconds",
       Type::kNumber,
       0,
       kNone,
       timing_field<&TimingSettings::max_seconds>(),
       {"--max-seconds", group::kTiming, "S",
        "Past its minimum, the timed window goes on while its noise is above --noise, up to "
        "this many seconds, and stops sooner when its noise projects past them; at or below "
        "--min-seconds it stops at its minimum (default: {gpu} on a GPU, {cpu} on the CPU)",
        "a number >= 0", 0, kNone, "", /*min_exclusive=*/false, /*finite=*/true}},
      {"noise_target",
       Type::kNumber,
       0,
       1,
       timing_field<&TimingSettings::noise_target>(),
       {"--noise", group::kTiming, "PCT",
        "Noise at which the timed window may stop: the 95% interval of the mean step time, +- "
        "this many percent of it (default: {gpu})",
        "a percentage above 0 and at most 100", 0, 100,
        " (0.5 stops once the mean step time is known to +-0.5%)", /*min_exclusive=*/true,
        /*finite=*/false, /*scale=*/100}},
      {"memory_cap_gib",
       Type::kOptionalNumber,
       0.25,
       kNone,
       run_field<&RunSettings::memory_cap_gib>(),
       {"--memory-cap", group::kSearch, "GiB",
        "Cap the caching allocator at this many GiB to emulate a smaller card",
        "a size in GiB of at least 0.25", 0.25}},
      {"job_timeout_s",
       Type::kNumber,
       1,
       kNone,
       run_field<&RunSettings::job_timeout_s>(),
       {"--timeout", group::kTiming, "S",
        "Seconds before a worker process is killed, per phase (default: {default})",
        "seconds >= 1", 1, kNone, "", /*min_exclusive=*/false, /*finite=*/false, /*scale=*/1,
        /*on_resume=*/true}},
      {"repeat",
       Type::kInt,
       1,
       100,
       run_field<&RunSettings::repeat>(),
       {"--repeat", group::kTiming, "N",
        "Timed runs per job, each in a fresh process; from 2 on, the throughput is their "
        "median with a 95% interval (default: {default})",
        "a number of timed runs from 1 to 100", 1, 100,
        " (1 times each job once; 3 gives a median and an interval)"}},
      {"seed", Type::kInt, 0, kNone, run_field<&RunSettings::seed>()},
      {"cudnn_benchmark", Type::kBool, kNone, kNone, run_field<&RunSettings::cudnn_benchmark>()},
      {"cudnn_benchmark_limit", Type::kInt, 0, 10000,
       run_field<&RunSettings::cudnn_benchmark_limit>()},
      {"cudnn_benchmark_empty_cache", Type::kBool, kNone, kNone,
       run_field<&RunSettings::cudnn_benchmark_empty_cache>()},
      {"expandable_segments", Type::kBool, kNone, kNone,
       run_field<&RunSettings::expandable_segments>()},
      {"search_cache",
       Type::kBool,
       kNone,
       kNone,
       run_field<&RunSettings::search_cache>(),
       {"--no-cache", group::kSearch, "",
        "Neither read nor write the local cache of search answers (by default a searched "
        "batch found there for this card, software and config is verified with two probes "
        "instead of searched; the cache is $GPUBENCH_CACHE_DIR, else "
        "$XDG_CACHE_HOME/gpubench, else ~/.cache/gpubench)",
        "", -kNone, kNone, "", /*min_exclusive=*/false, /*finite=*/false, /*scale=*/1,
        /*on_resume=*/true, /*sets=*/false}},
      // Issue 46. Last, so that the run settings' JSON keeps its keys' order before it.
      {"price_per_hour_usd",
       Type::kOptionalNumber,
       0,
       kNone,
       run_field<&RunSettings::price_per_hour_usd>(),
       {"--price-per-hour", group::kOutput, "USD",
        "The price of one of this run's GPUs per hour in USD, say 2.49: each record keeps it, and "
        "the reports give $ per million units and units per $ (default: {default})",
        "a price in USD per hour above 0 (say, 2.49)", 0, kNone,
        " (one card's price; a data-parallel job costs it times its GPUs; 'gpubench report "
        "--price-per-hour GPU=USD' prices records afterwards)",
        /*min_exclusive=*/true, /*finite=*/true, /*scale=*/1, /*on_resume=*/true}},
      // Issue 45: after the price, so that the keys before it keep their order.
      {"prestart_workers",
       Type::kBool,
       kNone,
       kNone,
       run_field<&RunSettings::prestart_workers>(),
       {"--no-prestart", group::kTiming, "",
        "Start each worker process only when its phase comes (by default the next worker is "
        "started while one runs, and waits at a lower priority, off the GPU, until the running "
        "one has exited)",
        "", -kNone, kNone, "", /*min_exclusive=*/false, /*finite=*/false, /*scale=*/1,
        /*on_resume=*/true, /*sets=*/false}},
  };
}

// ---- Reading ----

int64_t int_bound(double bound) {
  if (bound == -kNone) return std::numeric_limits<int64_t>::min();
  if (bound == kNone) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(bound);
}

/// A config value of `setting`, checked, as the JSON its field is set from.
Json read_value(const Setting& setting, const Json& value, const Where& where) {
  switch (setting.type) {
    case Type::kInt:
      return read_int(value, where, int_bound(setting.min), int_bound(setting.max));
    case Type::kNumber:
      return read_number(value, where, setting.min, setting.max);
    case Type::kOptionalNumber: {
      if (value.is_null()) return nullptr;
      const double number = read_number(value, where, setting.min);
      // A minimum its flag excludes is excluded in a config too (a price of 0 divides by 0).
      if (setting.flag.min_exclusive && number <= setting.min) {
        throw_bad_value(where, std::string(setting.flag.expected), value);
      }
      return number;
    }
    case Type::kBool:
      return read_bool(value, where);
    case Type::kPrecision:
      return read_choice(value, where, precision_names());
  }
  return nullptr;
}

/// The keys of a `run:` section: the timing sections where the first timing setting stands.
std::vector<std::string> run_keys() {
  std::vector<std::string> keys;
  bool timing = false;
  for (const Setting& s : table()) {
    if (!s.timing()) {
      keys.emplace_back(s.key);
    } else if (!timing) {
      timing = true;
      keys.insert(keys.end(), {"timing", "cpu_timing"});
    }
  }
  return keys;
}

TimingSettings read_timing(const Json& value, const Where& where, TimingSettings timing) {
  std::vector<std::string> keys;
  for (const Setting& s : table()) {
    if (s.timing()) keys.emplace_back(s.key);
  }
  check_keys(value, where, keys);
  for (const Setting& s : table()) {
    const std::string key(s.key);
    if (s.timing() && value.contains(key)) {
      s.access.set_timing(timing, read_value(s, value[key], where.at(key)));
    }
  }
  return timing;
}

Json timing_json(const TimingSettings& timing) {
  Json out = Json::object();
  for (const Setting& s : table()) {
    if (s.timing()) out[std::string(s.key)] = s.access.get_timing(timing);
  }
  return out;
}

// ---- Flags ----

/// A flag's value as --help and its messages show it, in the flag's unit.
std::string flag_text(const Setting& setting, const Json& value) {
  if (value.is_number_integer()) return fmt::format("{}", value.get<int64_t>());
  if (value.is_number()) return format_number(value.get<double>() * setting.flag.scale);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  return "none";
}

/// A flag's value checked as typed (the message names the flag) and turned into the config's.
Json flag_config_value(const Setting& setting, const Json& given) {
  const Flag& flag = setting.flag;
  if (setting.type == Type::kBool) return flag.sets;  // a flag without a value: given or not
  if (setting.type == Type::kPrecision) {
    return to_string(parse_precision(given.get<std::string>(), std::string(flag.name)));
  }
  const double value = given.get<double>();
  const bool above = flag.min_exclusive ? value > flag.min : value >= flag.min;
  GPUBENCH_CHECK(
      (!flag.finite || std::isfinite(value)) && above && value <= flag.max, ConfigError,
      "{}: expected {}, got '{}'{}", flag.name, flag.expected,
      given.is_number_integer() ? fmt::format("{}", given.get<int64_t>()) : format_number(value),
      flag.hint);
  if (setting.type == Type::kInt) return given;
  return value / flag.scale;
}

}  // namespace

std::string Setting::config_key() const {
  return fmt::format("run.{}{}", timing() ? "timing." : "", key);
}

std::string Setting::help() const {
  const RunSettings defaults;
  const auto text = [this](const Json& value) { return flag_text(*this, value); };
  if (timing()) {
    return fmt::format(fmt::runtime(flag.help),
                       fmt::arg("gpu", text(access.get_timing(defaults.timing))),
                       fmt::arg("cpu", text(access.get_timing(defaults.cpu_timing))));
  }
  return fmt::format(fmt::runtime(flag.help), fmt::arg("default", text(access.get_run(defaults))));
}

const std::vector<Setting>& table() {
  static const std::vector<Setting> rows = make_table();
  return rows;
}

std::vector<const Setting*> flags() {
  std::vector<const Setting*> out;
  for (const Setting& s : table()) {
    if (!s.flag.name.empty()) out.push_back(&s);
  }
  return out;
}

void apply_run_section(RunSettings& run, const Json& value, const Where& where) {
  check_keys(value, where, run_keys());
  bool timing_read = false;
  for (const Setting& s : table()) {
    if (s.timing()) {
      if (timing_read) continue;
      timing_read = true;
      if (value.contains("timing")) {
        run.timing = read_timing(value["timing"], where.at("timing"), run.timing);
      }
      if (value.contains("cpu_timing")) {
        run.cpu_timing = read_timing(value["cpu_timing"], where.at("cpu_timing"), run.cpu_timing);
      }
      continue;
    }
    const std::string key(s.key);
    if (value.contains(key)) s.access.set_run(run, read_value(s, value[key], where.at(key)));
  }
}

Json run_json(const RunSettings& run) {
  Json out = Json::object();
  bool timing_done = false;
  for (const Setting& s : table()) {
    if (!s.timing()) {
      out[std::string(s.key)] = s.access.get_run(run);
    } else if (!timing_done) {
      timing_done = true;
      out["timing"] = timing_json(run.timing);
      out["cpu_timing"] = timing_json(run.cpu_timing);
    }
  }
  return out;
}

Json flag_overlay(const std::map<std::string, Json>& given, bool resume_only) {
  Json run = Json::object();
  Json timing = Json::object();
  for (const Setting* s : flags()) {
    if (resume_only && !s->flag.on_resume) continue;
    const auto found = given.find(std::string(s->flag.name));
    if (found == given.end()) continue;
    (s->timing() ? timing : run)[std::string(s->key)] = flag_config_value(*s, found->second);
  }
  if (!timing.empty()) {
    // A flag means what it says on either device.
    run["timing"] = timing;
    run["cpu_timing"] = timing;
  }
  return run.empty() ? Json::object() : Json{{"run", run}};
}

}  // namespace gpubench::settings
