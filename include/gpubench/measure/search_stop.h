// Why a max-batch search stopped: a kind the code decides on (converged or not, a probe that
// broke its worker) and the sentence the record's `stop_reason` holds, the kind's words with its
// numbers ("limited by search.max_batch=512"). The sentences are spelled only here and in
// search_record.cpp (the factories below); a record read from a file gets its kind from its
// sentence (parse_search_stop), the JSON unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpubench {

/// The kinds of stop reason, each with the form of its sentence.
enum class SearchStop {
  none,              ///< "": not stopped (a record with no search behind it)
  bracket_closed,    ///< "bracket closed": the answer fits and the next candidate does not
  max_batch_limit,   ///< "limited by search.max_batch=N"
  /// "does not fit at search.min_batch=N" (records of older gpubench: "min_batch does not fit")
  min_batch_no_fit,
  probe_budget,      ///< "probe budget spent (search.max_probes=N)": not converged
  /// "the probe at batch N left its worker unusable: ERROR": interrupted; a fresh worker goes on
  probe_unusable,
  /// "the probe at batch N failed in two workers: ERROR": the search broke
  probe_failed,
  /// "cached answer verified: batch N fits and M does not", or "cached answer verified: batch N
  /// fits (limited by search.max_batch=N)" (run/search_cache.h)
  cache_verified,
};

/// A stop reason: its kind and its sentence (SearchRecord::stop, written as "stop_reason").
struct SearchStopReason {
  SearchStop kind = SearchStop::none;
  std::string text;  ///< the sentence: what the JSON's stop_reason holds

  bool stopped() const { return kind != SearchStop::none; }
  /// The probe budget ran out: the one stop of a finished search whose answer is not exact.
  bool budget_spent() const { return kind == SearchStop::probe_budget; }
  /// A probe broke its worker (probe_unusable or probe_failed): the search did not finish.
  bool probe_broke() const {
    return kind == SearchStop::probe_unusable || kind == SearchStop::probe_failed;
  }

  static SearchStopReason bracket_closed();
  static SearchStopReason max_batch_limit(int64_t max_batch);
  static SearchStopReason min_batch_no_fit(int64_t min_batch);
  static SearchStopReason probe_budget(int max_probes);
  static SearchStopReason probe_unusable(int64_t batch, std::string_view error);
  static SearchStopReason probe_failed(int64_t batch, std::string_view error);
  /// `smallest_failure` 0: the answer is search.max_batch (`max_batch`), one probe checked it.
  static SearchStopReason cache_verified(int64_t batch, int64_t smallest_failure,
                                         int64_t max_batch);
};

/// The form of a kind's sentence, for messages and docs: "limited by search.max_batch=N".
const char* to_string(SearchStop kind);

/// The stop reason whose sentence `text` is (as a record holds it), or none for a sentence of no
/// kind. "" is SearchStop::none.
std::optional<SearchStopReason> parse_search_stop(std::string_view text);

/// `text` read from the field `field` of a file: its stop reason, or a ConfigError naming the
/// field, the value and the forms a stop reason takes.
SearchStopReason require_search_stop(std::string_view text, std::string_view field);

}  // namespace gpubench
