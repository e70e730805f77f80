// A self-contained HTML page: inline CSS, charts as inline SVG drawn here, no script, no
// external resource, so the file can be mailed, committed or opened offline. Sections:
//
//   gpubench report: H200 fp32, H200 amp-bf16
//   Environment          GPU, memory, driver, CUDA, cuDNN, libtorch, gpubench, host, dates
//   Throughput ...       one bar chart per family (image, language): per model a group of bars,
//                        one per measured run, then the eight 2020 GPUs
//   Geometric mean ...   a small chart per family summary, and its table
//   then the normalized table, the max-batch table, the memory-tier tables (when there are tier
//   records), the measured jobs (failures with their message), energy and cost per unit of work,
//   the runs against gpubench's recorded numbers for their card, and the notes.
//
// Every text from the records (model names, messages, device names) is escaped. Nothing depends
// on the clock: dates come from the records.
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"
#include "src/report/sections.h"
#include "src/report/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace gpubench {

namespace {

using report::html_escape;

// Measured runs in strong colours (one per run column, in order); every 2020 bar in one muted
// grey, labelled with its GPU, so the eye finds this run's bars first.
const std::vector<std::string>& strong_colors() {
  static const std::vector<std::string> colors = {"#c0392b", "#1f5fbf", "#1e8449",
                                                  "#d35400", "#7d3c98", "#117a8b"};
  return colors;
}
constexpr const char* kMutedColor = "#b3bac2";

const char* kStyle =
    R"(body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1d2329; margin: 24px auto; max-width: 1320px; padding: 0 16px; overflow-wrap: break-word; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid #d9dee3; padding-bottom: 4px; }
p.lede { color: #56616c; margin-top: 0; }
nav a { margin-right: 12px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e4e8ec; text-align: left; white-space: nowrap; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; white-space: normal; vertical-align: bottom; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.ref, th.ref { background: #f6f7f8; color: #4a5561; }
td.oom { color: #8a6d00; }
td.fail { color: #b3261e; font-weight: 600; }
td.message { white-space: pre-wrap; min-width: 24em; overflow-wrap: anywhere; }
ul.notes { color: #56616c; font-size: 13px; padding-left: 20px; overflow-wrap: anywhere; }
ul.legend { list-style: none; padding: 0; margin: 4px 0 12px; display: flex; flex-wrap: wrap; gap: 4px 20px; }
ul.legend li { min-width: 0; overflow-wrap: anywhere; }
.swatch { display: inline-block; width: 14px; height: 10px; margin-right: 6px; }
.swatch.marker { width: 0; height: 12px; border-left: 2px dashed #3d4650; }
figure { margin: 8px 0 24px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg.chart text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: #1d2329; }
svg.chart .group-label { font-weight: 600; font-size: 12px; }
svg.chart .muted { fill: #6b7682; }
svg.chart .value.missing { fill: #8a6d00; font-style: italic; }
svg.chart .grid { stroke: #e4e8ec; }
svg.chart .marker { stroke: #3d4650; stroke-dasharray: 4 3; }
svg.chart .axis text { fill: #6b7682; }
footer { margin-top: 32px; color: #6b7682; font-size: 12px; }
)";

std::string capitalized(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

/// A value from the environment JSON as text ("-" when absent).
std::string env_text(const Json& env, std::initializer_list<const char*> path) {
  const Json* node = &env;
  for (const char* key : path) {
    if (!node->is_object() || !node->contains(key)) return "-";
    node = &(*node)[key];
  }
  if (node->is_string()) return node->get<std::string>().empty() ? "-" : node->get<std::string>();
  if (node->is_null()) return "-";
  return dump_json(*node);
}

/// The device's memory from a record's environment, 0 where it is absent or no byte count (a
/// report renders whatever a file holds: fuzz_report_merge found `"device": 3` throwing here).
int64_t env_memory_bytes(const Json& env) {
  const Json* node = &env;
  for (const char* key : {"device", "memory_bytes"}) {
    if (!node->is_object() || !node->contains(key)) return 0;
    node = &(*node)[key];
  }
  if (node->is_number_unsigned()) {
    const auto v = node->get<uint64_t>();
    return v <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(v) : 0;
  }
  if (node->is_number_integer()) return std::max<int64_t>(node->get<int64_t>(), 0);
  if (!node->is_number()) return 0;
  const double v = node->get<double>();
  return std::isfinite(v) && v > 0 && v < 9.0e18 ? static_cast<int64_t>(v) : 0;
}

/// One environment: the software and device a set of records ran on.
struct Environment {
  std::vector<std::string> fields;  // in the order of environment_headers()
  std::vector<std::string> precisions;
  std::string first_date, last_date;
};

const std::vector<std::string>& environment_headers() {
  static const std::vector<std::string> headers = {"GPU",      "memory", "driver",
                                                   "CUDA",     "cuDNN",  "libtorch",
                                                   "gpubench", "host"};
  return headers;
}

std::vector<Environment> environments(const std::vector<JobRecord>& jobs) {
  std::vector<Environment> out;
  for (const auto& job : jobs) {
    const Json& env = job.environment;
    std::string gpu = job.device.type == "cpu" ? "CPU: " + env_text(env, {"cpu"})
                                               : job.device.name;
    if (gpu.empty()) gpu = env_text(env, {"device", "name"});
    const int64_t bytes =
        job.device.memory_bytes ? job.device.memory_bytes : env_memory_bytes(env);
    std::string gpubench = env_text(env, {"gpubench", "version"});
    const std::string commit = env_text(env, {"gpubench", "git_commit"});
    if (commit != "-") gpubench += " (" + commit + ")";
    const std::vector<std::string> fields = {
        gpu,
        bytes > 0 ? format_bytes(static_cast<double>(bytes)) : "-",
        env_text(env, {"software", "driver"}),
        env_text(env, {"software", "cuda_runtime"}),
        env_text(env, {"software", "cudnn"}),
        env_text(env, {"software", "libtorch"}),
        gpubench,
        env_text(env, {"host"})};
    auto found = std::find_if(out.begin(), out.end(),
                              [&](const Environment& e) { return e.fields == fields; });
    if (found == out.end()) {
      out.push_back({fields, {}, "", ""});
      found = out.end() - 1;
    }
    if (std::find(found->precisions.begin(), found->precisions.end(), job.precision) ==
        found->precisions.end()) {
      found->precisions.push_back(job.precision);
    }
    const std::string date = job.created_utc.substr(0, 10);
    if (!date.empty()) {
      if (found->first_date.empty() || date < found->first_date) found->first_date = date;
      if (found->last_date.empty() || date > found->last_date) found->last_date = date;
    }
  }
  return out;
}

class HtmlReporter final : public Reporter {
 public:
  using Reporter::Reporter;

  void report(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) override {
    const report::ReportView view = report::make_view(jobs, reference);
    const Comparison& c = view.comparison;
    std::vector<std::string> labels;
    for (const auto& run : c.runs) labels.push_back(run.label);
    for (const auto& t : view.tiers) labels.push_back(t.label + " memory tiers");
    const std::string title =
        "gpubench report" + (labels.empty() ? std::string() : ": " + join(labels, ", "));

    out_ << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         << "<title>" << html_escape(title) << "</title>\n<style>\n"
         << kStyle << "</style>\n</head>\n<body>\n";
    out_ << "<h1>" << html_escape(title) << "</h1>\n";
    out_ << "<p class=\"lede\">Training throughput of the Lambda 2020 workloads, normalized to the "
         << html_escape(reference.baseline().name)
         << "'s 2020 throughput on the same model, beside the eight GPUs of "
         << html_escape(reference.source()) << ".</p>\n";

    std::optional<report::Section> summary = report::summary_section(view, reference);
    std::optional<report::Section> max_batch = report::max_batch_section(view, reference);
    const std::vector<report::Section> tiers = report::memory_tier_sections(view, reference);
    nav(summary.has_value(), max_batch.has_value(), tiers);

    environment_section(view.jobs);
    throughput_charts(c, reference);
    if (summary) {
      out_ << "<h2 id=\"summary\">" << html_escape(summary->title) << "</h2>\n";
      summary_chart(view, reference);
      table(*summary);
    }
    section(report::normalized_section(view, reference));
    if (auto s = report::precision_section(view, reference)) section(*s);
    if (auto s = report::cost_section(view, reference)) section(*s);
    if (max_batch) section(*max_batch);
    for (const auto& s : tiers) section(s);
    section(report::measured_section(view, /*with_message=*/true));
    if (auto s = report::energy_cost_section(view)) section(*s);
    if (auto s = report::recorded_section(view, reference)) section(*s);
    if (auto s = report::scaling_section(view)) section(*s);
    const std::vector<std::string> notes = report::report_notes(view);
    if (!notes.empty()) {
      out_ << "<h2 id=\"notes\">Notes</h2>\n";
      note_list(notes);
    }
    out_ << "<footer>Written by gpubench report from " << view.jobs.size() << " record"
         << (view.jobs.size() == 1 ? "" : "s") << ". 2020 reference: "
         << html_escape(reference.source()) << ".</footer>\n</body>\n</html>\n";
  }

 private:
  void nav(bool summary, bool max_batch, const std::vector<report::Section>& tiers) {
    out_ << "<nav><a href=\"#environment\">Environment</a><a href=\"#charts\">Charts</a>";
    if (summary) out_ << "<a href=\"#summary\">Geometric means</a>";
    out_ << "<a href=\"#normalized\">Normalized</a>";
    if (max_batch) out_ << "<a href=\"#max-batch\">Max batch</a>";
    if (!tiers.empty()) out_ << "<a href=\"#" << tiers.front().id << "\">Memory tiers</a>";
    out_ << "<a href=\"#measured\">Measured</a></nav>\n";
  }

  void environment_section(const std::vector<JobRecord>& jobs) {
    out_ << "<h2 id=\"environment\">Environment</h2>\n";
    report::Section s;
    s.headers = environment_headers();
    s.headers.push_back("precisions");
    s.headers.push_back("dates (UTC)");
    s.left_columns = s.headers.size();
    for (const auto& env : environments(jobs)) {
      std::vector<std::string> row = env.fields;
      row.push_back(join(env.precisions, ", "));
      row.push_back(env.first_date == env.last_date ? env.first_date
                                                    : env.first_date + " to " + env.last_date);
      s.rows.push_back(row);
    }
    table(s);
  }

  // The scale. A 2026 GPU can be 40x an RTX 8000 while a 2020 card is 0.3x, so on one axis the
  // 2020 bars are short. Options were a log axis, a broken axis, one chart per model, or a
  // linear axis with the value printed at every bar. Linear it is, one axis per family panel:
  // bar length stays proportional to speed (a log axis makes 40x look like 2x more than 20x),
  // bars compare across the panel's models, and the printed values carry the small differences
  // between the 2020 cards (which the tables below give exactly). Bars are at least 1 px wide,
  // and a dashed line marks 1.0, the RTX 8000.
  void throughput_charts(const Comparison& c, const ReferenceTable& reference) {
    out_ << "<h2 id=\"charts\">Throughput normalized to the " << html_escape(reference.baseline().name)
         << "</h2>\n";
    legend(c, reference);
    std::vector<std::string> families;
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      if (c.reference[r] &&
          std::find(families.begin(), families.end(), c.families[r]) == families.end()) {
        families.push_back(c.families[r]);
      }
    }
    std::vector<std::string> uncharted;
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      if (!c.reference[r]) uncharted.push_back(c.models[r]);
    }
    if (families.empty()) {
      out_ << "<p>No measured model has a 2020 row, so there is nothing to chart.</p>\n";
      return;
    }
    // The 2020 table's family order (image, then language).
    std::vector<std::string> ordered;
    for (const auto& row : reference.rows()) {
      if (std::find(families.begin(), families.end(), row.family) != families.end() &&
          std::find(ordered.begin(), ordered.end(), row.family) == ordered.end()) {
        ordered.push_back(row.family);
      }
    }
    for (const auto& family : ordered) {
      report::BarChart chart;
      chart.id = "chart-" + family;
      chart.marker = 1.0;
      chart.axis_label = fmt::format("throughput / {}'s 2020 throughput (linear)",
                                     reference.baseline().name);
      std::vector<std::string> models;
      for (std::size_t r = 0; r < c.models.size(); ++r) {
        if (!c.reference[r] || c.families[r] != family) continue;
        models.push_back(c.models[r]);
        report::BarGroup group;
        group.label = c.models[r] + " (2020: " + c.reference[r]->model + ")";
        for (std::size_t k = 0; k < c.runs.size(); ++k) {
          const RunCell& cell = c.cells[r][k];
          if (!cell.present) continue;
          report::Bar bar;
          bar.label = c.runs[k].label;
          bar.color = strong_colors()[k % strong_colors().size()];
          if (cell.status == "ok" && cell.normalized) {
            bar.value = *cell.normalized;
            bar.text = format_significant(*cell.normalized);
            bar.tooltip = fmt::format("{}, {}: {} x {} (batch {} {}, {} {})", c.models[r],
                                      bar.label, bar.text, reference.baseline().name, cell.batch,
                                      c.batch_units[r], format_significant(cell.throughput, 4),
                                      c.units[r]);
          } else {
            bar.text = report::normalized_text(cell);
          }
          group.bars.push_back(bar);
        }
        for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
          const ReferenceRow& row = *c.reference[r];
          report::Bar bar;
          bar.label = reference.gpus()[g].name;
          bar.muted = true;
          bar.color = kMutedColor;
          if (row.throughput[g] > 0) {
            bar.value = reference.normalized(row, g);
            bar.text = format_significant(*bar.value);
            bar.tooltip = fmt::format("{}, {} (2020): {} x {} (batch {})", c.models[r],
                                      bar.label, bar.text, reference.baseline().name,
                                      format_number(row.max_batch[g]));
          } else {
            bar.text = "OOM";
          }
          group.bars.push_back(bar);
        }
        chart.groups.push_back(group);
      }
      chart.title = fmt::format("{} models: throughput normalized to the {}", capitalized(family),
                                reference.baseline().name);
      chart.description = fmt::format(
          "Horizontal bars on a linear axis, one group per model ({}): each measured run, then "
          "the eight 2020 GPUs, as throughput divided by the {}'s 2020 throughput on the same "
          "model; the value is printed at the end of each bar.",
          join(models, ", "), reference.baseline().name);
      out_ << "<figure>\n<figcaption>" << html_escape(chart.title) << "</figcaption>\n"
           << report::render_bar_chart(chart) << "</figure>\n";
    }
    if (!uncharted.empty()) {
      out_ << "<p class=\"lede\">Not charted (no 2020 row, so no normalized score): "
           << html_escape(shortened(join(uncharted, ", "), 2000)) << ". See the tables.</p>\n";
    }
  }

  void legend(const Comparison& c, const ReferenceTable& reference) {
    out_ << "<ul class=\"legend\">\n";
    for (std::size_t k = 0; k < c.runs.size(); ++k) {
      out_ << "<li><span class=\"swatch\" style=\"background:"
           << strong_colors()[k % strong_colors().size()] << "\"></span>"
           << html_escape(shortened(c.runs[k].label, 200)) << " (measured)</li>\n";
    }
    out_ << "<li><span class=\"swatch\" style=\"background:" << kMutedColor
         << "\"></span>Lambda 2020 GPUs (labelled bar by bar)</li>\n"
         << "<li><span class=\"swatch marker\"></span>1.0 = "
         << html_escape(reference.baseline().name) << "</li>\n</ul>\n";
  }

  void summary_chart(const report::ReportView& view, const ReferenceTable& reference) {
    const Comparison& c = view.comparison;
    report::BarChart chart;
    chart.id = "chart-summary";
    chart.marker = 1.0;
    chart.title = fmt::format("Geometric mean of normalized throughput per family ({} = 1.00)",
                              reference.baseline().name);
    chart.axis_label = fmt::format("geometric mean of throughput / {}'s 2020 throughput (linear)",
                                   reference.baseline().name);
    std::vector<std::string> groups;
    for (const auto& s : view.summary) {
      report::BarGroup group;
      group.label = fmt::format("{}: {} of {} models", s.family, s.models.size(),
                                s.models.size() + s.missing.size());
      if (!s.missing.empty()) group.label += " (not " + join(s.missing, ", ") + ")";
      groups.push_back(group.label);
      for (std::size_t k = 0; k < s.runs.size(); ++k) {
        if (!s.runs[k] || !s.runs[k]->value) continue;
        report::Bar bar;
        bar.label = c.runs[k].label;
        bar.color = strong_colors()[k % strong_colors().size()];
        bar.value = *s.runs[k]->value;
        bar.text = format_significant(*bar.value);
        bar.tooltip = fmt::format("{}, {}: geometric mean {} over {}", s.family, bar.label,
                                  bar.text, join(s.runs[k]->counted, ", "));
        group.bars.push_back(bar);
      }
      for (std::size_t g = 0; g < s.reference.size(); ++g) {
        const GeoMean& mean = s.reference[g];
        report::Bar bar;
        bar.label = reference.gpus()[g].name;
        bar.muted = true;
        bar.color = kMutedColor;
        bar.value = mean.value;
        bar.text = mean.value ? format_significant(*mean.value) : "OOM";
        if (mean.counted.size() < mean.of) {
          bar.text += fmt::format(" ({} of {})", mean.counted.size(), mean.of);
        }
        bar.tooltip = fmt::format("{}, {} (2020): geometric mean {} over {}", s.family,
                                  bar.label, bar.text,
                                  mean.counted.empty() ? "no model" : join(mean.counted, ", "));
        group.bars.push_back(bar);
      }
      chart.groups.push_back(group);
    }
    chart.description = fmt::format(
        "Horizontal bars on a linear axis, one group per family summary ({}): the geometric "
        "mean of each run's normalized throughput, then each 2020 GPU's over the same models.",
        join(groups, "; "));
    out_ << "<figure>\n" << report::render_bar_chart(chart) << "</figure>\n";
  }

  void section(const report::Section& s) {
    out_ << "<h2 id=\"" << html_escape(s.id) << "\">" << html_escape(s.title) << "</h2>\n";
    table(s);
  }

  void table(const report::Section& s) {
    auto classes = [&](std::size_t column, const std::string& text, bool header) {
      std::vector<std::string> names;
      const bool message = s.headers[column] == "message";  // text, after the numbers
      if (column >= s.left_columns && !message) names.push_back("num");
      if (s.reference_from > 0 && column >= s.reference_from) names.push_back("ref");
      if (!header && message) names.push_back("message");
      if (!header && (text == "OOM" || text == "no-fit")) names.push_back("oom");
      if (!header && (text == "failed" || text == "crashed" || text == "timeout")) {
        names.push_back("fail");
      }
      return names.empty() ? std::string() : " class=\"" + join(names, " ") + "\"";
    };
    out_ << "<div class=\"scroll\">\n<table>\n<thead><tr>";
    for (std::size_t i = 0; i < s.headers.size(); ++i) {
      out_ << "<th" << classes(i, s.headers[i], true) << " scope=\"col\">"
           << html_escape(s.headers[i]) << "</th>";
    }
    out_ << "</tr></thead>\n<tbody>\n";
    for (const auto& row : s.rows) {
      out_ << "<tr>";
      for (std::size_t i = 0; i < s.headers.size(); ++i) {
        const std::string text = i < row.size() ? row[i] : "";
        // A one-line cell stays one line: a name of a megabyte would push the table off the page.
        const bool message = s.headers[i] == "message";
        out_ << "<td" << classes(i, text, false) << ">"
             << html_escape(message ? shortened(text, 4000) : shortened(text, 200)) << "</td>";
      }
      out_ << "</tr>\n";
    }
    out_ << "</tbody>\n</table>\n</div>\n";
    note_list(s.notes);
  }

  void note_list(const std::vector<std::string>& notes) {
    if (notes.empty()) return;
    out_ << "<ul class=\"notes\">\n";
    for (const auto& note : notes)
      out_ << "<li>" << html_escape(shortened(note, 4000)) << "</li>\n";
    out_ << "</ul>\n";
  }
};

}  // namespace

std::unique_ptr<Reporter> make_html_reporter(std::ostream& out) {
  return std::make_unique<HtmlReporter>(out);
}

}  // namespace gpubench
