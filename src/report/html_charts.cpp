// The HTML report's charts as BarCharts (see html_charts.h): throughput per workload beside the
// 2020 GPUs, the family geometric means, throughput per dollar and per joule, the precision gain
// per card, data-parallel scaling and memory tiers. Every value comes from the report's view
// (the comparison, the tier tables, the scaling rows), the numbers the tables beside print.
//
// The scale. A 2026 GPU can be 40x an RTX 8000 while a 2020 card is 0.3x. Options were a log
// axis, a broken axis, or a linear axis with the value printed at every bar. Linear it is, from 0:
// bar length stays proportional to speed (a log axis makes 40x look like 2x more than 20x), and
// the printed values carry the small differences between the 2020 cards (which the tables give
// exactly). Bars are at least 1 px wide. The throughput charts are one per workload (issue 46
// item 5; they were one panel per family), each on its own axis, so a workload where the new
// cards are 5x is not squeezed beside one where they are 50x; the family means chart compares
// across workloads. Charts whose groups are in different units (images per $ beside tokens per $,
// a batch of sequences beside one of tokens) scale each group's bars to its largest (1.0) and
// print the value in its unit at each bar.
#include "src/report/html_charts.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace gpubench::report {

namespace {

constexpr const char* kScalingColor = "#1f5fbf";
constexpr const char* kCapColor = "#1f5fbf";
constexpr const char* kUncappedColor = "#1e8449";

/// A name from the records in a title or a group label: at most 120 bytes.
std::string name(const std::string& text) { return shortened(text, 120); }

/// What a throughput unit counts: "images" for "images/s" ("units" when it says nothing).
std::string unit_noun(const std::string& throughput_unit) {
  std::string noun = throughput_unit;
  if (noun.size() > 2 && noun.compare(noun.size() - 2, 2, "/s") == 0) {
    noun.resize(noun.size() - 2);
  }
  return noun.empty() ? "units" : shortened(noun, 40);
}

std::string ratio_text(double v) { return format_significant(v) + "x"; }

/// A measured cell that has no number: "OOM" for a no-fit, else its status.
std::string status_text(JobStatus status) {
  return status == JobStatus::no_fit ? "OOM" : to_string(status);
}

std::string cap_text(double gib) { return format_number(gib) + " GiB"; }

/// Scales each bar with a value to the group's largest (1.0).
void scale_to_largest(BarGroup& group) {
  double largest = 0;
  for (const auto& bar : group.bars) {
    if (bar.value) largest = std::max(largest, *bar.value);
  }
  if (!(largest > 0)) return;
  for (auto& bar : group.bars) {
    if (bar.value) bar.value = *bar.value / largest;
  }
}

/// Chart ids unique in the page, built from record text.
class Ids {
 public:
  std::string make(const std::string& stem) {
    std::string id = stem;
    for (int n = 2; !used_.insert(id).second; ++n) id = fmt::format("{}-{}", stem, n);
    return id;
  }

