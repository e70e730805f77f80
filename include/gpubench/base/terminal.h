// What goes to a terminal: how wide it is, and progress that fits where it goes. On a terminal
// progress is one status line rewritten in place (carriage return, the text, clear to the end of
// the line) with the lines that stay printed above it; in a pipe or a log it is plain lines, the
// status at most one line per interval (10 s); or nothing at all.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace gpubench {

/// Whether the file descriptor `fd` is a terminal.
bool is_terminal(int fd);

/// The width of the terminal on `fd` in columns: COLUMNS where it is a whole number from 1 on
/// (the user's word for a terminal whose size the system cannot tell), else the terminal's own
/// (TIOCGWINSZ). 0 when `fd` is no terminal (a pipe, a file) or its width is unknown: no limit.
std::size_t terminal_columns(int fd);

/// The columns `text` takes on a terminal: one per UTF-8 character.
std::size_t text_columns(std::string_view text);

/// `text` cut to at most `columns` characters, at a character boundary.
std::string cut_to_columns(std::string_view text, std::size_t columns);

/// `text` broken at spaces into lines of at most `columns` characters (a word longer than that
/// stays whole on its own line); the lines after the first start with `indent` spaces.
std::vector<std::string> wrap_words(std::string_view text, std::size_t columns,
                                    std::size_t indent = 0);

/// Where progress goes and how it looks there.
enum class ProgressMode {
  kTerminal,  ///< one status line rewritten in place, the lines that stay above it
  kPlain,     ///< lines only; the status at most one line per interval
  kNone,      ///< nothing
};

/// The values of `run --progress`: auto, plain, none.
const std::vector<std::string>& progress_choices();

/// What a `run --progress` value means for a stream that is or is not a terminal: auto is
/// kTerminal on a terminal and kPlain elsewhere. Throws ConfigError for another value.
ProgressMode progress_mode(std::string_view choice, bool terminal);

/// "terminal", "plain", "none": how a run tells its workers (GPUBENCH_PROGRESS).
std::string_view to_string(ProgressMode mode);

/// The mode to_string() names; none for any other text.
std::optional<ProgressMode> parse_progress_mode(std::string_view text);

/// Progress on one stream, in one mode; safe to call from several threads. It adds no text of
/// its own but the terminal's control sequences: callers pass text that is safe to print
/// (terminal_safe).
class ProgressPrinter {
 public:
  /// Seconds on a monotonic clock (tests pass their own).
  using Clock = std::function<double()>;

  /// `columns`: the terminal's width (a status line is cut to one less, so that it never wraps);
  /// `interval_s`: in plain mode, the least time between a line and a status line after it.
  ProgressPrinter(std::ostream& out, ProgressMode mode, std::size_t columns = 80,
                  double interval_s = 10, Clock clock = nullptr);

  /// A line that stays. Terminal: printed from the start of a cleared line (over whatever
  /// status line is there, this process's or another's), and this printer's status line drawn
  /// again under it; plain: the line; none: nothing.
  void line(std::string_view text);

  /// What is going on now, one line. Terminal: the status line rewritten in place when it
  /// changed ("" clears it); plain: printed as a line when `interval_s` have passed since this
  /// printer last printed anything, else dropped; none: nothing.
  void status(std::string_view text);

  /// Terminal: clears the status line, so that whatever is printed next starts on a clean line.
  void clear_status();

  ProgressMode mode() const { return mode_; }

 private:
  double now() const;

  std::ostream& out_;
  const ProgressMode mode_;
  const std::size_t columns_;
  const double interval_s_;
  const Clock clock_;
  std::mutex m_;
  std::string shown_;           ///< the status line on the terminal ("" when none)
  double last_printed_s_ = 0;   ///< plain: when a line was last printed
};

}  // namespace gpubench
