// The config loader: a YAML or JSON document (the first byte picks which), parsed and applied
// over the built-in configs with every schema check, then every workload resolved.
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_config(data, size);
}