 private:
  std::set<std::string> used_;
};

BarChart workload_chart(const Comparison& c, std::size_t r, const ReferenceTable& reference,
                        const std::string& id) {
  const ReferenceRow& row = *c.reference[r];
  const std::string& base = reference.baseline().name;
  BarChart chart;
  chart.id = id;
  chart.marker = 1.0;
  chart.title = fmt::format("{} (2020: {}): throughput normalized to the {}", name(c.models[r]),
                            row.model, base);
  chart.axis_label = fmt::format("throughput / the {}'s 2020 throughput on {} (ratio, linear)",
                                 base, row.model);
  BarGroup measured{"measured runs (device, precision)", {}};
  std::vector<std::string> labels;
  for (std::size_t k = 0; k < c.runs.size(); ++k) {
    const RunCell& cell = c.cells[r][k];
    if (!cell.present) continue;
    Bar bar;
    bar.label = c.runs[k].label;
    bar.color = run_color(k);
    labels.push_back(shortened(bar.label, 60));
    if (cell.status == JobStatus::ok && cell.normalized) {
      bar.value = *cell.normalized;
      bar.text = format_significant(*cell.normalized);
      bar.tooltip = fmt::format("{}, {}: {} x {} (batch {} {}, {} {})", name(c.models[r]),
                                bar.label, bar.text, base, cell.batch, c.batch_units[r],
                                format_significant(cell.throughput, 4), c.units[r]);
    } else {
      bar.text = normalized_text(cell);
    }
    measured.bars.push_back(bar);
  }
  BarGroup lambda{"Lambda 2020 GPUs", {}};
  for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
    Bar bar;
    bar.label = reference.gpus()[g].name;
    bar.muted = true;
    bar.color = kMutedColor;
    if (row.throughput[g] > 0) {
      bar.value = reference.normalized(row, g);
      bar.text = format_significant(*bar.value);
      bar.tooltip = fmt::format("{}, {} (2020): {} x {} (batch {})", name(c.models[r]), bar.label,
                                bar.text, base, format_number(row.max_batch[g]));
    } else {
      bar.text = "OOM";
    }
    lambda.bars.push_back(bar);
  }
  if (!measured.bars.empty()) chart.groups.push_back(std::move(measured));
  chart.groups.push_back(std::move(lambda));
  chart.description = fmt::format(
      "Horizontal bars on a linear axis from 0: the measured runs ({}), then the {} GPUs of "
      "Lambda's 2020 table, each as its throughput on {} ({}) divided by the {}'s 2020 "
      "throughput on the same model; the value is printed at each bar and a dashed line marks "
      "1.0, the {}.",
      labels.empty() ? std::string("none") : join(labels, ", "), reference.gpus().size(),
      name(c.models[r]), c.units[r], base, base);
  return chart;
}

/// Throughput per dollar (`dollars`) or per joule, from the comparison's cells.
std::optional<BarChart> per_unit_chart(const ReportView& view, bool dollars) {
  const Comparison& c = view.comparison;
  BarChart chart;
  chart.id = dollars ? "chart-per-dollar" : "chart-per-joule";
  std::vector<std::string> models;
  for (std::size_t r = 0; r < c.models.size(); ++r) {
    const std::string noun = unit_noun(c.units[r]);
    BarGroup group{fmt::format("{} ({} per {})", name(c.models[r]), noun,
                               dollars ? "dollar" : "joule"),
                   {}};
    for (std::size_t k = 0; k < c.runs.size(); ++k) {
      const RunCell& cell = c.cells[r][k];
      const std::optional<double> value = dollars ? cell.units_per_usd : cell.units_per_joule;
      if (!cell.present || !value || !(*value > 0)) continue;
      Bar bar;
      bar.label = c.runs[k].label;
      bar.color = run_color(k);
      bar.value = *value;
      if (dollars) {
        bar.text = fmt::format("{} {}/$", compact_count(*value), noun);
        bar.tooltip = fmt::format("{}, {}: {} {} per dollar; ${} per million {}",
                                  name(c.models[r]), bar.label, compact_count(*value), noun,
                                  format_significant(cell.usd_per_million_units.value_or(0), 3),
                                  noun);
      } else {
        bar.text = fmt::format("{} {}/J", format_significant(*value), noun);
        bar.tooltip = fmt::format("{}, {}: {} {} per joule; {} J per unit; {} {} per kWh",
                                  name(c.models[r]), bar.label, format_significant(*value), noun,
                                  format_significant(1.0 / *value), compact_count(*value * 3.6e6),
                                  noun);
      }
      group.bars.push_back(bar);
    }
    if (group.bars.empty()) continue;
    scale_to_largest(group);
    models.push_back(name(c.models[r]));
    chart.groups.push_back(std::move(group));
  }
  if (chart.groups.empty()) return std::nullopt;
  if (dollars) {
    chart.title = "Throughput per dollar: units of work per $ at each run's price per hour";
    chart.axis_label =
        "units per $ / the workload's best run (ratio, linear); each bar prints units per $";
    chart.description = fmt::format(
        "Horizontal bars, one group per workload ({}): each measured run with a price per hour, "
        "as the units of work it trains per dollar (throughput x 3600 / (price per hour x "
        "cards)). Units differ between workloads, so each group's bars are scaled to its best "
        "run (1.0), and the value in units per $ is printed at each bar.",
        join(models, ", "));
  } else {
    chart.title = "Throughput per joule: units of work per J of GPU energy";
    chart.axis_label =
        "units per J / the workload's best run (ratio, linear); each bar prints units per J";
    chart.description = fmt::format(
        "Horizontal bars, one group per workload ({}): each measured run with an energy reading, "
        "as the units of work it trains per joule (the throughput over the mean power that "
        "NVML's energy counter gave for the timed window). Units differ between workloads, so "
        "each group's bars are scaled to its best run (1.0), and the value in units per J is "
        "printed at each bar.",
        join(models, ", "));
  }
  return chart;
}

}  // namespace

