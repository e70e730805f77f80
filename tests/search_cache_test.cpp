// The local cache of search answers (issue 45): its key, a hit verified by two probes, a miss, a
// stale key, an answer that no longer holds, a corrupt file, a folder that cannot be written,
// --no-cache, and a search that went on in a fresh worker. The probes are a simulated device,
// as in batch_search_test.cpp.
#include "gpubench/run/search_cache.h"

#include "gpubench/base/errors.h"
#include "gpubench/config/settings.h"
#include "gpubench/measure/search_stop.h"
#include "gpubench/run/job.h"
#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {
namespace {

using testing::TempDir;

const ConfigStore& builtin() {
  static const ConfigStore s = ConfigStore::load_builtin(builtin_registry());
  return s;
}

/// A device whose memory grows linearly with the batch and fits up to `limit` exactly; a batch
/// in `breaks` leaves the worker unusable.
struct Device {
  int64_t limit = 1000;
  int probes = 0;
  std::vector<int64_t> breaks;

  static double need(int64_t batch) { return 2e9 + 1e8 * static_cast<double>(batch); }
  int64_t capacity() const { return static_cast<int64_t>(need(limit)) + 50; }
  ProbeFunction probe() {
    return [this](int64_t batch) {
      ++probes;
      ProbeOutcome o;
      if (std::find(breaks.begin(), breaks.end(), batch) != breaks.end()) {
        o.worker_unusable = true;
        o.error = "CUDA error: an illegal memory access was encountered";
        return o;
      }
      o.fits = batch <= limit;
      if (o.fits) {
        o.peak_bytes = static_cast<int64_t>(need(batch));
        o.peak_allocated_bytes = o.peak_bytes - 1000;
        o.resident_bytes = 2'000'000'000;
      } else {
        o.error = "out of memory";
      }
      return o;
    };
  }
};

SearchSettings settings(int64_t max_batch = 4096) {
  SearchSettings s;
  s.min_batch = 8;
  s.max_batch = max_batch;
  s.granularity = 8;
  s.first_probe = 64;
  s.max_probes = 30;
  return s;
}

SearchCacheInputs inputs() {
  SearchCacheInputs in;
  in.environment = {
      {"device", {{"name", "NVIDIA H200"}, {"memory_bytes", int64_t{150'121'545'728}}}},
      {"software",
       {{"libtorch", "2.11.0"},
        {"cuda_runtime", "12.8"},
        {"cudnn", "9.19.0"},
        {"driver", "580.95.05"}}},
      {"gpubench", {{"version", "0.9.0"}, {"git_commit", "7903cfb"}}}};
  in.config = builtin().model("bert-base").to_json();
  return in;
}

Json key() { return search_cache_key(inputs()); }

void quiet_log(const std::string&) {}

/// A search through the cache, its notes kept.
struct Searched {
  SearchRecord record;
  std::vector<std::string> notes;
  bool said(const std::string& text) const {
    for (const auto& n : notes) {
      if (n.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

Searched search(const SearchCacheUse& use, Device& device, const SearchSettings& s = settings(),
                SearchOptions options = {}) {
  Searched out;
  options.on_note = [&out](const std::string& text) { out.notes.push_back(text); };
  out.record = cached_search(s, device.capacity(), device.probe(), options, use);
  return out;
}

TEST(SearchCacheTest, TheKeyChangesWithEachComponentThatCanChangeTheMaxBatch) {
  const std::string base = json_digest(search_cache_key(inputs()));
  EXPECT_EQ(json_digest(search_cache_key(inputs())), base);
  using Change = void (*)(SearchCacheInputs&);
  const std::vector<std::pair<const char*, Change>> changes = {
      {"device name",
       [](SearchCacheInputs& in) { in.environment["device"]["name"] = "NVIDIA H100"; }},
      {"memory", [](SearchCacheInputs& in) { in.environment["device"]["memory_bytes"] = 85e9; }},
      {"driver", [](SearchCacheInputs& in) { in.environment["software"]["driver"] = "570.1"; }},
      {"libtorch",
       [](SearchCacheInputs& in) { in.environment["software"]["libtorch"] = "1.13.1"; }},
      {"cuda runtime",
       [](SearchCacheInputs& in) { in.environment["software"]["cuda_runtime"] = "12.6"; }},
      {"cudnn", [](SearchCacheInputs& in) { in.environment["software"]["cudnn"] = "9.10.2"; }},
      {"gpubench version",
       [](SearchCacheInputs& in) { in.environment["gpubench"]["version"] = "0.9.1"; }},
      {"git commit",
       [](SearchCacheInputs& in) { in.environment["gpubench"]["git_commit"] = "ff31e34"; }},
      {"model", [](SearchCacheInputs& in) { in.config = builtin().model("mt-dnn").to_json(); }},
      {"model name", [](SearchCacheInputs& in) { in.config["name"] = "bert-base-copy"; }},
      {"precision", [](SearchCacheInputs& in) { in.run.precision = Precision::kAmpBf16; }},
      {"memory cap", [](SearchCacheInputs& in) { in.run.memory_cap_gib = 24.0; }},
      {"world size", [](SearchCacheInputs& in) { in.world_size = 2; }},
      {"memory tier", [](SearchCacheInputs& in) { in.search_only = true; }},
      {"model config", [](SearchCacheInputs& in) { in.config["model"]["attention"] = "other"; }},
      {"optimizer config", [](SearchCacheInputs& in) { in.config["optimizer"]["changed"] = true; }},
      {"runtime config", [](SearchCacheInputs& in) { in.config["runtime"]["changed"] = true; }},
      {"search config", [](SearchCacheInputs& in) { in.config["search"]["max_probes"] = 99; }},
      {"seed", [](SearchCacheInputs& in) { in.run.seed = 7; }},
      {"cudnn autotuning", [](SearchCacheInputs& in) { in.run.cudnn_benchmark = false; }},
      {"cudnn limit", [](SearchCacheInputs& in) { in.run.cudnn_benchmark_limit = 10; }},
      {"cudnn empty cache",
       [](SearchCacheInputs& in) { in.run.cudnn_benchmark_empty_cache = true; }},
      {"allocator", [](SearchCacheInputs& in) { in.run.expandable_segments = false; }},
      {"a variable",
       [](SearchCacheInputs& in) { in.variables["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"; }},
  };
  for (const auto& [what, change] : changes) {
    SearchCacheInputs in = inputs();
    change(in);
    EXPECT_NE(json_digest(search_cache_key(in)), base) << what;
  }
  // What does not change the answer does not change the key.
  SearchCacheInputs same = inputs();
  same.run.repeat = 3;
  same.run.job_timeout_s = 60;
  same.run.timing.min_seconds = 1;
  EXPECT_EQ(json_digest(search_cache_key(same)), base);
  // Nor does the order the key's fields were written in.
  Json reordered = Json::object();
  const Json k = key();
  for (auto it = k.rbegin(); it != k.rend(); ++it) reordered[it.key()] = it.value();
  EXPECT_EQ(json_digest(reordered), base);
}

TEST(SearchCacheTest, AMissSearchesInFullAndStoresTheAnswer) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  const Searched s = search({&cache, key(), true}, device);
  EXPECT_EQ(s.record.max_batch, 1000);
  EXPECT_TRUE(s.record.converged);
  EXPECT_EQ(s.record.source, "search");
  EXPECT_GT(device.probes, 2);
  EXPECT_EQ(s.record.cache["lookup"], "miss");
  EXPECT_EQ(s.record.cache["stored"], true);
  EXPECT_EQ(s.record.cache["file"], cache.file());
  EXPECT_EQ(s.record.cache["digest"], json_digest(key()));
  EXPECT_EQ(s.record.cache["key"], key());
  EXPECT_EQ(cache.file(), dir.file("cache") + "/search-answers-v1.json");
  const SearchCache::Lookup found = cache.find(key());
  ASSERT_EQ(found.status, "found");
  EXPECT_EQ(found.answer->max_batch, 1000);
  EXPECT_EQ(found.answer->smallest_failure, 1008);
  EXPECT_TRUE(found.answer->probes.empty());  // the answer and its line, not the probes
  EXPECT_EQ(found.search["probe_count"], s.record.probes.size());
  EXPECT_FALSE(found.stored_utc.empty());
}

TEST(SearchCacheTest, AHitIsVerifiedByTwoProbesAndUsed) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  const Searched first = search({&cache, key(), true}, device);
  device.probes = 0;
  const Searched again = search({&cache, key(), true}, device);
  const SearchRecord& r = again.record;
  EXPECT_EQ(device.probes, 2);
  EXPECT_EQ(r.source, "cache");
  EXPECT_EQ(r.max_batch, 1000);
  EXPECT_EQ(r.largest_pow2, 512);
  EXPECT_EQ(r.smallest_failure, 1008);
  EXPECT_TRUE(r.converged);
  EXPECT_FALSE(r.interrupted);
  ASSERT_EQ(r.probes.size(), 2u);
  EXPECT_EQ(r.probes[0].batch, 1000);
  EXPECT_TRUE(r.probes[0].fits);
  EXPECT_EQ(r.probes[1].batch, 1008);
  EXPECT_FALSE(r.probes[1].fits);
  for (const auto& p : r.probes) EXPECT_EQ(p.phase, "verify");
  EXPECT_EQ(r.peak_bytes_at_max, static_cast<int64_t>(Device::need(1000)));
  EXPECT_EQ(r.bytes_per_sample, first.record.bytes_per_sample);  // the line the search drew
  EXPECT_EQ(r.fixed_bytes, first.record.fixed_bytes);
  EXPECT_EQ(r.stop.kind, SearchStop::cache_verified);
  EXPECT_EQ(r.stop.text, "cached answer verified: batch 1000 fits and 1008 does not");
  EXPECT_EQ(r.cache["lookup"], "hit");
  EXPECT_EQ(r.cache["stored"], false);
  EXPECT_EQ(r.cache["verify"].size(), 2u);
  EXPECT_EQ(r.cache["cached"]["max_batch"], 1000);
  EXPECT_EQ(r.cache["cached"]["probe_count"], first.record.probes.size());
  EXPECT_TRUE(again.said("verifying it"));
  // As the journal and the reports read it back.
  const SearchRecord back = SearchRecord::from_json(r.to_json());
  EXPECT_EQ(back.source, "cache");
  EXPECT_EQ(back.cache, r.cache);
  // A plain search's record writes neither field, as before the cache.
  SearchRecord plain;
  EXPECT_FALSE(plain.to_json().contains("source"));
  EXPECT_FALSE(plain.to_json().contains("cache"));
  EXPECT_EQ(SearchRecord::from_json(plain.to_json()).source, "search");
}

TEST(SearchCacheTest, AnAnswerAtSearchMaxBatchIsVerifiedByOneProbe) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  const Searched first = search({&cache, key(), true}, device, settings(512));
  ASSERT_EQ(first.record.max_batch, 512);
  device.probes = 0;
  const SearchRecord r = search({&cache, key(), true}, device, settings(512)).record;
  EXPECT_EQ(device.probes, 1);
  EXPECT_EQ(r.source, "cache");
  EXPECT_EQ(r.max_batch, 512);
  EXPECT_EQ(r.smallest_failure, 0);
  EXPECT_EQ(r.cache["lookup"], "hit");
  EXPECT_EQ(r.stop.kind, SearchStop::cache_verified);
  EXPECT_EQ(r.stop.text,
            "cached answer verified: batch 512 fits (limited by search.max_batch=512)");
}

TEST(SearchCacheTest, AnotherDriverOrConfigMissesAndKeepsTheOtherEntry) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  search({&cache, key(), true}, device);
  SearchCacheInputs other_driver = inputs();
  other_driver.environment["software"]["driver"] = "590.10";
  SearchCacheInputs other_config = inputs();
  other_config.config["optimizer"]["lr"] = 0.5;
  for (const SearchCacheInputs& in : {other_driver, other_config}) {
    device.probes = 0;
    const Searched s = search({&cache, search_cache_key(in), true}, device);
    EXPECT_EQ(s.record.cache["lookup"], "miss");
    EXPECT_EQ(s.record.source, "search");
    EXPECT_GT(device.probes, 2);  // the full search
    EXPECT_EQ(s.record.max_batch, 1000);
    EXPECT_EQ(cache.find(search_cache_key(in)).status, "found");
  }
  EXPECT_EQ(cache.find(key()).status, "found");  // the first entry stays beside them
}

TEST(SearchCacheTest, AnAnswerThatNoLongerFitsFallsBackToTheFullSearchAndIsReplaced) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  search({&cache, key(), true}, device);
  device.limit = 900;  // another process holds memory now
  device.probes = 0;
  const Searched s = search({&cache, key(), true}, device);
  EXPECT_EQ(s.record.source, "search");
  EXPECT_EQ(s.record.max_batch, 896);
  EXPECT_EQ(s.record.cache["lookup"], "stale");
  ASSERT_EQ(s.record.cache["verify"].size(), 1u);  // 1000 failed: no second probe
  EXPECT_EQ(s.record.cache["verify"][0]["fits"], false);
  EXPECT_EQ(s.record.cache["stale_because"], "batch 1000 no longer fits");
  EXPECT_EQ(s.record.cache["stored"], true);
  EXPECT_EQ(device.probes, 1 + static_cast<int>(s.record.probes.size()));
  EXPECT_TRUE(s.said("no longer holds"));
  EXPECT_EQ(cache.find(key()).answer->max_batch, 896);
}

TEST(SearchCacheTest, AnAnswerWhoseNextGranuleFitsNowFallsBackToTheFullSearchAndIsReplaced) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  search({&cache, key(), true}, device);
  device.limit = 1100;  // more memory free than when it was stored
  const Searched s = search({&cache, key(), true}, device);
  EXPECT_EQ(s.record.source, "search");
  EXPECT_EQ(s.record.max_batch, 1096);
  EXPECT_EQ(s.record.cache["lookup"], "stale");
  ASSERT_EQ(s.record.cache["verify"].size(), 2u);
  EXPECT_EQ(s.record.cache["verify"][1]["batch"], 1008);
  EXPECT_EQ(s.record.cache["verify"][1]["fits"], true);
  EXPECT_EQ(cache.find(key()).answer->max_batch, 1096);
  // The verification's time counts in the search's.
  double probes = 0;
  for (const auto& p : s.record.probes) probes += p.seconds;
  EXPECT_GE(s.record.seconds, probes);
}

TEST(SearchCacheTest, ACorruptFileWarnsOnceSearchesInFullAndIsReplaced) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  search({&cache, key(), true}, device);
  testing::write_file(cache.file(), "{\"format\": 1, \"entries\": {\"ab");  // cut off
  device.probes = 0;
  const Searched s = search({&cache, key(), true}, device);
  EXPECT_EQ(s.record.max_batch, 1000);
  EXPECT_GT(device.probes, 2);
  EXPECT_EQ(s.record.cache["lookup"], "unreadable");
  EXPECT_EQ(s.record.cache["stored"], true);
  int warnings = 0;
  for (const auto& n : s.notes) {
    if (n.rfind("warning: ", 0) != 0) continue;
    ++warnings;
    EXPECT_NE(n.find(cache.file()), std::string::npos) << n;
    EXPECT_NE(n.find("is not valid JSON"), std::string::npos) << n;
    EXPECT_NE(n.find("--no-cache"), std::string::npos) << n;
    EXPECT_EQ(n.find('\n'), std::string::npos) << n;
  }
  EXPECT_EQ(warnings, 1);
  EXPECT_EQ(s.record.cache["warning"].get<std::string>().rfind("the search cache ", 0), 0u);
  EXPECT_EQ(cache.find(key()).status, "found");  // replaced by a readable file
  // A file of another shape, and an entry that cannot be read, are unreadable too.
  testing::write_file(cache.file(), "[1, 2]");
  EXPECT_EQ(cache.find(key()).status, "unreadable");
  testing::write_file(cache.file(),
                      Json{{"format", 1}, {"entries", {{json_digest(key()), 5}}}}.dump());
  const SearchCache::Lookup bad = cache.find(key());
  EXPECT_EQ(bad.status, "unreadable");
  EXPECT_NE(bad.problem.find("entry for this key"), std::string::npos) << bad.problem;
}

TEST(SearchCacheTest, AFolderThatCannotBeWrittenWarnsAndKeepsTheResult) {
  TempDir dir;
  testing::write_file(dir.file("plain"), "a file where the cache folder would go");
  const SearchCache cache(dir.file("plain") + "/cache");  // even root cannot create it
  Device device;
  const Searched s = search({&cache, key(), true}, device);
  EXPECT_EQ(s.record.max_batch, 1000);
  EXPECT_TRUE(s.record.converged);
  EXPECT_EQ(s.record.cache["lookup"], "miss");  // nothing there to read is no warning
  EXPECT_EQ(s.record.cache["stored"], false);
  ASSERT_TRUE(s.record.cache.contains("warning"));
  EXPECT_NE(s.record.cache["warning"].get<std::string>().find("was not stored"), std::string::npos);
  EXPECT_TRUE(
      s.said("warning: this search's answer was not stored in the search cache " + cache.file()));
  EXPECT_TRUE(s.said("GPUBENCH_CACHE_DIR"));
}

TEST(SearchCacheTest, NoCacheNeitherReadsNorWrites) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  search({&cache, key(), true}, device);
  const std::string stored = testing::read_file(cache.file());
  device.probes = 0;
  const Searched s = search(SearchCacheUse{}, device);  // what run --no-cache passes
  EXPECT_EQ(s.record.source, "search");
  EXPECT_TRUE(s.record.cache.is_null());
  EXPECT_FALSE(s.record.to_json().contains("cache"));
  EXPECT_GT(device.probes, 2);  // searched in full though an answer is stored
  EXPECT_EQ(testing::read_file(cache.file()), stored);
  EXPECT_TRUE(s.notes.empty());

  // The setting: run.search_cache, on by default, and the flag that turns it off.
  EXPECT_TRUE(RunSettings().search_cache);
  const Json overlay = settings::flag_overlay({{"--no-cache", true}});
  EXPECT_EQ(overlay, (Json{{"run", {{"search_cache", false}}}}));
  ConfigStore store = builtin();
  store.apply_document(overlay, "command line");
  EXPECT_FALSE(store.run().search_cache);
  EXPECT_EQ(store.run().to_json()["search_cache"], false);
  EXPECT_EQ(settings::flag_overlay({{"--no-cache", true}}, /*resume_only=*/true), overlay);
  ConfigStore from_file = builtin();
  from_file.apply_document(Json{{"run", {{"search_cache", false}}}}, "my.yaml");
  EXPECT_FALSE(from_file.run().search_cache);
}

TEST(SearchCacheTest, AVerificationThatBreaksItsWorkerGoesOnInAFreshOneThatOnlyStores) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;
  search({&cache, key(), true}, device);
  device.breaks = {1000};
  const Searched first = search({&cache, key(), true}, device);
  EXPECT_TRUE(first.record.interrupted);
  EXPECT_FALSE(first.record.converged);
  ASSERT_EQ(first.record.probes.size(), 1u);
  EXPECT_TRUE(first.record.probes[0].sticky);
  EXPECT_EQ(first.record.probes[0].phase, "verify");
  EXPECT_EQ(first.record.stop.kind, SearchStop::probe_unusable);
  EXPECT_EQ(first.record.stop.text.rfind("the probe at batch 1000 left its worker unusable", 0),
            0u);
  EXPECT_EQ(first.record.cache["lookup"], "stale");
  // The fresh worker goes on from that probe, searches in full and stores; it does not read.
  device.breaks.clear();
  device.limit = 992;
  SearchOptions options;
  options.prior = first.record.probes;
  options.worker = 1;
  const Searched second = search({&cache, key(), false}, device, settings(), options);
  EXPECT_EQ(second.record.source, "search");
  EXPECT_EQ(second.record.max_batch, 992);
  EXPECT_EQ(second.record.cache["lookup"], "skipped");
  EXPECT_EQ(second.record.cache["stored"], true);
  EXPECT_EQ(cache.find(key()).answer->max_batch, 992);
  const Json merged = merged_cache_note(first.record.cache, second.record.cache);
  EXPECT_EQ(merged["lookup"], "stale");
  EXPECT_EQ(merged["verify"].size(), 1u);
  EXPECT_EQ(merged["stored"], true);
  // One worker: its own note.
  EXPECT_EQ(merged_cache_note(first.record.cache, first.record.cache), first.record.cache);
  EXPECT_EQ(merged_cache_note(Json(), second.record.cache), second.record.cache);
}

/// A launcher whose first search worker breaks while verifying a cached answer, and whose
/// second searches in full and stores it.
class BrokenVerificationLauncher : public PhaseLauncher {
 public:
  JobRecord launch(const JobSpec& spec, double) override {
    JobRecord r;
    r.model = spec.model;
    r.device.type = "cuda";
    r.device.name = "NVIDIA H200";
    if (spec.phase == WorkerPhase::search) {
      SearchRecord s;
      if (spec.search_worker == 0) {
        s.interrupted = true;
        s.stop = SearchStopReason::probe_unusable(1000, "CUDA error");
        s.cache = {
            {"lookup", "stale"}, {"verify", Json::array({{{"batch", 1000}}})}, {"stored", false}};
        r.status = JobStatus::failed;
      } else {
        s.max_batch = 992;
        s.converged = true;
        s.cache = {{"lookup", "skipped"}, {"stored", true}};
        r.batch = 992;
      }
      r.search = s;
      return r;
    }
    r.batch = spec.batch;
    r.throughput = 100;
    return r;
  }
};

TEST(SearchCacheTest, TheJobKeepsTheFirstWorkersLookupWithWhatTheLastOneStored) {
  BrokenVerificationLauncher launcher;
  const JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  const JobRecord r = run_job(plan, builtin(), launcher, [](const std::string&) {});
  ASSERT_EQ(r.status, JobStatus::ok) << r.message;
  ASSERT_TRUE(r.search.has_value());
  EXPECT_EQ(r.search->cache["lookup"], "stale");
  EXPECT_EQ(r.search->cache["verify"].size(), 1u);
  EXPECT_EQ(r.search->cache["stored"], true);
}

/// A launcher whose search runs through a real cache file on a simulated device (the answer:
/// `device.limit`) and whose timed runs, in a fresh process with autotuning, fit up to
/// `timed_limit`: less than the probes, as conv-seq2seq's and unsupmt's did on the H100.
class SteppingDownLauncher : public PhaseLauncher {
 public:
  SteppingDownLauncher(const SearchCache& cache, Device& device, int64_t timed_limit)
      : cache_(cache), device_(device), timed_limit(timed_limit) {}
  JobRecord launch(const JobSpec& spec, double) override {
    calls.push_back(std::string(to_string(spec.phase)) + ":" + std::to_string(spec.batch));
    JobRecord r;
    r.model = spec.model;
    r.device.type = "cuda";
    r.device.name = "NVIDIA H100 80GB HBM3";
    if (spec.phase == WorkerPhase::search) {
      const SearchRecord s = search({&cache_, key(), true}, device_).record;
      r.batch = s.max_batch;
      r.status = JobStatus::ok;
      r.search = s;
      return r;
    }
    r.batch = spec.batch;
    if (spec.batch > timed_limit) {
      r.status = JobStatus::oom;
      r.message = "CUDA out of memory";
      return r;
    }
    r.throughput = 100;
    return r;
  }
  std::vector<std::string> calls;

