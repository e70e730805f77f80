// Reporters: read JobRecords (from a run or from result files) and print them beside the 2020
// reference, normalized to the Quadro RTX 8000. Measurement never formats; reporters never
// measure.
//
// The comparison every format shares: one row per model; one column per measured run (device,
// precision, memory cap), then the eight 2020 GPUs.
#pragma once

#include "gpubench/reference.h"
#include "gpubench/result.h"

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpubench {

/// A measured run as a report column: one device at one precision (and memory cap).
struct RunColumn {
  std::string label;      ///< "H200 fp32", "H200 fp32 @24GiB"
  std::string device;     ///< "NVIDIA H200"
  std::string precision;  ///< "fp32"
  std::optional<double> memory_cap_gib;
};

/// One model in one column.
struct RunCell {
  bool present = false;  ///< the column measured this model
  std::string status;    ///< "ok", "no-fit", "failed", ...
  int64_t batch = 0;
  double throughput = 0;
  std::optional<double> normalized;  ///< throughput / baseline; none without a 2020 row
};

/// Models x (measured runs + 2020 GPUs).
struct Comparison {
  std::vector<std::string> models;             ///< rows, in first-seen order
  std::vector<std::string> units;              ///< throughput unit per row
  std::vector<std::string> batch_units;        ///< batch unit per row
  std::vector<const ReferenceRow*> reference;  ///< 2020 row per model (null for twins)
  std::vector<RunColumn> runs;
  std::vector<std::vector<RunCell>> cells;  ///< [model][run]
};

/// Groups records into the comparison. When a (model, column) pair occurs more than once, the
/// last record wins.
Comparison build_comparison(const std::vector<JobRecord>& jobs, const ReferenceTable& reference);

/// A column of the flat per-job tables (CSV and the "measured" table).
struct ResultColumn {
  std::string key;     ///< CSV header, snake_case with the unit: "step_time_ms_median"
  std::string header;  ///< table header: "step median"
  std::function<std::string(const JobRecord&)> raw;     ///< CSV and JSON value
  std::function<std::string(const JobRecord&)> pretty;  ///< terminal value
};
/// The flat columns of a job record, in CSV order.
const std::vector<ResultColumn>& result_columns();

/// Prints a set of results in one format.
class Reporter {
 public:
  explicit Reporter(std::ostream& out) : out_(out) {}
  virtual ~Reporter() = default;
  virtual void report(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) = 0;

 protected:
  std::ostream& out_;
};

/// "table", "md", "csv", "json".
const std::vector<std::string>& report_formats();
/// Throws ConfigError for an unknown format, with a did-you-mean.
std::unique_ptr<Reporter> make_reporter(const std::string& format, std::ostream& out);

/// Reads result files (`gpubench run --json` documents) into records. Throws ConfigError naming
/// the file for a missing, malformed or foreign file.
std::vector<JobRecord> read_results(const std::vector<std::string>& paths);

// ---- Text grids (shared by the table and markdown reporters) ----
enum class GridStyle { kPlain, kMarkdown };
/// Columns after `left_columns` are right-aligned (numbers).
void render_grid(std::ostream& out, const std::vector<std::string>& headers,
                 const std::vector<std::vector<std::string>>& rows, std::size_t left_columns,
                 GridStyle style);

}  // namespace gpubench
