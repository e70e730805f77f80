// Whole-file writes, work files and their clean-up (records/files.h).
#include "gpubench/records/files.h"

#include "gpubench/base/errors.h"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace gpubench {

namespace {
std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

namespace {
std::string base_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// The prefix of every temporary file write_file_atomically makes for `path`:
/// FOLDER/.NAME.gpubench-tmp. (a dot file beside the target, so the rename stays in one
/// filesystem and a listing of the folder does not show it).
std::string temp_prefix(const std::string& path) {
  const std::string folder = folder_of(path);
  return (path.find('/') == std::string::npos ? std::string() : folder + "/") + "." +
         base_of(path) + ".gpubench-tmp.";
}

[[noreturn]] void throw_write_error(const std::string& path, int err) {
  throw AbortError(fmt::format("cannot write '{}': {}{}", path, std::strerror(err),
                               err == EFBIG || err == ENOSPC || err == EDQUOT
                                   ? " (free space or raise the file size limit)"
                                   : " (choose a writable folder)"));
}
}  // namespace

void write_file_atomically(const std::string& path, const std::string& content) {
  remove_stale_temp_files(path);
  // A fresh name each time, created only if nothing is there (O_EXCL) and never through a
  // symbolic link (O_NOFOLLOW): a link planted at a guessable temp name cannot redirect the
  // write. The rename then replaces `path` itself; a symlink at `path` is replaced, not followed.
  const std::string prefix = temp_prefix(path) + std::to_string(getpid()) + ".";
  static unsigned counter = 0;
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    const unsigned n = ++counter;
    temp = prefix + std::to_string(n) + "." +
           std::to_string(static_cast<unsigned>(std::time(nullptr)) ^ (n * 2654435761u));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) throw_write_error(path, errno);
  }
  if (fd < 0) throw_write_error(path, EEXIST);
  auto fail = [&](int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw_write_error(path, err);
  };
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : ENOSPC);  // SIGXFSZ is ignored: a size limit is EFBIG
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) fail(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw_write_error(path, err);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw_write_error(path, err);
  }
}

void remove_stale_temp_files(const std::string& path) {
  // Left by a gpubench killed between creating and renaming one: FOLDER/.NAME.gpubench-tmp.PID.*
  // whose process is gone. Those of a live process (another gpubench writing now) stay.
  const std::string prefix = base_of(temp_prefix(path));
  DIR* dir = ::opendir(folder_of(path).c_str());
  if (!dir) return;
  std::vector<std::string> stale;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      stale.push_back(folder_of(path) + "/" + name);
    }
  }
  ::closedir(dir);
  for (const auto& file : stale) ::unlink(file.c_str());
}

void check_writable(const std::string& path, const std::string& flag) {
  struct stat st {};
  GPUBENCH_CHECK(!(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)), ConfigError,
                 "{} '{}': is a folder (give a file path, such as {}/results.json)", flag, path,
                 path);
  const std::string folder = folder_of(path);
  GPUBENCH_CHECK(::access(folder.c_str(), W_OK) == 0, ConfigError,
                 "{} '{}': folder '{}' {} (create it or choose another path)", flag, path, folder,
                 ::access(folder.c_str(), F_OK) == 0 ? "is not writable" : "does not exist");
  if (::stat(path.c_str(), &st) == 0) {
    GPUBENCH_CHECK(::access(path.c_str(), W_OK) == 0, ConfigError,
                   "{} '{}': the file exists and is not writable (choose another path)", flag,
                   path);
  }
}

namespace {
/// Whether `text` starts with the PID of a process that is gone, the digits ended by
/// `terminator`: a name of another shape (say, mkstemp's random letters after the tag) is
/// nobody's PID, and its file is left alone.
bool process_is_gone(const std::string& text, char terminator) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 9 || digits >= text.size() || text[digits] != terminator) {
    return false;
  }
  const long pid = std::strtol(text.substr(0, digits).c_str(), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}
}  // namespace

std::string make_work_file(const char* tag) {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = env && *env ? env : "/tmp";
  std::string pattern = fmt::format("{}/gpubench-{}-{}-XXXXXX", dir, tag, ::getpid());
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const int fd = ::mkstemp(buffer.data());
  if (fd < 0) {
    throw AbortError(
        fmt::format("cannot create a work file in {}: {} (set TMPDIR to a writable "
                    "folder, then continue with --resume)",
                    dir, std::strerror(errno)));
  }
  ::close(fd);
  return buffer.data();
}

int remove_stale_work_files(const std::string& folder) {
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return 0;
  std::vector<std::string> stale;
  const std::string tmp_tag = ".gpubench-tmp.";
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    bool gone = false;
    if (const auto tag = name.find(tmp_tag);
        name.rfind(".gpubench-", 0) == 0 && tag != std::string::npos) {
      gone = process_is_gone(name.substr(tag + tmp_tag.size()), '.');  // its writer
    } else {
      for (const char* kind : {"gpubench-spec-", "gpubench-out-"}) {
        if (name.rfind(kind, 0) == 0) {
          gone = process_is_gone(name.substr(std::strlen(kind)), '-');  // the run that made it
        }
      }
    }
    if (gone) stale.push_back(folder + "/" + name);
  }
  ::closedir(dir);
  int removed = 0;
  for (const auto& file : stale) removed += ::unlink(file.c_str()) == 0 ? 1 : 0;
  return removed;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace gpubench
