#include "gpubench/records/result.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/base/json_fields.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {

namespace {
JobRecord job_record_from_json(const Json& j);
ResultDocument result_document_from_json(const Json& j, const std::string& file);

double number_field(const Json& object, const char* key, const std::string& field) {
  return optional_number(object, key, field).value_or(0.0);
}

int64_t integer_field(const Json& object, const char* key, const std::string& field) {
  return optional_integer(object, key, field).value_or(0);
}
}  // namespace

std::vector<std::string> JobRecord::modifications() const {
  std::vector<std::string> out;
  if (config.is_object() && config.value("modified", false)) out.push_back("config");
  if (environment.is_object() && environment.contains("modified_by") &&
      environment["modified_by"].is_array()) {
    for (const Json& name : environment["modified_by"]) {
      if (name.is_string()) out.push_back(name.get<std::string>());
    }
  }
  return out;
}

Json TimedAttempt::to_json() const {
  Json out = {{"batch", batch}, {"status", to_string(status)}, {"message", message}};
  if (seconds) out["seconds"] = *seconds;
  if (phase) out["phase"] = to_string(*phase);
  return out;
}

TimedAttempt TimedAttempt::from_json(const Json& json, const std::string& field) {
  GPUBENCH_CHECK(json.is_object(), ConfigError, "{}: expected an object, got {}", field,
                 json.type_name());
  TimedAttempt a;
  a.batch = json.value("batch", int64_t{0});
  a.status = require_job_status(json.value("status", std::string()), field + ".status");
  a.message = json.value("message", std::string());
  if (json.contains("seconds") && json["seconds"].is_number()) {
    a.seconds = json["seconds"].get<double>();
  }
  if (json.contains("phase")) {
    a.phase = require_attempt_phase(json["phase"].get<std::string>(), field + ".phase");
  }
  return a;
}

Json WarmupRecord::to_json() const {
  Json out = {{"steps", steps}, {"reason", to_string(reason)}};
  if (detail) out["detail"] = *detail;
  if (seconds) out["seconds"] = *seconds;
  if (autotune_steps) out["autotune_steps"] = *autotune_steps;
  out["step_time_ms"] = step_time_ms;
  if (every_shape) out["every_shape"] = *every_shape;
  if (host_bound) out["host_bound"] = *host_bound;
  return out;
}

WarmupRecord WarmupRecord::from_json(const Json& json, const std::string& field) {
  GPUBENCH_CHECK(json.is_object(), ConfigError, "{}: expected an object, got {}", field,
                 json.type_name());
  WarmupRecord w;
  w.steps = json.value("steps", int64_t{0});
  w.reason = require_warmup_end(json.value("reason", std::string()), field + ".reason");
  if (json.contains("detail")) w.detail = json["detail"].get<std::string>();
  if (json.contains("seconds")) w.seconds = json["seconds"].get<double>();
  if (json.contains("autotune_steps")) w.autotune_steps = json["autotune_steps"].get<int64_t>();
  if (json.contains("step_time_ms")) {
    w.step_time_ms = json["step_time_ms"].get<std::vector<double>>();
  }
  if (json.contains("every_shape")) w.every_shape = json["every_shape"].get<bool>();
  if (json.contains("host_bound")) w.host_bound = json["host_bound"];
  return w;
}

Json RepeatRun::to_json() const {
  Json out = {{"throughput", throughput},
              {"step_time_ms_median", step_time_ms_median},
              {"steps", steps},
              {"window_seconds", window_seconds},
              {"status", to_string(status)},
              {"message", message},
              {"seconds", seconds}};
  if (power_w_mean) out["power_w_mean"] = *power_w_mean;
  if (sm_clock_mhz_median) out["sm_clock_mhz_median"] = *sm_clock_mhz_median;
  if (units_per_joule) out["units_per_joule"] = *units_per_joule;
  if (throttled) out["throttled"] = *throttled;
  return out;
}

RepeatRun RepeatRun::from_json(const Json& json, const std::string& field) {
  GPUBENCH_CHECK(json.is_object(), ConfigError, "{}: expected an object, got {}", field,
                 json.type_name());
  RepeatRun r;
  r.throughput = json.value("throughput", 0.0);
  r.step_time_ms_median = json.value("step_time_ms_median", 0.0);
  r.steps = json.value("steps", int64_t{0});
  r.window_seconds = json.value("window_seconds", 0.0);
  r.status = require_job_status(json.value("status", std::string()), field + ".status");
  r.message = json.value("message", std::string());
  r.seconds = json.value("seconds", 0.0);
  if (json.contains("power_w_mean")) r.power_w_mean = json["power_w_mean"].get<double>();
  if (json.contains("sm_clock_mhz_median")) {
    r.sm_clock_mhz_median = json["sm_clock_mhz_median"].get<int64_t>();
  }
  if (json.contains("units_per_joule")) r.units_per_joule = json["units_per_joule"].get<double>();
  if (json.contains("throttled")) r.throttled = json["throttled"].get<bool>();
  return r;
}

