// The run settings, described once: each key of a config's `run:` section (and of its `timing:`
// and `cpu_timing:` sections) with its type, its range, its field in RunSettings, and, for the
// ones `gpubench run` also takes as a flag, the flag's name, check and help text. The config
// reader, RunSettings::to_json, the run command's options and their overlay are all made from
// this table, so that a new setting is one row plus its use.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/config/config.h"

#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpubench::settings {

/// How a setting's value is read and shown.
enum class Type {
  kInt,             ///< a whole number in [min, max]
  kNumber,          ///< a finite number in [min, max]
  kOptionalNumber,  ///< a finite number in [min, max], or null for none
  kBool,            ///< true or false
  kPrecision,       ///< one of precision_names()
};

/// The groups `gpubench run --help` lists its options in, in this order (the CLI's own options
/// use them too).
namespace group {
inline constexpr std::string_view kWhat = "What to run";
inline constexpr std::string_view kWhere = "Where to run";
inline constexpr std::string_view kSearch = "Search";
inline constexpr std::string_view kTiming = "Timing";
inline constexpr std::string_view kDataParallel = "Data parallel";
inline constexpr std::string_view kOutput = "Output";
}  // namespace group

/// The `gpubench run` flag of a setting, checked as typed before it becomes a config overlay.
/// The value passes when it is at least `min` (above it with `min_exclusive`), at most `max`,
/// and finite where `finite` says so; else "<name>: expected <expected>, got '<value>'<hint>".
struct Flag {
  std::string_view name;  ///< "--noise"; empty for a setting that is a config key only
  std::string_view group;  ///< its --help group (settings::group)
  /// What --help shows for its value: "N", "S", "PCT", "GiB" (a kPrecision flag shows its choices)
  std::string_view value_name;
  /// --help text, a format string: {default} is the default in the flag's unit; for a timing
  /// setting {gpu} and {cpu} are the defaults of `timing` and `cpu_timing`.
  std::string_view help;
  std::string_view expected;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::string_view hint;
  bool min_exclusive = false;
  bool finite = false;
  /// The config value is the flag's divided by this (--noise is in percent, the key a fraction).
  double scale = 1;
  /// --resume keeps the journal's settings; a flag with this set may still change them.
  bool on_resume = false;
  /// A Type::kBool flag takes no value: given, it sets its key to this (--no-cache: false).
  bool sets = true;
};

/// Reads and writes one setting's field in RunSettings (a run setting) or in TimingSettings (a
/// timing setting: the same field in `timing` and `cpu_timing`). Values travel as JSON of the
/// setting's Type.
struct Access {
  Json (*get_run)(const RunSettings&) = nullptr;
  void (*set_run)(RunSettings&, const Json&) = nullptr;
  Json (*get_timing)(const TimingSettings&) = nullptr;
  void (*set_timing)(TimingSettings&, const Json&) = nullptr;
};

/// One row of the table. Its default is the field's initializer in RunSettings (TimingSettings
/// stays an aggregate, which tests build value by value).
struct Setting {
  std::string_view key;  ///< "repeat" under run:, or "noise_target" under run.timing
  Type type;
  /// The config reader's range (read_int, read_number).
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  Access access;
  Flag flag;

  /// A field of TimingSettings, found under both `timing:` and `cpu_timing:`.
  bool timing() const { return access.get_timing != nullptr; }
  /// "run.repeat", or "run.timing.noise_target" (which also sets run.cpu_timing's).
  std::string config_key() const;
  /// The --help text with the defaults filled in.
  std::string help() const;
};

/// Every run setting, in the order the config reader reads them: the timing sections are read
/// where the first timing setting stands.
const std::vector<Setting>& table();

/// The settings that are `gpubench run` flags, in table order.
std::vector<const Setting*> flags();

/// Overlays a config's `run:` section onto `run`; throws ConfigError naming `where` and the key.
void apply_run_section(RunSettings& run, const Json& value, const Where& where);

/// `run` as its `run:` section: every key of the table, in table order.
Json run_json(const RunSettings& run);

/// The flags given, by flag name ("--noise" -> 0.5, "--precision" -> "tf32"), as a config
/// overlay ({"run": {...}}, or {} for none): each value checked with a message naming its flag,
/// timing flags set for both devices. With `resume_only`, just the flags a resume may change.
Json flag_overlay(const std::map<std::string, Json>& given, bool resume_only = false);

}  // namespace gpubench::settings
