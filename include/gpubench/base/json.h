// The JSON type used for configs, records and reports, and typed readers for config trees that
// produce messages naming the file, the key, the bad value and the fix.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// Insertion-ordered JSON: configs and records keep the order they were written in.
using Json = nlohmann::ordered_json;

/// Where a value sits: the file it came from and its dotted key path ("run.min_steps").
struct Where {
  std::string file;  ///< "configs/models/bert-base.yaml (built in)", "my.yaml", "--batch"
  std::string path;  ///< dotted key path; empty for the document root

  /// The location of `key` inside this one.
  Where at(const std::string& key) const;
  /// "file: path" (or just "file" at the root).
  std::string str() const;
};

/// A value as it appeared in the file, for messages: strings quoted, others as JSON.
std::string quote_value(const Json& value);

/// Throws ConfigError "<where>: expected <expected>, got <value>[ (<fix>)]".
[[noreturn]] void throw_bad_value(const Where& where, const std::string& expected, const Json& got,
                                  const std::string& fix = "");

/// Throws ConfigError unless `value` is an object whose keys are all in `allowed`; an unknown
/// key is named with the closest allowed key and the full list.
void check_keys(const Json& value, const Where& where, const std::vector<std::string>& allowed);

/// The value of a required key; throws ConfigError "<where>: missing required key '<key>'".
const Json& require_key(const Json& object, const std::string& key, const Where& where);

/// Typed readers: each throws ConfigError naming `where` when the value has the wrong type or is
/// out of range.
int64_t read_int(const Json& value, const Where& where,
                 int64_t min = std::numeric_limits<int64_t>::min(),
                 int64_t max = std::numeric_limits<int64_t>::max());
double read_number(const Json& value, const Where& where,
                   double min = -std::numeric_limits<double>::infinity(),
                   double max = std::numeric_limits<double>::infinity());
bool read_bool(const Json& value, const Where& where);
std::string read_string(const Json& value, const Where& where);
/// A string that must be one of `choices` (the message lists them, with a did-you-mean).
std::string read_choice(const Json& value, const Where& where,
                        const std::vector<std::string>& choices);

/// `value` as JSON text (indented when `indent` >= 0) that never throws on the strings in it:
/// invalid UTF-8 (a message quoting a binary file, a truncated name) becomes U+FFFD instead of
/// nlohmann's type_error 316, which would lose the record or the journal line that held it.
std::string dump_json(const Json& value, int indent = -1);

/// The value at `path` (object keys, outermost first) inside `json`; nullptr where a key is
/// missing or a value on the way is not an object. Records read their optional JSON fields
/// (clocks, compute, environment ...) through it.
const Json* json_at(const Json& json, std::initializer_list<const char*> path);

/// The number at `path` inside `json`, when there is one there.
std::optional<double> number_at(const Json& json, std::initializer_list<const char*> path);

/// Overlays `patch` onto `base`: objects merge key by key, everything else replaces.
void merge_into(Json& base, const Json& patch);

/// 16 hex digits of 64-bit FNV-1a over `value`'s JSON text with every object's keys sorted, so
/// that the order they were written in does not count: the digest of a config section (compare
/// shows its first 8) or of a search cache key.
std::string json_digest(const Json& value);

}  // namespace gpubench
