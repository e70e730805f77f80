// The report's data model: merging, the comparison, the geometric-mean summary and the memory
// tiers. Pure logic over records; the reporters format it.
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace gpubench {

namespace {

/// " x4" for a data-parallel record of 4 ranks (issue 15), else "": its own job and column.
std::string ranks_suffix(const JobRecord& job) {
  return job.data_parallel ? fmt::format(" x{}", job.data_parallel->world_size) : std::string();
}

std::string device_of(const JobRecord& job) {
  return (job.device.name.empty() ? job.device.type : job.device.name) + ranks_suffix(job);
}

std::string short_device_name(const DeviceInfo& device) {
  if (device.type == "cpu") return "CPU";
  std::string name = device.name.empty() ? "GPU" : device.name;
  for (const char* prefix : {"NVIDIA ", "Tesla "}) {
    if (name.rfind(prefix, 0) == 0) name = name.substr(std::string(prefix).size());
  }
  return name;
}

RunColumn column_of(const JobRecord& job) {
  RunColumn c;
  c.device = device_of(job);
  c.precision = job.precision;
  c.memory_cap_gib = job.memory_cap_gib;
  c.label = short_device_name(job.device) + ranks_suffix(job) + " " + job.precision;
  if (job.memory_cap_gib) c.label += " @" + format_number(*job.memory_cap_gib) + "GiB";
  c.same_batch = job.batch_source == "2020";
  if (c.same_batch) c.label += " @2020 batch";
  return c;
}

bool same_column(const RunColumn& a, const RunColumn& b) {
  return a.device == b.device && a.precision == b.precision &&
         a.memory_cap_gib == b.memory_cap_gib && a.same_batch == b.same_batch;
}

std::string reference_row_of(const JobRecord& job) {
  if (job.normalized) return job.normalized->reference_row;
  if (job.config.contains("reference_2020") && job.config["reference_2020"].is_object()) {
    return job.config["reference_2020"].value("row", std::string());
  }
  return "";
}

/// exp(mean(log x)): the mean of ratios that does not depend on which card is the baseline.
std::optional<double> geometric_mean(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  double sum = 0;
  for (double v : values) sum += std::log(v);
  return std::exp(sum / static_cast<double>(values.size()));
}

}  // namespace

// ---- Merging ----

std::string job_key(const JobRecord& job) {
  // \x1f (unit separator) cannot occur in a model or device name.
  return fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}", job.model, device_of(job), job.precision,
                     job.memory_cap_gib ? format_number(*job.memory_cap_gib) : "-",
                     job.search_only ? "search" : "full") +
         // A run at the 2020 batch (--same-batch) is its own job beside the max-batch run.
         (job.batch_source == "2020" ? std::string(1, '\x1f') + "2020-batch" : std::string());
}

std::vector<JobRecord> latest_records(const std::vector<JobRecord>& jobs) {
  std::vector<JobRecord> merged;
  std::map<std::string, std::size_t> position;
  for (const auto& job : jobs) {
    const auto [it, inserted] = position.emplace(job_key(job), merged.size());
    if (inserted) {
      merged.push_back(job);
    } else {
      merged[it->second] = job;
    }
  }
  return merged;
}

// ---- The comparison ----