Json MedianRange::to_json() const { return {{"median", median}, {"min", min}, {"max", max}}; }

MedianRange MedianRange::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  MedianRange m;
  m.median = number_field(json, "median", field);
  m.min = number_field(json, "min", field);
  m.max = number_field(json, "max", field);
  return m;
}

namespace {
/// The measurements of a RepeatSummary, in the order they are written.
constexpr std::pair<const char*, std::optional<MedianRange> RepeatSummary::*> kRepeatMeasures[] = {
    {"step_time_ms_median", &RepeatSummary::step_time_ms_median},
    {"power_w_mean", &RepeatSummary::power_w_mean},
    {"sm_clock_mhz_median", &RepeatSummary::sm_clock_mhz_median},
    {"units_per_joule", &RepeatSummary::units_per_joule}};
}  // namespace

Json RepeatSummary::to_json() const {
  Json out = {{"runs", runs}, {"throttled_runs", throttled_runs}};
  for (const auto& [key, member] : kRepeatMeasures) {
    if (this->*member) out[key] = (this->*member)->to_json();
  }
  return out;
}

RepeatSummary RepeatSummary::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  RepeatSummary s;
  s.runs = integer_field(json, "runs", field);
  s.throttled_runs = integer_field(json, "throttled_runs", field);
  for (const auto& [key, member] : kRepeatMeasures) {
    if (json.contains(key)) s.*member = MedianRange::from_json(json[key], field + "." + key);
  }
  return s;
}

Json AllocatorCounters::to_json() const {
  return {{"alloc_retries", alloc_retries},
          {"ooms", ooms},
          {"device_allocations", device_allocations},
          {"device_frees", device_frees}};
}

AllocatorCounters AllocatorCounters::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  AllocatorCounters c;
  c.alloc_retries = integer_field(json, "alloc_retries", field);
  c.ooms = integer_field(json, "ooms", field);
  c.device_allocations = integer_field(json, "device_allocations", field);
  c.device_frees = integer_field(json, "device_frees", field);
  return c;
}

Json MemoryCap::to_json() const {
  Json out = {{"cap_bytes", cap_bytes},
              {"outside_allocator_bytes", outside_allocator_bytes},
              {"allocator_cap_bytes", allocator_cap_bytes}};
  if (nvml_process_bytes) out["nvml_process_bytes"] = *nvml_process_bytes;
  return out;
}

MemoryCap MemoryCap::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  MemoryCap c;
  c.cap_bytes = integer_field(json, "cap_bytes", field);
  c.outside_allocator_bytes = integer_field(json, "outside_allocator_bytes", field);
  c.allocator_cap_bytes = integer_field(json, "allocator_cap_bytes", field);
  c.nvml_process_bytes = optional_integer(json, "nvml_process_bytes", field);
  return c;
}

Json MemoryRecord::to_json() const {
  Json out = Json::object();
  if (autotune_peak_allocated_bytes) {
    out["autotune_peak_allocated_bytes"] = *autotune_peak_allocated_bytes;
  }
  if (autotune_peak_reserved_bytes) {
    out["autotune_peak_reserved_bytes"] = *autotune_peak_reserved_bytes;
  }
  if (cudnn) out["cudnn"] = *cudnn;
  if (allocator) out["allocator"] = *allocator;
  if (allocator_counters_warmup) {
    out["allocator_counters_warmup"] = allocator_counters_warmup->to_json();
  }
  if (resident_bytes) out["resident_bytes"] = *resident_bytes;
  if (window_peak_allocated_bytes) {
    out["window_peak_allocated_bytes"] = *window_peak_allocated_bytes;
  }
  if (window_peak_reserved_bytes) out["window_peak_reserved_bytes"] = *window_peak_reserved_bytes;
  if (outside_allocator_bytes) out["outside_allocator_bytes"] = *outside_allocator_bytes;
  if (allocator_counters_window) {
    out["allocator_counters_window"] = allocator_counters_window->to_json();
  }
  if (confirm_steps) out["confirm_steps"] = *confirm_steps;
  if (cap) out["cap"] = cap->to_json();
  return out;
}

