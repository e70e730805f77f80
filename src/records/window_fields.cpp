// The timed window's record fields: ClocksRecord (JobRecord::clocks) and DataParallelRecord
// (JobRecord::data_parallel) with the parts they hold, to and from the JSON of a record.
#include "gpubench/records/window_fields.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/base/json_fields.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {

namespace {

double number_field(const Json& object, const char* key, const std::string& field) {
  return optional_number(object, key, field).value_or(0.0);
}

int64_t integer_field(const Json& object, const char* key, const std::string& field) {
  return optional_integer(object, key, field).value_or(0);
}

std::string string_field(const Json& object, const char* key, const std::string& field) {
  return optional_string(object, key, field).value_or(std::string());
}

/// The array at `key` of `object`, each item read by `read(item, "FIELD.KEY[i]")`; none where
/// the key is absent.
template <typename T, typename Read>
std::optional<std::vector<T>> optional_list(const Json& object, const char* key,
                                            const std::string& field, Read read) {
  if (!object.contains(key)) return std::nullopt;
  const Json& items = object[key];
  GPUBENCH_CHECK(items.is_array(), ConfigError, "{}.{}: expected a list, got {}", field, key,
                 quote_value(items));
  std::vector<T> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    out.push_back(read(items[i], fmt::format("{}.{}[{}]", field, key, i)));
  }
  return out;
}

/// The lists a window's fields hold; empty (or none) where the key is absent.
std::vector<double> number_list(const Json& object, const char* key, const std::string& field) {
  return optional_list<double>(object, key, field, number_value).value_or(std::vector<double>());
}

std::vector<int64_t> integer_list(const Json& object, const char* key, const std::string& field) {
  return optional_list<int64_t>(object, key, field, integer_value).value_or(std::vector<int64_t>());
}

std::optional<std::vector<std::string>> optional_string_list(const Json& object, const char* key,
                                                             const std::string& field) {
  return optional_list<std::string>(object, key, field, string_value);
}

/// A number, or null for none; a key that must be written either way.
std::optional<double> number_or_null(const Json& object, const char* key,
                                     const std::string& field) {
  if (!object.contains(key) || object[key].is_null()) return std::nullopt;
  GPUBENCH_CHECK(object[key].is_number(), ConfigError, "{}.{}: expected a number or null, got {}",
                 field, key, quote_value(object[key]));
  return object[key].get<double>();
}

Json number_or_null(const std::optional<double>& value) {
  return value ? Json(*value) : Json(nullptr);
}

}  // namespace

// ---- clocks ----

Json ClockRange::to_json() const { return {{"min", min}, {"median", median}, {"max", max}}; }

ClockRange ClockRange::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  ClockRange r;
  r.min = integer_field(json, "min", field);
  r.median = integer_field(json, "median", field);
  r.max = integer_field(json, "max", field);
  return r;
}

Json PowerRange::to_json() const { return {{"mean", mean}, {"max", max}}; }

PowerRange PowerRange::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  PowerRange r;
  r.mean = number_field(json, "mean", field);
  r.max = number_field(json, "max", field);
  return r;
}

Json WindowEnergy::to_json() const {
  Json out = {{"joules", joules},
              {"joules_per_step", joules_per_step},
              {"units_per_joule", units_per_joule}};
  if (mean_power_w) out["mean_power_w"] = *mean_power_w;
  if (counter_seconds) out["counter_seconds"] = *counter_seconds;
  return out;
}

WindowEnergy WindowEnergy::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  WindowEnergy e;
  e.joules = number_field(json, "joules", field);
  e.joules_per_step = number_field(json, "joules_per_step", field);
  e.units_per_joule = number_field(json, "units_per_joule", field);
  e.mean_power_w = optional_number(json, "mean_power_w", field);
  e.counter_seconds = optional_number(json, "counter_seconds", field);
  return e;
}

bool ClocksRecord::empty() const {
  return !samples && !sm_clock_max_mhz && !power_limit_w && !sm_clock_default_mhz &&
         !sm_clock_mhz && !power_w && !temperature_c_max && !throttle_reasons &&
         !throttle_reason_share && !power_capped && !throttled && !throttle_note && !available &&
         !energy;
}

std::optional<double> ClocksRecord::sm_clock_median_mhz() const {
  if (!sm_clock_mhz) return std::nullopt;
  return static_cast<double>(sm_clock_mhz->median);
}

std::optional<double> ClocksRecord::power_mean_w() const {
  if (!power_w) return std::nullopt;
  return power_w->mean;
}

