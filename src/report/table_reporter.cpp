// The terminal table and its markdown twin. Sample (terminal):
//
//   Training throughput normalized to the RTX 8000 (Lambda 2020); max batch in parentheses
//   model      unit        H200 fp32    RTX 2060  ...  RTX 8000
//   ---------  ----------  -----------  --------  ...  ----------
//   bert-base  examples/s  13.1 (1312)  0.362 (8) ...  1.00 (128)
//
//   Measured
//   model      device       precision  status  batch           throughput  ...
#include "gpubench/report/reporter.h"
#include "gpubench/strings.h"

#include <fmt/format.h>

#include <set>

namespace gpubench {

namespace {

std::string run_cell(const RunCell& cell) {
  if (!cell.present) return "";
  if (cell.status == "no-fit") return "OOM";
  if (cell.status != "ok") return cell.status;
  if (!cell.normalized) return "n/a";
  return fmt::format("{} ({})", format_significant(*cell.normalized), cell.batch);
}

std::string reference_cell(const ReferenceTable& reference, const ReferenceRow* row,
                           std::size_t gpu) {
  if (!row) return "";
  if (row->throughput[gpu] <= 0) return "OOM";
  return fmt::format("{} ({})", format_significant(reference.normalized(*row, gpu)),
                     format_number(row->max_batch[gpu]));
}

class TableReporter final : public Reporter {
 public:
  TableReporter(std::ostream& out, GridStyle style) : Reporter(out), style_(style) {}

  void report(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) override {
    const Comparison c = build_comparison(jobs, reference);
    heading(
        fmt::format("Training throughput normalized to the {} (Lambda 2020); max batch in "
                    "parentheses",
                    reference.baseline().name));
    std::vector<std::string> headers = {"model", "unit"};
    for (const auto& run : c.runs) headers.push_back(run.label);
    for (const auto& gpu : reference.gpus()) headers.push_back(gpu.name);
    std::vector<std::vector<std::string>> rows;
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      std::vector<std::string> row = {c.models[r], c.units[r]};
      for (const auto& cell : c.cells[r]) row.push_back(run_cell(cell));
      for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
        row.push_back(reference_cell(reference, c.reference[r], g));
      }
      rows.push_back(row);
    }
    render_grid(out_, headers, rows, 2, style_);

    out_ << '\n';
    heading("Measured");
    static const std::vector<std::string> kMeasured = {"model",
                                                       "device",
                                                       "precision",
                                                       "status",
                                                       "batch",
                                                       "throughput",
                                                       "normalized_score",
                                                       "step_time_ms_median",
                                                       "peak_memory_bytes",
                                                       "search_seconds",
                                                       "wall_seconds"};
    std::vector<std::string> measured_headers;
    std::vector<const ResultColumn*> columns;
    for (const auto& key : kMeasured) {
      for (const auto& column : result_columns()) {
        if (column.key == key) columns.push_back(&column);
      }
    }
    for (const auto* column : columns) {
      measured_headers.push_back(column->key == "search_seconds" ? "search" : column->header);
    }
    std::vector<std::vector<std::string>> measured;
    for (const auto& job : jobs) {
      std::vector<std::string> row;
      for (const auto* column : columns) {
        row.push_back(column->pretty ? column->pretty(job) : column->raw(job));
      }
      measured.push_back(row);
    }
    render_grid(out_, measured_headers, measured, 4, style_);
    notes(jobs);
  }

 private:
  void heading(const std::string& text) {
    out_ << (style_ == GridStyle::kMarkdown ? "### " + text + "\n\n" : text + "\n");
  }

  void notes(const std::vector<JobRecord>& jobs) {
    std::vector<std::string> lines;
    std::set<std::string> seen;
    for (const auto& job : jobs) {
      if (job.emulated && seen.insert("emulated").second) {
        lines.push_back(
            "@N GiB columns are emulated: the caching allocator was capped at N GiB; the CUDA "
            "context and library workspaces outside the allocator are not capped, so a real card "
            "of that size fits somewhat less.");
      }
      if (job.device.type == "cpu" && seen.insert("cpu").second) {
        lines.push_back(
            "CPU rows ran without a GPU at the config's small fixed batch (no search): "
            "they show the pipeline works, not GPU speed.");
      }
      if (job.config.value("modified", false) && seen.insert("modified:" + job.model).second) {
        lines.push_back(
            fmt::format("{}: a user config changed its model or optimizer, so it is "
                        "not compared with 2020 (n/a)",
                        job.model));
      }
      if (!job.message.empty()) lines.push_back(fmt::format("{}: {}", job.model, job.message));
    }
    if (lines.empty()) return;
    out_ << '\n';
    for (const auto& line : lines)
      out_ << (style_ == GridStyle::kMarkdown ? "- " : "note: ") << line << '\n';
  }

  GridStyle style_;
};

}  // namespace

std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, GridStyle style) {
  return std::make_unique<TableReporter>(out, style);
}

}  // namespace gpubench
