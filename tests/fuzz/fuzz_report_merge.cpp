// The report's merge of many files: the input split into up to 8 files (result documents and
// journals in any mix) read together, merged (the last record of a job wins), then rendered in
// the one format, or compared, that the input's hash picks; every terminal format must come out
// clean (no control byte, valid UTF-8), the HTML without markup from the records (targets.cpp).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_report_merge(data, size);
}
