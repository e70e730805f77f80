// The terminal table and its markdown twin: the normalized table, the geometric-mean summary,
// the max-batch table, the memory-tier tables (when there are tier records), the measured jobs,
// energy and cost per unit of work, the runs against gpubench's recorded numbers for their card
// (when they match one), and notes. Sample (terminal):
//
//   Training throughput normalized to the RTX 8000 (Lambda 2020); max batch in parentheses
//   model      unit        H200 fp32    RTX 2060  ...  RTX 8000
//   ---------  ----------  -----------  --------  ...  ----------
//   bert-base  examples/s  13.1 (1312)  0.362 (8) ...  1.00 (128)
//
//   Geometric mean of normalized throughput per family (RTX 8000 = 1.00)
//   family    models  H200 fp32  RTX 2060  ...
//
//   Measured
//   model      device       precision  status  batch           throughput  ...
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"
#include "src/report/sections.h"
#include "src/report/terminal_reporter.h"

#include <fmt/format.h>

namespace gpubench {

namespace {

class TableReporter final : public report::TerminalReporter {
 public:
  TableReporter(std::ostream& out, GridStyle style) : TerminalReporter(out), style_(style) {}

 private:
  void write(std::ostream& out, const std::vector<JobRecord>& jobs,
             const ReferenceTable& reference) override {
    const report::ReportView view = report::make_view(jobs, reference);
    std::vector<report::Section> sections = {report::normalized_section(view, reference)};
    if (auto s = report::summary_section(view, reference)) sections.push_back(std::move(*s));
    if (auto s = report::precision_section(view, reference)) sections.push_back(std::move(*s));
    if (auto s = report::cost_section(view, reference)) sections.push_back(std::move(*s));
    if (auto s = report::max_batch_section(view, reference)) sections.push_back(std::move(*s));
    for (auto& s : report::memory_tier_sections(view, reference)) sections.push_back(std::move(s));
    sections.push_back(report::measured_section(view, /*with_message=*/false));
    if (auto s = report::energy_cost_section(view)) sections.push_back(std::move(*s));
    if (auto s = report::recorded_section(view, reference)) sections.push_back(std::move(*s));
    if (auto s = report::scaling_section(view)) sections.push_back(std::move(*s));
    for (std::size_t i = 0; i < sections.size(); ++i) {
      if (i > 0) out << '\n';
      section(out, sections[i]);
    }
    notes(out, report::report_notes(view));
  }

  /// Text from the records as markdown shows it literally (the terminal pass comes after).
  std::string text(const std::string& s) const {
    return style_ == GridStyle::kMarkdown ? markdown_escape(s) : s;
  }

  void section(std::ostream& out, const report::Section& s) {
    out << (style_ == GridStyle::kMarkdown ? "### " + text(s.title) + "\n\n" : s.title + "\n");
    render_grid(out, s.headers, s.rows, s.left_columns, style_);
    notes(out, s.notes);
  }

  void notes(std::ostream& out, const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    out << '\n';
    for (const auto& line : lines) {
      out << (style_ == GridStyle::kMarkdown ? "- " : "note: ") << text(line) << '\n';
    }
  }

  GridStyle style_;
};

}  // namespace

std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, GridStyle style) {
  return std::make_unique<TableReporter>(out, style);
}

}  // namespace gpubench
