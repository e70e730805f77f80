// The search's records as data: each probe, the hint a later search starts from, why the search
// stopped, and the whole search, to and from the JSON of job records and journals. The search
// itself is batch_search.cpp.
#include "gpubench/measure/batch_search.h"
#include "gpubench/measure/search_stop.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json_int.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpubench {

// ---- Stop reasons (measure/search_stop.h): the only place their sentences are spelled ----

namespace {

constexpr std::string_view kBracketClosed = "bracket closed";
constexpr std::string_view kMaxBatchLimit = "limited by search.max_batch=";
constexpr std::string_view kMinBatchNoFit = "does not fit at search.min_batch=";
constexpr std::string_view kMinBatchNoFitOld = "min_batch does not fit";  // older records
constexpr std::string_view kProbeBudget = "probe budget spent";
constexpr std::string_view kProbeAt = "the probe at batch ";
constexpr std::string_view kLeftUnusable = " left its worker unusable";
constexpr std::string_view kFailedTwice = " failed in two workers";
constexpr std::string_view kCacheVerified = "cached answer verified: ";

/// Each kind's form, in the enum's order.
constexpr std::array<std::pair<SearchStop, const char*>, 8> kStopForms = {{
    {SearchStop::none, ""},
    {SearchStop::bracket_closed, "bracket closed"},
    {SearchStop::max_batch_limit, "limited by search.max_batch=N"},
    {SearchStop::min_batch_no_fit, "does not fit at search.min_batch=N"},
    {SearchStop::probe_budget, "probe budget spent (search.max_probes=N)"},
    {SearchStop::probe_unusable, "the probe at batch N left its worker unusable: ERROR"},
    {SearchStop::probe_failed, "the probe at batch N failed in two workers: ERROR"},
    {SearchStop::cache_verified, "cached answer verified: batch N fits and M does not"},
}};

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

SearchStopReason make_stop(SearchStop kind, std::string text) { return {kind, std::move(text)}; }

}  // namespace

SearchStopReason SearchStopReason::bracket_closed() {
  return make_stop(SearchStop::bracket_closed, std::string(kBracketClosed));
}
SearchStopReason SearchStopReason::max_batch_limit(int64_t max_batch) {
  return make_stop(SearchStop::max_batch_limit, fmt::format("{}{}", kMaxBatchLimit, max_batch));
}
SearchStopReason SearchStopReason::min_batch_no_fit(int64_t min_batch) {
  return make_stop(SearchStop::min_batch_no_fit, fmt::format("{}{}", kMinBatchNoFit, min_batch));
}
SearchStopReason SearchStopReason::probe_budget(int max_probes) {
  return make_stop(SearchStop::probe_budget,
              fmt::format("{} (search.max_probes={})", kProbeBudget, max_probes));
}
SearchStopReason SearchStopReason::probe_unusable(int64_t batch, std::string_view error) {
  return make_stop(SearchStop::probe_unusable,
              fmt::format("{}{}{}: {}", kProbeAt, batch, kLeftUnusable, error));
}
SearchStopReason SearchStopReason::probe_failed(int64_t batch, std::string_view error) {
  return make_stop(SearchStop::probe_failed,
              fmt::format("{}{}{}: {}", kProbeAt, batch, kFailedTwice, error));
}
SearchStopReason SearchStopReason::cache_verified(int64_t batch, int64_t smallest_failure,
                                                  int64_t max_batch) {
  return make_stop(SearchStop::cache_verified,
              smallest_failure > 0
                  ? fmt::format("{}batch {} fits and {} does not", kCacheVerified, batch,
                                smallest_failure)
                  : fmt::format("{}batch {} fits ({}{})", kCacheVerified, batch, kMaxBatchLimit,
                                max_batch));
}

const char* to_string(SearchStop kind) {
  for (const auto& [k, form] : kStopForms) {
    if (k == kind) return form;
  }
  return "?";  // not reached: every kind has a row
}

std::optional<SearchStopReason> parse_search_stop(std::string_view text) {
  auto kind = [&]() -> std::optional<SearchStop> {
    if (text.empty()) return SearchStop::none;
    if (text == kBracketClosed) return SearchStop::bracket_closed;
    if (starts_with(text, kMaxBatchLimit)) return SearchStop::max_batch_limit;
    if (starts_with(text, kMinBatchNoFit) || text == kMinBatchNoFitOld) {
      return SearchStop::min_batch_no_fit;
    }
    if (starts_with(text, kProbeBudget)) return SearchStop::probe_budget;
    if (starts_with(text, kCacheVerified)) return SearchStop::cache_verified;
    if (starts_with(text, kProbeAt)) {
      std::string_view rest = text.substr(kProbeAt.size());
      std::size_t digits = 0;
      while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) {
        ++digits;
      }
      rest = rest.substr(digits);
      if (digits > 0 && starts_with(rest, kLeftUnusable)) return SearchStop::probe_unusable;
      if (digits > 0 && starts_with(rest, kFailedTwice)) return SearchStop::probe_failed;
    }
    return std::nullopt;
  }();
  if (!kind) return std::nullopt;
  return make_stop(*kind, std::string(text));
}

SearchStopReason require_search_stop(std::string_view text, std::string_view field) {
  if (auto reason = parse_search_stop(text)) return *reason;
  std::vector<std::string> forms;
  for (const auto& row : kStopForms) {
    if (row.first != SearchStop::none) forms.push_back(fmt::format("'{}'", row.second));
  }
  throw ConfigError(fmt::format("{} '{}' is not a search's stop reason; its forms are: {}", field,
                                text, join(forms, ", ")));
}

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
            {"stop_reason", stop.text},
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
  r.stop = require_search_stop(json.value("stop_reason", std::string()), "stop_reason");
  // Records from before this field: a search stopped for anything but its budget converged.
  r.converged = json.value("converged", !r.stop.budget_spent());
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
