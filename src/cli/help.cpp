// What the commands' --help and options share: CLI11's formatter with lines that fit the
// terminal (or 100 columns) and footers printed as written, options with a fixed set of values,
// list's and info's --format, and whether stdout and stderr are terminals.
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/terminal.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace gpubench::cli {

namespace {

/// The widest --help gets, on a terminal as wide or wider and off a terminal.
constexpr std::size_t kHelpColumns = 100;

/// `text` with every line longer than `width` columns broken at spaces. An option's line (its
/// names, then its description from column `column`, CLI11's column width) keeps its names and
/// continues its description under that column; another line continues under its indent.
std::string wrap_help(const std::string& text, std::size_t width, std::size_t column) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (text_columns(line) <= width) {
      out += line + '\n';
      continue;
    }
    const std::size_t lead = line.find_first_not_of(' ');
    const bool option = lead < column && column <= width / 2 && line.size() > column &&
                        line[column - 1] == ' ' && line[column] != ' ';
    const std::size_t indent = option ? column : lead;
    const std::string head = line.substr(0, indent);
    const std::size_t head_columns = text_columns(head);
    const std::size_t room = std::max<std::size_t>(width - std::min(width, head_columns), 20);
    const std::vector<std::string> parts = wrap_words(line.substr(indent), room);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      out += (i == 0 ? head : std::string(head_columns, ' ')) + parts[i] + '\n';
    }
  }
  return out;
}

/// CLI11's formatter, its lines wrapped to `width`, and the footer (each command's examples)
/// added as written: CLI11 2.5 and later reflow a footer as a paragraph, which would run the
/// examples' lines together.
class HelpFormatter final : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::size_t width) : width_(width) {}

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    std::string text = CLI::Formatter::make_help(app, std::move(name), mode);
    if (mode != CLI::AppFormatMode::Sub) {
      text.erase(text.find_last_not_of('\n') + 1);
      text += '\n';
      const std::string footer = app->get_footer();
      if (!footer.empty()) text += '\n' + footer + '\n';
    }
    // One blank line between groups (CLI11 2.1 puts two).
    for (std::size_t at; (at = text.find("\n\n\n")) != std::string::npos;) text.erase(at, 1);
    return wrap_help(text, width_, get_column_width());
  }

  std::string make_footer(const CLI::App* /*app*/) const override { return {}; }

 private:
  std::size_t width_;
};

/// Whether `stream` is the process's stream on `fd` (std::cout on 1, std::cerr on 2) and that
/// is a terminal; a string stream (tests) is none.
bool on_terminal(const std::ostream& stream, int fd) {
  const bool standard = (fd == STDOUT_FILENO && &stream == &std::cout) ||
                        (fd == STDERR_FILENO && &stream == &std::cerr);
  return standard && is_terminal(fd);
}

}  // namespace

std::shared_ptr<CLI::FormatterBase> help_formatter(const std::ostream& out) {
  const std::size_t columns =
      on_terminal(out, STDOUT_FILENO) ? terminal_columns(STDOUT_FILENO) : 0;
  return std::make_shared<HelpFormatter>(
      columns == 0 ? kHelpColumns : std::clamp<std::size_t>(columns, 40, kHelpColumns));
}

CLI::Option* with_choices(CLI::Option* option, const std::vector<std::string>& values,
                          const std::string& noun) {
  const CLI::Validator choice(
      [values, noun](std::string& value) {
        if (std::find(values.begin(), values.end(), value) != values.end()) return std::string();
        return fmt::format("unknown {} '{}'{}; choose one of {}", noun, value,
                           did_you_mean(value, values), join(values, ", "));
      },
      "", "choice");
  return option->check(choice)->type_name("{" + join(values, ",") + "}");
}

std::size_t report_columns(const std::ostream& out, bool wide) {
  if (wide || !on_terminal(out, STDOUT_FILENO)) return 0;
  return terminal_columns(STDOUT_FILENO);
}

bool progress_on_terminal(const std::ostream& err) { return on_terminal(err, STDERR_FILENO); }

bool wants_json(const std::string& command, const std::string& format, bool json_flag,
                std::ostream& err) {
  if (!json_flag) return format == "json";
  GPUBENCH_CHECK(format.empty() || format == "json", ConfigError,
                 "{} --json and --format {} contradict each other; give --format json or "
                 "--format table",
                 command, format);
  err << "gpubench: warning: '" << command << " --json' is deprecated; use '" << command
      << " --format json' (--json FILE is where 'gpubench run' writes its results)\n";
  return true;
}

}  // namespace gpubench::cli
