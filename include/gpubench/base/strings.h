// Small string helpers shared by the config loader, the registry and the reporters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubench {

/// Levenshtein distance between two strings.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `name`, if it is close enough to be a plausible typo.
std::optional<std::string> closest_match(std::string_view name,
                                         const std::vector<std::string>& candidates);

/// " (did you mean 'x'?)" when a close candidate exists, else "".
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);

/// `text` as valid UTF-8: every byte that does not start a well-formed sequence (a stray
/// continuation byte, a truncated or overlong sequence, a surrogate, a code point past U+10FFFF)
/// becomes U+FFFD. Valid text comes back unchanged.
std::string valid_utf8(std::string_view text);

/// `text` safe to print on a terminal: every C0 control but newline and tab (an ANSI escape's
/// ESC, a carriage return, a bell), DEL, every C1 control (U+0080-U+009F, e.g. the 8-bit CSI
/// U+009B) and every byte of invalid UTF-8 as \xNN, so that a message quoting a file or an
/// argument cannot move the cursor, recolour the terminal or garble what follows. Valid UTF-8
/// passes through.
std::string terminal_safe(std::string_view text);

/// terminal_safe() with every line longer than `max_line` bytes cut there (at a character
/// boundary) and marked "... (N bytes cut)": one hostile model name or message cannot flood a
/// terminal or a CI log.
std::string terminal_text(std::string_view text, std::size_t max_line = 1000);

/// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary, marked
/// "... (N bytes cut)" when it was longer: for one-line places (a table cell, a chart label).
std::string shortened(std::string_view text, std::size_t max_bytes);

/// `text` as literal text in a markdown table cell or list item: valid UTF-8, newlines as
/// spaces, markdown's punctuation (| \ ` * _ [ ] # ! ~) backslash-escaped, and < > & as HTML
/// entities, so that no name or message becomes a link, an image, markup or a new column.
std::string markdown_escape(std::string_view text);

/// A count with its noun, singular for one: counted(1, "step") == "1 step", counted(3, "step")
/// == "3 steps" (a plural that is not noun + "s" goes in `plural`).
std::string counted(int64_t count, std::string_view noun, std::string_view plural = {});

/// Joins with a separator: join({"a","b"}, ", ") == "a, b".
std::string join(const std::vector<std::string>& parts, std::string_view separator);

/// 1234567 -> "1,234,567".
std::string with_thousands(int64_t value);

/// Bytes in binary units: 1536 -> "1.5 KiB", 3 << 30 -> "3.00 GiB".
std::string format_bytes(double bytes);

/// Shortest decimal form of a double that reads back to it, for messages ("0.1", "1e-06").
std::string format_number(double value);

/// A value for a table cell: three significant digits, at least the integer part
/// (1234.5 -> "1234", 12.345 -> "12.3", 0.4567 -> "0.457").
std::string format_significant(double value, int digits = 3);

}  // namespace gpubench
