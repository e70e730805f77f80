// A self-contained HTML page: inline CSS, charts as inline SVG drawn here, no script, no
// external resource, so the file can be mailed, committed or opened offline. Sections:
//
//   gpubench report: H200 fp32, H200 amp-bf16
//   Environment          GPU, memory, driver, CUDA, cuDNN, libtorch, gpubench, host, dates
//   Throughput ...       per family (image, language), one bar chart per workload: each measured
//                        run (device, precision), then the eight 2020 GPUs
//   Geometric mean ...   a chart of the family summaries, and its table
//   then the normalized table, the precision gain per card (a chart), the like-for-like
//   precision and per-$1000 tables, the max-batch table, the memory tiers (a chart and a table
//   each, when there are tier records), the measured jobs (failures with their message),
//   throughput per dollar and per joule (charts, or a note saying why there are none), energy
//   and cost per unit of work, the runs against gpubench's recorded numbers for their card,
//   data-parallel scaling (a chart and the table, with data-parallel records), and the notes.
//
// The charts are built in html_charts.cpp from the same view as the tables. Every text from the
// records (model names, messages, device names) is escaped. Nothing depends on the clock: dates
// come from the records.
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"
#include "src/report/html_charts.h"
#include "src/report/sections.h"
#include "src/report/svg.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace gpubench {