MemoryRecord MemoryRecord::from_json(const Json& json, const std::string& field) {
  require_object(json, field);
  const auto object_at = [&](const char* key) -> std::optional<Json> {
    if (!json.contains(key)) return std::nullopt;
    require_object(json[key], field + "." + key);
    return json[key];
  };
  const auto counters_at = [&](const char* key) -> std::optional<AllocatorCounters> {
    if (!json.contains(key)) return std::nullopt;
    return AllocatorCounters::from_json(json[key], field + "." + key);
  };
  MemoryRecord m;
  m.autotune_peak_allocated_bytes = optional_integer(json, "autotune_peak_allocated_bytes", field);
  m.autotune_peak_reserved_bytes = optional_integer(json, "autotune_peak_reserved_bytes", field);
  m.cudnn = object_at("cudnn");
  m.allocator = object_at("allocator");
  m.allocator_counters_warmup = counters_at("allocator_counters_warmup");
  m.resident_bytes = optional_integer(json, "resident_bytes", field);
  m.window_peak_allocated_bytes = optional_integer(json, "window_peak_allocated_bytes", field);
  m.window_peak_reserved_bytes = optional_integer(json, "window_peak_reserved_bytes", field);
  m.outside_allocator_bytes = optional_integer(json, "outside_allocator_bytes", field);
  m.allocator_counters_window = counters_at("allocator_counters_window");
  m.confirm_steps = optional_integer(json, "confirm_steps", field);
  if (json.contains("cap")) m.cap = MemoryCap::from_json(json["cap"], field + ".cap");
  return m;
}

Json JobRecord::to_json() const {
  Json params = Json::object();
  for (const auto& [network, count] : trainable_params) params[network] = count;
  Json attempts = Json::array();
  for (const TimedAttempt& attempt : confirm) attempts.push_back(attempt.to_json());
  Json out = {{"model", model},
              {"family", family},
              {"precision", precision},
              {"batch_unit", batch_unit},
              {"throughput_unit", throughput_unit},
              {"device", device.to_json()},
              {"status", to_string(status)},
              {"message", message},
              {"emulated", emulated},
              {"search_only", search_only},
              {"memory_cap_gib", memory_cap_gib ? Json(*memory_cap_gib) : Json(nullptr)},
              {"batch", batch},
              {"batch_source", batch_source},
              {"batch_info", batch_info},
              {"search", search ? search->to_json() : Json(nullptr)},
              {"confirm", attempts},
              {"warmup", warmup ? warmup->to_json() : Json::object()},
              {"timing", timing.to_json()},
              {"step_time_ms", step_time_ms},
              {"units_per_step", units_per_step},
              {"throughput", throughput},
              {"peak_memory_bytes", peak_memory_bytes},
              {"peak_allocated_bytes", peak_allocated_bytes},
              {"memory", memory.to_json()},
              {"trainable_params", params},
              {"losses_start", losses_start},
              {"losses", losses},
              {"clocks", clocks.to_json()}};
  if (normalized) {
    out["normalized"] = {{"reference_row", normalized->reference_row},
                         {"baseline_gpu", normalized->baseline_gpu},
                         {"baseline_throughput", normalized->baseline_throughput},
                         {"baseline_max_batch", normalized->baseline_max_batch},
                         {"score", normalized->score}};
  } else {
    out["normalized"] = nullptr;
  }
  if (status == JobStatus::diverged) out["diverged_throughput"] = diverged_throughput;
  // Repeats (run.repeat >= 2) only: records of one timed run read and write as before.
  if (!repeats.empty()) {
    Json runs = Json::array();
    for (const RepeatRun& run : repeats) runs.push_back(run.to_json());
    out["repeats"] = std::move(runs);
  }
  if (throughput_stats) out["throughput_stats"] = throughput_stats->to_json();
  if (repeat_summary) out["repeat_summary"] = repeat_summary->to_json();
  out["config"] = config;
  out["environment"] = environment;
  out["wall_seconds"] = wall_seconds;
  out["created_utc"] = created_utc;
  // How the step ran (launch, precision, optimizer kernels): written by timed runs only, so
  // records without one read and write as before.
  if (!runtime.empty()) out["runtime"] = runtime;
  // Timed runs that know their FLOPs or peak.
  if (!compute.empty()) out["compute"] = compute.to_json();
  if (data_parallel) out["data_parallel"] = data_parallel->to_json();  // issue 15
  if (cost) out["cost"] = {{"usd_per_hour", cost->usd_per_hour}, {"source", cost->source}};
  return out;
}

