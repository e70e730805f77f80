// `gpubench compare A B`: two result files job by job; exit 1 when B regressed.
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/records/result.h"
#include "gpubench/report/compare.h"
#include "gpubench/report/reporter.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>

#include <ostream>
#include <sstream>

namespace gpubench::cli {

void setup_compare(CLI::App& app, CompareOptions& o) {
  auto* cmd = app.add_subcommand(
      "compare", "Compare two result files job by job: faster, slower or within noise");
  cmd->add_option("files", o.files,
                  "A (the baseline) and B (the candidate): result files or journals")
      ->required()
      ->expected(2)
      ->type_name("FILE");
  cmd->add_option("--noise", o.noise_pct,
                  "Percent difference taken as noise where a job has no interval (one timed "
                  "run; --repeat 3 gives one) (default: 2)")
      ->type_name("PCT");
  with_choices(cmd->add_option("--format,-f", o.format, "table (default), md, json"),
               {"table", "md", "json"}, "format");
  cmd->footer(
      "Examples:\n"
      "  gpubench compare before.json after.json          faster, slower or within noise\n"
      "  gpubench compare a.jsonl b.jsonl --noise 5 --format md\n"
      "\n"
      "Jobs are matched by model, precision and memory cap; the devices may differ. With a 95%\n"
      "interval on both sides (run --repeat 2 or more) B is faster or slower when the intervals\n"
      "do not overlap; otherwise when the difference passes --noise.\n"
      "Exit codes: 0 no regression; 1 B is slower than A on some job, or failed where A\n"
      "trained; 2 bad input (a file, or two files that share no job).");
}

int run_compare(const CompareOptions& o, std::ostream& out, std::ostream& err) {
  GPUBENCH_CHECK(o.noise_pct >= 0 && o.noise_pct < 100, ConfigError,
                 "--noise: expected a percentage from 0 to 100, got '{}'",
                 format_number(o.noise_pct));
  const ResultFiles a = read_result_files({o.files.at(0)});
  const ResultFiles b = read_result_files({o.files.at(1)});
  for (const auto* files : {&a, &b}) {
    for (const auto& note : files->notes) err << "gpubench: " << terminal_text(note) << '\n';
  }
  std::ostringstream text;  // nothing is printed unless the whole comparison can be
  const CompareResult result = compare_results(a.jobs, b.jobs, o.noise_pct / 100.0);
  print_comparison(text, result, o.format);
  out << text.str();
  if (!result.regression) return kExitOk;
  std::vector<std::string> worse;
  for (const auto& c : result.jobs) {
    if (c.regressed()) {
      worse.push_back(fmt::format("{} {} ({})", c.model, c.precision, c.verdict));
    }
  }
  err << "gpubench: B regressed against A: " << terminal_text(join(worse, ", ")) << '\n';
  return kExitJobFailed;
}

}  // namespace gpubench::cli
