#include "gpubench/run/suite.h"

#include "gpubench/device/device.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/base/errors.h"
#include "gpubench/run/process.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

namespace gpubench {

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool same_cap(const std::optional<double>& a, const std::optional<double>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || std::fabs(*a - *b) < 1e-9;
}

/// What earlier searches of `model` learned, as a hint for its next search under another cap
/// (same workload, same precision: the suite's settings are shared): the answer of the latest
/// one that found a batch (the nearest cap: tiers run in ascending order) and the line of the
/// latest one that scouted without a hint (a long lever; a hinted search's probes all sit near
/// its limit). The next search scales the answer to its cap and checks the line against it.
std::optional<SearchHint> hint_for(const std::string& model, const std::vector<JobRecord>& done) {
  const SearchRecord* anchor = nullptr;
  const SearchRecord* line = nullptr;
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    if (it->model != model || !it->search || it->search->max_batch <= 0) continue;
    if (!anchor) anchor = &*it->search;
    if (!line && !it->search->hinted && it->search->bytes_per_sample > 0) line = &*it->search;
  }
  if (!anchor) return std::nullopt;
  if (!line) line = anchor;
  return SearchHint::from_searches(*line, *anchor);
}

/// The card's price per hour (run.price_per_hour_usd, issue 46) on a timed job's record before
/// it is journaled, with where it was set: the command line's flag, or a --config file.
void attach_price(JobRecord& record, const RunSettings& run,
                  const std::vector<ConfigOverlay>& overlays) {
  if (!run.price_per_hour_usd || record.search_only) return;
  JobCost cost;
  cost.usd_per_hour = *run.price_per_hour_usd;
  cost.source = "run.price_per_hour_usd";
  for (const auto& [file, document] : overlays) {  // the last overlay that sets it wins
    const Json* section = document.is_object() && document.contains("run") ? &document["run"]
                                                                         : nullptr;
    if (!section || !section->is_object() || !section->contains("price_per_hour_usd")) continue;
    cost.source = file == "command line" ? "run --price-per-hour"
                                         : "run.price_per_hour_usd in " + file;
  }
  record.cost = cost;
}

}  // namespace

std::string format_clock(double seconds) {
  const auto total = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  const int64_t h = total / 3600, m = total / 60 % 60, s = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, s) : fmt::format("{}:{:02}", m, s);
}

// ---- SuiteJob ----

std::string SuiteJob::label() const {
  std::string text = model;
  if (memory_cap_gib) text += " @" + format_number(*memory_cap_gib) + "GiB";
  if (search_only) text += " (search only)";
  return text;
}

bool SuiteJob::matches(const JobRecord& record) const {
  if (record.model != model || record.search_only != search_only) return false;
  // A tier job is its cap; a plain job runs under whatever cap the plan's configs set
  // (--memory-cap), the same for all of them.
  return !search_only || same_cap(record.memory_cap_gib, memory_cap_gib);
}

Json SuiteJob::to_json() const {
  return {{"model", model},
          {"memory_cap_gib", memory_cap_gib ? Json(*memory_cap_gib) : Json(nullptr)},
          {"search_only", search_only}};
}

SuiteJob SuiteJob::from_json(const Json& json) {
  SuiteJob job;
  job.model = json.at("model").get<std::string>();
  if (json.contains("memory_cap_gib") && json["memory_cap_gib"].is_number()) {
    job.memory_cap_gib = json["memory_cap_gib"].get<double>();
  }
  job.search_only = json.value("search_only", false);
  return job;
}

// ---- SuitePlan ----

Json SuitePlan::to_json() const {
  Json jobs_json = Json::array();
  for (const auto& job : jobs) jobs_json.push_back(job.to_json());
  Json overlays_json = Json::array();
  for (const auto& [file, document] : overlays) {
    overlays_json.push_back({{"file", file}, {"document", document}});
  }
  Json out = {{"jobs", jobs_json},
              {"device", device},
              {"device_name", device_name},
              {"fixed_batch", fixed_batch ? Json(*fixed_batch) : Json(nullptr)},
              {"model_batches", model_batches},
              {"same_batch", same_batch},
              {"overlays", overlays_json}};
  if (!data_parallel.is_null()) out["data_parallel"] = data_parallel;  // issue 15
  return out;
}

SuitePlan SuitePlan::from_json(const Json& json, const std::string& file) {
  try {
    SuitePlan plan;
    for (const auto& job : json.at("jobs")) plan.jobs.push_back(SuiteJob::from_json(job));
    plan.device = json.at("device").get<std::string>();
    require_device_ref(plan.device, fmt::format("{}: the plan's device", file));
    plan.device_name = json.value("device_name", std::string());
    if (json.contains("fixed_batch") && json["fixed_batch"].is_number_integer()) {
      plan.fixed_batch = json["fixed_batch"].get<int64_t>();
    }
    if (json.contains("model_batches")) {  // journals before per-model batches have none
      plan.model_batches = json["model_batches"].get<std::map<std::string, int64_t>>();
    }
    plan.same_batch = json.value("same_batch", false);
    for (const auto& overlay : json.at("overlays")) {
      plan.overlays.emplace_back(overlay.at("file").get<std::string>(), overlay.at("document"));
    }
    plan.data_parallel = json.value("data_parallel", Json());
    return plan;
  } catch (const Json::exception& e) {
    throw ConfigError(fmt::format(
        "{}: the journal's plan cannot be read ({}); it was not written by this gpubench", file,
        e.what()));
  }
}