 private:
  const SearchCache& cache_;
  Device& device_;

 public:
  int64_t timed_limit;
};

/// The timed runs of a job, in order ("time:1000", ...).
std::vector<std::string> timed_calls(const std::vector<std::string>& calls) {
  std::vector<std::string> out;
  for (const auto& c : calls) {
    if (c.rfind("time:", 0) == 0) out.push_back(c);
  }
  return out;
}

TEST(SearchCacheTest, ARerunTimesTheBatchTheTimedRunSteppedDownToInsteadOfSteppingDownAgain) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Device device;  // the probes fit up to 1000
  const JobPlan plan{"bert-base", "cuda:0", std::nullopt, {}};
  // Cold: the search finds 1000 and stores it; the timed run does not fit it in a fresh process
  // and steps down (bert-base's granule is one sequence).
  SteppingDownLauncher cold(cache, device, 985);
  const JobRecord first = run_job(plan, builtin(), cold, quiet_log);
  ASSERT_EQ(first.status, JobStatus::ok) << first.message;
  ASSERT_TRUE(first.search.has_value());
  EXPECT_EQ(first.search->max_batch, 1000);
  EXPECT_LE(first.batch, 985);
  EXPECT_GT(first.batch, 950);
  const std::vector<std::string> cold_timed = timed_calls(cold.calls);
  ASSERT_GE(cold_timed.size(), 2u);
  EXPECT_EQ(cold_timed.front(), "time:1000");
  // The answer's entry now holds the batch that trained, with the smallest that did not.
  const SearchCache::Lookup found = cache.find(key());
  ASSERT_EQ(found.status, "found");
  EXPECT_EQ(found.answer->max_batch, 1000);  // the search's answer, verified as before
  ASSERT_TRUE(found.timed.is_object());
  EXPECT_EQ(found.timed["search_batch"], 1000);
  EXPECT_EQ(found.timed["batch"], first.batch);
  ASSERT_TRUE(found.timed["failed"].is_number_integer());
  EXPECT_GT(found.timed["failed"].get<int64_t>(), first.batch);
  EXPECT_FALSE(found.timed.value("stored_utc", std::string()).empty());
  EXPECT_EQ(first.search->cache["timed_stored"]["stored"], true);
  EXPECT_EQ(first.search->cache["timed_stored"]["batch"], first.batch);

