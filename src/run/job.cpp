// The parent side of a job: the search across workers, the timed run with its step-down and
// bisection, the repeats, a memory tier's confirm, and the record's identity and score.
#include "gpubench/run/job.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/device/device.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/measure/timing.h"
#include "gpubench/run/search_cache.h"
#include "src/run/clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

namespace gpubench {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void normalize(JobRecord& record, const ModelConfig& config, const ReferenceTable& reference) {
  record.normalized.reset();
  // A CPU row shows the pipeline works, not GPU speed; a modified job is not the 2020 workload.
  if (!record.ok() || !config.reference_2020 || config.modified || record.on_cpu() ||
      !record.modifications().empty()) {
    return;
  }
  const ReferenceRow* row = reference.find_row(config.reference_2020->row);
  if (!row) return;
  NormalizedScore s;
  s.reference_row = row->model;
  s.baseline_gpu = reference.baseline().id;
  s.baseline_throughput = reference.baseline_throughput(*row);
  s.baseline_max_batch = row->max_batch.at(reference.baseline_index());
  s.score = normalized_score(record.throughput, s.baseline_throughput);
  record.normalized = s;
}

int64_t next_timed_batch(const std::vector<std::pair<int64_t, bool>>& attempts,
                         const SearchSettings& search) {
  if (attempts.empty() || static_cast<int>(attempts.size()) >= kMaxTimedAttempts) return 0;
  const int64_t g = std::max<int64_t>(1, search.granularity);
  const int64_t first = attempts.front().first;
  auto align_down = [&](int64_t b) {
    if (b <= search.min_batch) return search.min_batch;
    const int64_t aligned = b / g * g;
    return aligned <= search.min_batch ? search.min_batch : aligned;
  };
  // The first step: 1% of the search's batch, at least one granule.
  const auto one_percent = static_cast<int64_t>(std::ceil(0.01 * static_cast<double>(first)));
  const int64_t step = std::max(g, (one_percent + g - 1) / g * g);
  int64_t best = 0, failed = 0, failures = 0;
  for (const auto& [b, fitted] : attempts) {
    if (fitted) best = std::max(best, b);
  }
  for (const auto& [b, fitted] : attempts) {
    if (fitted || b <= best) continue;
    failed = failed == 0 ? b : std::min(failed, b);
    ++failures;
  }
  if (failed == 0) return 0;  // the largest one tried trained
  if (best == 0) {
    // Stepping down, each step twice the last, so a far miss costs few fresh processes.
    if (failed <= search.min_batch) return 0;
    const double delta = static_cast<double>(step) * std::pow(2.0, failures - 1);
    const int64_t next = align_down(failed - static_cast<int64_t>(delta));
    return next < failed ? next : 0;
  }
  // One trained below one that did not: halve the gap while it is wider than the first step.
  if (failed - best <= step) return 0;
  const int64_t mid = align_down(best + (failed - best) / 2);
  return mid > best && mid < failed ? mid : 0;
}

namespace {
/// Fills in what a record must always say, for records of workers that died before saying it.
void fill_identity(JobRecord& record, const ModelConfig& config, const RunSettings& run,
                   const std::string& device) {
  if (record.family.empty()) record.family = config.family;
  if (record.precision.empty()) record.precision = to_string(run.precision);
  if (record.batch_unit.empty()) record.batch_unit = config.batch_unit;
  if (record.throughput_unit.empty()) record.throughput_unit = config.throughput_unit;
  if (!record.memory_cap_gib) record.memory_cap_gib = run.memory_cap_gib;
  record.emulated = record.emulated || record.memory_cap_gib.has_value();
  if (record.device.type.empty() || record.device.name.empty()) {
    // The whole description, so the record groups with the job's other records in reports.
    const DeviceRef ref = require_device_ref(device, "device");
    record.device = ref.is_cuda() ? cuda_device_info(ref.index) : cpu_device_info();
  }
  if (record.config.empty()) record.config = config.to_json();
  if (record.created_utc.empty()) record.created_utc = utc_now();
}

/// One timed run as a repetition: what it measured and how it ended, with the GPU's power,
/// clock and energy over its window where NVML gave them.
RepeatRun repetition(const JobRecord& r, double seconds) {
  RepeatRun out;
  out.throughput = r.ok() ? r.throughput : 0.0;
  out.step_time_ms_median = r.timing.median_ms;
  out.steps = r.timing.steps;
  out.window_seconds = r.timing.window_seconds;
  out.status = r.status;
  out.message = r.message;
  out.seconds = seconds;
  const ClocksRecord& c = r.clocks;
  if (c.power_w) out.power_w_mean = c.power_w->mean;
  if (c.sm_clock_mhz) out.sm_clock_mhz_median = c.sm_clock_mhz->median;
  if (c.energy) out.units_per_joule = c.energy->units_per_joule;
  out.throttled = c.throttled;
  return out;
}

/// The repeats' other measurements (repetition's numbers) over the runs that trained:
/// {median, min, max} each, and how many runs trained and how many were throttled.
RepeatSummary summarize_repeats(const std::vector<RepeatRun>& repeats) {
  RepeatSummary out;
  for (const RepeatRun& r : repeats) {
    if (r.status != JobStatus::ok) continue;
    ++out.runs;
    if (r.throttled.value_or(false)) ++out.throttled_runs;
  }
  using Measure = std::optional<double> (*)(const RepeatRun&);
  const std::pair<std::optional<MedianRange> RepeatSummary::*, Measure> measures[] = {
      {&RepeatSummary::step_time_ms_median,
       [](const RepeatRun& r) { return std::optional<double>(r.step_time_ms_median); }},
      {&RepeatSummary::power_w_mean, [](const RepeatRun& r) { return r.power_w_mean; }},
      {&RepeatSummary::sm_clock_mhz_median,
       [](const RepeatRun& r) {
         return r.sm_clock_mhz_median
                    ? std::optional<double>(static_cast<double>(*r.sm_clock_mhz_median))
                    : std::nullopt;
       }},
      {&RepeatSummary::units_per_joule, [](const RepeatRun& r) { return r.units_per_joule; }}};
  for (const auto& [member, measure] : measures) {
    std::vector<double> values;
    for (const RepeatRun& r : repeats) {
      if (r.status != JobStatus::ok) continue;
      if (const std::optional<double> v = measure(r)) values.push_back(*v);
    }
    if (values.empty()) continue;
    const SampleStats stats = summarize_sample(values);  // as the throughputs are summarized
    out.*member = MedianRange{stats.median, stats.min, stats.max};
  }
  return out;
}

/// run.repeat >= 2: the timed run again, each time in a fresh process at `record`'s batch, and
/// the record's throughput their median. A repeat that diverges makes the job diverged (a number
/// is only a result when every timed run trained soundly); one that fails otherwise (out of
/// memory at the edge, a crash) is kept in `repeats` and said in the message, and the
/// statistics are over those that trained.
void repeat_timed_run(JobRecord& record, double first_seconds, JobSpec spec,
                      const RunSettings& run, PhaseLauncher& launcher,
                      const std::function<void(const std::string&)>& log) {
  record.repeats = {repetition(record, first_seconds)};
  std::vector<double> throughputs = {record.throughput};
  std::vector<std::string> problems;
  spec.phase = WorkerPhase::time;
  spec.batch = record.batch;
  for (int i = 2; i <= run.repeat; ++i) {
    log(fmt::format("{}: timed run {} of {} at batch {}", record.model, i, run.repeat,
                    record.batch));
    const auto started = Clock::now();
    const JobRecord again = launcher.launch(spec, run.job_timeout_s);
    record.repeats.push_back(repetition(again, seconds_since(started)));
    if (again.ok()) {
      throughputs.push_back(again.throughput);
    } else if (again.status == JobStatus::diverged) {
      record.status = JobStatus::diverged;
      record.diverged_throughput = record.throughput;
      record.throughput = 0;
      record.message = fmt::format("timed run {} of {}: {}", i, run.repeat, again.message);
      record.normalized.reset();
      return;
    } else {
      problems.push_back(fmt::format("timed run {} of {}: {} ({})", i, run.repeat,
                                     to_string(again.status), again.message.substr(0, 120)));
    }
  }
  const SampleStats stats = summarize_sample(throughputs);
  record.throughput_stats = stats;
  record.repeat_summary = summarize_repeats(record.repeats);
  record.throughput = stats.median;
  if (!problems.empty()) {
    record.message = fmt::format(
        "{} of {} timed runs did not finish, the statistics are over the "
        "other {}: {}",
        problems.size(), run.repeat, stats.n, join(problems, "; "));
  }
}

/// The fresh-process runs at a searched (or given) batch, with the step-down after an
/// out-of-memory error and the bisection back up once a batch trained.
struct Attempts {
  JobRecord record;               ///< the largest batch that trained, else the last run's record
  std::vector<TimedAttempt> log;  ///< every run: batch, status, message, seconds, phase
  int64_t first_batch = 0;
  int64_t last_batch = 0;
};

Attempts run_at_batch(JobSpec spec, int64_t batch, bool may_step, const ModelConfig& config,
                      const RunSettings& run, PhaseLauncher& launcher,
                      const std::function<void(const std::string&)>& log) {
  Attempts out;
  out.first_batch = batch;
  std::vector<std::pair<int64_t, bool>> outcomes;  // {batch, fitted} of the runs so far
  std::optional<JobRecord> best;                   // the largest batch that trained
  const bool confirm_only = spec.phase == WorkerPhase::confirm;
  for (int attempt = 0;; ++attempt) {
    spec.batch = batch;
    const AttemptPhase phase = attempt == 0 ? AttemptPhase::confirm
                               : best       ? AttemptPhase::bisect
                                            : AttemptPhase::step_down;
    log(confirm_only
            ? fmt::format("{}: confirming batch {} ({}) in a fresh process", spec.model, batch,
                          config.batch_unit)
            : fmt::format("{}: timing at batch {} ({})", spec.model, batch, config.batch_unit));
    const auto attempt_started = Clock::now();
    out.record = launcher.launch(spec, run.job_timeout_s);
    out.last_batch = batch;
    out.log.push_back(
        {batch, out.record.status, out.record.message, seconds_since(attempt_started), phase});
    if (out.record.status != JobStatus::oom && !out.record.ok()) break;  // not memory: stop
    outcomes.emplace_back(batch, out.record.ok());
    if (out.record.ok() && (!best || batch > best->batch)) best = out.record;
    // Only a searched batch steps down: a --batch or CPU batch is timed as given.
    if (!may_step) break;
    const int64_t next = next_timed_batch(outcomes, config.search);
    if (next <= 0) break;
    log(out.record.ok()
            ? fmt::format("{}: batch {} trained; trying {}, between it and the smallest batch "
                          "that did not",
                          spec.model, batch, next)
            : fmt::format("{}: batch {} did not fit in a fresh process{}; stepping down to {}",
                          spec.model, batch, confirm_only ? "" : " with autotuning", next));
    batch = next;
  }
  if (best) out.record = *best;  // a bisection above it may have run out of memory
  return out;
}

/// A memory tier's batch, confirmed in a fresh process under the same cap (issue 12: a capped
/// search's worker has run other batches first); a batch that does not train there steps down
/// as a timed run's would. The tier's answer is the largest batch that trained there.
void confirm_tier(JobRecord& found, JobSpec spec, const ModelConfig& config, const RunSettings& run,
                  PhaseLauncher& launcher, const std::function<void(const std::string&)>& log) {
  spec.phase = WorkerPhase::confirm;
  const Attempts confirmed = run_at_batch(spec, found.batch, true, config, run, launcher, log);
  found.confirm = confirmed.log;
  if (confirmed.record.ok()) {
    if (confirmed.record.batch != found.batch) {
      const std::string note = fmt::format(
          "the search's batch {} did not train in a fresh process under the cap; confirmed {}",
          found.batch, confirmed.record.batch);
      found.message = found.message.empty() ? note : found.message + "; " + note;
      found.batch = confirmed.record.batch;
    }
    return;
  }
  if (confirmed.record.status == JobStatus::diverged) {  // a tier that does not train soundly
    found.status = JobStatus::diverged;
    found.message = fmt::format("the tier's batch did not train soundly in its confirm: {}",
                                confirmed.record.message);
    found.losses = confirmed.record.losses;
    return;
  }
  found.status = JobStatus::failed;
  found.message = confirmed.record.status == JobStatus::oom
                      ? fmt::format(
                            "the search's batch {} did not train in a fresh process "
                            "under the cap, nor any step down to {}: {}",
                            found.batch, confirmed.last_batch, confirmed.record.message)
                      : fmt::format("the confirm at batch {} failed: {}", confirmed.last_batch,
                                    confirmed.record.message);
}

}  // namespace

namespace {
/// The job's worker processes in its record (runtime.workers): how many its phases started and
/// how many of them had been pre-started, from the launcher's counts before the job (`before`)
/// and now; nothing for a launcher that does not count them.
void note_workers(JobRecord& record, const std::optional<WorkerCounts>& before,
                  const PhaseLauncher& launcher) {
  const std::optional<WorkerCounts> now = launcher.worker_counts();
  if (!before || !now || !(record.runtime.is_object() || record.runtime.is_null())) return;
  record.runtime["workers"] = {{"prestart", now->prestart},
                               {"processes", now->processes - before->processes},
                               {"prestarted", now->prestarted - before->prestarted}};
}
}  // namespace

JobRecord run_job(const JobPlan& plan, const ConfigStore& store, PhaseLauncher& launcher,
                  const std::function<void(const std::string&)>& log) {
  const auto started = Clock::now();
  const std::optional<WorkerCounts> workers_before = launcher.worker_counts();
  const ModelConfig& config = store.model(plan.model);
  const RunSettings& run = store.run();
  JobSpec spec;
  spec.model = plan.model;
  spec.device = plan.device;
  spec.overlays = plan.overlays;
  spec.search_hint = plan.search_hint;
  spec.progress_label = plan.progress_label;
  spec.progress_started_unix = plan.progress_started_unix;
  spec.progress_eta_unix = plan.progress_eta_unix;
  spec.search_only = plan.search_only;
  spec.matmul_peak = plan.matmul_peak;

  GPUBENCH_CHECK(!plan.search_only || (!plan.fixed_batch && plan.device != "cpu"), ConfigError,
                 "{}: a search-only job needs a CUDA device and no --batch", plan.model);
  std::optional<SearchRecord> search;
  std::string search_warning;  // a search that did not converge: said again in the final record
  std::string source;
  int64_t batch = 0;
  if (plan.fixed_batch) {
    batch = *plan.fixed_batch;
    source = plan.same_batch ? "2020" : "flag";
  } else if (plan.device == "cpu") {
    batch = config.cpu_batch;
    source = "cpu";
  } else {
    log(fmt::format("{}: searching for the largest batch on {}", plan.model, plan.device));
    spec.phase = WorkerPhase::search;
    JobRecord found;
    Json first_cache;  // the first worker's cache lookup, for the record of the last one
    for (int worker = 0;; ++worker) {
      spec.search_worker = worker;
      found = launcher.launch(spec, run.job_timeout_s);
      if (worker == 0 && found.search) first_cache = found.search->cache;
      // A probe that left its worker unusable: the search goes on in a fresh one, from the
      // probes so far (a second failure of the same batch there fails the job).
      if (!found.search || !found.search->interrupted || worker + 1 >= kMaxSearchWorkers) break;
      spec.search_probes = found.search->probes;
      log(fmt::format("{}: {}; the search goes on in a fresh worker", plan.model,
                      found.search->stop.text));
    }
    if (found.search) found.search->cache = merged_cache_note(first_cache, found.search->cache);
    if (found.search && !found.search->converged && found.ok()) {
      log(fmt::format("{}: warning: {}", plan.model, found.message));
      search_warning = found.message;
    }
    if (found.ok() && plan.search_only) confirm_tier(found, spec, config, run, launcher, log);
    if (!found.ok() || plan.search_only) {
      found.wall_seconds = seconds_since(started);
      if (found.status == JobStatus::oom) found.status = JobStatus::failed;
      found.search_only = plan.search_only;
      fill_identity(found, config, run, plan.device);
      note_workers(found, workers_before, launcher);
      return found;
    }
    search = found.search;
    batch = found.batch;
    source = "search";
    // A verified cached answer whose earlier timed run stepped down: time where that run
    // trained instead of stepping down again (search_cache.h, cached_timed_batch).
    if (const int64_t timed_batch = search ? cached_timed_batch(*search) : 0; timed_batch > 0) {
      log(fmt::format("{}: the search cache says batch {} did not fit in a fresh process and {} "
                      "did; timing at {}",
                      plan.model, batch, timed_batch, timed_batch));
      batch = timed_batch;
    }
  }

  spec.phase = WorkerPhase::time;
  Attempts timed = run_at_batch(spec, batch, source == "search", config, run, launcher, log);
  JobRecord record = std::move(timed.record);
  const std::vector<TimedAttempt> attempts = std::move(timed.log);
  // A worker that died says nothing of its batch: the record keeps the one it was given.
  if (record.batch == 0) record.batch = timed.last_batch;
  if (record.status == JobStatus::oom) {
    record.status = JobStatus::failed;
    record.message = fmt::format("out of memory at batch {}: {}", timed.last_batch, record.message);
  } else if (record.ok() && source == "search" && search && record.batch != search->max_batch &&
             record.message.empty()) {
    record.message = fmt::format(
        "the search's batch {} did not fit in a fresh process with autotuning{}; timed at {}",
        search->max_batch,
        timed.first_batch != search->max_batch ? " (in the timed run the search cache keeps)" : "",
        record.batch);
  }
  // A timed run that stepped down below the search's answer: its batch goes into the answer's
  // cache entry, so that a rerun starts there.
  if (search && source == "search") {
    const Json timed_note = remember_timed_batch(*search, attempts);
    if (!timed_note.is_null()) {
      if (timed_note.contains("warning")) {
        log(fmt::format("{}: warning: {}", plan.model, timed_note["warning"].get<std::string>()));
      }
      search->cache["timed_stored"] = timed_note;
    }
  }
  if (record.ok() && run.repeat > 1) {
    // The repeats reuse the peak the first timed run measured, if it measured one.
    if (!spec.matmul_peak) spec.matmul_peak = measured_matmul_peak(record, plan.device);
    // The first timed run's process time: the attempt that trained at the record's batch.
    double first_seconds = 0;
    for (const TimedAttempt& a : attempts) {
      if (a.status == JobStatus::ok && a.batch == record.batch) {
        first_seconds = a.seconds.value_or(0);
      }
    }
    repeat_timed_run(record, first_seconds, spec, run, launcher, log);
    if (record.ok() && !record.compute.empty()) {  // the achieved FLOP/s of the median
      const ComputeRecord c = record.compute;
      PeakChoice peak;
      peak.tflops = c.peak_tflops;
      peak.source = c.peak_source.value_or(std::string());
      peak.measured_by = c.peak_measured_by.value_or(std::string());
      record.compute = compute_with_peak(record.throughput, FlopsPerUnit::from_compute(c),
                                         c.peak_kind.value_or(std::string()), peak);
    }
  }
  if (!search_warning.empty() && record.ok() && record.message.empty()) {
    record.message = search_warning;  // the timed run's record must not drop it
  }
  record.search = search;
  record.batch_source = source;
  record.confirm = attempts;
  record.wall_seconds = seconds_since(started);
  fill_identity(record, config, run, plan.device);
  note_workers(record, workers_before, launcher);
  normalize(record, config, store.reference());
  return record;
}

}  // namespace gpubench
