// The command-line parser: up to 24 arguments (the input split at NUL bytes) given to run_cli,
// the whole CLI as `gpubench` runs it. Kept from doing real work: it runs in an empty scratch
// folder, arguments with '/' are dropped (no file outside it is read or written), `worker` and
// the testing flags are refused, and `run` always gets `--device cuda`, which this CPU-only
// build refuses before any job (or CLI11 refuses the repeated option). What must hold: an exit
// code from the documented set, and stderr clean for a terminal.
#include "tests/fuzz/targets.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The scratch folder: whatever a fuzzed command writes stays in it.
  const std::string dir = "/tmp/gpubench-fuzz-cli-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  if (chdir(dir.c_str()) != 0) std::abort();
  setenv("GPUBENCH_JOURNAL_DIR", dir.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_command_line(data, size);
}
