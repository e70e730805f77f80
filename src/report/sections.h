// The report's tables as text: headers, rows and footnotes, built once from the data model and
// rendered by the terminal, markdown and HTML reporters alike (so all three say the same thing).
// Internal to src/report/.
#pragma once

#include "gpubench/report/reporter.h"

#include <optional>
#include <string>
#include <vector>

namespace gpubench::report {

/// One table of the report.
struct Section {
  std::string id;     ///< HTML anchor: "normalized"
  std::string title;  ///< the heading
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
  std::size_t left_columns = 1;    ///< columns after these are numbers (right-aligned)
  std::size_t reference_from = 0;  ///< first column of 2020 values (0: none); HTML shades them
  std::vector<std::string> notes;  ///< footnotes under the table
};

/// Everything a report shows, computed once.
struct ReportView {
  std::vector<JobRecord> jobs;     ///< merged (latest_records), in first-seen order
  std::size_t superseded = 0;      ///< records replaced by a later one of the same job
  Comparison comparison;           ///< throughput runs only (no memory-tier records)
  std::vector<FamilySummary> summary;
  std::vector<MemoryTierTable> tiers;
};
ReportView make_view(const std::vector<JobRecord>& jobs, const ReferenceTable& reference);

/// Throughput normalized to the baseline, measured columns then the 2020 GPUs.
Section normalized_section(const ReportView& view, const ReferenceTable& reference);
/// Geometric means per family; none when no run measured a model with a 2020 row.
std::optional<Section> summary_section(const ReportView& view, const ReferenceTable& reference);
/// Max batch, measured columns then the 2020 GPUs; none without throughput runs.
std::optional<Section> max_batch_section(const ReportView& view,
                                         const ReferenceTable& reference);
/// Each model with a 2020 row scored by each device's run at the precision the 2020 number was
/// probably measured in (ReferenceRow::precision); none unless some row of the report is not
/// fp32.
std::optional<Section> precision_section(const ReportView& view, const ReferenceTable& reference);
/// The family geometric means per $1000 for the 2020 GPUs and the measured GPUs with a price
/// (report --price); none without a measured price.
std::optional<Section> cost_section(const ReportView& view, const ReferenceTable& reference);
/// One table per device and precision with memory-tier records.
std::vector<Section> memory_tier_sections(const ReportView& view,
                                          const ReferenceTable& reference);
/// One row per throughput job (memory-tier jobs are in their own table); `with_message` adds
/// the message column (HTML shows failures in place; the text formats list them as notes).
Section measured_section(const ReportView& view, bool with_message);
/// Data-parallel scaling (issue 15, src/report/scaling.cpp): one row per world size of each
/// job that ran on several ranks, beside its one-device run; none without data-parallel jobs.
std::optional<Section> scaling_section(const ReportView& view);
/// The scaling table's jobs, in its row order: each timed job of a workload, precision and device
/// that has a data-parallel job, sorted by model, precision, device and world size; empty
/// without data-parallel jobs.
std::vector<const JobRecord*> scaling_rows(const ReportView& view);
/// A record's world size: data_parallel.world_size, else 1.
int world_size_of(const JobRecord& job);
/// A data-parallel record's backend ("nccl", "gloo") as the scaling table and chart show it; "?"
/// where it has none (a record written by hand, or one device).
std::string backend_of(const JobRecord& job);
/// throughput / (ranks x the one-device throughput of the same job in `jobs`), when known.
std::optional<double> scaling_efficiency(const JobRecord& job, const std::vector<JobRecord>& jobs);

/// Energy and cost per unit of work (issue 46, src/report/cost_energy.cpp): one row per timed
/// "ok" job with an energy reading or a price per hour (J/unit, units/kWh, $/h, $/M units,
/// units/$); none when no job has either.
std::optional<Section> energy_cost_section(const ReportView& view);
/// The jobs set against gpubench's recorded numbers for their card (issue 46,
/// src/report/recorded.cpp), with a note per job more than 10% below; none without a match.
std::optional<Section> recorded_section(const ReportView& view, const ReferenceTable& reference);

/// The mark after the throughput of a job whose GPU was throttled (issue 42).
constexpr const char* kThrottleMark = "*";
/// " *" for a timed "ok" job whose GPU was throttled (clocks.throttled), else "".
std::string throttle_mark(const JobRecord& job);
/// A footnote per marked job of `jobs`: "*: the GPU was throttled ...: model (device,
/// precision): clocks.throttle_note".
std::vector<std::string> throttle_notes(const std::vector<JobRecord>& jobs);
/// A count in three significant digits with an SI prefix: "950", "12.3 k", "3.40 M".
std::string compact_count(double value);

/// Notes on the whole report: emulated columns, CPU rows, modified configs, job messages,
/// throttled GPUs, merged records.
std::vector<std::string> report_notes(const ReportView& view);

/// Why a job is modified, for its note: "a user config changed its model or optimizer;
/// NVIDIA_TF32_OVERRIDE=0"; empty for an unmodified job.
std::string modification_text(const JobRecord& job);

/// A measured cell of the normalized table: "20.0 (1312)", "OOM", "n/a", "modified", "failed".
std::string normalized_text(const RunCell& cell);
/// A max-batch cell: "1669", "OOM", "-" (a fixed batch, no search), the status, or "".
std::string max_batch_text(const MaxBatchCell& cell);
/// A 2020 max batch ("OOM" where the GPU could not train the model).
std::string reference_batch_text(const ReferenceRow& row, std::size_t gpu);
/// "8 GB: RTX 2070, RTX 2080"
std::string reference_tier_name(const ReferenceTier& tier, const ReferenceTable& reference);
/// The 2020 GPUs of a tier on one model: "8", or "8/16" where they differ.
std::string reference_tier_text(const ReferenceTier& tier, const ReferenceRow& row);

}  // namespace gpubench::report
