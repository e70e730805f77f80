// The clock the worker and the parent time their phases and runs with (one definition for the
// run/ sources, which a unity build may compile as one unit).
#pragma once

#include <chrono>

namespace gpubench {

/// Seconds on the steady clock since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gpubench