Comparison build_comparison(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) {
  Comparison c;
  for (const auto& job : jobs) {
    if (job.search_only) continue;  // memory tiers: a search, no throughput to compare
    auto row = std::find(c.models.begin(), c.models.end(), job.model);
    std::size_t r = static_cast<std::size_t>(row - c.models.begin());
    if (row == c.models.end()) {
      c.models.push_back(job.model);
      c.units.push_back(job.throughput_unit);
      c.batch_units.push_back(job.batch_unit);
      const std::string name = reference_row_of(job);
      const ReferenceRow* reference_row = name.empty() ? nullptr : reference.find_row(name);
      c.reference.push_back(reference_row);
      c.families.push_back(reference_row ? reference_row->family : job.family);
      c.cells.emplace_back(c.runs.size());
      r = c.models.size() - 1;
    }
    const RunColumn column = column_of(job);
    auto found = std::find_if(c.runs.begin(), c.runs.end(),
                              [&](const RunColumn& x) { return same_column(x, column); });
    std::size_t k = static_cast<std::size_t>(found - c.runs.begin());
    if (found == c.runs.end()) {
      c.runs.push_back(column);
      for (auto& cells : c.cells) cells.emplace_back();
      k = c.runs.size() - 1;
    }
    RunCell& cell = c.cells[r][k];
    cell.present = true;
    cell.status = job.status;
    cell.batch = job.batch;
    cell.throughput = job.throughput;
    cell.max_batch = max_batch_of(job).max_batch;
    cell.modified = !job.on_cpu() && !job.modifications().empty();  // a CPU row is never scored
    cell.usd_per_million_units = usd_per_million_units(job);
    cell.units_per_usd = units_per_usd(job);
    const auto joules = joules_per_unit(job);
    cell.units_per_joule = joules ? std::optional<double>(1.0 / *joules) : std::nullopt;
    cell.normalized.reset();
    if (c.reference[r] && job.ok() && job.normalized) {
      cell.normalized =
          normalized_score(job.throughput, reference.baseline_throughput(*c.reference[r]));
    }
  }
  return c;
}

// ---- Geometric-mean summary ----

std::vector<FamilySummary> summarize_families(const Comparison& c,
                                              const ReferenceTable& reference) {
  std::vector<std::string> families;
  for (const auto& row : reference.rows()) {
    if (std::find(families.begin(), families.end(), row.family) == families.end()) {
      families.push_back(row.family);
    }
  }
  const std::size_t gpu_count = reference.gpus().size();
  std::vector<FamilySummary> summaries;
  for (const auto& family : families) {
    std::vector<std::size_t> rows;  // the family's models with a 2020 row
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      if (c.reference[r] && c.reference[r]->family == family) rows.push_back(r);
    }
    // Each run's OK models; runs with the same set share one summary.
    std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> groups;
    for (std::size_t k = 0; k < c.runs.size(); ++k) {
      std::vector<std::size_t> measured;
      for (std::size_t r : rows) {
        const RunCell& cell = c.cells[r][k];
        if (cell.present && cell.status == JobStatus::ok && cell.normalized &&
            *cell.normalized > 0) {
          measured.push_back(r);
        }
      }
      if (measured.empty()) continue;
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == measured; });
      if (group == groups.end()) {
        groups.push_back({measured, {k}});
      } else {
        group->second.push_back(k);
      }
    }
    for (const auto& [measured, runs] : groups) {
      FamilySummary s;
      s.family = family;
      for (std::size_t r : measured) s.models.push_back(c.models[r]);
      for (std::size_t r : rows) {
        if (std::find(measured.begin(), measured.end(), r) == measured.end()) {
          s.missing.push_back(c.models[r]);
        }
      }
      s.runs.resize(c.runs.size());
      for (std::size_t k : runs) {
        std::vector<double> scores;
        for (std::size_t r : measured) scores.push_back(*c.cells[r][k].normalized);
        s.runs[k] = GeoMean{geometric_mean(scores), s.models, rows.size()};
      }
      for (std::size_t g = 0; g < gpu_count; ++g) {
        GeoMean mean;
        mean.of = measured.size();
        std::vector<double> scores;
        for (std::size_t r : measured) {
          if (c.reference[r]->throughput[g] <= 0) continue;  // could not train it in 2020
          scores.push_back(reference.normalized(*c.reference[r], g));
          mean.counted.push_back(c.models[r]);
        }
        mean.value = geometric_mean(scores);
        s.reference.push_back(mean);
      }
      summaries.push_back(std::move(s));
    }
  }
  return summaries;
}

// ---- Memory tiers ----

MaxBatchCell max_batch_of(const JobRecord& job) {
  MaxBatchCell cell;
  cell.present = true;
  cell.status = job.status;
  // A search that found a batch answers the question even if a later timed run failed.
  if (job.search && job.search->max_batch > 0 && job.status != JobStatus::no_fit) {
    cell.max_batch = job.search->max_batch;
  }
  return cell;
}

