#include "gpubench/report/reporter.h"

#include "gpubench/config/config.h"
#include "gpubench/base/errors.h"
#include "gpubench/records/journal.h"
#include "gpubench/base/strings.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>

namespace gpubench {

// Defined in the reporter files.
std::unique_ptr<Reporter> make_table_reporter(std::ostream& out, GridStyle style,
                                              std::size_t max_width);
std::unique_ptr<Reporter> make_csv_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_summary_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_json_reporter(std::ostream& out);
std::unique_ptr<Reporter> make_html_reporter(std::ostream& out);

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

std::string raw(const std::optional<double>& v) { return v ? number(*v) : std::string(); }

std::optional<double> as_number(const std::optional<int64_t>& v) {
  return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
}

/// The repeat summary's measurement that a column reads (RepeatSummary::power_w_mean, ...).
using RepeatMeasure = std::optional<MedianRange> RepeatSummary::*;

/// What a column reads of the timed window (ClocksRecord::power_mean_w, ...).
using WindowMeasure = std::optional<double> (ClocksRecord::*)() const;

/// A GPU measurement of the timed window (`window` of the record's clocks), or with repeats the
/// median over the timed runs (`summary` of repeat_summary), as the throughput is.
std::optional<double> over_runs(const JobRecord& j, RepeatMeasure summary, WindowMeasure window) {
  if (j.repeat_summary && (*j.repeat_summary).*summary) {
    return ((*j.repeat_summary).*summary)->median;
  }
  return (j.clocks.*window)();
}

std::string raw_over_runs(const JobRecord& j, RepeatMeasure summary, WindowMeasure window) {
  return raw(over_runs(j, summary, window));
}

/// A text at `path` in a record's environment ("" where it has none or it is not text).
std::string environment_text(const JobRecord& j, std::initializer_list<const char*> path) {
  const Json* at = json_at(j.environment, path);
  return at != nullptr && at->is_string() ? at->get<std::string>() : std::string();
}

/// A CSV cell of a value that may be missing.
std::string raw_optional(const std::optional<double>& v) { return v ? number(*v) : std::string(); }

/// The per-unit singular of a throughput unit: "images/s" -> "images".
std::string unit_of(const JobRecord& j) {
  return j.throughput_unit.substr(0, j.throughput_unit.find('/'));
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
      {"search_only", "search only",
       [](const JobRecord& j) { return std::string(j.search_only ? "true" : "false"); }, nullptr},
      {"memory_cap_gib", "cap",
       [](const JobRecord& j) { return j.memory_cap_gib ? number(*j.memory_cap_gib) : ""; },
       nullptr},
      {"status", "status", [](const JobRecord& j) { return std::string(to_string(j.status)); },
       nullptr},
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
      // A job that failed or diverged has no throughput: an empty value, a dash on screen.
      {"throughput", "throughput",
       [](const JobRecord& j) { return j.ok() ? number(j.throughput) : std::string(); },
       [](const JobRecord& j) {
         if (!j.ok()) return std::string("-");
         return fmt::format("{} {}", format_significant(j.throughput, 4), j.throughput_unit);
       }},
      {"throughput_unit", "unit", [](const JobRecord& j) { return j.throughput_unit; }, nullptr},
      // Repeated timed runs (run.repeat >= 2): how many trained, and the mean's 95% interval.
      {"throughput_runs", "runs",
       [](const JobRecord& j) {
         return j.throughput_stats ? integer(j.throughput_stats->n) : std::string();
       },
       nullptr},
      {"throughput_ci95_low", "95% low",
       [](const JobRecord& j) {
         return j.ok() && j.throughput_stats ? number(j.throughput_stats->ci95_low) : "";
       },
       nullptr},
      {"throughput_ci95_high", "95% high",
       [](const JobRecord& j) {
         return j.ok() && j.throughput_stats ? number(j.throughput_stats->ci95_high) : "";
       },
       nullptr},
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
         if (j.timing.steps == 0) return std::string("-");
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
      // The GPU over the window (NVML): clock, power, energy; a dash where it was not sampled.
      {"sm_clock_mhz_median", "SM clock",
       [](const JobRecord& j) {
         return raw_over_runs(j, &RepeatSummary::sm_clock_mhz_median,
                              &ClocksRecord::sm_clock_median_mhz);
       },
       [](const JobRecord& j) {
         const auto v = over_runs(j, &RepeatSummary::sm_clock_mhz_median,
                                  &ClocksRecord::sm_clock_median_mhz);
         return v ? fmt::format("{:.0f} MHz", *v) : std::string("-");
       }},
      {"sm_clock_max_mhz", "max clock",
       [](const JobRecord& j) { return raw(as_number(j.clocks.sm_clock_max_mhz)); }, nullptr},
      {"power_w_mean", "power",
       [](const JobRecord& j) {
         return raw_over_runs(j, &RepeatSummary::power_w_mean, &ClocksRecord::power_mean_w);
       },
       [](const JobRecord& j) {
         const auto v = over_runs(j, &RepeatSummary::power_w_mean, &ClocksRecord::power_mean_w);
         return v ? fmt::format("{:.0f} W", *v) : std::string("-");
       }},
      {"power_limit_w", "power limit",
       [](const JobRecord& j) { return raw(j.clocks.power_limit_w); }, nullptr},
      {"throttled", "throttled",
       [](const JobRecord& j) {
         // With repeats: throttled when any timed run was.
         if (j.repeat_summary) {
           return std::string(j.repeat_summary->throttled_runs > 0 ? "true" : "false");
         }
         return j.clocks.throttled ? std::string(*j.clocks.throttled ? "true" : "false")
                                   : std::string();
       },
       nullptr},
      {"joules_per_step", "J/step",
       [](const JobRecord& j) {
         return j.clocks.energy ? number(j.clocks.energy->joules_per_step) : std::string();
       },
       nullptr},
      // Performance per watt: units per joule is (units/s) per (J/s).
      {"units_per_joule", "per joule",
       [](const JobRecord& j) {
         return j.ok() ? raw_over_runs(j, &RepeatSummary::units_per_joule,
                                       &ClocksRecord::units_per_joule)
                       : std::string();
       },
       [](const JobRecord& j) {
         const auto v = over_runs(j, &RepeatSummary::units_per_joule,
                                  &ClocksRecord::units_per_joule);
         if (!j.ok() || !v) return std::string("-");
         return fmt::format("{} {}/J", format_significant(*v, 3), unit_of(j));
       }},
      {"flops_per_unit", "FLOPs/unit",
       [](const JobRecord& j) { return raw(j.compute.flops_per_unit); }, nullptr},
      {"tflops", "TFLOP/s",
       [](const JobRecord& j) { return j.ok() ? raw(j.compute.tflops) : std::string(); },
       [](const JobRecord& j) {
         const auto& v = j.compute.tflops;
         return j.ok() && v ? format_significant(*v, 3) : std::string("-");
       }},
      {"peak_tflops", "peak TFLOP/s",
       [](const JobRecord& j) { return raw(j.compute.peak_tflops); }, nullptr},
      {"peak_share", "of peak",
       [](const JobRecord& j) {
         return j.ok() ? raw(j.compute.peak_share) : std::string();
       },
       [](const JobRecord& j) {
         const auto& v = j.compute.peak_share;
         return j.ok() && v ? fmt::format("{:.0f}%", 100 * *v) : std::string("-");
       }},
      {"window_alloc_retries", "alloc retries",
       [](const JobRecord& j) {
         const auto& counters = j.memory.allocator_counters_window;
         return counters ? number(static_cast<double>(counters->alloc_retries)) : std::string();
       },
       nullptr},
      {"outside_allocator_bytes", "outside allocator",
       [](const JobRecord& j) {
         const auto& bytes = j.memory.outside_allocator_bytes;
         return bytes ? number(static_cast<double>(*bytes)) : std::string();
       },
       nullptr},
      {"peak_memory_bytes", "peak memory",
       [](const JobRecord& j) { return integer(j.peak_memory_bytes); },
       [](const JobRecord& j) {
         if (j.peak_memory_bytes == 0) return std::string("-");
         return format_bytes(static_cast<double>(j.peak_memory_bytes));
       }},
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
      // CSV schema 2 (docs/output.md): columns are only ever appended, after the last.
      {"schema_version", "schema", [](const JobRecord&) { return integer(kCsvSchemaVersion); },
       nullptr},
      {"host", "host", [](const JobRecord& j) { return environment_text(j, {"host"}); }, nullptr},
      {"os", "os", [](const JobRecord& j) { return environment_text(j, {"os"}); }, nullptr},
      {"driver", "driver",
       [](const JobRecord& j) {
         return environment_text(j, {"software", "driver"});
       },
       nullptr},
      {"cuda_runtime", "CUDA",
       [](const JobRecord& j) {
         return environment_text(j, {"software", "cuda_runtime"});
       },
       nullptr},
      {"cudnn", "cuDNN",
       [](const JobRecord& j) {
         return environment_text(j, {"software", "cudnn"});
       },
       nullptr},
      {"libtorch", "libtorch",
       [](const JobRecord& j) {
         return environment_text(j, {"software", "libtorch"});
       },
       nullptr},
      // CSV schema 3 (issue 46): cost and energy per unit of work, and why a GPU was throttled.
      {"usd_per_hour", "$/h",
       [](const JobRecord& j) { return j.cost ? number(j.cost->usd_per_hour) : std::string(); },
       nullptr},
      {"price_source", "price from",
       [](const JobRecord& j) { return j.cost ? j.cost->source : std::string(); }, nullptr},
      {"usd_per_million_units", "$/M units",
       [](const JobRecord& j) { return raw_optional(usd_per_million_units(j)); }, nullptr},
      {"units_per_usd", "units/$",
       [](const JobRecord& j) { return raw_optional(units_per_usd(j)); }, nullptr},
      {"joules_per_unit", "J/unit",
       [](const JobRecord& j) { return raw_optional(joules_per_unit(j)); }, nullptr},
      {"units_per_kwh", "units/kWh",
       [](const JobRecord& j) { return raw_optional(units_per_kwh(j)); }, nullptr},
      {"throttle_note", "throttle note", [](const JobRecord& j) { return throttle_note(j); },
       nullptr},
  };
  return columns;
}

