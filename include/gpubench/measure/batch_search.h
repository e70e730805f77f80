// The max-batch search, as pure logic over a probe function so it is testable without a GPU.
//
// The largest batch for which a full training step (with its optimizer state in place: allocated
// before a one-step probe, or by the first of two steps) runs without running out of memory, exact
// to the workload's granularity: batch b fits and b + granularity does not, both seen (or b is
// search.max_batch). The search keeps a memory model of what a probe measured: what stays after a
// step (weights, gradients, optimizer state: the resident bytes) apart from what grows with the
// batch (activations), as a line peak = fixed + bytes_per_sample * batch through the probes that
// fitted.
//
//   scout    a cheap first probe; a second one halfway to the limit it predicts gives the slope
//   predict  just under the line's limit, with a margin that grows with how far the line
//            extrapolates; again after every fit, on a sharper line
//   edge     once the largest fit sits at the line's limit: just above it, doubling the step
//            while it still fits, so the first failure lies close above the largest fit
//   aim      with the allocated line: after an edge probe fitted past the line, near where
//            the line reaches the capacity; inside a bracket, one granule above the line's
//            limit, then the limit itself
//   bisect   once a prediction has failed, a split of [largest fit, smallest failure]: its
//            midpoint, or with the allocated line 0.618 of it (kCheapSplit) in turn with the
//            aimed probes; a wrong line never makes the search walk
//   hint     with a SearchHint (another memory cap's search of the same workload), scaled to
//            this capacity and checked before the first probe, which then goes just under it
//
// A probe that leaves its worker unusable (an error other than out of memory, or an out of
// memory error after which the device no longer works) interrupts the search; the caller runs
// it on in a fresh worker with the probes so far (`prior`), and the search decides again from
// them, so it re-probes that batch there once.
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/base/json.h"
#include "gpubench/measure/search_stop.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

/// What one probe observed.
struct ProbeOutcome {
  bool fits = false;                 ///< its steps ran without running out of memory
  int64_t peak_bytes = 0;            ///< peak memory the allocator reserved during the steps
  int64_t peak_allocated_bytes = 0;  ///< peak memory allocated during the steps
  int64_t resident_bytes = 0;  ///< memory still allocated after the steps (weights, grads, state)
  /// The worker cannot go on: an error other than out of memory, or an out-of-memory error after
  /// which the device does not work. The search stops; a fresh worker continues it.
  bool worker_unusable = false;
  std::string error;           ///< why it did not fit ("out of memory: ...")
  double prepare_seconds = 0;  ///< building the step (model, optimizer, batch) [s]
  double steps_seconds = 0;    ///< the steps, synchronized [s]
  /// The caching allocator's counters over the probe (allocator_counters_between: alloc_retries,
  /// ooms, device_allocations, device_frees); null where not read. A retry is an allocation
  /// that failed and made the allocator free its whole cache before trying again: under a
  /// memory cap, a cuDNN workspace that does not fit costs one (docs/search.md, "Hints across memory caps").
  Json allocator;
  /// Training steps run (run() calls): 1 when the step was readied for a one-step probe (its
  /// optimizer state allocated first, TrainStep::prepare_probe()), else 2 (the first allocates
  /// the state). A token-budget step's one run() may train several of its batches
  /// (TokenBatches::probe_batches(), in the timed record's batch_info).
  int steps = 0;
};

/// One probe as recorded.
struct ProbeRecord {
  int64_t batch = 0;
  bool fits = false;
  int64_t peak_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t resident_bytes = 0;
  double seconds = 0;          ///< wall time of the probe (build, steps, release) [s]
  double prepare_seconds = 0;  ///< of which building the step [s]
  double steps_seconds = 0;    ///< of which the steps [s]
  int steps = 0;               ///< training steps run (ProbeOutcome::steps); 0: not known
  Json allocator;              ///< ProbeOutcome::allocator; null: not read (older records)
  /// "scout", "hint", "predict", "edge", "aim", "double", "bisect"; "verify" for the two probes
  /// that check a cached answer (run/search_cache.h)
  std::string phase;
  std::string error;
  bool sticky = false;  ///< left its worker unusable (not an outcome: probed again elsewhere)
  int worker = 0;       ///< which of the search's worker processes ran it, from 0

  Json to_json() const;
  static ProbeRecord from_json(const Json& json);
};

