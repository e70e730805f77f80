// The result-file reader: a --json document parsed and read into records; what it accepts must
// write back (dump_json) and read back to the same records.
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_result(data, size);
}
