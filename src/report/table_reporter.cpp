// The terminal table and its markdown twin: the normalized table, the geometric-mean summary,
// the max-batch table, the memory-tier tables (when there are tier records), the measured jobs,
// energy and cost per unit of work, the runs against gpubench's recorded numbers for their card
// (when they match one), and notes. Given a terminal's width, a section wider than that prints
// its columns in blocks that fit, each repeating the row labels ("(continued)"), and notes wrap.
// Sample (terminal):
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
#include "gpubench/base/terminal.h"
#include "src/report/sections.h"
#include "src/report/terminal_reporter.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

namespace gpubench {

namespace {

/// The columns `columns` of section `s` as a grid.
void render_columns(std::ostream& out, const report::Section& s,
                    const std::vector<std::size_t>& columns, GridStyle style) {
  std::vector<std::string> headers;
  std::size_t left = 0;  // the block's columns are in order: the left-aligned ones lead
  for (const std::size_t c : columns) {
    headers.push_back(s.headers[c]);
    if (c < s.left_columns) ++left;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : s.rows) {
    rows.emplace_back();
    for (const std::size_t c : columns) rows.back().push_back(c < row.size() ? row[c] : "");
  }
  render_grid(out, headers, rows, left, style);
}

/// How wide the grid of `columns` of `s` prints.
std::size_t grid_width(const report::Section& s, const std::vector<std::size_t>& columns,
                       GridStyle style) {
  std::ostringstream grid;
  render_columns(grid, s, columns, style);
  std::istringstream lines(grid.str());
  std::size_t widest = 0;
  for (std::string line; std::getline(lines, line);) widest = std::max(widest, text_columns(line));
  return widest;
}

/// The columns of `s` in blocks that each print within `width`: every block starts with the
/// row labels (the left columns, or the first alone when they take more than half the width),
/// then as many of the other columns, in order, as fit (at least one). One block, all columns,
/// when the section fits.
std::vector<std::vector<std::size_t>> column_blocks(const report::Section& s, std::size_t width,
                                                    GridStyle style) {
  std::vector<std::size_t> all(s.headers.size());
  for (std::size_t c = 0; c < all.size(); ++c) all[c] = c;
  if (grid_width(s, all, style) <= width) return {all};
  std::vector<std::size_t> labels(all.begin(), all.begin() + std::min(s.left_columns, all.size()));
  if (labels.size() > 1 && grid_width(s, labels, style) > width / 2) labels.resize(1);
  std::vector<std::vector<std::size_t>> blocks;
  std::vector<std::size_t> block = labels;
  for (const std::size_t c : all) {
    if (std::find(labels.begin(), labels.end(), c) != labels.end()) continue;
    std::vector<std::size_t> wider = block;
    wider.push_back(c);
    if (block.size() > labels.size() && grid_width(s, wider, style) > width) {
      blocks.push_back(block);
      block = labels;
      block.push_back(c);
    } else {
      block = std::move(wider);
    }
  }
  blocks.push_back(block);
  return blocks;
}

class TableReporter final : public report::TerminalReporter {
 public:
  TableReporter(std::ostream& out, GridStyle style, std::size_t max_width)
      : TerminalReporter(out), style_(style), max_width_(max_width) {}

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
    if (style_ == GridStyle::kMarkdown) {
      out << "### " << text(s.title) << "\n\n";
      render_grid(out, s.headers, s.rows, s.left_columns, style_);
    } else {
      // A section wider than the terminal: its columns in blocks that fit, one under another.
      const auto blocks = max_width_ > 0 ? column_blocks(s, max_width_, style_)
                                         : std::vector<std::vector<std::size_t>>{};
      if (blocks.size() > 1) {
        for (std::size_t b = 0; b < blocks.size(); ++b) {
          if (b > 0) out << '\n';
          fitted(out, b == 0 ? s.title : s.title + " (continued)", 0);
          render_columns(out, s, blocks[b], style_);
        }
      } else {
        fitted(out, s.title, 0);
        render_grid(out, s.headers, s.rows, s.left_columns, style_);
      }
    }
    notes(out, s.notes);
  }

  void notes(std::ostream& out, const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    out << '\n';
    for (const auto& line : lines) {
      if (style_ == GridStyle::kMarkdown) {
        out << "- " << text(line) << '\n';
      } else {
        fitted(out, "note: " + line, 6);
      }
    }
  }

  /// A line of text, wrapped at spaces to the terminal's width (if any), the lines after the
  /// first indented by `indent`.
  void fitted(std::ostream& out, const std::string& line, std::size_t indent) const {
    if (max_width_ == 0 || text_columns(line) <= max_width_) {
      out << line << '\n';
      return;
    }
    for (const auto& part : wrap_words(line, max_width_, indent)) out << part << '\n';
  }

  GridStyle style_;
  std::size_t max_width_;  ///< the terminal's columns; 0: no limit
};

}  // namespace

std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, GridStyle style,
                                              std::size_t max_width) {
  return std::make_unique<TableReporter>(out, style, max_width);
}

}  // namespace gpubench
