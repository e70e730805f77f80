// The journal reader and resume's parsing: a journal file read (the header and every record),
// then one operation the input's hash picks: its suite plan read as a resume reads it, or
// continued as --resume does (a torn last line cut off), or continued and appended to; after
// which it must read back whole: no torn tail, no record lost (targets.cpp).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_journal(data, size);
}