ReferenceTier closest_reference_tier(double cap_gib, const ReferenceTable& reference) {
  ReferenceTier tier;
  double best = -1;
  for (const auto& gpu : reference.gpus()) {
    const double distance = std::fabs(gpu.memory_gb - cap_gib);
    if (best < 0 || distance < best || (distance == best && gpu.memory_gb < tier.memory_gb)) {
      best = distance;
      tier.memory_gb = gpu.memory_gb;
    }
  }
  for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
    if (reference.gpus()[g].memory_gb == tier.memory_gb) tier.gpus.push_back(g);
  }
  return tier;
}

std::vector<MemoryTierTable> build_memory_tiers(const std::vector<JobRecord>& all,
                                                const ReferenceTable& reference) {
  const std::vector<JobRecord> jobs = latest_records(all);
  std::vector<MemoryTierTable> tables;
  auto table_of = [&](const JobRecord& job) -> MemoryTierTable* {
    for (auto& t : tables) {
      if (t.device == device_of(job) && t.precision == job.precision) return &t;
    }
    return nullptr;
  };
  auto model_row = [](MemoryTierTable& t, const JobRecord& job) {
    auto found = std::find(t.models.begin(), t.models.end(), job.model);
    return static_cast<std::size_t>(found - t.models.begin());
  };
  // Tables, models and caps from the tier records.
  for (const auto& job : jobs) {
    if (!job.search_only || !job.memory_cap_gib) continue;
    MemoryTierTable* t = table_of(job);
    if (!t) {
      MemoryTierTable fresh;
      fresh.device = device_of(job);
      fresh.precision = job.precision;
      fresh.label = short_device_name(job.device) + " " + job.precision;
      tables.push_back(std::move(fresh));
      t = &tables.back();
    }
    if (model_row(*t, job) == t->models.size()) {
      t->models.push_back(job.model);
      t->batch_units.push_back(job.batch_unit);
      const std::string name = reference_row_of(job);
      t->reference.push_back(name.empty() ? nullptr : reference.find_row(name));
    }
    if (std::find(t->caps_gib.begin(), t->caps_gib.end(), *job.memory_cap_gib) ==
        t->caps_gib.end()) {
      t->caps_gib.push_back(*job.memory_cap_gib);
    }
  }
  for (auto& t : tables) {
    std::sort(t.caps_gib.begin(), t.caps_gib.end());
    t.cells.assign(t.models.size(), std::vector<MaxBatchCell>(t.caps_gib.size() + 1));
    for (double cap : t.caps_gib) {
      const ReferenceTier tier = closest_reference_tier(cap, reference);
      const bool seen = std::any_of(t.reference_tiers.begin(), t.reference_tiers.end(),
                                    [&](const ReferenceTier& x) {
                                      return x.memory_gb == tier.memory_gb;
                                    });
      if (!seen) t.reference_tiers.push_back(tier);
    }
  }
  // Cells: the tier records, and the uncapped search of the same device and precision (a full
  // run's search or an uncapped search-only job; the later record wins).
  for (const auto& job : jobs) {
    MemoryTierTable* t = table_of(job);
    if (!t) continue;
    const std::size_t m = model_row(*t, job);
    if (m == t->models.size()) continue;
    std::size_t column = t->caps_gib.size();  // the uncapped column
    if (job.memory_cap_gib) {
      if (!job.search_only) continue;  // a capped timed run is a throughput column instead
      column = static_cast<std::size_t>(
          std::find(t->caps_gib.begin(), t->caps_gib.end(), *job.memory_cap_gib) -
          t->caps_gib.begin());
    } else if (!job.search && job.status != JobStatus::no_fit) {
      continue;  // a fixed batch (--batch, the CPU) says nothing about the limit
    }
    t->cells[m][column] = max_batch_of(job);
  }
  for (auto& t : tables) {
    for (const auto& row : t.cells) t.has_uncapped = t.has_uncapped || row.back().present;
    if (!t.has_uncapped) {
      for (auto& row : t.cells) row.pop_back();
    }
  }
  return tables;
}

}  // namespace gpubench
