#include "gpubench/base/terminal.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdlib>

namespace gpubench {

namespace {

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xc0) == 0x80; }

/// COLUMNS as a width, when it is a whole number from 1 on.
std::size_t columns_variable() {
  const char* text = std::getenv("COLUMNS");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 1 || value > 100000) return 0;
  return static_cast<std::size_t>(value);
}

}  // namespace

bool is_terminal(int fd) { return ::isatty(fd) == 1; }

std::size_t terminal_columns(int fd) {
  if (!is_terminal(fd)) return 0;
  if (const std::size_t columns = columns_variable()) return columns;
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

std::size_t text_columns(std::string_view text) {
  std::size_t columns = 0;
  for (const char c : text) columns += continuation_byte(c) ? 0 : 1;
  return columns;
}

std::string cut_to_columns(std::string_view text, std::size_t columns) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (continuation_byte(text[i])) continue;
    if (seen == columns) return std::string(text.substr(0, i));
    ++seen;
  }
  return std::string(text);
}

std::vector<std::string> wrap_words(std::string_view text, std::size_t columns,
                                    std::size_t indent) {
  std::vector<std::string> lines;
  std::string current;
  std::size_t width = 0;
  bool has_word = false;  // on the current line
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t start = text.find_first_not_of(' ', at);
    if (start == std::string_view::npos) break;
    const std::size_t end = std::min(text.find(' ', start), text.size());
    const std::string_view word = text.substr(start, end - start);
    const std::size_t word_width = text_columns(word);
    if (has_word && width + 1 + word_width > columns) {
      lines.push_back(current);
      current = std::string(indent, ' ');
      width = indent;
      has_word = false;
    }
    if (has_word) {
      current += ' ';
      ++width;
    }
    current.append(word);
    width += word_width;
    has_word = true;
    at = end;
  }
  if (has_word || lines.empty()) lines.push_back(current);
  return lines;
}

// ---- Progress ----

const std::vector<std::string>& progress_choices() {
  static const std::vector<std::string> choices = {"auto", "plain", "none"};
  return choices;
}

ProgressMode progress_mode(std::string_view choice, bool terminal) {
  if (choice == "auto") return terminal ? ProgressMode::kTerminal : ProgressMode::kPlain;
  if (choice == "plain") return ProgressMode::kPlain;
  if (choice == "none") return ProgressMode::kNone;
  throw ConfigError(fmt::format("--progress: unknown mode '{}'{}; choose one of {}", choice,
                                did_you_mean(choice, progress_choices()),
                                join(progress_choices(), ", ")));
}

std::string_view to_string(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::kTerminal:
      return "terminal";
    case ProgressMode::kPlain:
      return "plain";
    case ProgressMode::kNone:
      return "none";
  }
  return "plain";
}

std::optional<ProgressMode> parse_progress_mode(std::string_view text) {
  for (const ProgressMode mode :
       {ProgressMode::kTerminal, ProgressMode::kPlain, ProgressMode::kNone}) {
    if (text == to_string(mode)) return mode;
  }
  return std::nullopt;
}

ProgressPrinter::ProgressPrinter(std::ostream& out, ProgressMode mode, std::size_t columns,
                                 double interval_s, Clock clock)
    : out_(out),
      mode_(mode),
      columns_(columns > 1 ? columns : 80),
      interval_s_(interval_s > 0 ? interval_s : 10),
      clock_(std::move(clock)) {
  last_printed_s_ = now();  // the first status line of plain mode comes after an interval
}

double ProgressPrinter::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ProgressPrinter::line(std::string_view text) {
  const std::lock_guard<std::mutex> lock(m_);
  switch (mode_) {
    case ProgressMode::kNone:
      return;
    case ProgressMode::kPlain:
      out_ << text << '\n' << std::flush;
      last_printed_s_ = now();
      return;
    case ProgressMode::kTerminal:
      out_ << "\r\x1b[K" << text << '\n';
      if (!shown_.empty()) out_ << cut_to_columns(shown_, columns_ - 1) << "\x1b[K";
      out_ << std::flush;
      return;
  }
}

void ProgressPrinter::status(std::string_view text) {
  // One line: whatever follows a newline is not shown.
  text = text.substr(0, text.find('\n'));
  const std::lock_guard<std::mutex> lock(m_);
  switch (mode_) {
    case ProgressMode::kNone:
      return;
    case ProgressMode::kPlain:
      if (text.empty() || now() - last_printed_s_ < interval_s_) return;
      out_ << text << '\n' << std::flush;
      last_printed_s_ = now();
      return;
    case ProgressMode::kTerminal:
      if (text == shown_) return;
      shown_ = std::string(text);
      out_ << '\r' << cut_to_columns(shown_, columns_ - 1) << "\x1b[K" << std::flush;
      return;
  }
}

void ProgressPrinter::clear_status() {
  const std::lock_guard<std::mutex> lock(m_);
  if (mode_ != ProgressMode::kTerminal || shown_.empty()) return;
  shown_.clear();
  out_ << "\r\x1b[K" << std::flush;
}

}  // namespace gpubench
