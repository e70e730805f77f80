#include "gpubench/records/journal.h"

#include "gpubench/base/errors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpubench {

namespace {

constexpr const char* kSchema = "gpubench-journal";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GPUBENCH_CHECK(in.good(), ConfigError,
                 "journal '{}' cannot be read (check the path; 'gpubench run --journal FILE' "
                 "writes one)",
                 path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

JournalHeader parse_header(const Json& j, const std::string& path) {
  GPUBENCH_CHECK(!(j.is_object() && j.value("schema", std::string()) == "gpubench-result"),
                 ConfigError,
                 "{}: is a result document ('gpubench run --json'), not a journal; resume the "
                 "journal the run named on stderr (gpubench-DATE-TIME.jsonl or --journal)",
                 path);
  GPUBENCH_CHECK(j.is_object() && j.value("schema", std::string()) == kSchema, ConfigError,
                 "{}:1: not a gpubench journal (no \"schema\": \"{}\" on the first line)", path,
                 kSchema);
  // Read as JSON, not as an int: a version of 1e30 must be refused, not overflow a cast.
  const Json& version_json = j.contains("schema_version") ? j["schema_version"] : Json(0);
  const std::string version =
      version_json.is_number_integer() ? version_json.dump() : quote_value(version_json);
  const bool supported =
      version_json.is_number_integer() && version_json.get<int64_t>() == kJournalSchemaVersion;
  GPUBENCH_CHECK(supported, ConfigError,
                 "{}:1: journal schema version {} is not supported by this gpubench (it reads "
                 "version {}); use the gpubench that wrote it",
                 path, version, kJournalSchemaVersion);
  JournalHeader h;
  h.created_utc = j.value("created_utc", std::string());
  h.command_line = j.value("command_line", std::vector<std::string>());
  h.plan = j.value("plan", Json::object());
  h.run_settings = j.value("run_settings", Json::object());
  h.outputs = j.value("outputs", Json::object());
  return h;
}

std::string errno_text() { return std::strerror(errno); }

/// read_journal on text already read (`path` names it in errors).
Journal parse_journal(const std::string& text, const std::string& path);

/// One writer per journal: a second gpubench on the same file would run jobs twice and
/// interleave its lines. The lock goes with the file descriptor.
void lock_or_throw(int fd, const std::string& path) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return;
  const std::string why = errno == EWOULDBLOCK ? "" : std::string(": ") + errno_text();
  ::close(fd);
  throw ConfigError(fmt::format(
      "journal '{}' is in use by another gpubench{}; wait for it to finish (or stop it), then "
      "continue with --resume {}",
      path, why, path));
}

}  // namespace

Json JournalHeader::to_json() const {
  Json out = {{"schema", kSchema},
              {"schema_version", kJournalSchemaVersion},
              {"created_utc", created_utc},
              {"command_line", command_line},
              {"plan", plan},
              {"run_settings", run_settings}};
  if (!outputs.empty()) out["outputs"] = outputs;
  return out;
}

bool is_journal_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string first;
  if (!in.good() || !std::getline(in, first)) return false;
  const Json j = Json::parse(first, nullptr, /*allow_exceptions=*/false);
  // Not value("schema", ""): that throws nlohmann's type_error when "schema" is no string
  // (found by fuzz_report_merge: `gpubench report` on {"schema": []} exited 1 as an internal
  // error instead of 2, bad input).
  if (!j.is_object()) return false;
  const auto schema = j.find("schema");
  return schema != j.end() && schema->is_string() && schema->get<std::string>() == kSchema;
}

Journal read_journal(const std::string& path) { return parse_journal(read_all(path), path); }

