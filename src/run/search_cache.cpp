// The local cache of search answers: its key, its file (read, and rewritten atomically under a
// lock on its folder), and the search through it: a cached answer verified by two probes, or the
// full search, whose answer is stored.
#include "gpubench/run/search_cache.h"

#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/measure/search_stop.h"
#include "gpubench/records/result.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

namespace gpubench {

namespace {

/// `object[section][name]`, or null where either is missing (an environment read from a
/// record may lack a field).
Json field_of(const Json& object, const char* section, const char* name) {
  if (!object.is_object() || !object.contains(section)) return nullptr;
  const Json& inner = object[section];
  return inner.is_object() && inner.contains(name) ? inner[name] : Json(nullptr);
}

/// Equal as JSON, whatever order the keys were written in.
bool same_json(const Json& a, const Json& b) {
  return nlohmann::json::parse(dump_json(a)) == nlohmann::json::parse(dump_json(b));
}

/// The cache file's entries by key digest, or why the file cannot be read. A file that does not
/// exist is an empty cache.
struct CacheFile {
  Json entries = Json::object();
  std::string problem;
};

CacheFile read_cache_file(const std::string& path) {
  CacheFile out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Nothing there (no file, or no folder yet): an empty cache.
    if (errno != ENOENT && errno != ENOTDIR) {
      out.problem = fmt::format("cannot be opened ({})", std::strerror(errno));
    }
    return out;
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      out.problem = fmt::format("cannot be read ({})", std::strerror(errno));
      ::close(fd);
      return out;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  try {
    const Json document = Json::parse(text);
    if (!document.is_object() || !document.contains("format") ||
        document["format"] != kSearchCacheFormat || !document.contains("entries") ||
        !document["entries"].is_object()) {
      out.problem = fmt::format(
          "is not a search cache of format {} (an object with `format` and "
          "`entries`)",
          kSearchCacheFormat);
      return out;
    }
    out.entries = document["entries"];
  } catch (const nlohmann::json::exception& e) {
    const std::string what = e.what();
    out.problem = fmt::format("is not valid JSON ({})", what.substr(0, 200));
  }
  return out;
}

/// An exclusive lock on a folder for the scope of a read, merge and write of its cache file, so
/// that two runs storing at once do not drop each other's entries. Released on close.
class FolderLock {
 public:
  explicit FolderLock(const std::string& folder)
      : fd_(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ < 0) {
      throw std::runtime_error(
          fmt::format("cannot open the folder {} to lock it ({})", folder, std::strerror(errno)));
    }
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd_);
      throw std::runtime_error(
          fmt::format("cannot lock the folder {} ({})", folder, std::strerror(error)));
    }
  }
  ~FolderLock() { ::close(fd_); }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_;
};

}  // namespace

Json search_cache_variables() {
  // The variables that make a job modified are those that change what fits: the allocator's
  // options beyond gpubench's own, workspaces, diagnostic switches.
  const Json& recorded = env::recorded_variables();
  Json out = Json::object();
  for (const std::string& name : env::modifying_variables(recorded)) out[name] = recorded.at(name);
  return out;
}

Json search_cache_key(const SearchCacheInputs& in) {
  const Json& env = in.environment;
  Json sections = Json::object();
  for (const char* section : {"model", "optimizer", "runtime", "search"}) {
    const bool has = in.config.is_object() && in.config.contains(section);
    sections[section] = has ? Json(json_digest(in.config[section])) : Json(nullptr);
  }
  const auto config_field = [&](const char* name) {
    return in.config.is_object() && in.config.contains(name) ? in.config[name] : Json(nullptr);
  };
  const RunSettings& run = in.run;
  return {{"device", field_of(env, "device", "name")},
          {"memory_bytes", field_of(env, "device", "memory_bytes")},
          {"driver", field_of(env, "software", "driver")},
          {"libtorch", field_of(env, "software", "libtorch")},
          {"cuda_runtime", field_of(env, "software", "cuda_runtime")},
          {"cudnn", field_of(env, "software", "cudnn")},
          {"gpubench", field_of(env, "gpubench", "version")},
          {"git_commit", field_of(env, "gpubench", "git_commit")},
          {"model", config_field("name")},
          {"architecture", config_field("architecture")},
          {"precision", to_string(run.precision)},
          {"memory_cap_gib", run.memory_cap_gib ? Json(*run.memory_cap_gib) : Json(nullptr)},
          {"world_size", in.world_size},
          {"search_only", in.search_only},
          {"config", sections},
          {"run",
           {{"seed", run.seed},
            {"cudnn_benchmark", run.cudnn_benchmark},
            {"cudnn_benchmark_limit", run.cudnn_benchmark_limit},
            {"cudnn_benchmark_empty_cache", run.cudnn_benchmark_empty_cache},
            {"expandable_segments", run.expandable_segments}}},
          {"variables", in.variables}};
}

