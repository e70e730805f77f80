// One row per job (merged: the last record of a job wins), every flat column, raw numbers
// (RFC 4180 quoting). Sample:
//   model,family,device,...,message
//   bert-base,language,NVIDIA H200,...,
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"

namespace gpubench {

namespace {

std::string csv_field(const std::string& raw) {
  std::string value = valid_utf8(raw);
  // A text cell a spreadsheet would run as a formula (=, +, @, or a tab or CR before one) gets a
  // leading apostrophe (OWASP's CSV injection advice); numbers, negative ones included, stay.
  if (!value.empty() && (value[0] == '=' || value[0] == '+' || value[0] == '@' ||
                         value[0] == '\t' || value[0] == '\r')) {
    value = "'" + value;
  }
  if (value.find_first_of(",\"\n\r") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char ch : value) {
    if (ch == '"') quoted += '"';
    quoted += ch;
  }
  return quoted + "\"";
}

class CsvReporter final : public Reporter {
 public:
  using Reporter::Reporter;

  void report(const std::vector<JobRecord>& jobs, const ReferenceTable& /*reference*/) override {
    const auto& columns = result_columns();
    for (std::size_t c = 0; c < columns.size(); ++c) out_ << (c ? "," : "") << columns[c].key;
    out_ << '\n';
    for (const auto& job : latest_records(jobs)) {
      for (std::size_t c = 0; c < columns.size(); ++c) {
        out_ << (c ? "," : "") << csv_field(columns[c].raw(job));
      }
      out_ << '\n';
    }
  }
};

}  // namespace

std::unique_ptr<Reporter> make_csv_reporter(std::ostream& out) {
  return std::make_unique<CsvReporter>(out);
}

}  // namespace gpubench
