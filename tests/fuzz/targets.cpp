// The fuzz targets' bodies (issue 14), shared by the libFuzzer mains (fuzz_*.cpp) and by
// FuzzRegressionTest, which replays the seed corpora and every input a campaign found
// (tests/fuzz/regressions/) in the ordinary test suite.
#include "tests/fuzz/targets.h"

#include "gpubench/config.h"
#include "gpubench/device.h"
#include "gpubench/journal.h"
#include "gpubench/registry.h"
#include "gpubench/report/compare.h"
#include "gpubench/report/reporter.h"
#include "gpubench/result.h"
#include "gpubench/suite.h"
#include "src/cli/app.h"
#include "tests/fuzz/fuzz_common.h"

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

namespace gpubench::fuzz {

// The config loader: a YAML or JSON document (the first byte picks which), parsed and applied
// over the built-in configs with every schema check, then every workload resolved.
int run_config(const uint8_t* data, size_t size) {
  static const ConfigStore base = ConfigStore::load_builtin(builtin_registry());
  if (size == 0) return 0;
  const bool yaml = (data[0] & 1) == 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const Json document = yaml ? parse_yaml(text, "fuzz.yaml") : parse_json(text, "fuzz.json");
    ConfigStore store = base;
    store.apply_document(document, yaml ? "fuzz.yaml" : "fuzz.json");
    for (const auto& name : store.model_names()) {
      const Json resolved = store.model(name).to_json();
      (void)dump_json(resolved);  // whatever was accepted can be written into a record
    }
    (void)dump_json(store.run().to_json());
  } catch (const gpubench::Error&) {
    // bad input, reported with a message: expected
  }
  return 0;
}

// The result-file reader: a --json document parsed and read into records; what it accepts must
// write back (dump_json) and read back to the same records.
int run_result(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ResultDocument document;
  try {
    document = ResultDocument::from_json(parse_json(text, "fuzz.json"), "fuzz.json");
  } catch (const gpubench::Error&) {
    return 0;  // bad input, reported with a message: expected
  }
  const std::string written = dump_json(document.to_json(), 2);
  FUZZ_CHECK(valid_utf8(written) == written, "a written result file is not valid UTF-8");
  const ResultDocument again = ResultDocument::from_json(Json::parse(written), "again.json");
  FUZZ_CHECK(again.jobs.size() == document.jobs.size(), "a result file does not read back");
  FUZZ_CHECK(dump_json(again.to_json(), 2) == written, "a result file does not round-trip");
  return 0;
}

// The journal reader and resume's parsing: a journal file read (the header, its suite plan as a
// resume reads it, every record), then continued as --resume does (a torn last line cut off, a
// whole last record without its newline kept), after which it must read back whole: no torn
// tail, the same records.
int run_journal(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::temp_file("journal.jsonl", text);
  Journal journal;
  try {
    journal = read_journal(path);
  } catch (const gpubench::Error&) {
    return 0;  // bad input, reported with a message: expected
  }
  try {
    (void)SuitePlan::from_json(journal.header.plan, path);
  } catch (const gpubench::Error&) {
  }
  {
    JournalWriter writer = JournalWriter::resume(path);  // may cut a torn last line
  }
  const Journal resumed = read_journal(path);
  FUZZ_CHECK(!resumed.torn_tail, "a resumed journal still has a torn last line");
  FUZZ_CHECK(
      resumed.jobs.size() == journal.jobs.size() || resumed.jobs.size() == journal.jobs.size() + 1,
      "resume lost records");
  // A record appended after the resume reads back as the last one.
  {
    JournalWriter writer = JournalWriter::resume(path);
    JobRecord record;
    record.model = "fuzz\xff";
    writer.append(record);
  }
  const Journal appended = read_journal(path);
  FUZZ_CHECK(appended.jobs.size() == resumed.jobs.size() + 1 &&
                 appended.jobs.back().model == valid_utf8("fuzz\xff"),
             "an appended record does not read back");
  return 0;
}