JobRecord JobRecord::from_json(const Json& j) {
  // A record is read from files anyone can edit: a value of the wrong type is bad input (exit
  // 2, with the reason), never an escaped nlohmann exception.
  GPUBENCH_CHECK(j.is_object(), ConfigError, "not a job record (expected a JSON object, got {})",
                 j.type_name());
  // Integer fields read through nlohmann's get<int64_t>, which casts a float: 1e30 or 1e400
  // (infinity) would overflow the cast (undefined behaviour). No benchmark value is that large.
  std::vector<const Json*> todo = {&j};
  while (!todo.empty()) {
    const Json* node = todo.back();
    todo.pop_back();
    if (node->is_structured()) {
      for (const auto& child : *node) todo.push_back(&child);
    } else if (node->is_number_float()) {
      const double v = node->get<double>();
      GPUBENCH_CHECK(std::isfinite(v) && std::fabs(v) < 9.2e18, ConfigError,
                     "not a job record: the number {} is out of range", dump_json(*node));
    }
  }
  try {
    return job_record_from_json(j);
  } catch (const Json::exception& e) {
    throw ConfigError(fmt::format("not a job record: {}", e.what()));
  }
}

namespace {
JobRecord job_record_from_json(const Json& j) {
  JobRecord r;
  r.model = j.value("model", std::string());
  r.family = j.value("family", std::string());
  r.precision = j.value("precision", std::string());
  r.batch_unit = j.value("batch_unit", std::string());
  r.throughput_unit = j.value("throughput_unit", std::string());
  if (j.contains("device")) r.device = DeviceInfo::from_json(j["device"]);
  // A status outside the list (a hand edit, a newer gpubench) is refused, naming it: read as
  // another, it would count a job as done or redo one that is.
  r.status = require_job_status(j.value("status", std::string("ok")), "status");
  r.message = j.value("message", std::string());
  r.emulated = j.value("emulated", false);
  r.search_only = j.value("search_only", false);
  if (j.contains("memory_cap_gib") && j["memory_cap_gib"].is_number()) {
    r.memory_cap_gib = j["memory_cap_gib"].get<double>();
  }
  r.batch = j.value("batch", int64_t{0});
  r.batch_source = j.value("batch_source", std::string());
  r.batch_info = j.value("batch_info", Json::object());
  r.runtime = j.value("runtime", Json::object());
  // None on one device: no key, or (hand-written) {} or null.
  if (const Json dp = j.value("data_parallel", Json::object());
      !dp.is_null() && !(dp.is_object() && dp.empty())) {
    r.data_parallel = DataParallelRecord::from_json(dp, "data_parallel");
  }
  if (j.contains("search") && j["search"].is_object())
    r.search = SearchRecord::from_json(j["search"]);
  const Json attempts = j.value("confirm", Json::array());
  GPUBENCH_CHECK(attempts.is_array(), ConfigError, "confirm: expected an array, got {}",
                 attempts.type_name());
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    r.confirm.push_back(TimedAttempt::from_json(attempts[i], fmt::format("confirm[{}]", i)));
  }
  // {} where no warm-up ran (a search-only or failed job).
  if (const Json warmup = j.value("warmup", Json::object()); !warmup.empty()) {
    r.warmup = WarmupRecord::from_json(warmup, "warmup");
  }
  if (j.contains("timing")) r.timing = TimingStats::from_json(j["timing"]);
  if (j.contains("step_time_ms")) r.step_time_ms = j["step_time_ms"].get<std::vector<double>>();
  r.units_per_step = j.value("units_per_step", 0.0);
  r.throughput = j.value("throughput", 0.0);
  r.peak_memory_bytes = j.value("peak_memory_bytes", int64_t{0});
  r.peak_allocated_bytes = j.value("peak_allocated_bytes", int64_t{0});
  // {} where nothing was measured (a failed job), absent in the oldest records.
  if (const Json memory = j.value("memory", Json::object()); !memory.is_null()) {
    r.memory = MemoryRecord::from_json(memory, "memory");
  }
  const Json params = j.value("trainable_params", Json::object());
  for (const auto& item : params.items())
    r.trainable_params[item.key()] = item.value().get<int64_t>();
  r.losses_start = j.value("losses_start", Json::object());
  r.losses = j.value("losses", Json::object());
  r.diverged_throughput = j.value("diverged_throughput", 0.0);
  const Json repeats = j.value("repeats", Json::array());
  GPUBENCH_CHECK(repeats.is_array(), ConfigError, "repeats: expected an array, got {}",
                 repeats.type_name());
  for (std::size_t i = 0; i < repeats.size(); ++i) {
    r.repeats.push_back(RepeatRun::from_json(repeats[i], fmt::format("repeats[{}]", i)));
  }
  // None where one timed run ran (no key; {} reads the same).
  if (const Json summary = j.value("repeat_summary", Json::object()); !summary.empty()) {
    r.repeat_summary = RepeatSummary::from_json(summary, "repeat_summary");
  }
  if (j.contains("throughput_stats") && j["throughput_stats"].is_object()) {
    r.throughput_stats = SampleStats::from_json(j["throughput_stats"]);
  }
  // {} where nothing was sampled (a search-only or failed job); null reads the same.
  if (const Json clocks = j.value("clocks", Json::object()); !clocks.is_null()) {
    r.clocks = ClocksRecord::from_json(clocks, "clocks");
  }
  // Absent where nothing was known (a search-only, failed or CPU job, the oldest records).
  if (const Json compute = j.value("compute", Json::object()); !compute.is_null()) {
    r.compute = ComputeRecord::from_json(compute, "compute");
  }
  if (j.contains("normalized") && j["normalized"].is_object()) {
    const Json& n = j["normalized"];
    NormalizedScore s;
    s.reference_row = n.value("reference_row", std::string());
    s.baseline_gpu = n.value("baseline_gpu", std::string());
    s.baseline_throughput = n.value("baseline_throughput", 0.0);
    s.baseline_max_batch = n.value("baseline_max_batch", 0.0);
    s.score = n.value("score", 0.0);
    r.normalized = s;
  }
  if (j.contains("cost") && j["cost"].is_object()) {  // issue 46: a price per hour was given
    JobCost cost;
    cost.usd_per_hour = j["cost"].value("usd_per_hour", 0.0);
    cost.source = j["cost"].value("source", std::string());
    r.cost = cost;
  }
  r.config = j.value("config", Json::object());
  r.environment = j.value("environment", Json::object());
  r.wall_seconds = j.value("wall_seconds", 0.0);
  r.created_utc = j.value("created_utc", std::string());
  return r;
}
}  // namespace