const std::string& run_color(std::size_t k) {
  static const std::vector<std::string> colors = {"#c0392b", "#1f5fbf", "#1e8449",
                                                  "#d35400", "#7d3c98", "#117a8b"};
  return colors[k % colors.size()];
}

std::string id_slug(const std::string& text) {
  std::string slug;
  for (char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (std::isalnum(byte) && byte < 0x80) {
      slug += static_cast<char>(std::tolower(byte));
    } else if (!slug.empty() && slug.back() != '-') {
      slug += '-';
    }
    if (slug.size() >= 60) break;
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "x" : slug;
}

std::vector<FamilyCharts> workload_charts(const ReportView& view, const ReferenceTable& reference) {
  const Comparison& c = view.comparison;
  std::vector<FamilyCharts> out;
  for (const auto& row : reference.rows()) {  // the 2020 table's order: image, then language
    if (std::any_of(out.begin(), out.end(),
                    [&](const FamilyCharts& f) { return f.family == row.family; })) {
      continue;
    }
    bool charted = false;
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      charted = charted || (c.reference[r] && c.families[r] == row.family);
    }
    if (charted) out.push_back({row.family, {}});
  }
  Ids ids;
  for (auto& family : out) {
    for (std::size_t r = 0; r < c.models.size(); ++r) {
      if (!c.reference[r] || c.families[r] != family.family) continue;
      const std::string id = ids.make("chart-" + id_slug(family.family) + "-" + id_slug(c.models[r]));
      family.charts.push_back(workload_chart(c, r, reference, id));
    }
  }
  return out;
}

BarChart summary_chart(const ReportView& view, const ReferenceTable& reference) {
  const Comparison& c = view.comparison;
  BarChart chart;
  chart.id = "chart-summary";
  chart.marker = 1.0;
  chart.title = fmt::format("Geometric mean of normalized throughput per family ({} = 1.00)",
                            reference.baseline().name);
  chart.axis_label = fmt::format("geometric mean of throughput / {}'s 2020 throughput (linear)",
                                 reference.baseline().name);
  std::vector<std::string> groups;
  for (const auto& s : view.summary) {
    BarGroup group;
    group.label = fmt::format("{}: {} of {} models", s.family, s.models.size(),
                              s.models.size() + s.missing.size());
    if (!s.missing.empty()) group.label += " (not " + join(s.missing, ", ") + ")";
    groups.push_back(group.label);
    for (std::size_t k = 0; k < s.runs.size(); ++k) {
      if (!s.runs[k] || !s.runs[k]->value) continue;
      Bar bar;
      bar.label = c.runs[k].label;
      bar.color = run_color(k);
      bar.value = *s.runs[k]->value;
      bar.text = format_significant(*bar.value);
      bar.tooltip = fmt::format("{}, {}: geometric mean {} over {}", s.family, bar.label,
                                bar.text, join(s.runs[k]->counted, ", "));
      group.bars.push_back(bar);
    }
    for (std::size_t g = 0; g < s.reference.size(); ++g) {
      const GeoMean& mean = s.reference[g];
      Bar bar;
      bar.label = reference.gpus()[g].name;
      bar.muted = true;
      bar.color = kMutedColor;
      bar.value = mean.value;
      bar.text = mean.value ? format_significant(*mean.value) : "OOM";
      if (mean.counted.size() < mean.of) {
        bar.text += fmt::format(" ({} of {})", mean.counted.size(), mean.of);
      }
      bar.tooltip = fmt::format("{}, {} (2020): geometric mean {} over {}", s.family, bar.label,
                                bar.text,
                                mean.counted.empty() ? "no model" : join(mean.counted, ", "));
      group.bars.push_back(bar);
    }
    chart.groups.push_back(group);
  }
  chart.description = fmt::format(
      "Horizontal bars on a linear axis, one group per family summary ({}): the geometric "
      "mean of each run's normalized throughput, then each 2020 GPU's over the same models.",
      join(groups, "; "));
  return chart;
}

