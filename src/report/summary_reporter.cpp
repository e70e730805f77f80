// The summary: what `gpubench run` prints by default, one line per job in at most 100 columns,
// the device and precision said once above the table when every job shares them. Sample:
//
//   NVIDIA H200, fp32
//   model            batch  throughput        x RTX 8000  step median    peak memory  wall
//   ---------------  -----  ----------------  ----------  -------------  -----------  ----
//   bert-base         1693  638.3 examples/s        6.79  2651 ms ±0.3%    138.6 GiB  52 s
//   mt-dnn             254  diverged                   -              -            -  66 s
//
//   note: mt-dnn: loss 'loss' is NaN at the end of the timed window ...
//
// With energy readings or a price per hour, a table of energy and cost per unit of work follows;
// on a card gpubench has recorded numbers for, a table of the jobs against them. The whole
// comparison with the eight 2020 GPUs is the table format (`gpubench report`).
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"
#include "src/report/sections.h"
#include "src/report/terminal_reporter.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace gpubench {

namespace {

/// Notes wrap at this width, as the table fits in it.
constexpr std::size_t kWidth = 100;

/// `text` wrapped at kWidth after `first` (the first line's prefix), later lines indented.
std::string wrapped(const std::string& first, const std::string& text) {
  const std::string indent(first.size(), ' ');
  std::string out = first;
  std::size_t used = first.size();
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    const bool fresh = used == first.size() || used == indent.size();
    if (!fresh && used + 1 + word.size() > kWidth) {
      out += "\n" + indent;
      used = indent.size();
    } else if (!fresh) {
      out += ' ';
      ++used;
    }
    out += word;
    used += word.size();
  }
  return out;
}

std::string step_text(const JobRecord& j) {
  if (j.timing.steps == 0) return "-";
  std::string text = fmt::format("{} ms", format_significant(j.timing.median_ms));
  if (j.timing.steps > 1 && j.timing.mean_ms > 0) {
    text +=
        fmt::format(" ±{}%", format_significant(100.0 * j.timing.stddev_ms / j.timing.mean_ms, 2));
  }
  return text;
}

class SummaryReporter final : public report::TerminalReporter {
 public:
  using TerminalReporter::TerminalReporter;

 private:
  void write(std::ostream& out, const std::vector<JobRecord>& jobs,
             const ReferenceTable& reference) override {
    const std::vector<JobRecord> merged = latest_records(jobs);
    std::set<std::string> devices, precisions;
    for (const auto& j : merged) {
      devices.insert(j.device.name.empty() ? j.device.type : j.device.name);
      precisions.insert(j.precision);
    }
    const bool one_device = devices.size() <= 1, one_precision = precisions.size() <= 1;
    if (!merged.empty() && one_device && one_precision) {
      out << *devices.begin() << ", " << *precisions.begin() << '\n';
    }
    std::vector<std::string> headers = {"model"};
    if (!one_device) headers.push_back("device");
    if (!one_precision) headers.push_back("precision");
    const std::size_t left = headers.size();
    for (const char* h :
         {"batch", "throughput", "x RTX 8000", "step median", "peak memory", "wall"}) {
      headers.emplace_back(h);
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& j : merged) {
      std::vector<std::string> row = {j.model};
      if (j.memory_cap_gib) row.back() += fmt::format(" @{}GiB", format_number(*j.memory_cap_gib));
      if (!one_device) row.push_back(j.device.name.empty() ? j.device.type : j.device.name);
      if (!one_precision) row.push_back(j.precision);
      // A search-only job (a memory tier) shows the batch it found; a failed one its status.
      row.push_back(j.batch > 0 ? std::to_string(j.batch) : "-");
      if (j.search_only) {
        row.push_back(j.ok() ? "search only" : to_string(j.status));
      } else {
        std::string cell =
            j.ok() ? fmt::format("{} {}", format_significant(j.throughput, 4), j.throughput_unit)
                   : to_string(j.status);
        // Repeated timed runs: the median, and its interval's half width.
        if (j.ok() && j.throughput_stats && j.throughput_stats->n > 1) {
          cell += fmt::format(
              " ±{}%", format_significant(100 * j.throughput_stats->relative_half_width(), 2));
        }
        row.push_back(cell + report::throttle_mark(j));  // footnoted with the notes
      }
      row.push_back(j.ok() && j.normalized           ? format_significant(j.normalized->score)
                    : j.ok() && !j.on_cpu() && !j.modifications().empty() ? "modified"
                                                          : "-");
      row.push_back(j.ok() && !j.search_only ? step_text(j) : "-");
      row.push_back(j.peak_memory_bytes > 0 && !j.search_only
                        ? format_bytes(static_cast<double>(j.peak_memory_bytes))
                        : "-");
      row.push_back(j.wall_seconds > 0 ? fmt::format("{:.0f} s", j.wall_seconds) : "-");
      rows.push_back(std::move(row));
    }
    render_grid(out, headers, rows, left, GridStyle::kPlain);
    const report::ReportView view = report::make_view(merged, reference);
    // Energy and cost per unit of work, and the card against gpubench's recorded numbers, when
    // the records have them (issue 46): tables of their own, so the line per job stays short.
    std::vector<report::Section> more;
    if (auto s = report::energy_cost_section(view)) more.push_back(std::move(*s));
    if (auto s = report::recorded_section(view, reference)) more.push_back(std::move(*s));
    for (const auto& s : more) {
      out << '\n' << s.title << '\n';
      render_grid(out, s.headers, s.rows, s.left_columns, GridStyle::kPlain);
      if (!s.notes.empty()) out << '\n';
      for (const auto& line : s.notes) out << wrapped("note: ", line) << '\n';
    }
    const auto notes = report::report_notes(view);
    if (!notes.empty()) out << '\n';
    for (const auto& line : notes) out << wrapped("note: ", line) << '\n';
  }
};

}  // namespace

std::unique_ptr<Reporter> make_summary_reporter(std::ostream& out) {
  return std::make_unique<SummaryReporter>(out);
}

}  // namespace gpubench