  // Rerun: the answer is verified by its two probes and the timed run starts at the batch
  // that trained: one fresh process, no step-down.
  device.probes = 0;
  SteppingDownLauncher rerun(cache, device, 985);
  const JobRecord second = run_job(plan, builtin(), rerun, quiet_log);
  ASSERT_EQ(second.status, JobStatus::ok) << second.message;
  EXPECT_EQ(device.probes, 2);
  EXPECT_EQ(second.search->source, "cache");
  EXPECT_EQ(second.search->max_batch, 1000);
  EXPECT_EQ(second.search->cache["lookup"], "hit");
  EXPECT_EQ(second.search->cache["timed"]["batch"], first.batch);
  EXPECT_EQ(cached_timed_batch(*second.search), first.batch);
  EXPECT_EQ(timed_calls(rerun.calls), std::vector<std::string>{"time:" + std::to_string(first.batch)});
  EXPECT_EQ(second.batch, first.batch);
  EXPECT_NE(second.message.find("the search's batch 1000 did not fit"), std::string::npos)
      << second.message;
  EXPECT_NE(second.message.find("search cache"), std::string::npos) << second.message;
  EXPECT_FALSE(second.search->cache.contains("timed_stored"));  // nothing new to store

  // A rerun whose fresh process fits less again steps down from there and stores the new batch.
  SteppingDownLauncher tighter(cache, device, first.batch - 30);
  const JobRecord third = run_job(plan, builtin(), tighter, quiet_log);
  ASSERT_EQ(third.status, JobStatus::ok) << third.message;
  EXPECT_EQ(timed_calls(tighter.calls).front(), "time:" + std::to_string(first.batch));
  EXPECT_LE(third.batch, first.batch - 30);
  EXPECT_EQ(cache.find(key()).timed["batch"], third.batch);