namespace {

using report::html_escape;

const char* kStyle =
    R"(body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1d2329; margin: 24px auto; max-width: 1320px; padding: 0 16px; overflow-wrap: break-word; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid #d9dee3; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
p.lede { color: #56616c; margin-top: 0; }
p.note { color: #56616c; font-size: 13px; }
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
    std::optional<report::Section> scaling = report::scaling_section(view);
    nav(summary.has_value(), max_batch.has_value(), tiers, scaling.has_value());

    environment_section(view.jobs);
    throughput_charts(view, reference);
    if (summary) {
      out_ << "<h2 id=\"summary\">" << html_escape(summary->title) << "</h2>\n";
      out_ << report::figure(report::summary_chart(view, reference), /*caption=*/false);
      table(*summary);
    }
    section(report::normalized_section(view, reference));
    precision_gain(view);
    if (auto s = report::precision_section(view, reference)) section(*s);
    if (auto s = report::cost_section(view, reference)) section(*s);
    if (max_batch) section(*max_batch);
    for (std::size_t i = 0; i < tiers.size(); ++i) {
      heading(tiers[i]);
      out_ << report::figure(report::memory_tier_chart(view, i, reference), /*caption=*/false);
      table(tiers[i]);
    }
    section(report::measured_section(view, /*with_message=*/true));
    per_dollar_and_joule(view);
    if (auto s = report::energy_cost_section(view)) section(*s);
    if (auto s = report::recorded_section(view, reference)) section(*s);
    if (scaling) {
      heading(*scaling);
      if (auto chart = report::scaling_chart(view)) out_ << report::figure(*chart, /*caption=*/false);
      table(*scaling);
    }
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
  void nav(bool summary, bool max_batch, const std::vector<report::Section>& tiers,
           bool scaling) {
    out_ << "<nav><a href=\"#environment\">Environment</a><a href=\"#charts\">Charts</a>";
    if (summary) out_ << "<a href=\"#summary\">Geometric means</a>";
    out_ << "<a href=\"#normalized\">Normalized</a>"
         << "<a href=\"#precision-gain\">Precision gain</a>";
    if (max_batch) out_ << "<a href=\"#max-batch\">Max batch</a>";
    if (!tiers.empty()) out_ << "<a href=\"#" << tiers.front().id << "\">Memory tiers</a>";
    out_ << "<a href=\"#measured\">Measured</a>"
         << "<a href=\"#per-dollar-joule\">Per $ and per J</a>";
    if (scaling) out_ << "<a href=\"#scaling\">Scaling</a>";
    out_ << "</nav>\n";
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

  // One chart per workload, under a heading per family; html_charts.cpp says why each has its
  // own linear axis from 0 with the values printed.
  void throughput_charts(const report::ReportView& view, const ReferenceTable& reference) {
    const Comparison& c = view.comparison;
    out_ << "<h2 id=\"charts\">Throughput normalized to the " << html_escape(reference.baseline().name)
         << "</h2>\n";
    legend(c, reference);
    std::vector<std::string> uncharted;
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      if (!c.reference[r]) uncharted.push_back(c.models[r]);
    }
    const std::vector<report::FamilyCharts> families = report::workload_charts(view, reference);
    if (families.empty()) {
      out_ << "<p>No measured model has a 2020 row, so there is nothing to chart.</p>\n";
      return;
    }
    for (const auto& family : families) {
      out_ << "<h3 id=\"charts-" << report::id_slug(family.family) << "\">"
           << html_escape(capitalized(family.family)) << " models</h3>\n";
      for (const auto& chart : family.charts) out_ << report::figure(chart);
    }
    if (!uncharted.empty()) {
      out_ << "<p class=\"lede\">Not charted (no 2020 row, so no normalized score): "
           << html_escape(shortened(join(uncharted, ", "), 2000)) << ". See the tables.</p>\n";
    }
  }

  void legend(const Comparison& c, const ReferenceTable& reference) {
    out_ << "<ul class=\"legend\">\n";
    for (std::size_t k = 0; k < c.runs.size(); ++k) {
      out_ << "<li><span class=\"swatch\" style=\"background:" << report::run_color(k)
           << "\"></span>" << html_escape(shortened(c.runs[k].label, 200)) << " (measured)</li>\n";
    }
    out_ << "<li><span class=\"swatch\" style=\"background:" << report::kMutedColor
         << "\"></span>Lambda 2020 GPUs (labelled bar by bar)</li>\n"
         << "<li><span class=\"swatch marker\"></span>1.0 = "
         << html_escape(reference.baseline().name) << "</li>\n</ul>\n";
  }

  void precision_gain(const report::ReportView& view) {
    if (auto chart = report::precision_gain_chart(view)) {
      out_ << "<h2 id=\"precision-gain\">" << html_escape(chart->title) << "</h2>\n"
           << report::figure(*chart, /*caption=*/false);
      return;
    }
    out_ << "<h2 id=\"precision-gain\">Precision gain per card</h2>\n";
    note("No device has an fp32 run and a run at another precision (amp-bf16, tf32, ...) of the "
         "same workload, so there is no precision gain to chart.");
  }

  void per_dollar_and_joule(const report::ReportView& view) {
    const auto dollar = report::per_dollar_chart(view);
    const auto joule = report::per_joule_chart(view);
    out_ << "<h2 id=\"per-dollar-joule\">Throughput per dollar and per joule</h2>\n";
    if (!dollar && !joule) {
      note("No record has a price per hour or an energy reading, so there is no per-dollar or "
           "per-joule chart (prices: run or report --price-per-hour; energy: NVML's counter on a "
           "GPU).");
      return;
    }
    if (dollar) {
      out_ << report::figure(*dollar);
    } else {
      note("No record has a price per hour, so there is no per-dollar chart (give one with run or "
           "report --price-per-hour, as in H100=2.49).");
    }
    if (joule) {
      out_ << report::figure(*joule);
    } else {
      note("No record has an energy reading (NVML's counter on a GPU), so there is no per-joule "
           "chart.");
    }
  }

  void note(const std::string& text) {
    out_ << "<p class=\"note\">" << html_escape(text) << "</p>\n";
  }

  void heading(const report::Section& s) {
    out_ << "<h2 id=\"" << html_escape(s.id) << "\">" << html_escape(s.title) << "</h2>\n";
  }

  void section(const report::Section& s) {
    heading(s);
    table(s);
  }

  void table(const report::Section& s) {
    auto classes = [&](std::size_t column, const std::string& text, bool header) {
      std::vector<std::string> names;
      const bool message = s.headers[column] == "message";  // text, after the numbers
      if (column >= s.left_columns && !message) names.push_back("num");
      if (s.reference_from > 0 && column >= s.reference_from) names.push_back("ref");
      if (!header && message) names.push_back("message");
      // A cell that shows a status (sections.cpp): coloured as what the status means.
      const std::optional<JobStatus> status = parse_job_status(text);
      if (!header && (text == "OOM" || status == JobStatus::no_fit)) names.push_back("oom");
      if (!header && (status == JobStatus::failed || status == JobStatus::crashed ||
                      status == JobStatus::timeout)) {
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
