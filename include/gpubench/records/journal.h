// The results journal: one JSON object per line, appended and synced to disk as each job ends,
// so a suite that crashes or is killed loses at most the job it was running, and
// `gpubench run --resume FILE` knows what is already done.
//
// Line 1 is the header: {"schema": "gpubench-journal", "schema_version": 1, "created_utc",
// "command_line", "plan", "run_settings"}; the plan is everything a resume needs to continue
// the same suite. Every further line is {"job": <JobRecord>}. A final line cut short by a kill
// (no newline, not JSON) is ignored when read and cut off when the journal is continued; a last
// line that is a whole record without its newline counts, and gets its newline.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/records/result.h"

#include <optional>
#include <string>
#include <vector>

namespace gpubench {

constexpr int kJournalSchemaVersion = 1;

struct JournalHeader {
  std::string created_utc;
  std::vector<std::string> command_line;
  Json plan = Json::object();          ///< the suite as planned (the CLI gives it its shape)
  Json run_settings = Json::object();  ///< resolved run settings, for the reader
  /// The run's result files as absolute paths ({"json": ..., "csv": ...}, each when given):
  /// a --resume rewrites them unless it is given others.
  Json outputs = Json::object();

  Json to_json() const;
};

struct Journal {
  std::string path;
  JournalHeader header;
  std::vector<JobRecord> jobs;  ///< in the order they ended
  bool torn_tail = false;       ///< the last line was cut short (a killed write) and ignored
};

/// True when the file's first line is a journal header (a cheap check for readers that take
/// result documents and journals alike).
bool is_journal_file(const std::string& path);

/// Reads a journal. Throws ConfigError naming the file (and line) for a missing file, a foreign
/// or newer header, or a line in the middle that is not a job record.
Journal read_journal(const std::string& path);

/// Appends job records, each as one line written in one call and synced before append returns.
/// Holds an exclusive lock on the file (flock) while it lives: one writer per journal. A write
/// that fails throws AbortError (exit code 4).
class JournalWriter {
 public:
  /// Starts a new journal at `path` with `header` as its first line. Throws ConfigError if the
  /// file exists (never overwrite measurements) or cannot be written.
  static JournalWriter create(const std::string& path, const JournalHeader& header);
  /// As create, but no journal (and no error) when `path` exists already.
  static std::optional<JournalWriter> create_if_absent(const std::string& path,
                                                       const JournalHeader& header);
  /// Continues the journal at `path`: cuts off a torn final line (one that is not JSON), ends a
  /// whole record that lacks only its newline, then appends after it.
  static JournalWriter resume(const std::string& path);

  JournalWriter(JournalWriter&& other) noexcept;
  JournalWriter& operator=(JournalWriter&&) = delete;
  JournalWriter(const JournalWriter&) = delete;
  ~JournalWriter();

  void append(const JobRecord& record);
  const std::string& path() const { return path_; }

 private:
  JournalWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void write_line(const std::string& line);
  void write_raw(const std::string& data);

  std::string path_;
  int fd_ = -1;
};

}  // namespace gpubench