Json ResultDocument::to_json() const {
  Json jobs_json = Json::array();
  for (const auto& job : jobs) jobs_json.push_back(job.to_json());
  return {{"schema", "gpubench-result"},
          {"schema_version", kResultSchemaVersion},
          {"created_utc", created_utc},
          {"command_line", command_line},
          {"run_settings", run_settings},
          {"environment", environment},
          {"jobs", jobs_json}};
}

ResultDocument ResultDocument::from_json(const Json& j, const std::string& file) {
  try {
    return result_document_from_json(j, file);
  } catch (const Json::exception& e) {
    throw ConfigError(fmt::format("{}: not a gpubench result file: {}", file, e.what()));
  }
}

namespace {
ResultDocument result_document_from_json(const Json& j, const std::string& file) {
  GPUBENCH_CHECK(j.is_object() && j.value("schema", std::string()) == "gpubench-result",
                 ConfigError, "{}: not a gpubench result file (no \"schema\": \"gpubench-result\")",
                 file);
  // Read as JSON, not as an int: a version of 1e30 must be refused, not overflow a cast.
  const Json& version_json = j.contains("schema_version") ? j["schema_version"] : Json(0);
  const std::string version =
      version_json.is_number_integer() ? version_json.dump() : quote_value(version_json);
  const bool supported =
      version_json.is_number_integer() && version_json.get<int64_t>() == kResultSchemaVersion;
  GPUBENCH_CHECK(supported, ConfigError,
                 "{}: result schema version {} is not supported by this gpubench (it reads "
                 "version {}); use the gpubench that wrote it",
                 file, version, kResultSchemaVersion);
  ResultDocument d;
  d.created_utc = j.value("created_utc", std::string());
  d.command_line = j.value("command_line", std::vector<std::string>());
  d.run_settings = j.value("run_settings", Json::object());
  d.environment = j.value("environment", Json::object());
  const Json jobs = j.value("jobs", Json::array());
  GPUBENCH_CHECK(jobs.is_array(), ConfigError, "{}: \"jobs\" is not a list", file);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    try {
      d.jobs.push_back(JobRecord::from_json(jobs[i]));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: jobs[{}]: {}", file, i, e.what()));
    }
  }
  return d;
}
}  // namespace

}  // namespace gpubench
