// Reading an int field of a record (result files, journals) without undefined behaviour.
#pragma once

#include "gpubench/base/json.h"

namespace gpubench {

/// object[key] as an int, `fallback` when absent: nlohmann's value(key, fallback), except that a
/// number outside int's range is a ConfigError (a float there made value()'s cast undefined
/// behaviour: a record's "multiprocessors": 1.3e12, found by fuzz_journal). A value of the wrong
/// type still throws nlohmann's type_error, which the record readers turn into bad input.
int value_int(const Json& object, const char* key, int fallback);

}  // namespace gpubench
