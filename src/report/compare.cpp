#include "gpubench/report/compare.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/report/reporter.h"
#include "src/report/sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace gpubench {

namespace {

/// Jobs pair by these: model, precision, memory cap. The rest of the identity decides whether a
/// pair is comparable (identity_differences).
std::string pairing_key(const JobRecord& r) {
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

/// `json[key]` where json is an object holding it; nullptr otherwise (records are read from
/// files, so a field may have any shape).
const Json* member(const Json& json, const char* key) {
  if (!json.is_object()) return nullptr;
  const auto it = json.find(key);
  return it == json.end() ? nullptr : &*it;
}

/// The model's `attention` setting ("stored", "fused"); empty for a model without one.
std::string attention_of(const JobRecord& r) {
  const Json* model = member(r.config, "model");
  const Json* attention = model ? member(*model, "attention") : nullptr;
  return attention && attention->is_string() ? attention->get<std::string>() : std::string();
}

/// One section of the record's resolved config, where the record holds it as an object.
const Json* config_section(const JobRecord& r, const char* section) {
  const Json* found = member(r.config, section);
  return found && found->is_object() ? found : nullptr;
}

constexpr std::pair<const char*, const char*> kConfigSections[] = {
    {"model", "model config"}, {"optimizer", "optimizer config"}, {"runtime", "runtime config"}};

/// The keys of one config section that count (the model's attention is a field of its own,
/// named in words), split by which record holds them: both, or one side only (a gpubench of
/// another version wrote the other record, with settings this one added or dropped).
struct SectionKeys {
  const Json* a = nullptr;
  const Json* b = nullptr;
  std::set<std::string> shared;
  std::vector<std::string> only_a, only_b;
};

/// The section's keys, where both records hold it (none: nullopt).
std::optional<SectionKeys> section_keys(const JobRecord& a, const JobRecord& b,
                                        const char* section) {
  SectionKeys k{config_section(a, section), config_section(b, section), {}, {}, {}};
  if (!k.a || !k.b) return std::nullopt;
  auto counts = [section](const std::string& key) {
    return !(std::string(section) == "model" && key == "attention");
  };
  for (const auto& item : k.a->items()) {
    if (!counts(item.key())) continue;
    if (k.b->contains(item.key())) {
      k.shared.insert(item.key());
    } else {
      k.only_a.push_back(item.key());
    }
  }
  for (const auto& item : k.b->items()) {
    if (counts(item.key()) && !k.a->contains(item.key())) k.only_b.push_back(item.key());
  }
  std::sort(k.only_a.begin(), k.only_a.end());  // named in the order of their names
  std::sort(k.only_b.begin(), k.only_b.end());
  return k;
}

/// A digest of a section's `keys` alone (the first 8 hex digits of json_digest: FNV-1a over its
/// JSON with the keys sorted, so that the order they were written in does not count).
std::string config_digest(const Json& section, const std::set<std::string>& keys) {
  Json kept = Json::object();
  for (const auto& key : keys) kept[key] = section.at(key);
  return json_digest(kept).substr(0, 8);  // the upper 32 bits of the 64-bit FNV-1a
}

/// The config keys that one side's record holds and the other's lacks, section by section
/// ("runtime fused_loss only in B"). They are not compared: the pair is judged on the keys both
/// hold (identity_differences), and the comparison says which were left out.
std::string unshared_config_keys(const JobRecord& a, const JobRecord& b) {
  std::vector<std::string> parts;
  for (const auto& [section, field] : kConfigSections) {
    const auto k = section_keys(a, b, section);
    if (!k) continue;
    for (const auto& [only, side] : {std::pair{&k->only_a, "A"}, std::pair{&k->only_b, "B"}}) {
      if (!only->empty()) {
        parts.push_back(fmt::format("{} {} only in {}", section, join(*only, ", "), side));
      }
    }
  }
  return join(parts, "; ");
}

/// The identity fields in which two records of one model, precision and memory cap differ,
/// in the order compare_results lists them.
std::vector<IdentityDifference> identity_differences(const JobRecord& a, const JobRecord& b) {
  std::vector<IdentityDifference> out;
  auto differ = [&out](const char* field, const std::string& x, const std::string& y) {
    if (x != y) out.push_back({field, x, y});
  };
  auto or_none = [](const std::string& s) { return s.empty() ? std::string("none") : s; };
  if (a.ok() && b.ok()) differ("batch", std::to_string(a.batch), std::to_string(b.batch));
  differ("batch source", or_none(a.batch_source), or_none(b.batch_source));
  differ("world size", std::to_string(report::world_size_of(a)),
         std::to_string(report::world_size_of(b)));
  // Attention and the config digests only where both records hold the config: one written by
  // hand or cut is judged on the rest.
  if (!attention_of(a).empty() && !attention_of(b).empty()) {
    differ("attention", attention_of(a), attention_of(b));
  }
  // The config sections on the keys both records hold (unshared_config_keys says which not).
  for (const auto& [section, field] : kConfigSections) {
    if (const auto k = section_keys(a, b, section)) {
      differ(field, config_digest(*k->a, k->shared), config_digest(*k->b, k->shared));
    }
  }
  return out;
}

/// A side's repeats as the tests need them: count, mean and the variance of the mean.
struct Repeats {
  int n = 0;
  double mean = 0, mean_variance = 0;
};

Repeats repeats_of(const SampleStats& s) { return {s.n, s.mean, s.stddev * s.stddev / s.n}; }

/// Welch's t-test of mean B = mean A (unequal variances): the two-sided p-value, with the
/// Welch-Satterthwaite degrees of freedom.
double welch_p_value(const Repeats& a, const Repeats& b) {
  const double variance = a.mean_variance + b.mean_variance;
  const double difference = b.mean - a.mean;
  if (variance == 0) return difference == 0 ? 1.0 : 0.0;  // no spread: any difference is real
  const double df = variance * variance /
                    (a.mean_variance * a.mean_variance / (a.n - 1) +
                     b.mean_variance * b.mean_variance / (b.n - 1));
  return 2 * student_t_cdf(-std::fabs(difference) / std::sqrt(variance), df);
}

/// The 95% interval of mean B / mean A by Fieller's theorem: the rho for which
/// (mean B - rho mean A)^2 <= t^2 (var B + rho^2 var A), the variances those of the means, t at
/// the Welch-Satterthwaite degrees of freedom of var B + r^2 var A (r the ratio itself). Unlike
/// a delta-method interval (r -+ t times a linearized standard error) it needs no symmetry and
/// holds its coverage where A's mean is uncertain; where A's mean is not clear of zero
/// (mean A^2 <= t^2 var A) the set is unbounded and there is none.
std::optional<std::pair<double, double>> ratio_interval(const Repeats& a, const Repeats& b) {
  const double r = b.mean / a.mean;
  const double spread = b.mean_variance + r * r * a.mean_variance;
  if (spread == 0) return std::make_pair(r, r);
  const double df = spread * spread /
                    (b.mean_variance * b.mean_variance / (b.n - 1) +
                     std::pow(r, 4) * a.mean_variance * a.mean_variance / (a.n - 1));
  const double t2 = std::pow(student_t_quantile(0.975, df), 2);
  const double denominator = a.mean * a.mean - t2 * a.mean_variance;
  if (!(denominator > 0)) return std::nullopt;
  // Not negative once the denominator is positive: var B x denominator + mean B^2 var A.
  const double root =
      std::sqrt(t2 * (a.mean * a.mean * b.mean_variance + b.mean * b.mean * a.mean_variance -
                      t2 * a.mean_variance * b.mean_variance));
  return std::make_pair((a.mean * b.mean - root) / denominator,
                        (a.mean * b.mean + root) / denominator);
}

/// "+9.90% past ±2% (--noise, 2% by default)": the relative difference against the threshold.
std::string against_noise(double change, double noise) {
  return fmt::format("{:+.2f}% {} ±{}% (--noise, {}% by default)", 100 * change,
                     std::fabs(change) > noise ? "past" : "within", format_number(100 * noise),
                     format_number(100 * kDefaultCompareNoise));
}

std::string p_text(double p) { return p < 1e-4 ? "p < 0.0001" : fmt::format("p = {:.2g}", p); }

void judge(JobComparison& c, double noise) {
  const JobRecord& a = *c.a;
  const JobRecord& b = *c.b;
  c.differences = identity_differences(a, b);
  if (!c.differences.empty()) {
    c.verdict = "not comparable";
    return;
  }
  if (!a.ok() || !b.ok()) {
    c.verdict = !a.ok() && !b.ok() ? "failed in both" : !a.ok() ? "failed in A" : "failed in B";
    return;
  }
  bool significant = true;  // without repeats on both sides, --noise alone decides
  if (has_interval(a) && has_interval(b) && a.throughput_stats->mean > 0) {
    const Repeats x = repeats_of(*a.throughput_stats);
    const Repeats y = repeats_of(*b.throughput_stats);
    c.ratio = y.mean / x.mean;
    if (const auto interval = ratio_interval(x, y)) {
      c.ratio_ci95_low = interval->first;
      c.ratio_ci95_high = interval->second;
    }
    c.p_value = welch_p_value(x, y);
    significant = *c.p_value < 0.05;
    c.basis = fmt::format("{}; Welch's t on {} and {} repeats: {}, {} at 5%",
                          against_noise(*c.ratio - 1, noise), x.n, y.n, p_text(*c.p_value),
                          significant ? "significant" : "not significant");
  } else {
    c.ratio = a.throughput > 0 ? b.throughput / a.throughput : 0.0;
    c.basis = fmt::format("no interval (one timed run{}): {}",
                          has_interval(a) || has_interval(b) ? " on one side" : " each",
                          against_noise(*c.ratio - 1, noise));
  }
  if (const std::string unshared = unshared_config_keys(a, b); !unshared.empty()) {
    c.basis += fmt::format("; config keys of another gpubench version, not compared: {}",
                           unshared);
  }
  const double change = *c.ratio - 1.0;
  c.verdict = std::fabs(change) <= noise || !significant ? "within noise"
              : change > 0                               ? "faster"
                                                         : "slower";
}

}  // namespace

std::string JobComparison::not_comparable() const {
  std::vector<std::string> parts;
  for (const auto& d : differences) parts.push_back(fmt::format("{} {} vs {}", d.field, d.a, d.b));
  return join(parts, ", ");
}

CompareResult compare_results(const std::vector<JobRecord>& a_records,
                              const std::vector<JobRecord>& b_records, double noise) {
  GPUBENCH_CHECK(noise >= 0 && noise < 1, ConfigError,
                 "--noise: expected a percentage from 0 to 100, got '{}'",
                 format_number(100 * noise));
  const std::vector<JobRecord> a = timed_jobs(a_records);
  const std::vector<JobRecord> b = timed_jobs(b_records);
  std::set<std::string> keys_b;
  for (const auto& r : b) keys_b.insert(pairing_key(r));
  const bool shared = std::any_of(
      a.begin(), a.end(), [&](const JobRecord& r) { return keys_b.count(pairing_key(r)) > 0; });
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
  // Pairs: first the records that agree in every identity field, then each one left over with
  // the free record of its model, precision and cap that it differs from in the fewest.
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> partner(a.size(), kNone);
  std::vector<bool> taken(b.size(), false);
  for (const bool exact : {true, false}) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (partner[i] != kNone) continue;
      std::size_t best = kNone, fewest = 0;
      for (std::size_t j = 0; j < b.size(); ++j) {
        if (taken[j] || pairing_key(b[j]) != pairing_key(a[i])) continue;
        const std::size_t count = identity_differences(a[i], b[j]).size();
        if ((count == 0 || !exact) && (best == kNone || count < fewest)) {
          best = j;
          fewest = count;
        }
      }
      if (best != kNone) {
        partner[i] = best;
        taken[best] = true;
      }
    }
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
  for (std::size_t i = 0; i < a.size(); ++i) {
    add(&a[i], partner[i] == kNone ? nullptr : &b[partner[i]]);
  }
  for (std::size_t j = 0; j < b.size(); ++j) {
    if (!taken[j]) add(nullptr, &b[j]);
  }
  return result;
}

