#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gpubench {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest_match(std::string_view name,
                                         const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(name, candidate);
    if (!best || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  // A typo changes a few characters; beyond a third of the word it is another word.
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  if (best && best_distance <= limit) return best;
  // A prefix is a plausible shorthand too ("bert" for "bert-base").
  for (const auto& candidate : candidates) {
    if (!name.empty() && candidate.rfind(name, 0) == 0) return candidate;
  }
  return std::nullopt;
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  auto match = closest_match(name, candidates);
  return match ? fmt::format(" (did you mean '{}'?)", *match) : std::string();
}

namespace {

/// Length of the well-formed UTF-8 sequence at text[i], or 0 when the byte there starts none
/// (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF).
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = at(i);
  if (b < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
  if (b >= 0xc2 && b <= 0xdf) {
    n = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    n = 3;
    if (b == 0xe0) lo = 0xa0;  // overlong
    if (b == 0xed) hi = 0x9f;  // surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4;
    if (b == 0xf0) lo = 0x90;  // overlong
    if (b == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return n;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_length(text, i);
    const bool c0 = n == 1 && ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f);
    // C1 controls are U+0080-U+009F: 0xc2 0x80-0x9f in UTF-8.
    const bool c1 = n == 2 && byte == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    if (n == 0 || c0) {
      out += fmt::format("\\x{:02x}", byte);
      ++i;
    } else if (c1) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[i + 1]));
      i += 2;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string terminal_text(std::string_view text, std::size_t max_line) {
  const std::string safe = terminal_safe(text);
  std::string out;
  out.reserve(safe.size());
  std::size_t start = 0;
  while (start <= safe.size()) {
    std::size_t end = safe.find('\n', start);
    const bool last = end == std::string::npos;
    if (last) end = safe.size();
    std::string_view line(safe.data() + start, end - start);
    out += shortened(line, max_line);
    if (last) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string shortened(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes cut)", text.substr(0, cut), text.size() - cut);
}

std::string markdown_escape(std::string_view text) {
  const std::string valid = valid_utf8(text);
  std::string out;
  out.reserve(valid.size());
  for (const char c : valid) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '\n':
      case '\r':
        out += ' ';
        break;
      case '|':
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '#':
      case '!':
      case '~':
        out += '\\';
        out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.{}f} {}", bytes, std::fabs(bytes) < 10 ? 2 : 1, kUnits[unit]);
}

std::string format_number(double value) {
  return fmt::format("{}", value);  // shortest text that reads back to the same double
}

std::string counted(int64_t count, std::string_view noun, std::string_view plural) {
  if (count == 1) return fmt::format("1 {}", noun);
  if (!plural.empty()) return fmt::format("{} {}", count, plural);
  return fmt::format("{} {}s", count, noun);
}

std::string format_significant(double value, int digits) {
  if (!std::isfinite(value)) return "-";
  if (value == 0.0) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(value)))) + 1;
  const int decimals = std::max(0, digits - magnitude);
  return fmt::format("{:.{}f}", value, decimals);
}

}  // namespace gpubench
