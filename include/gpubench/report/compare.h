// `gpubench compare A B`: two sets of results (result documents or journals) job by job: whether
// each pair is the same job and, where it is, a verdict (faster, slower, within noise) and
// whether B regressed against A.
#pragma once

#include "gpubench/records/result.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpubench {

/// compare's --noise when none is given: 2%. A difference of B against A at or below it is
/// noise however significant, since the same job moves more than that between machines of one
/// kind (8-9% has been seen), while the repeats of one sitting vary by hundredths of a percent.
inline constexpr double kDefaultCompareNoise = 0.02;

/// A field of the job's identity in which the two sides differ, each value in words.
struct IdentityDifference {
  /// "batch", "batch source", "world size", "attention", "model config", "optimizer config",
  /// "runtime config"
  std::string field;
  std::string a, b;  ///< "2" and "4"; a config's digest ("3f09a1c2")
};

/// One job as both sides measured it.
struct JobComparison {
  std::string model;
  std::string precision;
  std::optional<double> memory_cap_gib;
  std::optional<JobRecord> a, b;  ///< the latest record of the job on each side, if any
  /// "faster" | "slower" | "within noise" (B against A) | "not comparable" | "failed in A" |
  /// "failed in B" | "failed in both" | "only in A" | "only in B"
  std::string verdict;
  /// Where "not comparable": the identity fields in which the two differ (in the order of
  /// compare_results' list).
  std::vector<IdentityDifference> differences;
  /// B over A, when both trained and are comparable: the ratio of the means of the repeats where
  /// both sides have two or more, else of the throughputs (a median where one side repeated).
  std::optional<double> ratio;
  /// The ratio's 95% interval where both sides have repeats: Fieller's, with the degrees of
  /// freedom of Welch-Satterthwaite (ratio_interval in compare.cpp says why that one); none
  /// where A's mean is not clear of zero, which leaves it unbounded.
  std::optional<double> ratio_ci95_low, ratio_ci95_high;
  /// Where both sides have repeats: the two-sided p-value of Welch's t-test of the means.
  std::optional<double> p_value;
  /// How the verdict was reached. With repeats on both sides: "+9.90% past ±2% (--noise, 2% by
  /// default); Welch's t on 3 and 3 repeats: p = 0.00041, significant at 5%"; without: "no
  /// interval (one timed run each): +1.50% within ±2% (--noise, 2% by default)". Empty for the
  /// other verdicts.
  std::string basis;

  /// B is slower than A, or failed where A trained: what a CI gate fails on. A pair that is not
  /// comparable never is.
  bool regressed() const { return verdict == "slower" || verdict == "failed in B"; }
  /// The differences in words: "batch 2 vs 4, attention stored vs fused"; empty when there are
  /// none.
  std::string not_comparable() const;
};

struct CompareResult {
  std::vector<JobComparison> jobs;  ///< A's jobs in their order, then those only in B
  bool regression = false;  ///< some job regressed (JobComparison::regressed)
};

/// Compares job by job. Jobs are paired by model, precision and memory cap (the device may
/// differ: that is usually the point); jobs without a timed run (memory tiers) are left out. The
/// rest of a job's identity is its batch (where both trained: a failed job's batch is where it
/// stopped), batch source (search, flag, cpu, 2020), world size (1 without data parallelism),
/// attention (the model's `attention` setting, where it has one) and a digest of each of the
/// resolved config's model (attention apart), optimizer and runtime sections, compared where
/// both records hold the section. A pair that differs in any of these is "not comparable": no
/// ratio, no verdict, never a regression. Where a side holds several records of one model,
/// precision and cap, those that agree in every field are paired first, then each left over
/// with the one it differs from in the fewest.
///
/// A comparable pair that both trained is "slower" or "faster" only when B's throughput differs
/// from A's by more than `noise` (relative: 0.02 for ±2%, kDefaultCompareNoise the CLI's
/// default) and, where both sides have two or more repeats, Welch's t-test on the repeats'
/// throughputs finds the means' difference significant at 5% (two-sided); otherwise "within
/// noise". Where a side has one timed run, `noise` alone decides.
/// Throws ConfigError when the two share no job (different workloads or precisions) or for a
/// noise outside [0, 1).
CompareResult compare_results(const std::vector<JobRecord>& a, const std::vector<JobRecord>& b,
                              double noise);

/// Prints a comparison: "table" (the terminal), "md" or "json". Throws ConfigError for another
/// format.
void print_comparison(std::ostream& out, const CompareResult& result, const std::string& format);

}  // namespace gpubench
