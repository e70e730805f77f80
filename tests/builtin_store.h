// Test helpers: the shipped configs, loaded once per test binary, and a CPU step context at a
// workload's smoke size.
#pragma once

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "gpubench/train/workload.h"

#include <cstdint>

namespace gpubench::testing {

/// The shipped configs (configs/ over the registry's schemas), loaded once.
inline const ConfigStore& builtin_store() {
  static const ConfigStore s = ConfigStore::load_builtin(builtin_registry());
  return s;
}

/// Which optimizer section a smoke context gets: the smoke one (`smoke.optimizer:` over
/// `optimizer:`, say without warm-up, so that one step visibly moves every parameter) or the
/// workload's own (its schedule as it trains).
enum class SmokeOptimizer { kSmoke, kFull };

/// `config`'s smoke model at `batch`, on the CPU in fp32, with seed `seed`.
inline StepContext smoke_context(const ModelConfig& config, int64_t batch,
                                 SmokeOptimizer optimizer = SmokeOptimizer::kSmoke,
                                 uint64_t seed = 0) {
  StepContext ctx;
  ctx.config = &config;
  ctx.model = config.smoke_model;
  ctx.optimizer = optimizer == SmokeOptimizer::kSmoke ? config.smoke_optimizer : config.optimizer;
  ctx.batch = batch;
  ctx.seed = seed;
  return ctx;
}

}  // namespace gpubench::testing
