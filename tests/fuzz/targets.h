// The fuzz targets' bodies (tests/fuzz/targets.cpp): each takes one input and returns 0; bad input
// that gpubench reports (gpubench::Error) is expected, any other exception or a broken invariant
// escapes as an exception.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpubench::fuzz {

/// Bit 0 of the first byte: YAML (0) or JSON; the other bits, modulo config_choices(): the
/// built-in config a document of bare model keys is applied to (0: the document as it is).
int run_config(const uint8_t* data, size_t size);
int config_choices();
int run_result(const uint8_t* data, size_t size);

/// What run_journal does after reading the journal (the input's hash picks it).
enum JournalOperation { kJournalPlan, kJournalResume, kJournalAppend, kJournalOperations };
int run_journal(const uint8_t* data, size_t size);
int run_journal(const uint8_t* data, size_t size, int operation);

/// choice: a format of report_formats() by index, or (== their number) the comparison; the
/// input's hash picks it in the two-argument form.
int run_report_merge(const uint8_t* data, size_t size);
int run_report_merge(const uint8_t* data, size_t size, int choice);
int report_merge_choices();
/// Needs a scratch folder as the working directory (it may write files there).
int run_command_line(const uint8_t* data, size_t size);

}  // namespace gpubench::fuzz
