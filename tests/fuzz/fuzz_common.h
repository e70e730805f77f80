// Shared by the libFuzzer targets (issue 14). Each target feeds its input to one reader and
// lets through only gpubench's own errors (gpubench::Error: bad input, with a message); any
// other exception escapes, and libFuzzer reports it as a crash (an uncaught nlohmann, YAML or
// std exception is a bug: the CLI would print an internal error with the wrong exit code).
// Invariants that must hold for every input throw std::logic_error (FUZZ_CHECK): uncaught, a
// crash for libFuzzer; caught, a failure for FuzzRegressionTest.
#pragma once

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace gpubench::fuzz {

/// A file of this process under $TMPDIR (or /tmp) holding `content`; rewritten each call.
inline std::string temp_file(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/gpubench-fuzz-" +
                           std::to_string(getpid()) + "-" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  return path;
}

/// Text is what a terminal may show: no control byte but \n and \t, valid UTF-8.
inline bool terminal_clean(const std::string& text) {
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if ((b < 0x20 && c != '\n' && c != '\t') || b == 0x7f) return false;
  }
  return valid_utf8(text) == text;
}

}  // namespace gpubench::fuzz

#define FUZZ_CHECK(cond, what)                                                           \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      throw std::logic_error(std::string("fuzz invariant failed at ") + __FILE__ + ":" + \
                             std::to_string(__LINE__) + ": " + (what));                  \
    }                                                                                    \
  } while (false)
