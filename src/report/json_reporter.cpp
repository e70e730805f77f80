// The comparison as JSON: the runs, one row per model (measured cells and the 2020 row), the
// geometric-mean summary per family, the memory-tier tables, notes, every merged job record, and
// on a card gpubench has recorded numbers for, the jobs against them ("recorded").
// Sample:
//   {"schema": "gpubench-report", "schema_version": 1, "baseline_gpu": "quadro-rtx-8000",
//    "runs": [{"label": "H200 fp32", ...}], "rows": [{"model": "bert-base", ...}],
//    "summary": [{"family": "language", "models": [...], "runs": [...], ...}],
//    "memory_tiers": [...], "notes": [...], "superseded_records": 0, "jobs": [...]}
#include "gpubench/report/reporter.h"
#include "src/report/sections.h"

#include <fmt/format.h>

#include <string>

namespace gpubench {

namespace {

Json optional_number(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json geo_mean_json(const GeoMean& mean) {
  // Nine significant digits: far finer than any measurement, and the same text on every libm
  // (exp and log may differ in the last bit between C libraries; the golden file must not).
  std::optional<double> value;
  if (mean.value) value = std::stod(fmt::format("{:.9g}", *mean.value));
  return {{"geomean", optional_number(value)},
          {"count", mean.counted.size()},
          {"of", mean.of},
          {"models", mean.counted}};
}

Json max_batch_json(const MaxBatchCell& cell) {
  if (!cell.present) return nullptr;
  return {{"status", to_string(cell.status)},
          {"max_batch", cell.max_batch ? Json(*cell.max_batch) : Json(nullptr)}};
}

/// The jobs against gpubench's recorded numbers for their card (issue 46).
Json recorded_json(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) {
  Json out = Json::array();
  for (const auto& m : compare_with_recorded(jobs, reference)) {
    out.push_back({{"model", m.job->model},
                   {"device", m.job->device.name},
                   {"precision", m.job->precision},
                   {"batch", m.job->batch},
                   {"throughput", m.job->throughput},
                   {"recorded_batch", m.recorded->batch},
                   {"recorded_throughput", m.recorded->throughput},
                   {"recorded_created_utc", m.recorded->created_utc},
                   {"recorded_record", "docs/results/" + m.recorded->record},
                   {"ratio", m.ratio},
                   {"below", m.below},
                   {"causes", m.causes},
                   {"compare", m.compare_command}});
  }
  return out;
}

class JsonReporter final : public Reporter {
 public:
  using Reporter::Reporter;

  void report(const std::vector<JobRecord>& all, const ReferenceTable& reference) override {
    const report::ReportView view = report::make_view(all, reference);
    const Comparison& c = view.comparison;
    const auto& gpus = reference.gpus();
    Json runs = Json::array();
    for (const auto& run : c.runs) {
      runs.push_back({{"label", run.label},
                      {"device", run.device},
                      {"precision", run.precision},
                      {"memory_cap_gib", optional_number(run.memory_cap_gib)}});
    }
    Json rows = Json::array();
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      Json measured = Json::array();
      for (std::size_t k = 0; k < c.runs.size(); ++k) {
        const RunCell& cell = c.cells[r][k];
        if (!cell.present) {
          measured.push_back(nullptr);
          continue;
        }
        Json entry = {{"status", to_string(cell.status)},
                      {"batch", cell.batch},
                      {"max_batch", cell.max_batch ? Json(*cell.max_batch) : Json(nullptr)},
                      {"throughput", cell.throughput},
                      {"normalized", optional_number(cell.normalized)}};
        if (cell.usd_per_million_units) {  // priced (issue 46): the job's cost says where from
          entry["usd_per_million_units"] = *cell.usd_per_million_units;
          entry["units_per_usd"] = optional_number(cell.units_per_usd);
        }
        measured.push_back(std::move(entry));
      }
      Json reference_2020 = nullptr;
      if (const ReferenceRow* row = c.reference[r]) {
        reference_2020 = Json::object();
        reference_2020["row"] = row->model;
        for (std::size_t g = 0; g < gpus.size(); ++g) {
          reference_2020[gpus[g].id] = {{"max_batch", row->max_batch[g]},
                                        {"throughput", row->throughput[g]},
                                        {"normalized", reference.normalized(*row, g)}};
        }
      }
      rows.push_back({{"model", c.models[r]},
                      {"family", c.families[r]},
                      {"throughput_unit", c.units[r]},
                      {"batch_unit", c.batch_units[r]},
                      {"measured", measured},
                      {"reference_2020", reference_2020}});
    }
    Json summary = Json::array();
    for (const auto& s : view.summary) {
      Json run_means = Json::array();
      for (const auto& mean : s.runs) run_means.push_back(mean ? geo_mean_json(*mean) : Json());
      Json reference_means = Json::object();
      for (std::size_t g = 0; g < gpus.size(); ++g) {
        reference_means[gpus[g].id] = geo_mean_json(s.reference[g]);
      }
      summary.push_back({{"family", s.family},
                         {"models", s.models},
                         {"missing", s.missing},
                         {"runs", run_means},
                         {"reference_2020", reference_means}});
    }
    Json tiers = Json::array();
    for (const auto& t : view.tiers) {
      Json tier_rows = Json::array();
      for (std::size_t m = 0; m < t.models.size(); ++m) {
        Json caps = Json::array();
        for (std::size_t i = 0; i < t.caps_gib.size(); ++i) caps.push_back(max_batch_json(t.cells[m][i]));
        Json reference_2020 = nullptr;
        if (const ReferenceRow* row = t.reference[m]) {
          reference_2020 = Json::array();
          for (const auto& tier : t.reference_tiers) {
            Json per_gpu = Json::object();
            for (std::size_t g : tier.gpus) per_gpu[gpus[g].id] = row->max_batch[g];
            reference_2020.push_back(per_gpu);
          }
        }
        tier_rows.push_back(
            {{"model", t.models[m]},
             {"batch_unit", t.batch_units[m]},
             {"caps", caps},
             {"uncapped", t.has_uncapped ? max_batch_json(t.cells[m].back()) : Json(nullptr)},
             {"reference_2020", reference_2020}});
      }
      Json reference_tiers = Json::array();
      for (const auto& tier : t.reference_tiers) {
        Json ids = Json::array();
        for (std::size_t g : tier.gpus) ids.push_back(gpus[g].id);
        reference_tiers.push_back({{"memory_gb", tier.memory_gb}, {"gpus", ids}});
      }
      tiers.push_back({{"label", t.label},
                       {"device", t.device},
                       {"precision", t.precision},
                       {"emulated", true},
                       {"caps_gib", t.caps_gib},
                       {"reference_tiers", reference_tiers},
                       {"rows", tier_rows}});
    }
    Json jobs = Json::array();
    for (const auto& job : view.jobs) jobs.push_back(job.to_json());
    Json document = {{"schema", "gpubench-report"},
                     {"schema_version", kResultSchemaVersion},
                     {"baseline_gpu", reference.baseline().id},
                     {"reference_source", reference.source()},
                     {"runs", runs},
                     {"rows", rows},
                     {"summary", summary},
                     {"memory_tiers", tiers},
                     {"notes", report::report_notes(view)},
                     {"superseded_records", view.superseded},
                     {"jobs", jobs}};
    if (Json recorded = recorded_json(view.jobs, reference); !recorded.empty()) {
      document["recorded"] = std::move(recorded);  // only on a card gpubench has numbers for
    }
    out_ << dump_json(document, 2) << '\n';
  }
};

}  // namespace

std::unique_ptr<Reporter> make_json_reporter(std::ostream& out) {
  return std::make_unique<JsonReporter>(out);
}

}  // namespace gpubench
