// Test helper: the bytes the CPU allocator hands out while a step runs, through c10's
// memory-report hook (compat::MemoryReportingHook: both libtorch signatures), so that a test
// can compare the peaks of two ways of running a step on the CPU.
#pragma once

#include "gpubench/base/compat.h"

#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>

namespace gpubench::testing {

/// Bytes the CPU allocator gives this thread while it is installed (c10's memory-profiling
/// hook): now and the most since reset_peak(). Installed for its lifetime; intra-op threads are
/// set to one meanwhile, so that every allocation and free is reported here.
class CpuAllocationPeak : public compat::MemoryReportingHook {
 public:
  void reset_peak() { peak_ = current_; }
  int64_t current() const { return current_; }
  int64_t peak() const { return peak_; }

 private:
  void on_memory(int64_t bytes, const c10::Device& device) override {
    if (!device.is_cpu()) return;
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }
  int64_t current_ = 0, peak_ = 0;
};

/// Runs `body` with a CpuAllocationPeak installed on one intra-op thread.
template <typename Body>
void with_allocation_peak(Body body) {
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  {
    auto tracker = std::make_shared<CpuAllocationPeak>();
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, tracker);
    body(*tracker);
  }
  torch::set_num_threads(threads);
}

}  // namespace gpubench::testing
