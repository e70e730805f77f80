// The fuzz targets' bodies (tests/fuzz/targets.cpp): each takes one input and returns 0; bad input
// that gpubench reports (gpubench::Error) is expected, any other exception or a broken invariant
// escapes as an exception.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpubench::fuzz {

int run_config(const uint8_t* data, size_t size);
int run_result(const uint8_t* data, size_t size);
int run_journal(const uint8_t* data, size_t size);
int run_report_merge(const uint8_t* data, size_t size);
/// Needs a scratch folder as the working directory (it may write files there).
int run_command_line(const uint8_t* data, size_t size);

}  // namespace gpubench::fuzz
