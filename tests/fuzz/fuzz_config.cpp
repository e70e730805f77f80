// The config loader: a YAML or JSON document (bit 0 of the first byte picks which; its other
// bits the built-in config a document of bare model keys is applied to), parsed and applied over
// the built-in configs with every schema check, then what it changed resolved (targets.cpp).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_config(data, size);
}
