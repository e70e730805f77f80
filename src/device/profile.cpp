#include "gpubench/device/profile.h"

#include "gpubench/base/env.h"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>

#if GPUBENCH_WITH_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace gpubench {

ProfileRequest ProfileRequest::from_environment() {
  ProfileRequest request;
  if (const char* path = env::get(env::Switch::kProfileTrace)) request.trace_path = path;
  if (const char* steps = env::get(env::Switch::kProfileSteps)) {
    const int n = std::atoi(steps);
    if (n > 0) request.steps = n;
  }
  return request;
}

std::string profile_steps(const ProfileRequest& request, const std::function<void()>& run_step,
                          const std::function<void()>& synchronize) {
  if (request.trace_path.empty()) return "no trace path";
#if GPUBENCH_WITH_CUDA
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  try {
    synchronize();
    const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO,
                                          /*report_input_shapes=*/true);
    const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
    for (int i = 0; i < request.steps; ++i) run_step();
    synchronize();
    auto result = profiler::disableProfiler();
    result->save(request.trace_path);
    return "";
  } catch (const std::exception& e) {
    return fmt::format("profiling failed: {}", e.what());
  }
#else
  (void)run_step;
  (void)synchronize;
  return "this gpubench is built without CUDA; there is no device time to profile";
#endif
}

}  // namespace gpubench