  // A new answer (the verification fails: more memory fits now) replaces the entry, and with it
  // the timed batch of the old answer: the timed run starts at the new answer.
  device.limit = 1200;
  SteppingDownLauncher roomier(cache, device, 2000);
  const JobRecord fourth = run_job(plan, builtin(), roomier, quiet_log);
  ASSERT_EQ(fourth.status, JobStatus::ok) << fourth.message;
  EXPECT_EQ(fourth.search->cache["lookup"], "stale");
  EXPECT_EQ(fourth.search->max_batch, 1200);
  EXPECT_EQ(timed_calls(roomier.calls), std::vector<std::string>{"time:1200"});
  EXPECT_TRUE(cache.find(key()).timed.is_null());
  EXPECT_EQ(cached_timed_batch(*fourth.search), 0);
}

TEST(SearchCacheTest, ATimedBatchIsStoredOnlyBesideTheAnswerItSteppedDownFrom) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  SearchRecord answer;
  answer.max_batch = 1000;
  ASSERT_EQ(cache.store(key(), answer), "");
  // Another answer's step-down (the entry was replaced since) is not stored beside this one.
  const std::string refused =
      cache.store_timed(key(), {{"search_batch", 992}, {"batch", 980}, {"failed", 985}});
  EXPECT_NE(refused.find("another answer"), std::string::npos) << refused;
  EXPECT_TRUE(cache.find(key()).timed.is_null());
  // Nor for a key without an entry, nor in a folder that does not exist.
  SearchCacheInputs other = inputs();
  other.config = builtin().model("mt-dnn").to_json();
  EXPECT_NE(cache.store_timed(search_cache_key(other), {{"search_batch", 1000}, {"batch", 980}}),
            "");
  EXPECT_NE(SearchCache(dir.file("none")).store_timed(key(), {{"search_batch", 1000}, {"batch", 9}}),
            "");
  EXPECT_EQ(cache.store_timed(key(), {{"search_batch", 1000}, {"batch", 980}, {"failed", 985}}),
            "");
  EXPECT_EQ(cache.find(key()).timed["batch"], 980);
  // No step-down, no cache, or a search that was not a hit: nothing to store or to start from.
  SearchRecord searched = answer;
  searched.cache = {{"file", cache.file()}, {"key", key()}, {"lookup", "miss"}};
  const std::vector<TimedAttempt> trained = {{1000, JobStatus::ok, "", std::nullopt, std::nullopt}};
  EXPECT_TRUE(remember_timed_batch(searched, trained).is_null());
  EXPECT_TRUE(remember_timed_batch(SearchRecord{}, trained).is_null());
  EXPECT_EQ(cached_timed_batch(searched), 0);
  searched.cache["timed"] = {{"search_batch", 1000}, {"batch", 980}};
  EXPECT_EQ(cached_timed_batch(searched), 0);  // a miss: the search's own answer is timed
  searched.cache["lookup"] = "hit";
  EXPECT_EQ(cached_timed_batch(searched), 980);
  searched.cache["timed"]["search_batch"] = 992;  // another answer's
  EXPECT_EQ(cached_timed_batch(searched), 0);
  // A cache file that cannot be written: a warning in the note, the job goes on.
  SearchRecord elsewhere = answer;
  elsewhere.cache = {{"file", dir.file("none") + "/search-answers-v1.json"}, {"key", key()}};
  const Json note =
      remember_timed_batch(elsewhere, {{1000, JobStatus::oom, "", 12.5, AttemptPhase::confirm},
                                       {990, JobStatus::ok, "", 11.0, AttemptPhase::step_down}});
  ASSERT_TRUE(note.is_object());
  EXPECT_EQ(note["stored"], false);
  EXPECT_EQ(note["batch"], 990);
  EXPECT_EQ(note["failed"], 1000);
  EXPECT_NE(note.value("warning", std::string()).find("a rerun steps down again"),
            std::string::npos);
}