std::optional<double> ClocksRecord::units_per_joule() const {
  if (!energy) return std::nullopt;
  return energy->units_per_joule;
}

Json ClocksRecord::to_json() const {
  Json out = Json::object();
  if (available && available_first) out["available"] = *available;
  if (samples) out["samples"] = *samples;
  if (sm_clock_max_mhz) out["sm_clock_max_mhz"] = *sm_clock_max_mhz;
  if (power_limit_w) out["power_limit_w"] = *power_limit_w;
  if (sm_clock_default_mhz) out["sm_clock_default_mhz"] = *sm_clock_default_mhz;
  if (sm_clock_mhz) out["sm_clock_mhz"] = sm_clock_mhz->to_json();
  if (power_w) out["power_w"] = power_w->to_json();
  if (temperature_c_max) out["temperature_c_max"] = *temperature_c_max;
  if (throttle_reasons) out["throttle_reasons"] = *throttle_reasons;
  if (throttle_reason_share) {
    Json share = Json::object();
    for (const auto& [reason, value] : *throttle_reason_share) share[reason] = value;
    out["throttle_reason_share"] = std::move(share);
  }
  if (power_capped) out["power_capped"] = *power_capped;
  if (throttled) out["throttled"] = *throttled;
  if (throttle_note) out["throttle_note"] = *throttle_note;
  if (available && !available_first) out["available"] = *available;
  if (energy) out["energy"] = energy->to_json();
  return out;
}

ClocksRecord ClocksRecord::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  ClocksRecord c;
  c.available_first = !json.empty() && json.begin().key() == "available";
  c.samples = optional_integer(json, "samples", field);
  c.sm_clock_max_mhz = optional_integer(json, "sm_clock_max_mhz", field);
  c.power_limit_w = optional_number(json, "power_limit_w", field);
  c.sm_clock_default_mhz = optional_integer(json, "sm_clock_default_mhz", field);
  if (json.contains("sm_clock_mhz")) {
    c.sm_clock_mhz = ClockRange::from_json(json["sm_clock_mhz"], field + ".sm_clock_mhz");
  }
  if (json.contains("power_w")) {
    c.power_w = PowerRange::from_json(json["power_w"], field + ".power_w");
  }
  c.temperature_c_max = optional_integer(json, "temperature_c_max", field);
  c.throttle_reasons = optional_string_list(json, "throttle_reasons", field);
  if (json.contains("throttle_reason_share")) {
    const std::string at = field + ".throttle_reason_share";
    const Json& share = json["throttle_reason_share"];
    require_object(share, at);
    c.throttle_reason_share.emplace();
    for (const auto& item : share.items()) {
      c.throttle_reason_share->emplace_back(item.key(),
                                            number_value(item.value(), at + "." + item.key()));
    }
  }
  c.power_capped = optional_bool(json, "power_capped", field);
  c.throttled = optional_bool(json, "throttled", field);
  c.throttle_note = optional_string(json, "throttle_note", field);
  c.available = optional_bool(json, "available", field);
  if (json.contains("energy")) {
    c.energy = WindowEnergy::from_json(json["energy"], field + ".energy");
  }
  return c;
}

// ---- data_parallel ----

Json GradientBuckets::to_json() const {
  return {{"buckets", buckets}, {"bucket_bytes", bucket_bytes}};
}

GradientBuckets GradientBuckets::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  GradientBuckets b;
  b.buckets = integer_field(json, "buckets", field);
  b.bucket_bytes = integer_list(json, "bucket_bytes", field);
  return b;
}

Json GradientSyncRecord::to_json() const {
  Json by_network = Json::object();
  for (const auto& [network, buckets] : networks) by_network[network] = buckets.to_json();
  Json out = {{"name", name},
              {"bucket_cap_bytes", bucket_cap_bytes},
              {"networks", std::move(by_network)},
              {"updates", updates},
              {"allreduces_started_in_backward", allreduces_started_in_backward},
              {"allreduces_started_at_update", allreduces_started_at_update},
              {"allreduces_repeated", allreduces_repeated}};
  if (gradients_from_other_backward) {
    out["gradients_from_other_backward"] = *gradients_from_other_backward;
  }
  return out;
}

