// The 2020 reference tables (Lambda, "Choosing the Best GPU for Deep Learning in 2020"): max
// batch and throughput of twelve workloads on eight GPUs, which every result is normalized to;
// and gpubench's own current numbers per measured card, which a report sets a run against.
#pragma once

#include "gpubench/base/json.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// One of the eight 2020 GPUs.
struct ReferenceGpu {
  std::string id;        ///< "quadro-rtx-8000"
  std::string name;      ///< "RTX 8000", as the post's tables head the column
  double memory_gb = 0;  ///< memory in GB as the post gives it
  double price_usd = 0;  ///< street price quoted in the post
};

/// One model row: values per GPU in the table's GPU order; 0 means the GPU could not train it.
struct ReferenceRow {
  std::string model;            ///< row name in the post: "BERT Base"
  std::string family;           ///< "image" | "language"
  std::string batch_unit;       ///< "images" | "sequences" | "tokens"
  std::string throughput_unit;  ///< "images/s" | "examples/s" | "words/s"
  std::vector<double> max_batch;
  std::vector<double> throughput;
  /// The precision the evidence points to for the 2020 numbers (the post does not say):
  /// "fp32" unless the row says otherwise, and why (`precision_evidence`).
  std::string precision = "fp32";
  std::string precision_evidence;
};

/// One of gpubench's own current numbers: the latest full max-batch job of a workload at a
/// precision on a card gpubench has measured (docs/results), shipped with the binary in
/// configs/measured/cards.json (written by scripts/dev/current_numbers.py --write-cards).
struct CardNumber {
  std::string card;          ///< the device name its records carry: "NVIDIA H200"
  int64_t memory_bytes = 0;  ///< the card's memory as its records give it (0: not known)
  std::string model;         ///< "bert-base"
  std::string precision;     ///< "fp32"
  std::string batch_source;  ///< "search": the recorded numbers are max-batch jobs
  int64_t batch = 0;
  double throughput = 0;        ///< in throughput_unit
  std::string throughput_unit;  ///< "examples/s"
  std::string created_utc;
  std::string record;  ///< the record's file, relative to docs/results in gpubench's sources
  std::optional<double> sm_clock_mhz_median;  ///< over the timed window (NVML)
  std::optional<double> power_limit_w;
  bool throttled = false;
  std::string driver;        ///< NVIDIA driver ("" where not known)
  std::string cuda_runtime;  ///< "13.0"
  std::string libtorch;      ///< "2.11.0"
};

/// Parses configs/measured/cards.json; throws ConfigError naming `where`.
std::vector<CardNumber> parse_card_numbers(const Json& document, const Where& where);

/// Both 2020 tables for all eight GPUs.
class ReferenceTable {
 public:
  /// Parses configs/reference/lambda-2020.yaml; throws ConfigError naming `where`.
  static ReferenceTable parse(const Json& document, const Where& where);

  const std::string& source() const { return source_; }
  const std::vector<ReferenceGpu>& gpus() const { return gpus_; }
  const std::vector<ReferenceRow>& rows() const { return rows_; }
  /// Index of the GPU every score is normalized to (the Quadro RTX 8000).
  std::size_t baseline_index() const { return baseline_; }
  const ReferenceGpu& baseline() const { return gpus_.at(baseline_); }

  const ReferenceRow* find_row(const std::string& model) const;
  std::optional<std::size_t> gpu_index(const std::string& id) const;
  std::vector<std::string> gpu_ids() const;

  /// The baseline GPU's 2020 throughput for a row: the denominator of every normalized score.
  double baseline_throughput(const ReferenceRow& row) const { return row.throughput.at(baseline_); }
  /// throughput / baseline throughput; 0 where the GPU could not train the model.
  double normalized(const ReferenceRow& row, std::size_t gpu) const;

  /// The price of a measured GPU (`report --price`), by the device name its records carry
  /// ("NVIDIA H200"); for the performance-per-dollar section.
  void set_measured_price(const std::string& device, double usd) { prices_[device] = usd; }
  std::optional<double> measured_price(const std::string& device) const {
    const auto it = prices_.find(device);
    return it == prices_.end() ? std::nullopt : std::optional<double>(it->second);
  }
  bool has_measured_prices() const { return !prices_.empty(); }

  /// gpubench's own current numbers (CardNumber), which a report sets its runs against, and the
  /// result file the report's `gpubench compare` hint names for the user's side ("" for a
  /// placeholder). Set by `run` and `report` from the shipped file; empty unless set.
  void set_card_numbers(std::vector<CardNumber> numbers, std::string results_file) {
    card_numbers_ = std::move(numbers);
    results_file_ = std::move(results_file);
  }
  const std::vector<CardNumber>& card_numbers() const { return card_numbers_; }
  const std::string& results_file() const { return results_file_; }

 private:
  std::string source_;
  std::vector<ReferenceGpu> gpus_;
  std::vector<ReferenceRow> rows_;
  std::size_t baseline_ = 0;
  std::map<std::string, double> prices_;
  std::vector<CardNumber> card_numbers_;
  std::string results_file_;
};

/// normalized score = throughput / baseline throughput (0 when the baseline is 0).
double normalized_score(double throughput, double baseline_throughput);

}  // namespace gpubench