std::optional<int64_t> SuitePlan::fixed_batch_of(const std::string& model) const {
  const auto own = model_batches.find(model);
  return own != model_batches.end() ? std::optional<int64_t>(own->second) : fixed_batch;
}

std::vector<SuiteJob> plan_jobs(const std::vector<std::string>& models,
                                const std::vector<double>& memory_tiers_gib) {
  std::vector<SuiteJob> jobs;
  for (const auto& model : models) {
    if (memory_tiers_gib.empty()) {
      jobs.push_back({model, std::nullopt, false});
      continue;
    }
    for (double cap : memory_tiers_gib) jobs.push_back({model, cap, true});
  }
  return jobs;
}

bool job_is_done(const JobRecord& record) {
  return record.status == JobStatus::ok || record.status == JobStatus::no_fit;
}

std::vector<ConfigOverlay> job_overlays(const SuitePlan& plan, const SuiteJob& job) {
  std::vector<ConfigOverlay> overlays = plan.overlays;
  if (job.memory_cap_gib) {
    overlays.emplace_back("--memory-tiers",
                          Json{{"run", {{"memory_cap_gib", *job.memory_cap_gib}}}});
  }
  return overlays;
}

// ---- Running ----

SuiteOutcome run_suite(const SuitePlan& plan, const std::vector<JobRecord>& earlier,
                       PhaseLauncher& launcher, JournalWriter& journal,
                       const SuiteCallbacks& callbacks) {
  auto log = [&](const std::string& line) {
    if (callbacks.log) callbacks.log(line);
  };
  SuiteOutcome outcome;
  outcome.records = earlier;

  // What is left: jobs without a done record in the journal.
  std::vector<const SuiteJob*> todo;
  for (const auto& job : plan.jobs) {
    bool done = false;
    for (const auto& record : earlier) done = done || (job.matches(record) && job_is_done(record));
    if (done) {
      ++outcome.skipped;
    } else {
      todo.push_back(&job);
    }
  }
  if (outcome.skipped > 0) {
    log(fmt::format("{} of {} jobs are already in the journal; {} to run", outcome.skipped,
                    plan.jobs.size(), todo.size()));
  }

  const double started_unix = unix_now();
  const auto started = std::chrono::steady_clock::now();
  double finished_seconds = 0;  // wall time of the jobs this run finished
  // The device's matmul peak by kind, as the first timed run of this run measured it: the jobs
  // after it reuse it instead of measuring it again. Not across a resume (another day, maybe
  // another card of the name), nor for data-parallel runs (each rank measures its own device).
  std::map<std::string, MatmulPeak> peaks;
  const bool share_peaks = plan.data_parallel.is_null();
  for (std::size_t i = 0; i < todo.size(); ++i) {
    stop_if_asked();  // a Ctrl-C between two jobs: start no other
    const SuiteJob& job = *todo[i];
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::string estimate;
    double eta_unix = 0;  // for the workers' status line
    if (i > 0) {
      const double per_job = finished_seconds / static_cast<double>(i);
      const double left = per_job * double(todo.size() - i);
      estimate = fmt::format(", about {} left", format_clock(left));
      eta_unix = unix_now() + left;
    }
    const ConfigStore store = resolve_store(job_overlays(plan, job));
    const std::string label = fmt::format("job {}/{} {}", i + 1, todo.size(), job.label());
    log(fmt::format("[{}] job {}/{}: {} ({}, {}){}", format_clock(elapsed), i + 1, todo.size(),
                    job.label(), plan.device, to_string(store.run().precision), estimate));

    JobPlan job_plan;
    job_plan.model = job.model;
    job_plan.device = plan.device;
    job_plan.fixed_batch = job.search_only ? std::nullopt : plan.fixed_batch_of(job.model);
    job_plan.same_batch = plan.same_batch && job_plan.fixed_batch.has_value();
    job_plan.overlays = job_overlays(plan, job);
    job_plan.search_only = job.search_only;
    job_plan.search_hint = hint_for(job.model, outcome.records);
    job_plan.progress_label = label;
    job_plan.progress_started_unix = started_unix;
    job_plan.progress_eta_unix = eta_unix;
    if (share_peaks) {
      const auto peak = peaks.find(matmul_peak_kind(to_string(store.run().precision)));
      if (peak != peaks.end()) job_plan.matmul_peak = peak->second;
    }
    JobRecord record = run_job(job_plan, store, launcher, log);
    finished_seconds += record.wall_seconds;
    if (share_peaks) {
      if (auto measured = measured_matmul_peak(record, plan.device)) {
        peaks.emplace(measured->kind, *measured);
      }
    }

    attach_price(record, store.run(), plan.overlays);
    journal.append(record);  // synced before anything else happens
    ++outcome.ran;
    if (!job_is_done(record)) {
      ++outcome.failed;
      log(fmt::format("{} {}: {}", job.label(), to_string(record.status), record.message));
    }
    outcome.records.push_back(std::move(record));
    if (callbacks.job_ended) callbacks.job_ended(outcome.records.back());
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  log(fmt::format("[{}] {} job{} run, {} skipped, {} failed", format_clock(total), outcome.ran,
                  outcome.ran == 1 ? "" : "s", outcome.skipped, outcome.failed));
  return outcome;
}

}  // namespace gpubench
