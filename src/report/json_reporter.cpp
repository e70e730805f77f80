// The comparison as JSON, with every job record. Sample:
//   {"schema": "gpubench-report", "schema_version": 1, "baseline_gpu": "quadro-rtx-8000",
//    "runs": [{"label": "H200 fp32", ...}], "rows": [{"model": "bert-base", ...}], "jobs": [...]}
#include "gpubench/report/reporter.h"

namespace gpubench {

namespace {

class JsonReporter final : public Reporter {
 public:
  using Reporter::Reporter;

  void report(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) override {
    const Comparison c = build_comparison(jobs, reference);
    Json runs = Json::array();
    for (const auto& run : c.runs) {
      runs.push_back(
          {{"label", run.label},
           {"device", run.device},
           {"precision", run.precision},
           {"memory_cap_gib", run.memory_cap_gib ? Json(*run.memory_cap_gib) : Json(nullptr)}});
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
        measured.push_back(
            {{"status", cell.status},
             {"batch", cell.batch},
             {"throughput", cell.throughput},
             {"normalized", cell.normalized ? Json(*cell.normalized) : Json(nullptr)}});
      }
      Json reference_2020 = nullptr;
      if (const ReferenceRow* row = c.reference[r]) {
        reference_2020 = Json::object();
        reference_2020["row"] = row->model;
        for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
          reference_2020[reference.gpus()[g].id] = {{"max_batch", row->max_batch[g]},
                                                    {"throughput", row->throughput[g]},
                                                    {"normalized", reference.normalized(*row, g)}};
        }
      }
      rows.push_back({{"model", c.models[r]},
                      {"throughput_unit", c.units[r]},
                      {"batch_unit", c.batch_units[r]},
                      {"measured", measured},
                      {"reference_2020", reference_2020}});
    }
    Json jobs_json = Json::array();
    for (const auto& job : jobs) jobs_json.push_back(job.to_json());
    const Json document = {{"schema", "gpubench-report"},
                           {"schema_version", kResultSchemaVersion},
                           {"baseline_gpu", reference.baseline().id},
                           {"reference_source", reference.source()},
                           {"runs", runs},
                           {"rows", rows},
                           {"jobs", jobs_json}};
    out_ << document.dump(2) << '\n';
  }
};

}  // namespace

std::unique_ptr<Reporter> make_json_reporter(std::ostream& out) {
  return std::make_unique<JsonReporter>(out);
}

}  // namespace gpubench
