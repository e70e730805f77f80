// The command-line parser: up to 24 arguments (the input split at NUL bytes) given to
// run_cli_check_only, which parses and checks the whole command line as `gpubench` does and
// runs nothing (`run` stops before its journal and first job). It works in a scratch folder,
// and arguments with '/' are skipped (no file outside it is read or written). What must hold:
// an exit code from the documented set, and stderr clean for a terminal.
#include "tests/fuzz/targets.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The scratch folder, under $TMPDIR: whatever a fuzzed command writes stays in it.
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/gpubench-fuzz-cli-" + std::to_string(getpid());
  mkdir(dir.c_str(), 0700);
  if (chdir(dir.c_str()) != 0) std::abort();
  setenv("GPUBENCH_JOURNAL_DIR", dir.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gpubench::fuzz::run_command_line(data, size);
}
