#include "gpubench/report/reporter.h"

#include "gpubench/config.h"
#include "gpubench/errors.h"
#include "gpubench/strings.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace gpubench {

// Defined in the reporter files.
std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, GridStyle style);
std::unique_ptr<Reporter> make_csv_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_json_reporter(std::ostream& out);

namespace {

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
  c.device = job.device.name.empty() ? job.device.type : job.device.name;
  c.precision = job.precision;
  c.memory_cap_gib = job.memory_cap_gib;
  c.label = short_device_name(job.device) + " " + job.precision;
  if (job.memory_cap_gib) c.label += " @" + format_number(*job.memory_cap_gib) + "GiB";
  return c;
}

bool same_column(const RunColumn& a, const RunColumn& b) {
  return a.device == b.device && a.precision == b.precision && a.memory_cap_gib == b.memory_cap_gib;
}

std::string reference_row_of(const JobRecord& job) {
  if (job.normalized) return job.normalized->reference_row;
  if (job.config.contains("reference_2020") && job.config["reference_2020"].is_object()) {
    return job.config["reference_2020"].value("row", std::string());
  }
  return "";
}

}  // namespace

Comparison build_comparison(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) {
  Comparison c;
  for (const auto& job : jobs) {
    auto row = std::find(c.models.begin(), c.models.end(), job.model);
    std::size_t r = static_cast<std::size_t>(row - c.models.begin());
    if (row == c.models.end()) {
      c.models.push_back(job.model);
      c.units.push_back(job.throughput_unit);
      c.batch_units.push_back(job.batch_unit);
      const std::string name = reference_row_of(job);
      c.reference.push_back(name.empty() ? nullptr : reference.find_row(name));
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
    cell.normalized.reset();
    if (c.reference[r] && job.ok() && job.normalized) {
      cell.normalized =
          normalized_score(job.throughput, reference.baseline_throughput(*c.reference[r]));
    }
  }
  return c;
}

// ---- Flat columns ----

namespace {
std::string number(double v) { return format_number(v); }
std::string integer(int64_t v) { return std::to_string(v); }

int64_t total_params(const JobRecord& j) {
  int64_t total = 0;
  for (const auto& [network, count] : j.trainable_params) total += count;
  return total;
}

std::string search_summary(const JobRecord& j) {
  if (!j.search) return j.batch_source == "flag" ? "--batch" : j.batch_source;
  return fmt::format("{} probes, {:.1f} s", j.search->probes.size(), j.search->seconds);
}

std::string normalized_text(const JobRecord& j) {
  return j.normalized ? format_significant(j.normalized->score) : "-";
}
}  // namespace

const std::vector<ResultColumn>& result_columns() {
  static const std::vector<ResultColumn> columns = {
      {"model", "model", [](const JobRecord& j) { return j.model; }, nullptr},
      {"family", "family", [](const JobRecord& j) { return j.family; }, nullptr},
      {"device", "device", [](const JobRecord& j) { return j.device.name; }, nullptr},
      {"device_type", "type", [](const JobRecord& j) { return j.device.type; }, nullptr},
      {"precision", "precision", [](const JobRecord& j) { return j.precision; }, nullptr},
      {"emulated", "emulated",
       [](const JobRecord& j) { return std::string(j.emulated ? "true" : "false"); }, nullptr},
      {"memory_cap_gib", "cap",
       [](const JobRecord& j) { return j.memory_cap_gib ? number(*j.memory_cap_gib) : ""; },
       nullptr},
      {"status", "status", [](const JobRecord& j) { return j.status; }, nullptr},
      {"batch", "batch", [](const JobRecord& j) { return integer(j.batch); },
       [](const JobRecord& j) { return fmt::format("{} {}", j.batch, j.batch_unit); }},
      {"batch_unit", "batch unit", [](const JobRecord& j) { return j.batch_unit; }, nullptr},
      {"batch_source", "batch from", [](const JobRecord& j) { return j.batch_source; }, nullptr},
      {"max_batch", "max batch",
       [](const JobRecord& j) { return j.search ? integer(j.search->max_batch) : ""; }, nullptr},
      {"largest_pow2_batch", "pow2 batch",
       [](const JobRecord& j) { return j.search ? integer(j.search->largest_pow2) : ""; }, nullptr},
      {"search_probes", "probes",
       [](const JobRecord& j) {
         return j.search ? integer(static_cast<int64_t>(j.search->probes.size())) : "";
       },
       nullptr},
      {"search_seconds", "search s",
       [](const JobRecord& j) { return j.search ? number(j.search->seconds) : ""; },
       [](const JobRecord& j) { return search_summary(j); }},
      {"throughput", "throughput", [](const JobRecord& j) { return number(j.throughput); },
       [](const JobRecord& j) {
         return fmt::format("{} {}", format_significant(j.throughput, 4), j.throughput_unit);
       }},
      {"throughput_unit", "unit", [](const JobRecord& j) { return j.throughput_unit; }, nullptr},
      {"normalized_score", "vs RTX 8000",
       [](const JobRecord& j) { return j.normalized ? number(j.normalized->score) : ""; },
       [](const JobRecord& j) { return normalized_text(j); }},
      {"rtx8000_2020_throughput", "RTX 8000 2020",
       [](const JobRecord& j) {
         return j.normalized ? number(j.normalized->baseline_throughput) : "";
       },
       nullptr},
      {"rtx8000_2020_max_batch", "RTX 8000 batch",
       [](const JobRecord& j) {
         return j.normalized ? number(j.normalized->baseline_max_batch) : "";
       },
       nullptr},
      {"step_time_ms_median", "step median",
       [](const JobRecord& j) { return number(j.timing.median_ms); },
       [](const JobRecord& j) {
         return fmt::format("{} ms", format_significant(j.timing.median_ms));
       }},
      {"step_time_ms_mean", "step mean",
       [](const JobRecord& j) { return number(j.timing.mean_ms); }, nullptr},
      {"step_time_ms_min", "step min", [](const JobRecord& j) { return number(j.timing.min_ms); },
       nullptr},
      {"step_time_ms_max", "step max", [](const JobRecord& j) { return number(j.timing.max_ms); },
       nullptr},
      {"step_time_ms_stddev", "step stddev",
       [](const JobRecord& j) { return number(j.timing.stddev_ms); }, nullptr},
      {"timed_steps", "steps", [](const JobRecord& j) { return integer(j.timing.steps); }, nullptr},
      {"window_seconds", "window s",
       [](const JobRecord& j) { return number(j.timing.window_seconds); }, nullptr},
      {"peak_memory_bytes", "peak memory",
       [](const JobRecord& j) { return integer(j.peak_memory_bytes); },
       [](const JobRecord& j) { return format_bytes(static_cast<double>(j.peak_memory_bytes)); }},
      {"bytes_per_sample", "per sample",
       [](const JobRecord& j) { return j.search ? number(j.search->bytes_per_sample) : ""; },
       nullptr},
      {"fixed_bytes", "fixed",
       [](const JobRecord& j) { return j.search ? number(j.search->fixed_bytes) : ""; }, nullptr},
      {"trainable_params", "params", [](const JobRecord& j) { return integer(total_params(j)); },
       nullptr},
      {"wall_seconds", "wall", [](const JobRecord& j) { return number(j.wall_seconds); },
       [](const JobRecord& j) { return fmt::format("{:.1f} s", j.wall_seconds); }},
      {"gpubench_commit", "commit",
       [](const JobRecord& j) {
         return j.environment.contains("gpubench")
                    ? j.environment["gpubench"].value("git_commit", std::string())
                    : std::string();
       },
       nullptr},
      {"created_utc", "created", [](const JobRecord& j) { return j.created_utc; }, nullptr},
      {"message", "message", [](const JobRecord& j) { return j.message; }, nullptr},
  };
  return columns;
}

// ---- Factory and reading ----

const std::vector<std::string>& report_formats() {
  static const std::vector<std::string> formats = {"table", "md", "csv", "json"};
  return formats;
}

std::unique_ptr<Reporter> make_reporter(const std::string& format, std::ostream& out) {
  if (format == "table") return make_table_reporter(out, GridStyle::kPlain);
  if (format == "md") return make_table_reporter(out, GridStyle::kMarkdown);
  if (format == "csv") return make_csv_reporter(out);
  if (format == "json") return make_json_reporter(out);
  throw ConfigError(fmt::format("--format: unknown format '{}'{}; choose one of {}", format,
                                did_you_mean(format, report_formats()),
                                join(report_formats(), ", ")));
}

std::vector<JobRecord> read_results(const std::vector<std::string>& paths) {
  std::vector<JobRecord> jobs;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    GPUBENCH_CHECK(in.good(), ConfigError,
                   "result file '{}' cannot be read (check the path; 'gpubench run --json FILE' "
                   "writes one)",
                   path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const ResultDocument doc = ResultDocument::from_json(parse_json(buffer.str(), path), path);
    for (auto job : doc.jobs) {
      if (job.environment.empty()) job.environment = doc.environment;
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

// ---- Grids ----

void render_grid(std::ostream& out, const std::vector<std::string>& headers,
                 const std::vector<std::vector<std::string>>& rows, std::size_t left_columns,
                 GridStyle style) {
  std::vector<std::size_t> width(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) width[c] = headers[c].size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto cell = [&](const std::string& text, std::size_t c) {
    const std::string pad(width[c] - std::min(width[c], text.size()), ' ');
    return c < left_columns ? text + pad : pad + text;
  };
  auto line = [&](const std::vector<std::string>& values) {
    std::string text;
    for (std::size_t c = 0; c < headers.size(); ++c) {
      const std::string value = cell(c < values.size() ? values[c] : "", c);
      if (style == GridStyle::kMarkdown) {
        text += (c == 0 ? "| " : " | ") + value;
      } else {
        text += (c == 0 ? "" : "  ") + value;
      }
    }
    if (style == GridStyle::kMarkdown) {
      text += " |";
    } else {
      text.erase(text.find_last_not_of(' ') + 1);
    }
    out << text << '\n';
  };
  line(headers);
  if (style == GridStyle::kMarkdown) {
    std::string rule;
    for (std::size_t c = 0; c < headers.size(); ++c) {
      const std::string dashes(std::max<std::size_t>(3, width[c]) - 1, '-');
      rule += c < left_columns ? "| :" + dashes + " " : "| " + dashes + ": ";
    }
    out << rule << "|\n";
  } else {
    std::string rule;
    for (std::size_t c = 0; c < headers.size(); ++c) {
      rule += (c == 0 ? "" : "  ") + std::string(width[c], '-');
    }
    out << rule << '\n';
  }
  for (const auto& row : rows) line(row);
}

}  // namespace gpubench
