// `gpubench compare A B`: two sets of results (result documents or journals) job by job, with
// a verdict for each (faster, slower, within noise) and whether B regressed against A.
#pragma once

#include "gpubench/records/result.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpubench {

/// One job as both sides measured it.
struct JobComparison {
  std::string model;
  std::string precision;
  std::optional<double> memory_cap_gib;
  std::optional<JobRecord> a, b;  ///< the latest record of the job on each side, if any
  /// "faster" | "slower" | "within noise" (B against A) | "failed in A" | "failed in B" |
  /// "failed in both" | "only in A" | "only in B"
  std::string verdict;
  std::optional<double> ratio;  ///< B's throughput over A's, when both trained
  /// How the verdict was reached: "95% intervals apart", "95% intervals overlap", or, without
  /// an interval on both sides, "no interval: the difference against ±N%".
  std::string basis;

  /// B is slower than A, or failed where A trained: what a CI gate fails on.
  bool regressed() const { return verdict == "slower" || verdict == "failed in B"; }
};

struct CompareResult {
  std::vector<JobComparison> jobs;  ///< A's jobs in their order, then those only in B
  bool regression = false;  ///< some job regressed (JobComparison::regressed)
};

/// Compares job by job (model, precision, memory cap; the device may differ: that is usually
/// the point). Jobs without a timed run (memory tiers) are left out. `noise` is the relative
/// difference taken as noise where a side has no interval (one timed run): 0.02 for ±2%.
/// Throws ConfigError when the two share no job: different workloads or precisions.
CompareResult compare_results(const std::vector<JobRecord>& a, const std::vector<JobRecord>& b,
                              double noise);

/// Prints a comparison: "table" (the terminal), "md" or "json". Throws ConfigError for another
/// format.
void print_comparison(std::ostream& out, const CompareResult& result, const std::string& format);

}  // namespace gpubench