std::optional<BarChart> per_dollar_chart(const ReportView& view) {
  return per_unit_chart(view, /*dollars=*/true);
}

std::optional<BarChart> per_joule_chart(const ReportView& view) {
  return per_unit_chart(view, /*dollars=*/false);
}

std::optional<BarChart> precision_gain_chart(const ReportView& view) {
  const Comparison& c = view.comparison;
  // (fp32 column, other column) pairs of one device; capped and same-batch runs measure another
  // thing than the precision, so they are left out.
  auto plain = [&](std::size_t k) { return !c.runs[k].memory_cap_gib && !c.runs[k].same_batch; };
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (std::size_t other = 0; other < c.runs.size(); ++other) {
    if (!plain(other) || c.runs[other].precision == "fp32") continue;
    for (std::size_t fp32 = 0; fp32 < c.runs.size(); ++fp32) {
      if (plain(fp32) && c.runs[fp32].precision == "fp32" &&
          c.runs[fp32].device == c.runs[other].device) {
        pairs.emplace_back(fp32, other);
        break;
      }
    }
  }
  BarChart chart;
  chart.id = "chart-precision-gain";
  chart.marker = 1.0;
  std::vector<std::vector<double>> logs(pairs.size());
  std::vector<std::vector<std::string>> over(pairs.size());  // the workloads of each mean
  std::vector<std::string> models;
  for (std::size_t r = 0; r < c.models.size(); ++r) {
    BarGroup group{fmt::format("{} ({})", name(c.models[r]), c.units[r]), {}};
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto [fp32, other] = pairs[i];
      const RunCell& base = c.cells[r][fp32];
      const RunCell& cell = c.cells[r][other];
      if (!base.present || !cell.present) continue;
      Bar bar;
      bar.label = c.runs[other].label;
      bar.color = run_color(other);
      const bool ok = base.status == JobStatus::ok && cell.status == JobStatus::ok &&
                      base.throughput > 0 && cell.throughput > 0;
      if (ok) {
        const double gain = cell.throughput / base.throughput;
        bar.value = gain;
        bar.text = ratio_text(gain);
        bar.tooltip = fmt::format(
            "{}, {}: {} {} at batch {} over fp32's {} {} at batch {}: {}", name(c.models[r]),
            bar.label, format_significant(cell.throughput, 4), c.units[r], cell.batch,
            format_significant(base.throughput, 4), c.units[r], base.batch, bar.text);
        logs[i].push_back(std::log(gain));
        over[i].push_back(name(c.models[r]));
      } else {
        bar.text =
            base.status != JobStatus::ok
                ? fmt::format("no ratio: fp32 {}", status_text(base.status))
                : fmt::format("no ratio: {} {}", c.runs[other].precision, status_text(cell.status));
      }
      group.bars.push_back(bar);
    }
    if (group.bars.empty()) continue;
    models.push_back(name(c.models[r]));
    chart.groups.push_back(std::move(group));
  }
  if (chart.groups.empty()) return std::nullopt;
  if (chart.groups.size() > 1) {
    BarGroup mean{"geometric mean per card and precision over its workloads", {}};
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (logs[i].empty()) continue;
      double sum = 0;
      for (double v : logs[i]) sum += v;
      const double gain = std::exp(sum / static_cast<double>(logs[i].size()));
      Bar bar;
      bar.label = c.runs[pairs[i].second].label;
      bar.color = run_color(pairs[i].second);
      bar.value = gain;
      bar.text = fmt::format("{} ({})", ratio_text(gain),
                             counted(static_cast<int64_t>(logs[i].size()), "workload"));
      bar.tooltip = fmt::format("{}: geometric mean {} over {}", bar.label, ratio_text(gain),
                                join(over[i], ", "));
      mean.bars.push_back(bar);
    }
    if (!mean.bars.empty()) chart.groups.push_back(std::move(mean));
  }
  chart.title = "Precision gain per card: throughput at each precision over fp32 on the same card";
  chart.axis_label =
      "throughput / the same card's fp32 throughput on the workload (ratio, linear; 1.0 = fp32)";
  chart.description = fmt::format(
      "Horizontal bars on a linear axis from 0, one group per workload ({}): each run at another "
      "precision than fp32 (amp-bf16, tf32, ...) as its throughput over the fp32 run's on the "
      "same device and workload, each at its own batch (the search's, usually larger at a lower "
      "precision); a dashed line marks 1.0, fp32; the last group is each run's geometric mean "
      "over the workloads it has a ratio for.",
      join(models, ", "));
  return chart;
}