// ---- Prices ----

namespace {
std::string price_key(std::string text) {
  for (auto& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}
}  // namespace

std::vector<PriceSpec> parse_prices(const std::vector<std::string>& values) {
  std::vector<PriceSpec> out;
  for (const auto& value : values) {
    const auto eq = value.rfind('=');
    GPUBENCH_CHECK(eq != std::string::npos && eq > 0, ConfigError,
                   "--price: expected GPU=USD (say, H200=30000), got '{}'", value);
    PriceSpec p;
    p.gpu = value.substr(0, eq);
    const std::string usd = value.substr(eq + 1);
    std::size_t used = 0;
    try {
      p.usd = std::stod(usd, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GPUBENCH_CHECK(used > 0 && used == usd.size() && std::isfinite(p.usd) && p.usd > 0, ConfigError,
                   "--price {}: expected a price in USD above 0, got '{}'", p.gpu, usd);
    for (const auto& other : out) {
      GPUBENCH_CHECK(price_key(other.gpu) != price_key(p.gpu), ConfigError,
                     "--price: {} is given twice; give each GPU one price", p.gpu);
    }
    out.push_back(p);
  }
  return out;
}

void apply_prices(ReferenceTable& reference, const std::vector<PriceSpec>& prices,
                  const std::vector<JobRecord>& jobs) {
  std::vector<std::string> devices;
  for (const auto& job : jobs) {
    if (job.device.type == "cpu" || job.device.name.empty()) continue;
    if (std::find(devices.begin(), devices.end(), job.device.name) == devices.end()) {
      devices.push_back(job.device.name);
    }
  }
  for (const auto& price : prices) {
    const std::string wanted = price_key(price.gpu);
    std::string match;
    for (const auto& device : devices) {
      const std::string name = price_key(device);
      const auto space = name.find(' ');
      if (name == wanted || (space != std::string::npos && name.substr(space + 1) == wanted)) {
        match = device;
      }
    }
    GPUBENCH_CHECK(!match.empty(), ConfigError,
                   "--price {}: no record in these files ran on a GPU of that name (measured: "
                   "{})",
                   price.gpu, devices.empty() ? std::string("none") : join(devices, ", "));
    reference.set_measured_price(match, price.usd);
  }
}

// ---- Factory and reading ----

const std::vector<std::string>& report_formats() {
  static const std::vector<std::string> formats = {"summary", "table", "md", "csv", "json", "html"};
  return formats;
}

std::unique_ptr<Reporter> make_reporter(const std::string& format, std::ostream& out,
                                        std::size_t max_width) {
  if (format == "summary") return make_summary_reporter(out);
  if (format == "table") return make_table_reporter(out, GridStyle::kPlain, max_width);
  if (format == "md") return make_table_reporter(out, GridStyle::kMarkdown, 0);
  if (format == "csv") return make_csv_reporter(out);
  if (format == "json") return make_json_reporter(out);
  if (format == "html") return make_html_reporter(out);
  throw ConfigError(fmt::format("--format: unknown format '{}'{}; choose one of {}", format,
                                did_you_mean(format, report_formats()),
                                join(report_formats(), ", ")));
}

namespace {

std::string read_text(const std::string& path) {
  struct stat st {};
  GPUBENCH_CHECK(!(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)), ConfigError,
                 "result file '{}' is a folder (give the result files or journals in it)", path);
  std::ifstream in(path, std::ios::binary);
  GPUBENCH_CHECK(in.good(), ConfigError,
                 "result file '{}' cannot be read (check the path; 'gpubench run --json FILE' "
                 "writes one)",
                 path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  GPUBENCH_CHECK(!in.bad(), ConfigError, "result file '{}' cannot be read", path);
  return buffer.str();
}

}  // namespace

ResultFiles read_result_files(const std::vector<std::string>& paths) {
  ResultFiles files;
  for (const auto& path : paths) {
    const std::string text = read_text(path);  // a missing or unreadable file fails here
    if (is_journal_file(path)) {
      const Journal journal = read_journal(path);
      for (const auto& job : journal.jobs) files.jobs.push_back(job);
      if (journal.torn_tail) {
        files.notes.push_back(fmt::format(
            "{}: the last line was cut short (a run killed while writing it) and is left out",
            path));
      }
      continue;
    }
    GPUBENCH_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, ConfigError,
                   "result file '{}' is empty (a run writes its --json file after its first job)",
                   path);
    const ResultDocument doc = ResultDocument::from_json(parse_json(text, path), path);
    for (auto job : doc.jobs) {
      if (job.environment.empty()) job.environment = doc.environment;
      files.jobs.push_back(std::move(job));
    }
  }
  // Records written before CPU rows and modified jobs lost their 2020 score (2026-12-06) are
  // read as today's runs write them.
  for (auto& job : files.jobs) {
    if (job.normalized && (job.on_cpu() || !job.modifications().empty())) job.normalized.reset();
  }
  return files;
}

std::vector<JobRecord> read_results(const std::vector<std::string>& paths) {
  return read_result_files(paths).jobs;
}

// ---- Grids ----

void render_grid(std::ostream& out, const std::vector<std::string>& headers,
                 const std::vector<std::vector<std::string>>& rows, std::size_t left_columns,
                 GridStyle style) {
  // Cells hold model names, device names and messages from files anyone can write: each is one
  // line of literal text (markdown-escaped, or terminal-safe and at most kMaxCell bytes).
  constexpr std::size_t kMaxCell = 200;
  auto safe = [style](const std::string& text) {
    if (style == GridStyle::kMarkdown) return markdown_escape(text);
    std::string one_line = text;
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    return terminal_text(one_line, kMaxCell);
  };
  std::vector<std::vector<std::string>> escaped;
  escaped.reserve(rows.size());
  for (const auto& row : rows) {
    escaped.emplace_back();
    for (const auto& text : row) escaped.back().push_back(safe(text));
  }
  std::vector<std::size_t> width(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) width[c] = headers[c].size();
  for (const auto& row : escaped) {
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
  for (const auto& row : escaped) line(row);
}

}  // namespace gpubench