std::string default_search_cache_folder() {
  auto set = [](const char* value) { return value && *value ? value : nullptr; };
  namespace fs = std::filesystem;
  if (const char* dir = set(env::get(env::Switch::kCacheDir))) return dir;
  if (const char* cache = set(std::getenv("XDG_CACHE_HOME"))) {
    return (fs::path(cache) / "gpubench").string();
  }
  if (const char* home = set(std::getenv("HOME"))) {
    return (fs::path(home) / ".cache" / "gpubench").string();
  }
  return "";
}

SearchCache::SearchCache(std::string folder)
    : folder_(std::move(folder)),
      file_((std::filesystem::path(folder_) /
             fmt::format("search-answers-v{}.json", kSearchCacheFormat))
                .string()) {}

SearchCache::Lookup SearchCache::find(const Json& key) const {
  Lookup out;
  const CacheFile file = read_cache_file(file_);
  if (!file.problem.empty()) {
    out.status = "unreadable";
    out.problem = file.problem;
    return out;
  }
  const auto it = file.entries.find(json_digest(key));
  out.status = "miss";
  if (it == file.entries.end()) return out;
  const Json& entry = it.value();
  try {
    if (!entry.is_object() || !entry.contains("key") || !entry.contains("search") ||
        !entry["search"].is_object()) {
      throw std::runtime_error("its entry for this key has no `key` and `search`");
    }
    if (!same_json(entry["key"], key)) return out;  // another key with the same digest
    SearchRecord answer = SearchRecord::from_json(entry["search"]);
    if (answer.max_batch <= 0) throw std::runtime_error("its entry for this key has no batch");
    out.answer = std::move(answer);
    out.search = entry["search"];
    out.stored_utc = entry.value("stored_utc", std::string());
    if (entry.contains("timed") && entry["timed"].is_object()) out.timed = entry["timed"];
    out.status = "found";
  } catch (const std::exception& e) {
    out.status = "unreadable";
    out.problem = fmt::format("holds an entry for this key that cannot be read ({})", e.what());
  }
  return out;
}