std::optional<BarChart> scaling_chart(const ReportView& view) {
  const std::vector<const JobRecord*> rows = scaling_rows(view);
  if (rows.empty()) return std::nullopt;
  BarChart chart;
  chart.id = "chart-scaling";
  chart.marker = 100.0;
  chart.min_axis_max = 150.0;  // the efficiencies are about 100%: room for their texts
  std::vector<std::string> groups;
  for (const JobRecord* j : rows) {
    const std::string device = j->device.name.empty() ? j->device.type : j->device.name;
    const std::string label = fmt::format("{}, {}, {}", name(j->model), j->precision, device);
    if (chart.groups.empty() || chart.groups.back().label != label) {
      chart.groups.push_back({label, {}});
      groups.push_back(label);
    }
    const int n = world_size_of(*j);
    const bool one_device = !j->data_parallel;
    Bar bar;
    bar.label = one_device ? "1 device (baseline)"
                           : fmt::format("{} rank{} ({})", n, n == 1 ? "" : "s", backend_of(*j));
    bar.color = kScalingColor;
    const std::string throughput =
        fmt::format("{} {}", format_significant(j->throughput, 4), j->throughput_unit);
    const auto efficiency = scaling_efficiency(*j, view.jobs);
    if (!j->ok()) {
      bar.text = status_text(j->status);
    } else if (one_device) {
      bar.value = 100.0;
      bar.muted = true;
      bar.color = kMutedColor;
      bar.text = fmt::format("100% ({}, batch {})", throughput, j->batch);
      bar.tooltip = fmt::format("{}: one device, {} at batch {}", label, throughput, j->batch);
    } else if (efficiency) {
      bar.value = *efficiency * 100;
      bar.text = fmt::format("{:.1f}% ({} in total)", *efficiency * 100, throughput);
      bar.tooltip = fmt::format("{}: {} ranks at batch {} per rank, {} in total, {:.1f}% of {} x "
                                "the one-device throughput",
                                label, n, j->batch, throughput, *efficiency * 100, n);
    } else {
      bar.text = fmt::format("no efficiency: no one-device run at batch {}", j->batch);
    }
    chart.groups.back().bars.push_back(bar);
  }
  chart.title =
      "Data-parallel scaling efficiency: throughput over (ranks x the one-device throughput)";
  chart.axis_label = "scaling efficiency (%, linear; 100% = linear scaling)";
  chart.description = fmt::format(
      "Horizontal bars on a linear axis from 0, one group per workload, precision and device "
      "({}): the one-device run at 100%, then each data-parallel run's throughput summed over its "
      "ranks divided by the ranks times the one-device throughput at the same per-rank batch; a "
      "dashed line marks 100%, and each bar prints the efficiency and the summed throughput.",
      join(groups, "; "));
  return chart;
}

