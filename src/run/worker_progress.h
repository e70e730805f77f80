// A worker's progress on stderr (the parent passes it through): who is speaking, the lines that
// stay, and what the worker is doing now, printed as the run asked (GPUBENCH_PROGRESS): on a
// terminal one status line rewritten in place, in a pipe or a log a plain line when the worker
// has been quiet for a while, or nothing. Shared by the worker's files (worker.cpp,
// timed_phase.cpp); the parent logs through its own callback.
#pragma once

#include "src/run/clock.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace gpubench {

/// Who is speaking in this worker's progress: `label` ("job 3/12 nasnet-large"; the model's
/// name when empty) after the time since `started_unix` (the suite's start; none when 0), as
/// "[2:13] job 3/12 nasnet-large". `eta_unix`: when the suite is expected to end, for the status
/// line's "about 1:05:00 left" (0: no estimate yet).
void set_progress_prefix(const std::string& label, double started_unix, double eta_unix = 0);

/// A progress line of the worker running `model` that stays, unless progress is off
/// (GPUBENCH_PROGRESS=none, or GPUBENCH_QUIET=1: a data-parallel run's ranks other than 0).
void worker_log(const std::string& model, const std::string& text);

/// For the scope of one worker phase, what the worker is doing, so that a first step that
/// autotunes for a minute, or a probe that takes 18 s, never leaves the user guessing: on a
/// terminal a status line redrawn every second (the phase, how long it has run, what is left of
/// the suite); in plain mode a line when the worker has said nothing for a while (10 s, or
/// GPUBENCH_HEARTBEAT_S), so at most one such line per interval; nothing in none mode.
class Heartbeat {
 public:
  explicit Heartbeat(std::string model);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// What the worker is doing from now on ("warm-up step 1 at batch 456"); "" for nothing.
  static void phase(const std::string& what);

 private:
  /// The heartbeat of this worker, if one runs.
  static Heartbeat*& current();
  void loop();

  std::string model_;
  double silence_s_ = 10;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string phase_;
  std::chrono::steady_clock::time_point phase_started_ = std::chrono::steady_clock::now();
  std::thread thread_;  // last: it starts once the rest exists
};

}  // namespace gpubench
