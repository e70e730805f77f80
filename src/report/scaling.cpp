// The data-parallel scaling table (issue 15): for each workload, precision and kind of device,
// one row per world size, with the throughput summed over the ranks, per GPU, and the scaling
// efficiency against the one-device run of the same job where the report has one.
#include "src/report/sections.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace gpubench::report {

int world_size_of(const JobRecord& job) {
  // Read as 1 to INT_MAX (DataParallelRecord::from_json).
  return job.data_parallel ? static_cast<int>(job.data_parallel->world_size) : 1;
}

std::string backend_of(const JobRecord& job) {
  return job.data_parallel && !job.data_parallel->backend.empty() ? job.data_parallel->backend
                                                                  : std::string("?");
}

namespace {

/// The one-device records of `job`'s workload, precision, device and memory cap: its baselines
/// when their batch is its per-rank batch.
std::vector<const JobRecord*> one_device_peers(const JobRecord& job,
                                               const std::vector<JobRecord>& jobs) {
  std::vector<const JobRecord*> peers;
  for (const auto& one : jobs) {
    if (&one == &job || world_size_of(one) != 1 || !one.ok() || one.throughput <= 0) continue;
    if (one.model != job.model || one.precision != job.precision ||
        one.device.name != job.device.name || one.memory_cap_gib != job.memory_cap_gib ||
        one.data_parallel) {
      continue;
    }
    peers.push_back(&one);
  }
  return peers;
}

}  // namespace

std::optional<double> scaling_efficiency(const JobRecord& job, const std::vector<JobRecord>& jobs) {
  const int n = world_size_of(job);
  if (!job.ok() || job.throughput <= 0) return std::nullopt;
  if (n == 1 && !job.data_parallel) return std::nullopt;
  // Only at the same per-rank batch: a one-GPU run at another batch times another step.
  for (const JobRecord* one : one_device_peers(job, jobs)) {
    if (one->batch == job.batch) return job.throughput / (static_cast<double>(n) * one->throughput);
  }
  return std::nullopt;
}

std::vector<const JobRecord*> scaling_rows(const ReportView& view) {
  // Rows: the data-parallel jobs and the one-device jobs of the same workload beside them.
  using Key = std::tuple<std::string, std::string, std::string>;  // model, precision, device
  std::map<Key, bool> with_ranks;
  for (const auto& j : view.jobs) {
    if (j.data_parallel) with_ranks[{j.model, j.precision, j.device.name}] = true;
  }
  std::vector<const JobRecord*> rows;
  for (const auto& j : view.jobs) {
    if (with_ranks.count({j.model, j.precision, j.device.name}) && !j.search_only) rows.push_back(&j);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const JobRecord* a, const JobRecord* b) {
    return std::make_tuple(a->model, a->precision, a->device.name, world_size_of(*a)) <
           std::make_tuple(b->model, b->precision, b->device.name, world_size_of(*b));
  });
  return rows;
}

std::optional<Section> scaling_section(const ReportView& view) {
  const bool any = std::any_of(view.jobs.begin(), view.jobs.end(),
                               [](const JobRecord& j) { return j.data_parallel.has_value(); });
  if (!any) return std::nullopt;
  const std::vector<const JobRecord*> rows = scaling_rows(view);
  Section s;
  s.id = "scaling";
  s.title = "Data-parallel scaling (weak: every rank at the per-rank batch, throughput summed)";
  s.headers = {"model", "precision", "device", "interconnect", "ranks", "batch per rank",
               "throughput", "per rank", "step spread", "efficiency"};
  s.left_columns = 4;
  bool missing_baseline = false;
  for (const JobRecord* j : rows) {
    const int n = world_size_of(*j);
    const std::optional<DataParallelRecord>& dp = j->data_parallel;
    const std::string interconnect = !dp                        ? "-"
                                     : dp->interconnect.empty() ? "unknown"
                                                                : dp->interconnect;
    const auto eff = scaling_efficiency(*j, view.jobs);
    // A one-device run at another batch: both batches, and no efficiency.
    std::string other_batch;
    if (n > 1 && !eff && j->ok()) {
      const auto peers = one_device_peers(*j, view.jobs);
      if (peers.empty()) {
        missing_baseline = true;
      } else {
        other_batch =
            fmt::format("- (one device at batch {}, {} per rank)", peers.front()->batch, j->batch);
      }
    }
    const std::string unit = j->throughput_unit;
    s.rows.push_back(
        {j->model, j->precision, j->device.name.empty() ? j->device.type : j->device.name,
         interconnect, !dp ? "1" : fmt::format("{} ({})", n, backend_of(*j)),
         std::to_string(j->batch),
         j->ok() ? fmt::format("{:.1f} {}", j->throughput, unit) : to_string(j->status),
         j->ok() ? fmt::format("{:.1f}", j->throughput / n) : "-",
         !dp ? "-" : fmt::format("{:.1f}%", dp->step_time_spread_pct),
         eff                    ? fmt::format("{:.1f}%", *eff * 100)
         : !other_batch.empty() ? other_batch
         : n == 1 && !dp        ? "(baseline)"
                                : "-"});
  }
  s.notes.push_back(
      "efficiency: throughput / (ranks x the one-device throughput of the same workload, "
      "precision, device and per-rank batch); step spread: slowest over fastest rank's median step "
      "time");
  if (missing_baseline) {
    s.notes.push_back(
        "'-' efficiency: no one-device run of that job among these records; run it without "
        "--gpus (or --world-size) and report both files together");
  }
  return s;
}

}  // namespace gpubench::report