namespace {
Journal parse_journal(const std::string& text, const std::string& path) {
  Journal journal;
  journal.path = path;
  std::size_t start = 0;
  int line_number = 0;
  bool have_header = false;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    const bool complete = end != std::string::npos;
    if (!complete) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      // Only the last write can be torn by a kill; anything else is damage to report.
      GPUBENCH_CHECK(!complete, ConfigError,
                     "{}:{}: not a JSON object; the journal is damaged (remove the line to keep "
                     "the rest)",
                     path, line_number);
      journal.torn_tail = true;
      break;
    }
    if (!have_header) {
      try {
        journal.header = parse_header(j, path);
      } catch (const Json::exception& e) {
        throw ConfigError(fmt::format("{}:1: not a gpubench journal header: {}", path, e.what()));
      }
      have_header = true;
      continue;
    }
    GPUBENCH_CHECK(j.is_object() && j.contains("job") && j["job"].is_object(), ConfigError,
                   "{}:{}: expected a {{\"job\": ...}} line; the journal is damaged (remove "
                   "the line to keep the rest)",
                   path, line_number);
    try {
      journal.jobs.push_back(JobRecord::from_json(j["job"]));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}:{}: {}", path, line_number, e.what()));
    }
  }
  GPUBENCH_CHECK(have_header, ConfigError,
                 "{}: empty journal (no header line: its run was stopped as it started); delete "
                 "it and start the run again",
                 path);
  return journal;
}
}  // namespace

JournalWriter JournalWriter::create(const std::string& path, const JournalHeader& header) {
  auto writer = create_if_absent(path, header);
  if (!writer) {
    throw ConfigError(
        fmt::format("journal '{}' already exists; continue it with --resume {} or choose another "
                    "--journal path",
                    path, path));
  }
  return std::move(*writer);
}

std::optional<JournalWriter> JournalWriter::create_if_absent(const std::string& path,
                                                             const JournalHeader& header) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return std::nullopt;
    throw ConfigError(
        fmt::format("journal '{}' cannot be created: {} (check that the folder exists and is "
                    "writable)",
                    path, errno_text()));
  }
  lock_or_throw(fd, path);
  JournalWriter writer(path, fd);
  writer.write_line(dump_json(header.to_json()));
  // The new file's name is durable too, not only its content.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return std::optional<JournalWriter>(std::move(writer));
}

JournalWriter JournalWriter::resume(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  GPUBENCH_CHECK(fd >= 0, ConfigError,
                 "journal '{}' cannot be opened for appending: {} (check the path and its "
                 "permissions)",
                 path, errno_text());
  lock_or_throw(fd, path);  // before reading, so no other writer changes it under us
  JournalWriter writer(path, fd);
  const std::string text = read_all(path);
  parse_journal(text, path);  // validates the header and every full line
  if (!text.empty() && text.back() != '\n') {
    const std::size_t start = text.rfind('\n') + 1;  // npos + 1 == 0: a one-line file
    const Json last = Json::parse(text.substr(start), nullptr, /*allow_exceptions=*/false);
    if (!last.is_discarded()) {
      writer.write_raw("\n");  // a whole record cut before its newline: keep it
    } else if (::ftruncate(fd, static_cast<off_t>(start)) != 0) {
      throw AbortError(
          fmt::format("journal '{}': cannot cut off its torn last line: {}", path, errno_text()));
    }
  }
  return writer;
}

JournalWriter::JournalWriter(JournalWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

JournalWriter::~JournalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::append(const JobRecord& record) {
  write_line(dump_json(Json{{"job", record.to_json()}}));
}

void JournalWriter::write_line(const std::string& line) { write_raw(line + '\n'); }

void JournalWriter::write_raw(const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    GPUBENCH_CHECK(n > 0, AbortError,
                   "journal '{}': write failed: {}; free space or fix the folder, then continue "
                   "with --resume {}",
                   path_, n < 0 ? errno_text() : "no bytes written", path_);
    done += static_cast<std::size_t>(n);
  }
  GPUBENCH_CHECK(::fsync(fd_) == 0, AbortError,
                 "journal '{}': fsync failed: {}; fix the disk, then continue with --resume {}",
                 path_, errno_text(), path_);
}

}  // namespace gpubench
