// A worker's progress lines on stderr (the parent passes them through): who is speaking, and a
// heartbeat that names what the worker is doing when it has been quiet for a while. Shared by
// the worker's files (worker.cpp, timed_phase.cpp); the parent logs through its own callback.
#pragma once

#include "src/run/clock.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace gpubench {

/// Who is speaking in this worker's progress lines: `label` ("job 3/12 nasnet-large"; the
/// model's name when empty) after the time since `started_unix` (the suite's start; none when
/// 0), as "[2:13] job 3/12 nasnet-large".
void set_progress_prefix(const std::string& label, double started_unix);

/// One progress line of the worker running `model`, unless GPUBENCH_QUIET=1 (a data-parallel
/// run's ranks other than 0).
void worker_log(const std::string& model, const std::string& text);

/// For the scope of one worker phase, a line whenever the worker has said nothing for a while
/// (10 s, or GPUBENCH_HEARTBEAT_S), naming what it is doing and for how long: a first step that
/// autotunes for a minute, or a probe that takes 18 s, never leaves the terminal quiet.
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