namespace {

std::string throughput_cell(const std::optional<JobRecord>& r) {
  if (!r) return "-";
  if (!r->ok()) return to_string(r->status);
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
    auto optional = [](const std::optional<double>& v) { return v ? Json(*v) : Json(); };
    Json jobs = Json::array();
    for (const auto& c : result.jobs) {
      Json differences = Json::array();
      for (const auto& d : c.differences) {
        differences.push_back({{"field", d.field}, {"a", d.a}, {"b", d.b}});
      }
      jobs.push_back({{"model", c.model},
                      {"precision", c.precision},
                      {"memory_cap_gib", optional(c.memory_cap_gib)},
                      {"a_throughput", c.a && c.a->ok() ? Json(c.a->throughput) : Json()},
                      {"b_throughput", c.b && c.b->ok() ? Json(c.b->throughput) : Json()},
                      {"ratio", optional(c.ratio)},
                      {"verdict", c.verdict},
                      {"basis", c.basis},
                      {"ratio_ci95_low", optional(c.ratio_ci95_low)},
                      {"ratio_ci95_high", optional(c.ratio_ci95_high)},
                      {"p_value", optional(c.p_value)},
                      {"not_comparable", c.differences.empty() ? Json() : Json(c.not_comparable())},
                      {"differences", differences}});
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
    std::string ratio = c.ratio ? fmt::format("{:.3f}", *c.ratio) : "-";
    if (c.ratio_ci95_low && c.ratio_ci95_high) {
      ratio += fmt::format(" ({:.3f}-{:.3f})", *c.ratio_ci95_low, *c.ratio_ci95_high);
    }
    rows.push_back({name, c.precision, throughput_cell(c.a), throughput_cell(c.b), ratio,
                    c.differences.empty() ? c.verdict : c.verdict + ": " + c.not_comparable()});
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
