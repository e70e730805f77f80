// A closed set of words as a table: an enum's values beside the strings files hold for them,
// in the enum's order, spelled in that one place. The formatter, the parser and the reader that
// refuses a word outside the set (records/enums.cpp, measure/timing.cpp) are these templates.
#pragma once

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpubench {

template <typename E, std::size_t N>
using WordTable = std::array<std::pair<E, const char*>, N>;

/// The word for `value` ("?" for a value without a row, which a complete table never has).
template <typename E, std::size_t N>
const char* word_of(const WordTable<E, N>& table, E value) {
  for (const auto& [e, word] : table) {
    if (e == value) return word;
  }
  return "?";
}

/// The value whose word is `text`, or none.
template <typename E, std::size_t N>
std::optional<E> value_of(const WordTable<E, N>& table, std::string_view text) {
  for (const auto& [e, word] : table) {
    if (text == word) return e;
  }
  return std::nullopt;
}

/// The value whose word `text` is, read from the field `field` of a file; else a ConfigError
/// naming the field, the text, the closest word where it looks misspelt, and the allowed words:
/// "status 'no_fit' is not a job status (did you mean 'no-fit'?); the allowed values are: ok,
/// no-fit, ...". The words `hidden` lists (an empty "none", say) are accepted but not offered.
template <typename E, std::size_t N>
E require_word(const WordTable<E, N>& table, std::string_view text, std::string_view field,
               std::string_view what, std::initializer_list<E> hidden = {}) {
  if (const auto value = value_of(table, text)) return *value;
  std::vector<std::string> allowed;
  for (const auto& [e, word] : table) {
    bool offered = true;
    for (const E h : hidden) offered = offered && e != h;
    if (offered) allowed.emplace_back(word);
  }
  throw ConfigError(fmt::format("{} '{}' is not {}{}; the allowed values are: {}", field, text,
                                what, did_you_mean(text, allowed), join(allowed, ", ")));
}

}  // namespace gpubench
