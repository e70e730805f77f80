// The search's records as data: each probe, the hint a later search starts from, and the whole
// search, to and from the JSON of job records and journals. The search itself is
// batch_search.cpp.
#include "gpubench/measure/batch_search.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json_int.h"
#include "gpubench/base/strings.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace gpubench {

Json ProbeRecord::to_json() const {
  Json j = {{"batch", batch},
            {"fits", fits},
            {"peak_bytes", peak_bytes},
            {"peak_allocated_bytes", peak_allocated_bytes},
            {"resident_bytes", resident_bytes},
            {"seconds", seconds},
            {"prepare_seconds", prepare_seconds},
            {"steps_seconds", steps_seconds},
            {"phase", phase},
            {"error", error}};
  if (steps) j["steps"] = steps;
  if (!allocator.is_null()) j["allocator"] = allocator;
  if (sticky) j["sticky"] = true;
  if (worker) j["worker"] = worker;
  return j;
}

ProbeRecord ProbeRecord::from_json(const Json& p) {
  ProbeRecord probe;
  probe.batch = p.value("batch", int64_t{0});
  probe.fits = p.value("fits", false);
  probe.peak_bytes = p.value("peak_bytes", int64_t{0});
  probe.peak_allocated_bytes = p.value("peak_allocated_bytes", int64_t{0});
  probe.resident_bytes = p.value("resident_bytes", int64_t{0});
  probe.seconds = p.value("seconds", 0.0);
  probe.prepare_seconds = p.value("prepare_seconds", 0.0);
  probe.steps_seconds = p.value("steps_seconds", 0.0);
  probe.steps = value_int(p, "steps", 0);
  if (p.contains("allocator")) probe.allocator = p["allocator"];
  probe.phase = p.value("phase", std::string());
  probe.error = p.value("error", std::string());
  probe.sticky = p.value("sticky", false);
  probe.worker = value_int(p, "worker", 0);
  return probe;
}

Json SearchHint::to_json() const {
  return {{"fixed_bytes", fixed_bytes},
          {"bytes_per_sample", bytes_per_sample},
          {"capacity_bytes", capacity_bytes},
          {"max_batch", max_batch},
          {"peak_bytes_at_max", peak_bytes_at_max},
          {"resident_bytes", resident_bytes}};
}

SearchHint SearchHint::from_searches(const SearchRecord& line, const SearchRecord& answer) {
  SearchHint hint;
  hint.fixed_bytes = std::max(0.0, line.fixed_bytes - static_cast<double>(line.headroom_bytes));
  hint.bytes_per_sample = line.bytes_per_sample;
  hint.capacity_bytes = answer.capacity_bytes;
  hint.max_batch = answer.max_batch;
  const auto less_ballast = [&](int64_t bytes) {
    return bytes > 0 ? std::max<int64_t>(0, bytes - answer.headroom_bytes) : bytes;
  };
  hint.peak_bytes_at_max = less_ballast(answer.peak_bytes_at_max);
  hint.resident_bytes = less_ballast(answer.resident_bytes_at_max);
  return hint;
}

std::optional<SearchHint> SearchHint::from_json(const Json& json) {
  if (!json.is_object()) return std::nullopt;
  SearchHint hint;
  hint.fixed_bytes = json.value("fixed_bytes", 0.0);
  hint.bytes_per_sample = json.value("bytes_per_sample", 0.0);
  hint.capacity_bytes = json.value("capacity_bytes", int64_t{0});
  hint.max_batch = json.value("max_batch", int64_t{0});
  hint.peak_bytes_at_max = json.value("peak_bytes_at_max", int64_t{0});
  hint.resident_bytes = json.value("resident_bytes", int64_t{0});
  return hint;
}

Json SearchRecord::to_json() const {
  Json probes_json = Json::array();
  for (const auto& p : probes) probes_json.push_back(p.to_json());
  Json j = {{"max_batch", max_batch},
            {"largest_pow2_batch", largest_pow2},
            {"peak_bytes_at_max", peak_bytes_at_max},
            {"peak_allocated_bytes_at_max", peak_allocated_bytes_at_max},
            {"resident_bytes_at_max", resident_bytes_at_max},
            {"activation_peak_bytes", activation_peak_bytes},
            {"bytes_per_sample", bytes_per_sample},
            {"fixed_bytes", fixed_bytes},
            {"memory_line", memory_line},
            {"capacity_bytes", capacity_bytes},
            {"smallest_failure", smallest_failure},
            {"probe_count", probes.size()},
            {"stop_reason", stop_reason},
            {"converged", converged},
            {"hinted", hinted},
            {"hint_note", hint_note},
            {"interrupted", interrupted},
            {"cudnn_benchmark", cudnn_benchmark},
            {"headroom_bytes", headroom_bytes},
            {"probe_overrides", probe_overrides},
            {"workers", workers},
            {"seconds", seconds},
            {"probes", probes_json}};
  // Each only when it has something to say, so a searched record reads as it did before them.
  if (source != "search") j["source"] = source;
  if (!cache.is_null()) j["cache"] = cache;
  return j;
}

SearchRecord SearchRecord::from_json(const Json& json) {
  SearchRecord r;
  r.max_batch = json.value("max_batch", int64_t{0});
  r.largest_pow2 = json.value("largest_pow2_batch", int64_t{0});
  r.peak_bytes_at_max = json.value("peak_bytes_at_max", int64_t{0});
  r.peak_allocated_bytes_at_max = json.value("peak_allocated_bytes_at_max", int64_t{0});
  r.resident_bytes_at_max = json.value("resident_bytes_at_max", int64_t{0});
  r.activation_peak_bytes = json.value("activation_peak_bytes", int64_t{0});
  r.bytes_per_sample = json.value("bytes_per_sample", 0.0);
  r.fixed_bytes = json.value("fixed_bytes", 0.0);
  r.memory_line = json.value("memory_line", std::string("reserved"));
  r.capacity_bytes = json.value("capacity_bytes", int64_t{0});
  r.smallest_failure = json.value("smallest_failure", int64_t{0});
  r.stop_reason = json.value("stop_reason", std::string());
  // Records from before this field: a search stopped for anything but its budget converged.
  r.converged = json.value("converged", r.stop_reason.rfind("probe budget", 0) != 0);
  r.hinted = json.value("hinted", false);
  r.hint_note = json.value("hint_note", std::string());
  r.interrupted = json.value("interrupted", false);
  r.cudnn_benchmark = json.value("cudnn_benchmark", false);
  r.headroom_bytes = json.value("headroom_bytes", int64_t{0});
  r.probe_overrides = json.value("probe_overrides", Json::object());
  r.workers = value_int(json, "workers", 1);
  r.seconds = json.value("seconds", 0.0);
  for (const auto& p : json.value("probes", Json::array())) {
    r.probes.push_back(ProbeRecord::from_json(p));
  }
  r.source = json.value("source", std::string("search"));
  if (json.contains("cache")) r.cache = json["cache"];
  return r;
}

}  // namespace gpubench