GradientSyncRecord GradientSyncRecord::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  GradientSyncRecord s;
  s.name = string_field(json, "name", field);
  s.bucket_cap_bytes = integer_field(json, "bucket_cap_bytes", field);
  if (json.contains("networks")) {
    const std::string at = field + ".networks";
    require_object(json["networks"], at);
    for (const auto& item : json["networks"].items()) {
      s.networks.emplace_back(item.key(),
                              GradientBuckets::from_json(item.value(), at + "." + item.key()));
    }
  }
  s.updates = integer_field(json, "updates", field);
  s.allreduces_started_in_backward = integer_field(json, "allreduces_started_in_backward", field);
  s.allreduces_started_at_update = integer_field(json, "allreduces_started_at_update", field);
  s.allreduces_repeated = integer_field(json, "allreduces_repeated", field);
  s.gradients_from_other_backward = optional_integer(json, "gradients_from_other_backward", field);
  return s;
}

Json RankResult::to_json() const {
  Json out = {{"rank", rank},
              {"device", device},
              {"status", to_string(status)},
              {"message", message},
              {"throughput", throughput},
              {"units_per_step", units_per_step},
              {"steps", steps},
              {"step_time_ms_median", step_time_ms_median},
              {"step_time_ms_mean", step_time_ms_mean},
              {"step_time_ms", step_time_ms}};
  if (device_index) out["device_index"] = *device_index;
  return out;
}

RankResult RankResult::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  RankResult r;
  r.rank = integer_field(json, "rank", field);
  r.device = string_field(json, "device", field);
  r.status = require_job_status(string_field(json, "status", field), field + ".status");
  r.message = string_field(json, "message", field);
  r.throughput = number_field(json, "throughput", field);
  r.units_per_step = number_field(json, "units_per_step", field);
  r.steps = integer_field(json, "steps", field);
  r.step_time_ms_median = number_field(json, "step_time_ms_median", field);
  r.step_time_ms_mean = number_field(json, "step_time_ms_mean", field);
  r.step_time_ms = number_list(json, "step_time_ms", field);
  r.device_index = optional_string(json, "device_index", field);
  return r;
}

Json DataParallelRecord::to_json() const {
  Json rank_results = Json::array();
  for (const RankResult& r : ranks) rank_results.push_back(r.to_json());
  Json out = {{"world_size", world_size},
              {"backend", backend},
              {"interconnect", interconnect},
              {"devices", devices},
              {"per_rank_batch", per_rank_batch},
              {"global_batch", global_batch},
              {"scaling", scaling},
              {"ranks", std::move(rank_results)},
              {"rank_throughput", rank_throughput},
              {"step_time_spread_pct", step_time_spread_pct},
              {"gradient_sync", gradient_sync.to_json()},
              {"single_gpu_throughput", number_or_null(single_gpu_throughput)},
              {"scaling_efficiency", number_or_null(scaling_efficiency)}};
  if (throughput_per_gpu) out["throughput_per_gpu"] = *throughput_per_gpu;
  return out;
}

DataParallelRecord DataParallelRecord::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  DataParallelRecord d;
  // The reports divide by it and price each rank's card: a world size of 0, a negative one or
  // one past int is no run that happened.
  if (const std::optional<int64_t> n = optional_integer(json, "world_size", field)) {
    GPUBENCH_CHECK(*n >= 1 && *n <= std::numeric_limits<int>::max(), ConfigError,
                   "{}.world_size: expected a number of ranks from 1, got {}", field, *n);
    d.world_size = *n;
  }
  d.backend = string_field(json, "backend", field);
  d.interconnect = string_field(json, "interconnect", field);
  d.devices = optional_string_list(json, "devices", field).value_or(std::vector<std::string>());
  d.per_rank_batch = integer_field(json, "per_rank_batch", field);
  d.global_batch = integer_field(json, "global_batch", field);
  d.scaling = string_field(json, "scaling", field);
  d.ranks = optional_list<RankResult>(json, "ranks", field, RankResult::from_json)
                .value_or(std::vector<RankResult>());
  d.rank_throughput = number_field(json, "rank_throughput", field);
  d.step_time_spread_pct = number_field(json, "step_time_spread_pct", field);
  if (json.contains("gradient_sync")) {
    d.gradient_sync =
        GradientSyncRecord::from_json(json["gradient_sync"], field + ".gradient_sync");
  }
  d.single_gpu_throughput = number_or_null(json, "single_gpu_throughput", field);
  d.scaling_efficiency = number_or_null(json, "scaling_efficiency", field);
  d.throughput_per_gpu = optional_number(json, "throughput_per_gpu", field);
  return d;
}

}  // namespace gpubench