TEST(SearchCacheTest, StoringRereadsTheFileSoAnotherRunsEntryIsKept) {
  TempDir dir;
  const SearchCache a(dir.file("cache")), b(dir.file("cache"));
  SearchCacheInputs other = inputs();
  other.config = builtin().model("mt-dnn").to_json();
  const Json k1 = key(), k2 = search_cache_key(other);
  EXPECT_EQ(a.find(k1).status, "miss");
  SearchRecord r1, r2;
  r1.max_batch = 1000;
  r2.max_batch = 64;
  EXPECT_EQ(b.store(k2, r2), "");  // another run stores while this one searches
  EXPECT_EQ(a.store(k1, r1), "");
  EXPECT_EQ(a.find(k1).answer->max_batch, 1000);
  EXPECT_EQ(a.find(k2).answer->max_batch, 64);
  // Storing a key again replaces its entry.
  r1.max_batch = 992;
  EXPECT_EQ(b.store(k1, r1), "");
  EXPECT_EQ(a.find(k1).answer->max_batch, 992);
  const Json file = Json::parse(testing::read_file(a.file()));
  EXPECT_EQ(file["format"], kSearchCacheFormat);
  EXPECT_EQ(file["entries"].size(), 2u);
}

TEST(SearchCacheTest, AFullFileDropsTheLeastRecentlyStoredEntry) {
  TempDir dir;
  const SearchCache cache(dir.file("cache"));
  Json entries = Json::object();
  for (int i = 0; i < kSearchCacheMaxEntries; ++i) {
    entries[fmt::format("old{:04}", i)] = {{"key", {{"n", i}}}, {"search", {{"max_batch", 8}}}};
  }
  std::filesystem::create_directories(cache.folder());
  testing::write_file(cache.file(), Json{{"format", 1}, {"entries", entries}}.dump());
  SearchRecord r;
  r.max_batch = 1000;
  EXPECT_EQ(cache.store(key(), r), "");
  const Json file = Json::parse(testing::read_file(cache.file()));
  EXPECT_EQ(file["entries"].size(), static_cast<std::size_t>(kSearchCacheMaxEntries));
  EXPECT_FALSE(file["entries"].contains("old0000"));
  EXPECT_TRUE(file["entries"].contains("old0001"));
  EXPECT_TRUE(file["entries"].contains(json_digest(key())));
}

/// Sets environment variables for one test and restores them after.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) {
    for (auto& name : names) {
      const char* value = std::getenv(name.c_str());
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    }
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(SearchCacheTest, TheFolderIsGpubenchCacheDirElseXdgCacheHomeElseHome) {
  const EnvGuard guard({"GPUBENCH_CACHE_DIR", "XDG_CACHE_HOME", "HOME"});
  setenv("GPUBENCH_CACHE_DIR", "/a/cache", 1);
  setenv("XDG_CACHE_HOME", "/b", 1);
  setenv("HOME", "/c", 1);
  EXPECT_EQ(default_search_cache_folder(), "/a/cache");
  setenv("GPUBENCH_CACHE_DIR", "", 1);  // empty is unset
  EXPECT_EQ(default_search_cache_folder(), "/b/gpubench");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_search_cache_folder(), "/c/.cache/gpubench");
  unsetenv("HOME");
  EXPECT_EQ(default_search_cache_folder(), "");
}

}  // namespace
}  // namespace gpubench