std::string SearchCache::store(const Json& key, const SearchRecord& search) const {
  try {
    std::error_code ec;
    std::filesystem::create_directories(folder_, ec);
    if (ec) return fmt::format("cannot create the folder {} ({})", folder_, ec.message());
    const FolderLock lock(folder_);
    // Read again under the lock: another run may have stored an answer since this one looked.
    CacheFile file = read_cache_file(file_);
    Json entries = file.problem.empty() ? std::move(file.entries) : Json::object();
    Json answer = search.to_json();
    answer.erase("probes");  // probe_count stays
    answer.erase("cache");
    const std::string digest = json_digest(key);
    entries.erase(digest);  // and back at the end: the entries stay in the order they were stored
    entries[digest] = {{"key", key}, {"stored_utc", utc_now()}, {"search", answer}};
    while (entries.size() > static_cast<std::size_t>(kSearchCacheMaxEntries)) {
      entries.erase(entries.begin());
    }
    const Json document = {
        {"format", kSearchCacheFormat},
        {"about",
         "gpubench's cache of max-batch search answers (docs/search.md, \"The cache of "
         "answers\"); safe to delete"},
        {"entries", entries}};
    write_file_atomically(file_, dump_json(document, 1) + "\n");
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string SearchCache::store_timed(const Json& key, const Json& timed) const {
  try {
    if (!timed.is_object() || !timed.contains("search_batch") || !timed.contains("batch")) {
      return "no search_batch and batch to store";
    }
    std::error_code ec;
    if (!std::filesystem::is_directory(folder_, ec)) {
      return fmt::format("the folder {} does not exist", folder_);
    }
    const FolderLock lock(folder_);
    CacheFile file = read_cache_file(file_);
    if (!file.problem.empty()) return fmt::format("the file {}", file.problem);
    const std::string digest = json_digest(key);
    const auto it = file.entries.find(digest);
    if (it == file.entries.end() || !it.value().is_object() || !it.value().contains("key") ||
        !same_json(it.value()["key"], key)) {
      return "it holds no entry for this key";
    }
    Json& entry = it.value();
    const Json answer = entry.contains("search") && entry["search"].is_object()
                            ? entry["search"].value("max_batch", Json(nullptr))
                            : Json(nullptr);
    if (answer != timed["search_batch"]) {
      return fmt::format("its entry holds another answer ({}) than this search's ({})",
                         dump_json(answer), dump_json(timed["search_batch"]));
    }
    Json stored = timed;
    stored["stored_utc"] = utc_now();
    entry["timed"] = stored;
    const Json document = {
        {"format", kSearchCacheFormat},
        {"about",
         "gpubench's cache of max-batch search answers (docs/search.md, \"The cache of "
         "answers\"); safe to delete"},
        {"entries", file.entries}};
    write_file_atomically(file_, dump_json(document, 1) + "\n");
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

namespace {

/// The probes that check a cached answer, and what they say.
struct Verification {
  std::vector<ProbeRecord> probes;
  bool holds = false;   ///< the answer fits and one granule more does not (or it is the top)
  bool sticky = false;  ///< a probe left its worker unusable
  std::string why;      ///< why it does not hold
  SearchStopReason broke;  ///< the stop reason of a probe that left its worker unusable
};

Verification verify(const SearchSettings& settings, int64_t answer, const ProbeFunction& probe,
                    const SearchOptions& options) {
  Verification v;
  auto run = [&](int64_t batch) {
    v.probes.push_back(run_probe(probe, batch, "verify", options.worker));
    if (options.on_probe) options.on_probe(v.probes.back(), static_cast<int>(v.probes.size()));
    const ProbeRecord p = v.probes.back();
    if (p.sticky) {
      v.sticky = true;
      v.broke = SearchStopReason::probe_unusable(p.batch, p.error);
      v.why = v.broke.text;
    }
    return p;
  };
  if (answer < settings.min_batch || answer > settings.max_batch) {
    v.why = fmt::format("batch {} lies outside search.min_batch..max_batch ({}..{})", answer,
                        settings.min_batch, settings.max_batch);
    return v;
  }
  const ProbeRecord fit = run(answer);
  if (v.sticky) return v;
  if (!fit.fits) {
    v.why = fmt::format("batch {} no longer fits", answer);
    return v;
  }
  const int64_t above = next_candidate_above(settings, answer);
  if (above > 0) {
    const ProbeRecord next = run(above);
    if (v.sticky) return v;
    if (next.fits) {
      v.why = fmt::format("batch {}, one granule above it, fits now", above);
      return v;
    }
  }
  v.holds = true;
  return v;
}

double probe_seconds(const std::vector<ProbeRecord>& probes) {
  double s = 0;
  for (const auto& p : probes) s += p.seconds;
  return s;
}

/// The record of a cached answer that the probes verified: the batch and its peaks as the
/// probes measured them, the memory line the search that found it drew.
SearchRecord verified_record(const SearchSettings& settings, int64_t capacity,
                             const SearchRecord& cached, const Verification& v,
                             const SearchOptions& options) {
  SearchRecord r;
  const ProbeRecord& fit = v.probes.front();
  r.max_batch = fit.batch;
  r.largest_pow2 = largest_power_of_two_at_most(fit.batch);
  r.peak_bytes_at_max = fit.peak_bytes;
  r.peak_allocated_bytes_at_max = fit.peak_allocated_bytes;
  r.resident_bytes_at_max = fit.resident_bytes;
  r.activation_peak_bytes =
      std::max<int64_t>(0, r.peak_allocated_bytes_at_max - r.resident_bytes_at_max);
  r.bytes_per_sample = cached.bytes_per_sample;
  r.fixed_bytes = cached.fixed_bytes;
  r.memory_line = cached.memory_line;
  r.capacity_bytes = capacity;
  r.smallest_failure = v.probes.size() > 1 ? v.probes[1].batch : 0;
  r.probes = v.probes;
  r.stop = SearchStopReason::cache_verified(r.max_batch, r.smallest_failure, settings.max_batch);
  r.converged = true;
  r.headroom_bytes = options.headroom_bytes;
  r.workers = options.worker + 1;
  r.seconds = probe_seconds(v.probes);
  r.source = "cache";
  return r;
}

/// The record of a search whose verification probe left its worker unusable: interrupted, with
/// that probe (a fresh worker searches in full, and probes that batch again only once).
SearchRecord interrupted_record(int64_t capacity, const Verification& v,
                                const SearchOptions& options) {
  SearchRecord r;
  r.capacity_bytes = capacity;
  r.probes = {v.probes.back()};
  r.interrupted = true;
  r.stop = v.broke;
  r.headroom_bytes = options.headroom_bytes;
  r.workers = options.worker + 1;
  r.seconds = probe_seconds(v.probes);
  return r;
}

}  // namespace

SearchRecord cached_search(const SearchSettings& settings, int64_t capacity_bytes,
                           const ProbeFunction& probe, const SearchOptions& options,
                           const SearchCacheUse& use) {
  if (!use.cache) return find_max_batch(settings, capacity_bytes, probe, options);
  auto say = [&](const std::string& text) {
    if (options.on_note) options.on_note(text);
  };
  const std::string& file = use.cache->file();
  Json note = {{"file", file},
               {"digest", json_digest(use.key)},
               {"key", use.key},
               {"lookup", use.read ? "miss" : "skipped"}};
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& text) {
    warnings.push_back(text);
    say("warning: " + text);
  };
  double verify_seconds = 0;
  if (use.read) {
    const SearchCache::Lookup found = use.cache->find(use.key);
    if (found.status == "unreadable") {
      note["lookup"] = "unreadable";
      warn(
          fmt::format("the search cache {} {}; searching in full, and this search's answer "
                      "replaces it (delete the file if this repeats, or run with --no-cache)",
                      file, found.problem));
    } else if (found.status == "found") {
      const SearchRecord& cached = *found.answer;
      note["cached"] = {
          {"max_batch", cached.max_batch},
          {"smallest_failure", cached.smallest_failure},
          {"probe_count",
           found.search.contains("probe_count") ? found.search["probe_count"] : Json(nullptr)},
          {"seconds", cached.seconds},
          {"stored_utc", found.stored_utc}};
      say(
          fmt::format("the search cache holds batch {} for this card, software and config "
                      "(stored {}); verifying it",
                      cached.max_batch, found.stored_utc));
      const Verification v = verify(settings, cached.max_batch, probe, options);
      Json verify_json = Json::array();
      for (const auto& p : v.probes) verify_json.push_back(p.to_json());
      note["verify"] = verify_json;
      note["stored"] = false;
      // The batch an earlier timed run of this answer stepped down to, while it still is this
      // answer's (cached_timed_batch takes it on a hit).
      const Json& timed = found.timed;
      const bool has_timed = timed.is_object() && timed.contains("search_batch") &&
                             timed["search_batch"] == cached.max_batch &&
                             timed.contains("batch") && timed["batch"].is_number_integer();
      if (v.holds) {
        note["lookup"] = "hit";
        if (has_timed) {
          note["timed"] = timed;
          say(fmt::format("a timed run of this answer (stored {}) trained at batch {} in a fresh "
                          "process, where {} did not fit: the timed run starts there",
                          timed.value("stored_utc", std::string("earlier")),
                          timed["batch"].get<int64_t>(), cached.max_batch));
        }
        SearchRecord r = verified_record(settings, capacity_bytes, cached, v, options);
        say(fmt::format("{}: no search", r.stop.text));
        r.cache = note;
        return r;
      }
      note["lookup"] = "stale";
      note["stale_because"] = v.why;
      if (v.sticky) {
        SearchRecord r = interrupted_record(capacity_bytes, v, options);
        r.cache = note;
        return r;
      }
      say(fmt::format("the cached batch {} no longer holds ({}); searching in full",
                      cached.max_batch, v.why));
      verify_seconds = probe_seconds(v.probes);
    }
  }
  SearchRecord r = find_max_batch(settings, capacity_bytes, probe, options);
  r.seconds += verify_seconds;
  r.headroom_bytes = options.headroom_bytes;
  note["stored"] = false;
  if (r.converged && !r.interrupted && r.max_batch > 0) {
    const std::string problem = use.cache->store(use.key, r);
    if (problem.empty()) {
      note["stored"] = true;
    } else {
      warn(
          fmt::format("this search's answer was not stored in the search cache {}: {} (set "
                      "GPUBENCH_CACHE_DIR to a folder you can write, or run with --no-cache)",
                      file, problem));
    }
  }
  if (!warnings.empty()) note["warning"] = join(warnings, "; ");
  r.cache = note;
  return r;
}

int64_t cached_timed_batch(const SearchRecord& search) {
  const Json& note = search.cache;
  if (!note.is_object() || note.value("lookup", std::string()) != "hit") return 0;
  if (!note.contains("timed") || !note["timed"].is_object()) return 0;
  const Json& timed = note["timed"];
  if (!timed.contains("search_batch") || timed["search_batch"] != search.max_batch) return 0;
  if (!timed.contains("batch") || !timed["batch"].is_number_integer()) return 0;
  const auto batch = timed["batch"].get<int64_t>();
  return batch > 0 && batch < search.max_batch ? batch : 0;
}

Json remember_timed_batch(const SearchRecord& search, const std::vector<TimedAttempt>& attempts) {
  const Json& note = search.cache;
  if (!note.is_object() || !note.contains("key") || !note.contains("file") ||
      !note["file"].is_string() || search.max_batch <= 0) {
    return nullptr;
  }
  // The largest batch that trained, and the smallest above it that ran out of memory.
  int64_t trained = 0;
  for (const TimedAttempt& a : attempts) {
    if (a.status == JobStatus::ok) trained = std::max(trained, a.batch);
  }
  if (trained <= 0 || trained >= search.max_batch) return nullptr;  // no step-down
  int64_t failed = 0;
  for (const TimedAttempt& a : attempts) {
    if (a.status == JobStatus::oom && a.batch > trained) {
      failed = failed == 0 ? a.batch : std::min(failed, a.batch);
    }
  }
  // An entry that holds this batch already (the timed run started there and trained).
  if (note.contains("timed") && note["timed"].is_object() &&
      note["timed"].value("batch", int64_t{0}) == trained) {
    return nullptr;
  }
  const Json timed = {{"search_batch", search.max_batch},
                      {"batch", trained},
                      {"failed", failed > 0 ? Json(failed) : Json(nullptr)}};
  Json out = {{"batch", trained}, {"failed", timed["failed"]}, {"stored", false}};
  const std::string file = note["file"].get<std::string>();
  const SearchCache cache(std::filesystem::path(file).parent_path().string());
  std::string problem = cache.file() == file ? cache.store_timed(note["key"], timed)
                                             : "it is not a search cache file of this gpubench";
  if (problem.empty()) {
    out["stored"] = true;
  } else {
    out["warning"] = fmt::format(
        "the timed run's batch {} was not stored in the search cache {}: {}; a rerun steps "
        "down again",
        trained, file, problem);
  }
  return out;
}

Json merged_cache_note(const Json& first, const Json& last) {
  const bool skipped = last.is_object() && last.contains("lookup") && last["lookup"] == "skipped";
  if (!first.is_object() || !skipped) return last;
  Json merged = first;
  merged["stored"] = last.contains("stored") ? last["stored"] : Json(false);
  std::vector<std::string> warnings;
  for (const Json* n : {&first, &last}) {
    if (n->contains("warning") && (*n)["warning"].is_string()) {
      warnings.push_back((*n)["warning"].get<std::string>());
    }
  }
  if (!warnings.empty()) merged["warning"] = join(warnings, "; ");
  return merged;
}

}  // namespace gpubench
