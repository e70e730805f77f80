// Reporters: read JobRecords (from a run, from result files or from journals) and print them
// beside the 2020 reference, normalized to the Quadro RTX 8000. Measurement never formats;
// reporters never measure.
//
// What every format shares (the data model below, no formatting in it):
//   - merging: records of the same job (model, device, precision, memory cap, search_only) are
//     merged, the last one read wins (latest_records);
//   - the comparison: one row per model; one column per measured run (device, precision, memory
//     cap), then the eight 2020 GPUs; memory-tier records (search_only) are not in it;
//   - the geometric-mean summary per family (summarize_families);
//   - the memory-tier tables (build_memory_tiers).
#pragma once

#include "gpubench/config/reference.h"
#include "gpubench/records/result.h"

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpubench {

// ---- Merging ----

/// The identity of a job when results are merged: records with equal keys are the same job
/// measured again (a retry, a rerun), and the later one replaces the earlier.
std::string job_key(const JobRecord& job);

/// The records that survive merging: for each job_key the last record, kept at the position
/// where that key first occurred (so a retried job stays in its suite's order).
std::vector<JobRecord> latest_records(const std::vector<JobRecord>& jobs);

// ---- The comparison ----

/// A measured run as a report column: one device at one precision (and memory cap).
struct RunColumn {
  std::string label;      ///< "H200 fp32", "H200 fp32 @24GiB"
  std::string device;     ///< "NVIDIA H200"
  std::string precision;  ///< "fp32"
  std::optional<double> memory_cap_gib;
  bool same_batch = false;  ///< run at the RTX 8000's 2020 batch (--same-batch): "@2020 batch"
};

/// One model in one column.
struct RunCell {
  bool present = false;  ///< the column measured this model
  JobStatus status = JobStatus::ok;  ///< the record's status
  int64_t batch = 0;     ///< batch of the timed run
  double throughput = 0;
  std::optional<double> normalized;  ///< throughput / baseline; none without a 2020 row
  std::optional<int64_t> max_batch;  ///< what the search found; none when the batch was fixed
  /// The job is modified (JobRecord::modifications): its score cell says so rather than n/a.
  bool modified = false;
  std::optional<double> usd_per_million_units;  ///< with a price per hour (JobRecord::cost)
  std::optional<double> units_per_usd;
  /// Throughput units per joule: 1 / joules_per_unit, with an energy reading (NVML's counter).
  std::optional<double> units_per_joule;
};

/// Models x (measured runs + 2020 GPUs).
struct Comparison {
  std::vector<std::string> models;             ///< rows, in first-seen order
  std::vector<std::string> families;           ///< "image" | "language" per row
  std::vector<std::string> units;              ///< throughput unit per row
  std::vector<std::string> batch_units;        ///< batch unit per row
  std::vector<const ReferenceRow*> reference;  ///< 2020 row per model (null for twins)
  std::vector<RunColumn> runs;
  std::vector<std::vector<RunCell>> cells;  ///< [model][run]
};

/// Groups records into the comparison. When a (model, column) pair occurs more than once, the
/// last record wins. Memory-tier records (search_only) are left out: they have no throughput.
Comparison build_comparison(const std::vector<JobRecord>& jobs, const ReferenceTable& reference);

// ---- Geometric-mean summary ----

/// A geometric mean of normalized scores and the models it is over.
struct GeoMean {
  std::optional<double> value;       ///< none when no model counted
  std::vector<std::string> counted;  ///< the models in the mean
  std::size_t of = 0;                ///< out of how many it could have had
};

/// One family's geometric means over one set of models: the runs that measured exactly these
/// models OK, and every 2020 GPU over the same models (like for like).
///
/// Rules: a family's models are the report's rows of that family that have a 2020 row (twins
/// have no normalized score). Each run column counts the models it measured OK; run columns that
/// counted the same models share a summary (the usual case: one per family). A 2020 GPU that
/// could not train a model (throughput 0, the post's "0*") leaves that model out of its mean;
/// its `counted` says which remain.
struct FamilySummary {
  std::string family;                   ///< "image"
  std::vector<std::string> models;      ///< the models of this summary, in row order
  std::vector<std::string> missing;     ///< the family's models in the report not among them
  std::vector<std::optional<GeoMean>> runs;  ///< per Comparison::runs; set for runs covered
  std::vector<GeoMean> reference;       ///< per 2020 GPU, over `models`
};

/// The geometric-mean summaries, image family first, then language (the 2020 table's order).
std::vector<FamilySummary> summarize_families(const Comparison& comparison,
                                              const ReferenceTable& reference);

// ---- Memory tiers ----

/// A max-batch answer: what a search found, or why there is none.
struct MaxBatchCell {
  bool present = false;              ///< a record exists
  JobStatus status = JobStatus::ok;  ///< the record's status
  std::optional<int64_t> max_batch;  ///< the search's largest fitting batch
};

/// The 2020 GPUs of one memory size, matched to a cap.
struct ReferenceTier {
  double memory_gb = 0;              ///< the post's size ("11 GB")
  std::vector<std::size_t> gpus;     ///< indices into ReferenceTable::gpus()
};

/// Max batch under emulated memory caps (records with search_only and a memory cap) for one
/// device and precision: rows = models, columns = caps ascending, then the uncapped search of
/// the same device and precision when the report has one.
struct MemoryTierTable {
  std::string label;      ///< "H200 fp32"
  std::string device;     ///< "NVIDIA H200"
  std::string precision;  ///< "fp32"
  std::vector<double> caps_gib;  ///< ascending
  bool has_uncapped = false;     ///< cells have one more column: the uncapped search
  std::vector<std::string> models;
  std::vector<std::string> batch_units;
  std::vector<const ReferenceRow*> reference;  ///< per model (null for twins)
  std::vector<std::vector<MaxBatchCell>> cells;  ///< [model][cap (+ uncapped)]
  /// The 2020 memory sizes closest to the caps, in cap order without repeats.
  std::vector<ReferenceTier> reference_tiers;
};

/// One table per (device, precision) with memory-tier records, in first-seen order.
std::vector<MemoryTierTable> build_memory_tiers(const std::vector<JobRecord>& jobs,
                                                const ReferenceTable& reference);

/// The 2020 memory size closest to `cap_gib` (ties go to the smaller card) and its GPUs.
/// The post's sizes are nominal card memory, which is binary: an "11 GB" card carries 11 GiB.
ReferenceTier closest_reference_tier(double cap_gib, const ReferenceTable& reference);

/// The search's answer in a record (OOM for no-fit, none for a fixed batch).
MaxBatchCell max_batch_of(const JobRecord& job);

// ---- Flat per-job columns ----

/// A column of the flat per-job tables (CSV and the "measured" table).
struct ResultColumn {
  std::string key;     ///< CSV header, snake_case with the unit: "step_time_ms_median"
  std::string header;  ///< table header: "step median"
  std::function<std::string(const JobRecord&)> raw;     ///< CSV and JSON value
  std::function<std::string(const JobRecord&)> pretty;  ///< terminal value
};
/// Version of the CSV's columns (docs/output.md, "Versioning"): columns are only appended at the
/// end of the row, and this goes up with each change. 1: the 52 columns up to `message`; 2: the
/// schema version and the environment (host, os, driver, CUDA, cuDNN, libtorch) after them; 3:
/// cost and energy per unit of work and the throttle note (issue 46).
constexpr int kCsvSchemaVersion = 3;
/// The flat columns of a job record, in CSV order.
const std::vector<ResultColumn>& result_columns();

// ---- Prices (report --price) ----

/// A measured GPU's price as `report --price GPU=USD` gives it.
struct PriceSpec {
  std::string gpu;  ///< as given: "H200", "NVIDIA H200"
  double usd = 0;
};
/// Parses "GPU=USD" values; throws ConfigError (exit 2) for a missing '=', an empty name, a
/// price that is not a number above 0, or a GPU given twice.
std::vector<PriceSpec> parse_prices(const std::vector<std::string>& values);
/// Sets each price on `reference` under the device name of the records it names: the name
/// itself, case-insensitively, or without its vendor prefix ("H200" for "NVIDIA H200"). Throws
/// ConfigError naming the measured GPUs for a GPU that no record of `jobs` ran on.
void apply_prices(ReferenceTable& reference, const std::vector<PriceSpec>& prices,
                  const std::vector<JobRecord>& jobs);

// ---- Cost and energy per unit of work (issue 46) ----

/// A price per hour as `report --price-per-hour` gives it: "GPU=USD" for the records of that
/// GPU, or a plain "USD" for every record (when they all ran on one device).
struct HourlyPrice {
  std::string gpu;  ///< as given: "H100", "NVIDIA H200"; empty for a plain price
  double usd_per_hour = 0;
};
/// Parses the values; throws ConfigError (exit 2) naming --price-per-hour for a price that is
/// not a number above 0, an empty name, a GPU given twice, or a plain price beside others.
std::vector<HourlyPrice> parse_hourly_prices(const std::vector<std::string>& values);
/// Sets JobRecord::cost (source "report --price-per-hour") on the timed records each price
/// names, case-insensitively: the device's whole name, or that without its vendor ("H200" for
/// "NVIDIA H200"), else whole words of it ("H100" for "NVIDIA H100 80GB HBM3"). Throws
/// ConfigError naming the devices measured for a GPU no record ran on, for a name that fits
/// several devices, and for a plain price when the records ran on more than one device.
void apply_hourly_prices(std::vector<JobRecord>& jobs, const std::vector<HourlyPrice>& prices);

/// The cards a job's price pays for: its data-parallel world size (1 on one device).
int priced_cards(const JobRecord& job);
/// USD per million throughput units: price per hour x cards / 3600 / throughput x 1e6. None
/// without a price or a throughput (a job that is not "ok").
std::optional<double> usd_per_million_units(const JobRecord& job);
/// Throughput units per USD: throughput x 3600 / (price per hour x cards).
std::optional<double> units_per_usd(const JobRecord& job);
/// Joules per throughput unit over the timed window: 1 / clocks.energy.units_per_joule (NVML's
/// energy counter; a data-parallel record's is rank 0's card per rank 0's units). None without
/// an energy reading or a throughput.
std::optional<double> joules_per_unit(const JobRecord& job);
/// Throughput units per kWh: 3.6e6 / joules_per_unit.
std::optional<double> units_per_kwh(const JobRecord& job);
/// clocks.throttled: the GPU was slowed over the timed window (a thermal or hardware slowdown,
/// or the power limit holding the clocks down); clocks.throttle_note says which.
bool throttled(const JobRecord& job);
/// clocks.throttle_note ("" when none).
std::string throttle_note(const JobRecord& job);

// ---- Against gpubench's own numbers for the card (issue 46) ----

/// A run below this share of gpubench's recorded number on the same card is flagged.
constexpr double kRecordedShortfall = 0.9;

/// One timed job set against gpubench's current number for its card, workload and precision
/// (ReferenceTable::card_numbers()).
struct RecordedComparison {
  const JobRecord* job = nullptr;          ///< into the jobs compared
  const CardNumber* recorded = nullptr;    ///< into the reference table's card numbers
  double ratio = 0;                        ///< job throughput / recorded throughput
  bool below = false;                      ///< ratio < kRecordedShortfall
  std::vector<std::string> causes;         ///< what the two records say differs (when below)
  std::string compare_command;             ///< gpubench compare docs/results/... YOURS
};
/// The jobs that match a recorded number: "ok", timed, whole card (no memory cap), one device,
/// the same device name and memory size (within 2%, where both are known), workload, precision
/// and batch source (the recorded numbers are max-batch jobs: a --batch run is not compared).
std::vector<RecordedComparison> compare_with_recorded(const std::vector<JobRecord>& jobs,
                                                      const ReferenceTable& reference);

// ---- Reporters ----

/// Prints a set of results in one format. Every reporter merges first (latest_records).
class Reporter {
 public:
  explicit Reporter(std::ostream& out) : out_(out) {}
  virtual ~Reporter() = default;
  virtual void report(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) = 0;

 protected:
  std::ostream& out_;
};

/// "summary", "table", "md", "csv", "json", "html".
const std::vector<std::string>& report_formats();
/// Throws ConfigError for an unknown format, with a did-you-mean. `max_width` (0: none) is the
/// terminal's width for the "table" format: a section wider than that is printed in blocks of
/// columns that fit, each block repeating the section's row labels, and its notes are wrapped.
std::unique_ptr<Reporter> make_reporter(const std::string& format, std::ostream& out,
                                        std::size_t max_width = 0);

/// What read_result_files found.
struct ResultFiles {
  std::vector<JobRecord> jobs;     ///< every record, in file order, then line order
  std::vector<std::string> notes;  ///< for stderr: "FILE: its last line was cut short ..."
};

/// Reads result files: `gpubench run --json` documents and results journals (told apart by
/// content, not by name), in any mix. A journal whose last line was cut short by a kill reads
/// without it (and a note says so). Throws ConfigError naming the file for a missing, unreadable,
/// malformed or foreign file.
ResultFiles read_result_files(const std::vector<std::string>& paths);
/// read_result_files(paths).jobs
std::vector<JobRecord> read_results(const std::vector<std::string>& paths);

// ---- Text grids (shared by the table and markdown reporters) ----
enum class GridStyle { kPlain, kMarkdown };
/// Columns after `left_columns` are right-aligned (numbers).
void render_grid(std::ostream& out, const std::vector<std::string>& headers,
                 const std::vector<std::vector<std::string>>& rows, std::size_t left_columns,
                 GridStyle style);

}  // namespace gpubench
