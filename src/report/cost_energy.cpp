// Cost and energy per unit of work (issue 46): prices per hour from `report --price-per-hour`
// (a run's own are on its records already, JobRecord::cost), the arithmetic from a record to $
// per million units, units per $, J per unit and units per kWh, the throttle mark and its
// footnote (issue 42), and the report's "Energy and cost per unit of work" table.
#include "gpubench/report/reporter.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "src/report/sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace gpubench {

namespace {

std::string lowercase(std::string text) {
  for (auto& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

/// A record's device as the prices name it: its name, or its type where it has none.
std::string priced_device(const JobRecord& job) {
  return job.device.name.empty() ? job.device.type : job.device.name;
}

/// Whether `wanted` (as a user typed it) names `device`, case-insensitively: the whole name, or
/// words of it ("H200" for "NVIDIA H200", "H100" for "NVIDIA H100 80GB HBM3", "A100" for
/// "NVIDIA A100-SXM4-80GB", "RTX 3090" for "NVIDIA GeForce RTX 3090").
bool names_device(const std::string& wanted, const std::string& device) {
  const std::string want = lowercase(wanted), name = lowercase(device);
  if (want.empty()) return false;
  for (auto at = name.find(want); at != std::string::npos; at = name.find(want, at + 1)) {
    const std::size_t end = at + want.size();
    const bool starts = at == 0 || name[at - 1] == ' ' || name[at - 1] == '-';
    const bool ends = end == name.size() || name[end] == ' ' || name[end] == '-';
    if (starts && ends) return true;
  }
  return false;
}

/// Whether `wanted` is `device`'s whole name, or all of it but the vendor ("H200").
bool is_device(const std::string& wanted, const std::string& device) {
  const std::string want = lowercase(wanted), name = lowercase(device);
  const auto space = name.find(' ');
  return name == want || (space != std::string::npos && name.substr(space + 1) == want);
}

/// The price in a value as typed, or a ConfigError that names the flag, the GPU and the fix.
double price_of(const std::string& text, const std::string& gpu, const std::string& value) {
  std::size_t used = 0;
  double usd = 0;
  try {
    usd = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GPUBENCH_CHECK(used > 0 && used == text.size() && std::isfinite(usd) && usd > 0, ConfigError,
                 "--price-per-hour{}: expected a price in USD per hour above 0, got '{}' (give "
                 "GPU=USD, say H100=2.49, or a plain 2.49 when every record ran on one device)",
                 gpu.empty() ? std::string() : " " + gpu, value);
  return usd;
}

/// The window's units per joule (clocks.energy) when the counter gave one: finite and above 0.
std::optional<double> window_units_per_joule(const JobRecord& job) {
  const std::optional<double> v = job.clocks.units_per_joule();
  return v && std::isfinite(*v) && *v > 0 ? v : std::nullopt;
}

}  // namespace

// ---- Prices per hour ----

std::vector<HourlyPrice> parse_hourly_prices(const std::vector<std::string>& values) {
  std::vector<HourlyPrice> out;
  for (const auto& value : values) {
    HourlyPrice p;
    const auto eq = value.rfind('=');
    if (eq == std::string::npos) {
      p.usd_per_hour = price_of(value, "", value);
    } else {
      p.gpu = value.substr(0, eq);
      GPUBENCH_CHECK(!p.gpu.empty(), ConfigError,
                     "--price-per-hour: expected GPU=USD (say, H100=2.49), got '{}'", value);
      p.usd_per_hour = price_of(value.substr(eq + 1), p.gpu, value);
    }
    for (const auto& other : out) {
      GPUBENCH_CHECK(!p.gpu.empty() && !other.gpu.empty(), ConfigError,
                     "--price-per-hour: a plain price ({}) is every record's, so it cannot stand "
                     "beside another; give each GPU its own as GPU=USD",
                     format_number(p.gpu.empty() ? p.usd_per_hour : other.usd_per_hour));
      GPUBENCH_CHECK(lowercase(other.gpu) != lowercase(p.gpu), ConfigError,
                     "--price-per-hour: {} is given twice; give each GPU one price", p.gpu);
    }
    out.push_back(p);
  }
  return out;
}

void apply_hourly_prices(std::vector<JobRecord>& jobs, const std::vector<HourlyPrice>& prices) {
  std::vector<std::string> devices;
  for (const auto& job : jobs) {
    const std::string device = priced_device(job);
    if (!device.empty() && std::find(devices.begin(), devices.end(), device) == devices.end()) {
      devices.push_back(device);
    }
  }
  const std::string measured = devices.empty() ? std::string("none") : join(devices, ", ");
  for (const auto& price : prices) {
    if (price.gpu.empty()) {
      GPUBENCH_CHECK(devices.size() <= 1, ConfigError,
                     "--price-per-hour {}: these files hold records of {} devices ({}); give "
                     "each its price as GPU=USD (say, --price-per-hour H100=2.49)",
                     format_number(price.usd_per_hour), devices.size(), measured);
    }
    std::vector<std::string> named;  // the devices this price is for: a whole name first
    for (const auto& device : devices) {
      if (price.gpu.empty() || is_device(price.gpu, device)) named.push_back(device);
    }
    if (named.empty()) {  // else words of names: "H100" for "NVIDIA H100 80GB HBM3"
      for (const auto& device : devices) {
        if (names_device(price.gpu, device)) named.push_back(device);
      }
    }
    GPUBENCH_CHECK(price.gpu.empty() || !named.empty(), ConfigError,
                   "--price-per-hour {}: no record in these files ran on a device of that name "
                   "(measured: {}); name one of those, as in H200=3.5",
                   price.gpu, measured);
    GPUBENCH_CHECK(named.size() <= 1, ConfigError,
                   "--price-per-hour {}: that names {} devices ({}); give each its price under "
                   "its whole name",
                   price.gpu, named.size(), join(named, ", "));
    for (auto& job : jobs) {
      if (job.search_only || named.empty() || priced_device(job) != named.front()) continue;
      job.cost = JobCost{price.usd_per_hour, "report --price-per-hour"};
    }
  }
}

// ---- The arithmetic ----

int priced_cards(const JobRecord& job) {
  if (!job.data_parallel) return 1;
  const int64_t n = job.data_parallel->world_size;
  return n >= 1 && n <= 1'000'000 ? static_cast<int>(n) : 1;
}

std::optional<double> usd_per_million_units(const JobRecord& job) {
  if (!job.cost || !(job.cost->usd_per_hour > 0) || !job.ok() || job.search_only ||
      !(job.throughput > 0)) {
    return std::nullopt;
  }
  const double usd_per_second = job.cost->usd_per_hour * priced_cards(job) / 3600.0;
  return usd_per_second / job.throughput * 1e6;
}

std::optional<double> units_per_usd(const JobRecord& job) {
  if (!usd_per_million_units(job)) return std::nullopt;
  return job.throughput * 3600.0 / (job.cost->usd_per_hour * priced_cards(job));
}

std::optional<double> joules_per_unit(const JobRecord& job) {
  if (!job.ok() || job.search_only) return std::nullopt;
  const auto per_joule = window_units_per_joule(job);
  if (!per_joule) return std::nullopt;
  return 1.0 / *per_joule;
}

std::optional<double> units_per_kwh(const JobRecord& job) {
  if (!joules_per_unit(job)) return std::nullopt;
  return *window_units_per_joule(job) * 3.6e6;
}

bool throttled(const JobRecord& job) { return job.clocks.throttled.value_or(false); }

std::string throttle_note(const JobRecord& job) {
  return job.clocks.throttle_note.value_or(std::string());
}

namespace report {

std::string throttle_mark(const JobRecord& job) {
  return throttled(job) && job.ok() && !job.search_only ? std::string(" ") + kThrottleMark : "";
}

std::vector<std::string> throttle_notes(const std::vector<JobRecord>& jobs) {
  std::vector<std::string> notes;
  for (const auto& job : jobs) {
    if (throttle_mark(job).empty()) continue;
    const std::string note = throttle_note(job);
    notes.push_back(fmt::format(
        "{}: the GPU was throttled over the timed window, so the throughput may be low: {} ({}, "
        "{}): {}",
        kThrottleMark, job.model, priced_device(job), job.precision,
        note.empty() ? std::string("clocks.throttled is set") : note));
  }
  return notes;
}

std::string compact_count(double value) {
  static const char* const kSuffixes[] = {"", " k", " M", " G", " T"};
  int i = 0;
  while (std::fabs(value) >= 1000 && i < 4) {
    value /= 1000;
    ++i;
  }
  return format_significant(value, 3) + kSuffixes[i];
}

namespace {

/// The notes under the energy and cost table: what each column is, and the prices used.
std::vector<std::string> energy_cost_notes(const std::vector<const JobRecord*>& rows,
                                           bool energy, bool cost) {
  std::vector<std::string> notes;
  if (energy) {
    std::string note =
        "J/unit: the energy the GPU's counter (NVML) measured over the timed window, per "
        "throughput unit; units/kWh = 3,600,000 / (J/unit); -: no energy reading (a CPU run, or "
        "a GPU without NVML)";
    if (std::any_of(rows.begin(), rows.end(), [](const JobRecord* j) {
          return priced_cards(*j) > 1;
        })) {
      note += "; a data-parallel row's energy is rank 0's card over rank 0's units";
    }
    notes.push_back(note);
  }
  if (cost) {
    std::vector<std::string> prices;
    for (const JobRecord* j : rows) {
      if (!j->cost) continue;
      const std::string price = fmt::format("{} ${}/h ({})", priced_device(*j),
                                            format_number(j->cost->usd_per_hour), j->cost->source);
      if (std::find(prices.begin(), prices.end(), price) == prices.end()) prices.push_back(price);
    }
    notes.push_back(fmt::format(
        "$/h is one card's price per hour (N x: a data-parallel job's N cards); $/M units = $/h x "
        "cards / 3600 / throughput x 1,000,000; units/$ = throughput x 3600 / ($/h x cards); "
        "prices: {}",
        join(prices, "; ")));
  }
  return notes;
}

}  // namespace

std::optional<Section> energy_cost_section(const ReportView& view) {
  std::vector<const JobRecord*> rows;
  bool energy = false, cost = false;
  for (const auto& job : view.jobs) {
    const bool has_energy = joules_per_unit(job).has_value();
    const bool has_cost = usd_per_million_units(job).has_value();
    if (!has_energy && !has_cost) continue;
    rows.push_back(&job);
    energy = energy || has_energy;
    cost = cost || has_cost;
  }
  if (rows.empty()) return std::nullopt;
  Section s;
  s.id = "energy-cost";
  s.title = "Energy and cost per unit of work (a unit is what the row's throughput counts)";
  s.headers = {"model", "device", "precision", "throughput"};
  if (energy) s.headers.insert(s.headers.end(), {"J/unit", "units/kWh"});
  if (cost) s.headers.insert(s.headers.end(), {"$/h", "$/M units", "units/$"});
  s.left_columns = 3;
  auto or_dash = [](const std::optional<double>& v, std::string (*text)(double)) {
    return v ? text(*v) : std::string("-");
  };
  auto three = [](double v) { return format_significant(v, 3); };
  for (const JobRecord* j : rows) {
    std::vector<std::string> row = {
        j->model, priced_device(*j), j->precision,
        fmt::format("{} {}", format_significant(j->throughput, 4), j->throughput_unit) +
            throttle_mark(*j)};
    if (energy) {
      row.push_back(or_dash(joules_per_unit(*j), three));
      row.push_back(or_dash(units_per_kwh(*j), compact_count));
    }
    if (cost) {
      const auto per_million = usd_per_million_units(*j);
      const int cards = priced_cards(*j);
      row.push_back(!per_million ? std::string("-")
                    : cards > 1  ? fmt::format("{} x {}", cards,
                                               format_number(j->cost->usd_per_hour))
                                 : format_number(j->cost->usd_per_hour));
      row.push_back(or_dash(per_million, three));
      row.push_back(or_dash(units_per_usd(*j), compact_count));
    }
    s.rows.push_back(std::move(row));
  }
  s.notes = energy_cost_notes(rows, energy, cost);
  return s;
}

}  // namespace report

}  // namespace gpubench
