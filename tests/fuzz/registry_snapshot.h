// The built-in registry's architectures as data: names and the `model:` / `optimizer:` schemas
// (keys, kinds, defaults, choices, minimums), without the model code. The fuzz and sanitizer
// builds (cmake/Fuzz.cmake) leave the models out (libtorch model code under ASan is slow to
// build and outside what the readers do) and fill their registry from
// tests/fuzz/registry_schemas.json, which RegistrySnapshotTest keeps equal to the real one.
#pragma once

#include "gpubench/train/registry.h"

namespace gpubench::fuzz {

/// The registry as JSON (what tests/fuzz/registry_schemas.json holds).
Json registry_to_json(const Registry& registry);
/// Adds the architectures of `snapshot` to `registry`; their prepare and count_parameters
/// throw std::logic_error (nothing in the readers builds a model).
void add_snapshot_architectures(const Json& snapshot, Registry& registry);

}  // namespace gpubench::fuzz