/// The search's answer and how it got there.
struct SearchRecord {
  int64_t max_batch = 0;          ///< largest batch that fits; 0 when not even min_batch fits
  int64_t largest_pow2 = 0;       ///< largest power of two <= max_batch (the 2020 post's habit)
  int64_t peak_bytes_at_max = 0;  ///< peak memory reserved by the probe at max_batch
  int64_t peak_allocated_bytes_at_max = 0;  ///< peak memory allocated by the probe at max_batch
  /// What stayed allocated after it (weights, state, and the headroom ballast, still held).
  int64_t resident_bytes_at_max = 0;
  /// peak_allocated_bytes_at_max - resident_bytes_at_max: what the step adds at max_batch on top
  /// of what stays (activations and their gradients, with the workspaces of the cuDNN algorithms
  /// the probes ran: by heuristics unless search.cudnn_benchmark).
  int64_t activation_peak_bytes = 0;
  double bytes_per_sample = 0;  ///< slope of the fitted line [bytes per batch unit]
  double fixed_bytes = 0;       ///< intercept of the fitted line [bytes]
  /// Which peaks the line runs through: "allocated" (an expandable allocator) or "reserved".
  std::string memory_line = "reserved";
  int64_t capacity_bytes = 0;   ///< memory the search aimed to fill
  /// The smallest batch seen not to fit above max_batch (0: none). With a converged search it is
  /// max_batch + granularity.
  int64_t smallest_failure = 0;
  std::vector<ProbeRecord> probes;
  /// Why it stopped (measure/search_stop.h): its kind and its sentence, written as
  /// "stop_reason" ("bracket closed", "limited by search.max_batch=512", ...).
  SearchStopReason stop;
  /// The answer is exact: max_batch fits and the next candidate does not (both seen), max_batch
  /// is search.max_batch, or min_batch does not fit. False when the budget ran out or the search
  /// was interrupted.
  bool converged = false;
  bool hinted = false;     ///< the first probe came from a SearchHint
  std::string hint_note;   ///< what became of the hint ("used", "rescaled: ...", "refused: ...")
  bool interrupted = false;  ///< stopped by a probe that left the worker unusable
  bool cudnn_benchmark = false;  ///< the probes ran with cuDNN autotuning (else heuristics)
  /// The ballast each probe held (search.headroom of the capacity): its peaks include it.
  int64_t headroom_bytes = 0;
  /// Model parameters the probes built with where they differ from the timed run's
  /// ({"memory_format": "contiguous"}); empty when none.
  Json probe_overrides = Json::object();
  int workers = 1;               ///< worker processes the probes ran in
  double seconds = 0;            ///< wall time of the whole search (all its workers)
  /// Where the answer came from: "search" (the probes found it) or "cache" (a cached answer
  /// that two probes verified: run/search_cache.h; `probes` are those two).
  std::string source = "search";
  /// What the cache of search answers did for this search (run/search_cache.h: the key, the
  /// lookup, the verification, whether the answer was stored); null where it was not used
  /// (run --no-cache, the CPU).
  Json cache;

  Json to_json() const;
  static SearchRecord from_json(const Json& json);
};

/// What an earlier search of the same workload and precision learned (under another memory
/// cap): its line peak = fixed_bytes + bytes_per_sample * batch and, when known, its answer
/// (max_batch under capacity_bytes, with the peak and resident bytes of that probe). The search
/// scales it to its own capacity and checks it before the first probe; a line that disagrees
/// with its own answer is replaced by the answer scaled by the capacity, and a hint that makes no
/// sense is refused. The record's hint_note says which. Its bytes hold no probe ballast
/// (search.headroom): each search takes its own from its capacity (SearchOptions::headroom_bytes).
struct SearchHint {
  double fixed_bytes = 0;
  double bytes_per_sample = 0;
  int64_t capacity_bytes = 0;      ///< the capacity it was learned under (0: unknown)
  int64_t max_batch = 0;           ///< its answer under that capacity (0: unknown)
  int64_t peak_bytes_at_max = 0;   ///< peak of its probe at max_batch (0: unknown)
  int64_t resident_bytes = 0;      ///< resident bytes of that probe (0: unknown)
  bool valid() const { return bytes_per_sample > 0 && fixed_bytes >= 0; }
  /// The hint two earlier searches of a workload give: `line`'s memory line and `answer`'s max
  /// batch with its probe's peak and resident bytes, each less the ballast its probes held
  /// (SearchRecord::headroom_bytes), which depends on the capacity and is not the workload's.
  static SearchHint from_searches(const SearchRecord& line, const SearchRecord& answer);
  Json to_json() const;
  static std::optional<SearchHint> from_json(const Json& json);  ///< none for null
};

/// Called after every probe (for progress lines).
using ProbeCallback = std::function<void(const ProbeRecord& probe, int index)>;
/// Runs one probe at a batch size. Must release everything it built before returning.
using ProbeFunction = std::function<ProbeOutcome(int64_t batch)>;

/// The optional inputs of a search.
struct SearchOptions {
  std::optional<SearchHint> hint;
  /// Probes an earlier worker made for this search (it was interrupted); decided on, not redone.
  std::vector<ProbeRecord> prior;
  int worker = 0;  ///< index of this worker among the search's workers (recorded per probe)
  /// The allocator grows its segments on demand (expandable segments): a batch needs about its
  /// allocated peak, so the memory model is the line through the allocated peaks, aimed a little
  /// under the capacity. Otherwise the reserved peaks (cached blocks that fragment count too).
  bool expandable_allocator = false;
  /// The ballast every probe holds (search.headroom of the capacity): inside the probes' peaks,
  /// and taken from the capacity when a hint (which holds none) predicts the limit.
  int64_t headroom_bytes = 0;
  ProbeCallback on_probe;
  /// Notes worth a line on stderr: what became of the hint, a budget spent, an interruption.
  std::function<void(const std::string&)> on_note;
};

/// Finds the largest batch in [settings.min_batch, settings.max_batch], a multiple of
/// settings.granularity (or min_batch itself), for which `probe` fits. `capacity_bytes` is the
/// memory available to the allocator (for predictions only; the probes decide). Settings that
/// make no sense (a granularity or bounds below 1, min_batch above max_batch, a negative
/// capacity) throw ConfigError naming them, before any probe.
SearchRecord find_max_batch(const SearchSettings& settings, int64_t capacity_bytes,
                            const ProbeFunction& probe, const SearchOptions& options = {});

/// Runs `probe` at `batch` and records it as the search does: its outcome, its wall time, the
/// phase and the worker. A probe that left its worker unusable does not fit and is `sticky`.
ProbeRecord run_probe(const ProbeFunction& probe, int64_t batch, const std::string& phase,
                      int worker);

/// The batch the search would probe right above `batch` (one granule up: the next multiple of
/// settings.granularity, or min_batch below it), or 0 when that lies above search.max_batch.
int64_t next_candidate_above(const SearchSettings& settings, int64_t batch);

/// Largest power of two <= value (0 for value < 1).
int64_t largest_power_of_two_at_most(int64_t value);

}  // namespace gpubench
