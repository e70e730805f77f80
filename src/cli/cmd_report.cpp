// `gpubench report`: result files and journals beside the 2020 GPUs, with the purchase prices
// and prices per hour given, and against gpubench's recorded numbers for the cards measured.
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/terminal.h"
#include "gpubench/records/result.h"
#include "gpubench/report/reporter.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <ostream>
#include <sstream>
#include <string>

namespace gpubench::cli {

void setup_report(CLI::App& app, ReportOptions& o) {
  auto* cmd = app.add_subcommand("report", "Print result files beside the 2020 GPUs");
  cmd->add_option("files", o.files,
                  "Result files of 'gpubench run --json' and journals of 'gpubench run "
                  "--journal', in any mix; the last record of a job wins")
      ->required()
      ->type_name("FILE");
  with_choices(cmd->add_option("--format,-f", o.format,
                               "table (default): beside the eight 2020 GPUs; summary: a line per "
                               "job; md: the tables in markdown; csv, json: every field; html: "
                               "a page with charts"),
               report_formats(), "format");
  cmd->add_option("--output,-o", o.output, "Write the report to FILE instead of stdout")
      ->type_name("FILE");
  cmd->add_flag("--wide", o.wide,
                "Print every column of the table, however wide: on a terminal a wider section "
                "is otherwise printed in blocks of columns that fit it");
  cmd->add_option("--price", o.prices,
                  "A measured GPU's price (say, H200=30000; repeatable), for a "
                  "performance-per-dollar table beside the 2020 GPUs' prices")
      ->type_name("GPU=USD");
  cmd->add_option("--price-per-hour", o.hourly_prices,
                  "One card's price per hour (say, H100=2.49; repeatable), or USD when every "
                  "record ran on one device: $ per million units and units per $; it replaces "
                  "the price a record has from 'run --price-per-hour'")
      ->type_name("GPU=USD|USD");
  cmd->footer(
      "Examples:\n"
      "  gpubench report bert.json                      the tables beside the 2020 GPUs\n"
      "  gpubench report one.json all.jsonl --format html -o report.html\n"
      "  gpubench report h100.json --price-per-hour H100=2.49   $ per million units\n"
      "  gpubench report bert.json --wide | less -S     every column, scrolled sideways");
}

int run_report(const ReportOptions& o, std::ostream& out, std::ostream& err) {
  // All bad input fails before anything is read or written: the format, the prices, then the
  // output path.
  std::ostringstream text;
  // A file gets every column; so does a pipe (report_columns).
  auto reporter =
      make_reporter(o.format, text, o.output.empty() ? report_columns(out, o.wide) : 0);
  const std::vector<PriceSpec> prices = parse_prices(o.prices);
  const std::vector<HourlyPrice> hourly = parse_hourly_prices(o.hourly_prices);
  if (!o.output.empty()) check_writable(o.output, "--output");
  const ConfigStore store = builtin_store();
  ResultFiles files = read_result_files(o.files);
  // On a terminal the notes wrap to its width, as the tables do (a path can make one long).
  const std::size_t note_columns =
      progress_on_terminal(err) ? terminal_columns(STDERR_FILENO) : 0;
  for (const auto& note : files.notes) {
    const std::string line = "gpubench: " + terminal_text(note);
    if (note_columns == 0) {
      err << line << '\n';
      continue;
    }
    for (const auto& part : wrap_words(line, note_columns, 2)) err << part << '\n';
  }
  ReferenceTable reference = store.reference();
  apply_prices(reference, prices, files.jobs);  // a GPU no record ran on fails here
  apply_hourly_prices(files.jobs, hourly);      // and here
  // gpubench's own numbers for the cards measured; the compare hint names the file when one.
  reference.set_card_numbers(store.card_numbers(), o.files.size() == 1 ? o.files[0] : "");
  reporter->report(files.jobs, reference);
  if (o.output.empty()) {
    out << text.str();
  } else {
    write_file_atomically(o.output, text.str());  // never half a report
  }
  return kExitOk;
}

}  // namespace gpubench::cli
