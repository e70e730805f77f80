// The local cache of search answers (issue 45), like cuDNN's benchmark cache: the max batch a
// search found, under a key of everything that answer depends on besides the probes (the card,
// its driver and libraries, gpubench's commit, the job's config and settings). A rerun on the
// same card verifies the cached answer with two probes (it fits; one granule more does not)
// instead of searching; a miss, a stale answer or an unreadable file falls back to the full
// search, whose answer replaces the entry. One JSON file in the cache folder, written
// atomically under a lock, re-read before each write. Only searched batches use it (not --batch,
// not the CPU, which does not search); `run --no-cache` (run.search_cache) turns it off.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/config/config.h"
#include "gpubench/measure/batch_search.h"
#include "gpubench/records/result.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// The cache file's format, in its name (search-answers-v1.json): a gpubench that changes the
/// format writes another file and never misreads this one.
constexpr int kSearchCacheFormat = 1;
/// Entries one file keeps; storing one more drops the least recently stored.
constexpr int kSearchCacheMaxEntries = 512;

/// What a search's answer depends on besides its probes.
struct SearchCacheInputs {
  /// The worker's environment (environment_json): `device` (name, memory_bytes), `software`
  /// (driver, libtorch, cuda_runtime, cudnn) and `gpubench` (version, git_commit).
  Json environment;
  /// The resolved workload config (ModelConfig::to_json): its name and the sections `model`,
  /// `optimizer`, `runtime` and `search` count.
  Json config;
  RunSettings run;           ///< precision, memory cap, seed, cuDNN and allocator settings
  bool search_only = false;  ///< a memory tier's search (its probes build as the confirm does)
  int world_size = 1;        ///< of the search's process: 1 (data parallel searches on one GPU)
  Json variables = Json::object();  ///< search_cache_variables()
};

/// The variables this process was started with that make a job modified
/// (env::modifying_variables of env::recorded_variables): the allocator's options beyond
/// gpubench's own, the CUDA libraries' workspaces, TF32 and launch switches, and gpubench's
/// diagnostic switches. Each can change what fits, so each is part of the key.
Json search_cache_variables();

/// The key of a search's cache entry: each component in a field of its own (the config
/// sections as json_digest), so that two keys can be told apart by eye.
Json search_cache_key(const SearchCacheInputs& inputs);

/// The cache folder: $GPUBENCH_CACHE_DIR, else $XDG_CACHE_HOME/gpubench, else
/// $HOME/.cache/gpubench; "" when there is none of them.
std::string default_search_cache_folder();

/// The cache file of one folder.
class SearchCache {
 public:
  explicit SearchCache(std::string folder);
  const std::string& folder() const { return folder_; }
  const std::string& file() const { return file_; }

  /// What the file holds for a key.
  struct Lookup {
    std::string status;                  ///< "found", "miss", or "unreadable"
    std::optional<SearchRecord> answer;  ///< "found": the search stored (no probes)
    Json search;                         ///< "found": the same as stored (with probe_count)
    std::string stored_utc;              ///< "found": when it was stored
    std::string problem;                 ///< "unreadable": why, for the warning
    /// "found": the batch a timed run stepped down to from this answer (store_timed:
    /// {search_batch, batch, failed, stored_utc}), or null
    Json timed;
  };
  Lookup find(const Json& key) const;

  /// Stores `search`'s answer under `key`: under a lock on the folder, the file is read again
  /// (another run may have stored since) and only this key's entry replaced; an unreadable file
  /// is replaced. Returns "" or why it could not be stored (never throws).
  std::string store(const Json& key, const SearchRecord& search) const;

  /// Adds to the entry of `key` the batch the timed run trained at in a fresh process when it
  /// stepped down from the search's answer (`timed`: {search_batch, batch, failed}), so that a
  /// rerun whose verification holds times that batch at once instead of stepping down again.
  /// Only an entry whose answer is `timed.search_batch` takes it (a newer search's entry is
  /// left alone). Under the folder's lock, as store. Returns "" or why it was not added.
  std::string store_timed(const Json& key, const Json& timed) const;

 private:
  std::string folder_;
  std::string file_;
};

/// How one search uses the cache.
struct SearchCacheUse {
  const SearchCache* cache = nullptr;  ///< null: not used (--no-cache): nothing read or written
  Json key;
  /// Look the key up first. False in a later worker of a search that was interrupted: the
  /// first one looked it up, and this one only stores the answer.
  bool read = true;
};

/// find_max_batch through the cache. With an entry for the key: the cached answer's batch is
/// probed (phase "verify") and, unless it is search.max_batch, the batch one granule above it;
/// when the first fits and the second does not, that is the answer (source "cache", the two
/// probes its probes). Otherwise (no entry, an unreadable file, an answer that no longer holds)
/// the full search runs, and its answer, when converged, replaces the entry. The record's
/// `cache` says what happened; a file that cannot be read or written is a warning through
/// options.on_note, never a failure. A verification probe that leaves the worker unusable
/// interrupts the search as a search probe would, with that probe in `probes`.
SearchRecord cached_search(const SearchSettings& settings, int64_t capacity_bytes,
                           const ProbeFunction& probe, const SearchOptions& options,
                           const SearchCacheUse& use);

/// The batch to time first for a search whose cached answer was verified (lookup "hit") and
/// whose entry holds the batch an earlier timed run stepped down to (`search.cache.timed`,
/// store_timed): that batch, below search.max_batch; else 0 (time the search's answer).
int64_t cached_timed_batch(const SearchRecord& search);

/// After the timed runs of a searched batch (`attempts`: the job's confirm log, each run's
/// batch and status): when the largest batch that trained lies below the search's answer (a
/// fresh process with autotuning fits less than the probes did), stores it in the search's
/// cache entry (SearchCache::store_timed), under the key and in the file its `cache` note
/// names. Returns the note for the record's `search.cache.timed_stored`: {batch, failed,
/// stored, and a warning where it could not be stored}; null when there is nothing to store
/// (no cache, no step-down, or the entry already holds that batch).
Json remember_timed_batch(const SearchRecord& search, const std::vector<TimedAttempt>& attempts);

/// The cache note of a search that went on in fresh workers: the first worker's lookup and
/// verification (`first`) with what the last one stored (`last`, whose lookup is "skipped").
Json merged_cache_note(const Json& first, const Json& last);

}  // namespace gpubench
