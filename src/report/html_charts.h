// The HTML report's charts (issue 43 item 6, issue 46 item 5), built as BarCharts from the same
// view the tables are made from, so that a chart and the table beside it say the same thing.
// Each builder returns the chart (tests read its bars); figure() renders one as inline SVG.
// Internal to src/report/.
#pragma once

#include "src/report/sections.h"
#include "src/report/svg.h"

#include <optional>
#include <string>
#include <vector>

namespace gpubench::report {

/// The colour of measured run column `k` (Comparison::runs): strong colours in order, so the
/// eye finds the measured bars first; every 2020 bar is kMutedColor.
const std::string& run_color(std::size_t k);
constexpr const char* kMutedColor = "#b3bac2";

/// The throughput charts of one family ("image", "language").
struct FamilyCharts {
  std::string family;
  std::vector<BarChart> charts;
};
/// One chart per workload with a 2020 row: every measured run (device and precision) and then
/// the eight 2020 GPUs, as throughput over the baseline's 2020 throughput on that model, each on
/// its own linear axis with a dashed line at 1.0. Families in the 2020 table's order (image, then
/// language), workloads in the report's row order.
std::vector<FamilyCharts> workload_charts(const ReportView& view, const ReferenceTable& reference);
/// The geometric mean per family summary: each run, then each 2020 GPU over the same models.
BarChart summary_chart(const ReportView& view, const ReferenceTable& reference);

/// Throughput per dollar: per workload, each measured run with a price per hour (JobRecord::cost)
/// as units per $, its bar scaled to the workload's best run; none when no run has a price.
std::optional<BarChart> per_dollar_chart(const ReportView& view);
/// Throughput per joule (NVML's energy counter): as per_dollar_chart, in units per J; none when
/// no run has an energy reading.
std::optional<BarChart> per_joule_chart(const ReportView& view);

/// The precision gain per card: per workload, each uncapped run at another precision than fp32
/// (amp-bf16, tf32, ...) as its throughput over the fp32 run's on the same device, then (with
/// more than one workload) each such run's geometric mean over the workloads it has a ratio for;
/// none when no device has an fp32 run and another of the same workload.
std::optional<BarChart> precision_gain_chart(const ReportView& view);

/// Data-parallel scaling efficiency (scaling_rows, scaling_efficiency) in %: one group per
/// workload, precision and device, one bar per world size, the one-device run at 100%; none
/// without data-parallel jobs.
std::optional<BarChart> scaling_chart(const ReportView& view);

/// Memory tier table `table` (ReportView::tiers) as max batch per cap: one group per model, one
/// bar per cap (and the uncapped search), then the 2020 GPUs of the closest memory sizes; bars
/// scaled to the model's largest batch in the chart, the batch printed in its unit.
BarChart memory_tier_chart(const ReportView& view, std::size_t table,
                           const ReferenceTable& reference);

/// A chart as a <figure>: its title as the caption (unless `caption` is false, where a heading
/// of the same text is above it), then the SVG with its <title> and <desc>.
std::string figure(const BarChart& chart, bool caption = true);

/// `text` as an id fragment: lower-case letters, digits and '-' only ("bert-base").
std::string id_slug(const std::string& text);

}  // namespace gpubench::report
