// The fuzz and sanitizer builds' register_builtin_workloads (models/builtin_workloads.cpp's in
// the real build): the architectures' schemas from tests/fuzz/registry_schemas.json, no model
// code (cmake/Fuzz.cmake says why).
#include "gpubench/train/registry.h"
#include "tests/fuzz/registry_snapshot.h"

namespace gpubench {

namespace fuzz {
extern const char* const kRegistrySnapshot;  // generated from registry_schemas.json
}

void register_builtin_workloads(Registry& registry) {
  fuzz::add_snapshot_architectures(Json::parse(fuzz::kRegistrySnapshot), registry);
}

}  // namespace gpubench
