// The base of the reporters whose output goes to a terminal (the table, its markdown twin and
// the summary). Internal to src/report/.
#pragma once

#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"

#include <ostream>
#include <sstream>
#include <vector>

namespace gpubench::report {

/// Writes the whole report, then makes it safe for a terminal in one place (terminal_text):
/// nothing from a record (a name, a message) can send an escape sequence or a megabyte line to
/// the screen.
class TerminalReporter : public Reporter {
 public:
  using Reporter::Reporter;

  void report(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) final {
    std::ostringstream text;
    write(text, jobs, reference);
    out_ << terminal_text(text.str());
  }

 protected:
  /// The report as it would be without the terminal pass.
  virtual void write(std::ostream& out, const std::vector<JobRecord>& jobs,
                     const ReferenceTable& reference) = 0;
};

}  // namespace gpubench::report
