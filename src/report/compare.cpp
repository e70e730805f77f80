#include "gpubench/report/compare.h"

#include "gpubench/base/errors.h"
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace gpubench {

namespace {

std::string identity(const JobRecord& r) {
  return fmt::format("{}|{}|{}", r.model, r.precision,
                     r.memory_cap_gib ? format_number(*r.memory_cap_gib) : std::string());
}

std::string label(const JobRecord& r) {
  std::string out = r.model + " " + r.precision;
  if (r.memory_cap_gib) out += fmt::format(" @{} GiB", format_number(*r.memory_cap_gib));
  return out;
}

/// The timed jobs of one side, merged (the latest record of each job wins).
std::vector<JobRecord> timed_jobs(const std::vector<JobRecord>& records) {
  std::vector<JobRecord> out;
  for (auto& r : latest_records(records)) {
    if (!r.search_only) out.push_back(std::move(r));
  }
  return out;
}

bool has_interval(const JobRecord& r) { return r.throughput_stats && r.throughput_stats->n > 1; }

void judge(JobComparison& c, double noise) {
  const JobRecord& a = *c.a;
  const JobRecord& b = *c.b;
  if (!a.ok() || !b.ok()) {
    c.verdict = !a.ok() && !b.ok() ? "failed in both" : !a.ok() ? "failed in A" : "failed in B";
    return;
  }
  c.ratio = a.throughput > 0 ? b.throughput / a.throughput : 0.0;
  if (has_interval(a) && has_interval(b)) {
    const SampleStats& x = *a.throughput_stats;
    const SampleStats& y = *b.throughput_stats;
    if (y.ci95_low > x.ci95_high) {
      c.verdict = "faster";
    } else if (y.ci95_high < x.ci95_low) {
      c.verdict = "slower";
    } else {
      c.verdict = "within noise";
    }
    c.basis = c.verdict == "within noise" ? "95% intervals overlap" : "95% intervals apart";
    return;
  }
  const double change = *c.ratio - 1.0;
  c.verdict = std::fabs(change) <= noise ? "within noise" : change > 0 ? "faster" : "slower";
  c.basis = fmt::format("no interval (one timed run{}): the difference against ±{}%",
                        has_interval(a) || has_interval(b) ? " on one side" : " each",
                        format_number(100 * noise));
}

}  // namespace

CompareResult compare_results(const std::vector<JobRecord>& a_records,
                              const std::vector<JobRecord>& b_records, double noise) {
  GPUBENCH_CHECK(noise >= 0 && noise < 1, ConfigError,
                 "--noise: expected a percentage from 0 to 100, got '{}'",
                 format_number(100 * noise));
  const std::vector<JobRecord> a = timed_jobs(a_records);
  const std::vector<JobRecord> b = timed_jobs(b_records);
  std::set<std::string> in_a, in_b;
  for (const auto& r : a) in_a.insert(identity(r));
  for (const auto& r : b) in_b.insert(identity(r));
  const bool shared = std::any_of(a.begin(), a.end(),
                                  [&](const JobRecord& r) { return in_b.count(identity(r)) > 0; });
  if (!shared) {
    auto names = [](const std::vector<JobRecord>& side) {
      std::vector<std::string> out;
      for (const auto& r : side) out.push_back(label(r));
      return out.empty() ? std::string("no timed job") : join(out, ", ");
    };
    throw ConfigError(fmt::format(
        "A and B share no job (A: {}; B: {}); compare runs of the same workloads at the same "
        "precision",
        names(a), names(b)));
  }
  CompareResult result;
  auto add = [&](const JobRecord* x, const JobRecord* y) {
    JobComparison c;
    const JobRecord& any = x ? *x : *y;
    c.model = any.model;
    c.precision = any.precision;
    c.memory_cap_gib = any.memory_cap_gib;
    if (x) c.a = *x;
    if (y) c.b = *y;
    if (x && y) {
      judge(c, noise);
    } else {
      c.verdict = x ? "only in A" : "only in B";
    }
    if (c.regressed()) result.regression = true;
    result.jobs.push_back(std::move(c));
  };
  for (const auto& x : a) {
    const auto y = std::find_if(b.begin(), b.end(),
                                [&](const JobRecord& r) { return identity(r) == identity(x); });
    add(&x, y == b.end() ? nullptr : &*y);
  }
  for (const auto& y : b) {
    if (!in_a.count(identity(y))) add(nullptr, &y);
  }
  return result;
}

namespace {

std::string throughput_cell(const std::optional<JobRecord>& r) {
  if (!r) return "-";
  if (!r->ok()) return r->status;
  std::string cell = fmt::format("{} {}", format_significant(r->throughput, 4), r->throughput_unit);
  if (has_interval(*r)) {
    cell += fmt::format(" ±{}%",
                        format_significant(100 * r->throughput_stats->relative_half_width(), 2));
  }
  return cell;
}

std::string device_of(const std::optional<JobRecord>& r) {
  return r ? (r->device.name.empty() ? r->device.type : r->device.name) : std::string();
}

}  // namespace

void print_comparison(std::ostream& out, const CompareResult& result, const std::string& format) {
  if (format == "json") {
    Json jobs = Json::array();
    for (const auto& c : result.jobs) {
      jobs.push_back({{"model", c.model},
                      {"precision", c.precision},
                      {"memory_cap_gib", c.memory_cap_gib ? Json(*c.memory_cap_gib) : Json()},
                      {"a_throughput", c.a && c.a->ok() ? Json(c.a->throughput) : Json()},
                      {"b_throughput", c.b && c.b->ok() ? Json(c.b->throughput) : Json()},
                      {"ratio", c.ratio ? Json(*c.ratio) : Json()},
                      {"verdict", c.verdict},
                      {"basis", c.basis}});
    }
    out << dump_json(Json{{"regression", result.regression}, {"jobs", jobs}}, 2) << '\n';
    return;
  }
  GPUBENCH_CHECK(format == "table" || format == "md", ConfigError,
                 "--format: unknown format '{}'{}; choose one of table, md, json", format,
                 did_you_mean(format, {"table", "md", "json"}));
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;
  std::set<std::string> a_devices, b_devices;
  for (const auto& c : result.jobs) {
    if (c.a) a_devices.insert(device_of(c.a));
    if (c.b) b_devices.insert(device_of(c.b));
    std::string name = c.model;
    if (c.memory_cap_gib) name += fmt::format(" @{}GiB", format_number(*c.memory_cap_gib));
    rows.push_back({name, c.precision, throughput_cell(c.a), throughput_cell(c.b),
                    c.ratio ? fmt::format("{:.3f}", *c.ratio) : "-", c.verdict});
    if (!c.basis.empty()) notes.push_back(fmt::format("{} {}: {}", name, c.precision, c.basis));
  }
  auto devices = [](const std::set<std::string>& names) {
    return std::vector<std::string>(names.begin(), names.end());
  };
  // Device names and notes come from the records: literal text in markdown, and the whole
  // output made safe for a terminal (render_grid escapes the cells).
  const bool md = format == "md";
  auto text = [md](const std::string& s) { return md ? markdown_escape(s) : s; };
  std::ostringstream body;
  body << text("A: " + join(devices(a_devices), ", ") + "; B: " + join(devices(b_devices), ", "))
       << '\n';
  render_grid(body, {"model", "precision", "A", "B", "B / A", "verdict"}, rows, 2,
              md ? GridStyle::kMarkdown : GridStyle::kPlain);
  if (!notes.empty()) body << '\n';
  for (const auto& line : notes) body << (md ? "- " : "note: ") << text(line) << '\n';
  out << terminal_text(body.str());
}

}  // namespace gpubench
