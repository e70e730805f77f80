// tests/fuzz/registry_schemas.json is the built-in registry's schemas as data: the fuzz and
// sanitizer builds, which leave the model code out, validate configs against it. This test
// keeps it equal to the real registry (GPUBENCH_UPDATE_GOLDEN=1 rewrites it).
#include "tests/fuzz/registry_snapshot.h"

#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace gpubench {
namespace {

std::string snapshot_path() {
  return std::string(GPUBENCH_TEST_SOURCE_DIR) + "/fuzz/registry_schemas.json";
}

TEST(RegistrySnapshotTest, TheFuzzBuildsSchemasAreTheBuiltinRegistrys) {
  const Json live = fuzz::registry_to_json(builtin_registry());
  const char* update = std::getenv("GPUBENCH_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    testing::write_file(snapshot_path(), dump_json(live, 1) + "\n");
  }
  const Json stored = Json::parse(testing::read_file(snapshot_path()));
  EXPECT_EQ(stored, live) << "the registry changed: GPUBENCH_UPDATE_GOLDEN=1 "
                             "build/gpubench_tests --gtest_filter='RegistrySnapshotTest.*'";
  // And it reads back into a registry with the same schemas.
  Registry copy;
  fuzz::add_snapshot_architectures(stored, copy);
  EXPECT_EQ(fuzz::registry_to_json(copy), live);
}

}  // namespace
}  // namespace gpubench
