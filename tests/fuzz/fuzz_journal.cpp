// The journal reader and resume's parsing: a journal file read (the header, its suite plan as a
// resume reads it, every record), then continued as --resume does (a torn last line cut off, a
// whole last record without its newline kept), after which it must read back whole: no torn
// tail, the same records.
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_journal(data, size);
}