BarChart memory_tier_chart(const ReportView& view, std::size_t table,
                           const ReferenceTable& reference) {
  const MemoryTierTable& t = view.tiers.at(table);
  BarChart chart;
  chart.id = fmt::format("chart-memory-tiers-{}", table + 1);
  chart.title = fmt::format("Memory tiers, {}: max batch per emulated memory cap", t.label);
  chart.axis_label =
      "max batch / the model's largest in this chart (ratio, linear); each bar prints the batch";
  std::vector<std::string> models;
  for (std::size_t m = 0; m < t.models.size(); ++m) {
    BarGroup group{fmt::format("{} (batch in {})", name(t.models[m]), t.batch_units[m]), {}};
    for (std::size_t i = 0; i < t.cells[m].size(); ++i) {
      const MaxBatchCell& cell = t.cells[m][i];
      if (!cell.present) continue;
      const bool uncapped = i >= t.caps_gib.size();
      Bar bar;
      bar.label = uncapped ? "uncapped" : cap_text(t.caps_gib[i]) + " cap";
      bar.color = uncapped ? kUncappedColor : kCapColor;
      bar.text = max_batch_text(cell);
      if (cell.max_batch && *cell.max_batch > 0) {
        bar.value = static_cast<double>(*cell.max_batch);
        bar.tooltip = fmt::format("{}, {} {}: max batch {} {}", name(t.models[m]), t.label,
                                  bar.label, *cell.max_batch, t.batch_units[m]);
      }
      group.bars.push_back(bar);
    }
    if (const ReferenceRow* row = t.reference[m]) {
      for (const auto& tier : t.reference_tiers) {
        Bar bar;
        bar.label = "2020 " + format_number(tier.memory_gb) + " GB";
        bar.muted = true;
        bar.color = kMutedColor;
        bar.text = reference_tier_text(tier, *row);
        double largest = 0;
        for (std::size_t g : tier.gpus) {
          if (row->throughput[g] > 0) largest = std::max(largest, row->max_batch[g]);
        }
        if (largest > 0) {
          bar.value = largest;
          bar.tooltip = fmt::format("{}, 2020 max batch of {}: {}", name(t.models[m]),
                                    reference_tier_name(tier, reference), bar.text);
        }
        group.bars.push_back(bar);
      }
    }
    if (group.bars.empty()) continue;
    scale_to_largest(group);
    models.push_back(name(t.models[m]));
    chart.groups.push_back(std::move(group));
  }
  chart.description = fmt::format(
      "Horizontal bars, one group per model ({}): the search's largest fitting batch under each "
      "emulated memory cap on {}{}, then the 2020 max batch of the cards of the closest memory "
      "size (the larger where they differ). Batch units differ between models, so each group's "
      "bars are scaled to its largest (1.0), and the batch is printed at each bar (OOM: none fit).",
      models.empty() ? std::string("none") : join(models, ", "), t.label,
      t.has_uncapped ? " and without a cap" : "");
  return chart;
}

std::string figure(const BarChart& chart, bool caption) {
  std::string out = "<figure>\n";
  if (caption) out += "<figcaption>" + html_escape(chart.title) + "</figcaption>\n";
  return out + render_bar_chart(chart) + "</figure>\n";
}

}  // namespace gpubench::report