// The report's merge of many files: the input split into up to 8 files (result documents and
// journals in any mix) read together, merged (the last record of a job wins) and rendered in
// every format and compared; every terminal format must come out clean (no control byte,
// valid UTF-8), the HTML without markup from the records.
int run_report_merge(const uint8_t* data, size_t size) {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Files are separated by a line "--8<--".
  std::vector<std::string> paths;
  std::size_t start = 0;
  while (paths.size() < 8) {
    const std::size_t cut = text.find("\n--8<--\n", start);
    const std::string part = text.substr(start, cut == std::string::npos ? cut : cut - start);
    paths.push_back(fuzz::temp_file("merge-" + std::to_string(paths.size()), part));
    if (cut == std::string::npos) break;
    start = cut + 8;
  }
  ResultFiles files;
  try {
    files = read_result_files(paths);
  } catch (const gpubench::Error&) {
    return 0;  // bad input, reported with a message: expected
  }
  for (const auto& format : report_formats()) {
    std::ostringstream out;
    try {
      make_reporter(format, out)->report(files.jobs, store.reference());
    } catch (const gpubench::Error&) {
      continue;
    }
    const std::string rendered = out.str();
    FUZZ_CHECK(valid_utf8(rendered) == rendered, "a report is not valid UTF-8");
    if (format == "table" || format == "summary" || format == "md") {
      FUZZ_CHECK(fuzz::terminal_clean(rendered), "a terminal report holds a control byte");
    }
    if (format == "html") {
      FUZZ_CHECK(rendered.find("<script") == std::string::npos, "markup in the HTML report");
    }
  }
  try {
    const std::size_t half = files.jobs.size() / 2;
    const std::vector<JobRecord> a(files.jobs.begin(), files.jobs.begin() + half);
    const std::vector<JobRecord> b(files.jobs.begin() + half, files.jobs.end());
    const CompareResult result = compare_results(a, b, 0.02);
    for (const char* format : {"table", "md", "json"}) {
      std::ostringstream out;
      print_comparison(out, result, format);
      FUZZ_CHECK(valid_utf8(out.str()) == out.str(), "a comparison is not valid UTF-8");
    }
  } catch (const gpubench::Error&) {
  }
  return 0;
}

// The command-line parser: up to 24 arguments (the input split at NUL bytes) given to run_cli,
// the whole CLI as `gpubench` runs it. Kept from doing real work: it runs in an empty scratch
// folder (the caller's chdir), inputs with an argument holding '/' are skipped (no file outside
// it is read or written), as are `worker`, `--` and the device and testing flags, and `run`
// always gets `--device cuda`, which a CPU-only build refuses before any job (a CUDA build skips
// `run` inputs). What must hold: an exit code from the documented set, and stderr clean for a
// terminal.
int run_command_line(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"gpubench"};
  std::string current;
  for (std::size_t i = 0; i < size && args.size() < 24; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  if (!current.empty() && args.size() < 24) args.push_back(current);
  for (const auto& a : args) {
    if (a.find('/') != std::string::npos || a == "--" || a.rfind("--device", 0) == 0 ||
        a.rfind("--gpu", 0) == 0 || a.rfind("--in-process", 0) == 0 ||
        a.rfind("--worker", 0) == 0 || a == "worker") {
      return 0;
    }
  }
  if (args.size() > 1 && args[1] == "run") {
    if (built_with_cuda()) return 0;  // --device cuda would run the jobs
    args.push_back("--device");
    args.push_back("cuda");
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  FUZZ_CHECK(code >= 0 && code <= 4, "an exit code outside the documented ones");
  FUZZ_CHECK(fuzz::terminal_clean(err.str()), "stderr holds a control byte or invalid UTF-8");
  return 0;
}

}  // namespace gpubench::fuzz
