// The fuzz targets' bodies (issue 14), shared by the libFuzzer mains (fuzz_*.cpp) and by
// FuzzRegressionTest, which replays the seed corpora and every input a campaign found
// (tests/fuzz/regressions/) in the ordinary test suite.
#include "tests/fuzz/targets.h"

#include "gpubench/config/config.h"
#include "gpubench/records/journal.h"
#include "gpubench/train/registry.h"
#include "gpubench/report/compare.h"
#include "gpubench/report/reporter.h"
#include "gpubench/records/result.h"
#include "gpubench/run/suite.h"
#include "src/cli/app.h"
#include "tests/fuzz/fuzz_common.h"

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

namespace gpubench::fuzz {

namespace {

const ConfigStore& builtin_store() {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  return store;
}

/// FNV-1a of the input: picks what a target does with it (which operation, which format)
/// without taking bytes from it, so that the seeds and regression inputs keep their meaning.
uint32_t input_hash(const uint8_t* data, size_t size) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  return h;
}

}  // namespace

int config_choices() { return static_cast<int>(builtin_store().model_names().size()) + 1; }

// The config loader: a YAML or JSON document (bit 0 of the first byte picks which), parsed and
// applied over the built-in configs with every schema check. The first byte's other bits pick
// the built-in config a document of bare model keys (no `name`, `models` or `run`) is applied
// to, as `models: {NAME: document}`; 0 applies every document as it is, as a --config file.
// Then every workload the document changed, the chosen one and the run settings are resolved
// and written (the others are the built-in store's, unchanged).
int run_config(const uint8_t* data, size_t size) {
  const ConfigStore& base = builtin_store();
  if (size == 0) return 0;
  const bool yaml = (data[0] & 1) == 0;
  const int choice = (data[0] >> 1) % config_choices();
  const std::string chosen = choice == 0 ? std::string() : base.model_names()[choice - 1];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string file = yaml ? "fuzz.yaml" : "fuzz.json";
  try {
    Json document = yaml ? parse_yaml(text, file) : parse_json(text, file);
    if (!chosen.empty() && document.is_object() && !document.contains("name") &&
        !document.contains("models") && !document.contains("run")) {
      document = Json{{"models", Json{{chosen, std::move(document)}}}};
    }
    ConfigStore store = base;
    store.apply_document(document, file);
    // What apply_document rebuilt: the models it names (it throws on any other name).
    std::vector<std::string> touched;
    if (!chosen.empty()) touched.push_back(chosen);
    if (document.is_object()) {
      if (document.contains("models") && document["models"].is_object()) {
        for (const auto& item : document["models"].items()) touched.push_back(item.key());
      } else if (document.contains("name") && document["name"].is_string()) {
        touched.push_back(document["name"].get<std::string>());
      }
    }
    for (const auto& name : touched) {
      FUZZ_CHECK(store.has_model(name), "an applied model is not in the store");
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

// The journal reader and resume's parsing: a journal file read (the header, every record), then
// one operation (the input's hash picks it):
//   kJournalPlan:   its suite plan read as --resume reads it;
//   kJournalResume: continued as --resume does (a torn last line cut off, a whole last record
//                   without its newline kept), after which it must read back whole: no torn
//                   tail, no record lost;
//   kJournalAppend: resumed and a record appended, which must read back as the last one after
//                   the same records, with no torn tail.
int run_journal(const uint8_t* data, size_t size, int operation) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::temp_file("journal.jsonl", text);
  Journal journal;
  try {
    journal = read_journal(path);
  } catch (const gpubench::Error&) {
    return 0;  // bad input, reported with a message: expected
  }
  const std::size_t before = journal.jobs.size();
  switch (operation) {
    case kJournalPlan:
      try {
        (void)SuitePlan::from_json(journal.header.plan, path);
      } catch (const gpubench::Error&) {
      }
      break;
    case kJournalResume: {
      {
        JournalWriter writer = JournalWriter::resume(path);  // may cut a torn last line
      }
      const Journal resumed = read_journal(path);
      FUZZ_CHECK(!resumed.torn_tail, "a resumed journal still has a torn last line");
      FUZZ_CHECK(resumed.jobs.size() == before || resumed.jobs.size() == before + 1,
                 "resume lost records");
      break;
    }
    default: {
      {
        JournalWriter writer = JournalWriter::resume(path);
        JobRecord record;
        record.model = "fuzz\xff";
        writer.append(record);
      }
      // The resume may have kept a whole last record that had no newline: one more.
      const Journal appended = read_journal(path);
      FUZZ_CHECK(!appended.torn_tail, "a resumed journal still has a torn last line");
      FUZZ_CHECK((appended.jobs.size() == before + 1 || appended.jobs.size() == before + 2) &&
                     appended.jobs.back().model == valid_utf8("fuzz\xff"),
                 "an appended record does not read back");
      break;
    }
  }
  return 0;
}

int run_journal(const uint8_t* data, size_t size) {
  return run_journal(data, size, static_cast<int>(input_hash(data, size) % kJournalOperations));
}

int report_merge_choices() { return static_cast<int>(report_formats().size()) + 1; }

// The report's merge of many files: the input split into up to 8 files (result documents and
// journals in any mix) read together, merged (the last record of a job wins), then rendered in
// one format, or compared (choice == the number of formats; the input's hash picks): every
// terminal format must come out clean (no control byte, valid UTF-8), the HTML without markup
// from the records, a comparison valid UTF-8 in each of its formats.
int run_report_merge(const uint8_t* data, size_t size, int choice) {
  const ConfigStore& store = builtin_store();
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
  if (choice < static_cast<int>(report_formats().size())) {
    const std::string& format = report_formats()[static_cast<std::size_t>(choice)];
    std::ostringstream out;
    try {
      make_reporter(format, out)->report(files.jobs, store.reference());
    } catch (const gpubench::Error&) {
      return 0;
    }
    const std::string rendered = out.str();
    FUZZ_CHECK(valid_utf8(rendered) == rendered, "a report is not valid UTF-8");
    if (format == "table" || format == "summary" || format == "md") {
      FUZZ_CHECK(fuzz::terminal_clean(rendered), "a terminal report holds a control byte");
    }
    if (format == "html") {
      FUZZ_CHECK(rendered.find("<script") == std::string::npos, "markup in the HTML report");
    }
    return 0;
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

int run_report_merge(const uint8_t* data, size_t size) {
  return run_report_merge(data, size,
                          static_cast<int>(input_hash(data, size) % report_merge_choices()));
}

// The command-line parser: up to 24 arguments (the input split at NUL bytes) given to
// run_cli_check_only: the whole CLI as `gpubench` parses and checks it (every option, the
// configs a --config names, the plan, the device, the outputs' paths, a --resume's journal),
// with `run` stopped before its journal and first job and `worker` and `info` once parsed;
// `list`, `report` and `compare` run as usual. It runs in an empty scratch folder (the caller's
// chdir), and inputs with an argument holding '/' are skipped (no file outside it is read or
// written). What must hold: an exit code from the documented set, and stderr clean for a
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
    if (a.find('/') != std::string::npos) return 0;
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run_cli_check_only(static_cast<int>(argv.size()), argv.data(), out, err);
  FUZZ_CHECK(code >= 0 && code <= 4, "an exit code outside the documented ones");
  FUZZ_CHECK(fuzz::terminal_clean(err.str()), "stderr holds a control byte or invalid UTF-8");
  return 0;
}

}  // namespace gpubench::fuzz
