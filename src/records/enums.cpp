#include "gpubench/records/enums.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <array>
#include <utility>
#include <vector>

namespace gpubench {

namespace {

// One table per enum, in the enum's order: the only place its strings are spelled.
constexpr std::array<std::pair<JobStatus, const char*>, 7> kJobStatuses = {{
    {JobStatus::ok, "ok"},
    {JobStatus::no_fit, "no-fit"},
    {JobStatus::diverged, "diverged"},
    {JobStatus::failed, "failed"},
    {JobStatus::timeout, "timeout"},
    {JobStatus::crashed, "crashed"},
    {JobStatus::oom, "oom"},
}};

constexpr std::array<std::pair<WorkerPhase, const char*>, 3> kWorkerPhases = {{
    {WorkerPhase::search, "search"},
    {WorkerPhase::time, "time"},
    {WorkerPhase::confirm, "confirm"},
}};

constexpr std::array<std::pair<AttemptPhase, const char*>, 3> kAttemptPhases = {{
    {AttemptPhase::confirm, "confirm"},
    {AttemptPhase::step_down, "step-down"},
    {AttemptPhase::bisect, "bisect"},
}};

template <typename E, std::size_t N>
const char* name_in(const std::array<std::pair<E, const char*>, N>& table, E value) {
  for (const auto& [e, name] : table) {
    if (e == value) return name;
  }
  return "?";  // not reached: every enumerator has a row
}

template <typename E, std::size_t N>
std::optional<E> value_in(const std::array<std::pair<E, const char*>, N>& table,
                          std::string_view text) {
  for (const auto& [e, name] : table) {
    if (text == name) return e;
  }
  return std::nullopt;
}

template <typename E, std::size_t N>
std::vector<std::string> names_in(const std::array<std::pair<E, const char*>, N>& table) {
  std::vector<std::string> out;
  for (const auto& row : table) out.emplace_back(row.second);
  return out;
}

/// "status 'no_fit' is not a job status (did you mean 'no-fit'?); the allowed values are: ok,
/// no-fit, ...", the closest value named where the text looks like a misspelling of it.
[[noreturn]] void throw_not_one_of(std::string_view field, std::string_view text,
                                   const char* what, const std::vector<std::string>& allowed) {
  throw ConfigError(fmt::format("{} '{}' is not {}{}; the allowed values are: {}", field, text,
                                what, did_you_mean(text, allowed), join(allowed, ", ")));
}

}  // namespace

const char* to_string(JobStatus status) { return name_in(kJobStatuses, status); }
const char* to_string(WorkerPhase phase) { return name_in(kWorkerPhases, phase); }
const char* to_string(AttemptPhase phase) { return name_in(kAttemptPhases, phase); }

std::optional<JobStatus> parse_job_status(std::string_view text) {
  return value_in(kJobStatuses, text);
}
std::optional<WorkerPhase> parse_worker_phase(std::string_view text) {
  return value_in(kWorkerPhases, text);
}
std::optional<AttemptPhase> parse_attempt_phase(std::string_view text) {
  return value_in(kAttemptPhases, text);
}

JobStatus require_job_status(std::string_view text, std::string_view field) {
  if (const auto status = parse_job_status(text)) return *status;
  throw_not_one_of(field, text, "a job status", names_in(kJobStatuses));
}

WorkerPhase require_worker_phase(std::string_view text, std::string_view field) {
  if (const auto phase = parse_worker_phase(text)) return *phase;
  throw_not_one_of(field, text, "a worker phase", names_in(kWorkerPhases));
}

AttemptPhase require_attempt_phase(std::string_view text, std::string_view field) {
  if (const auto phase = parse_attempt_phase(text)) return *phase;
  throw_not_one_of(field, text, "an attempt phase", names_in(kAttemptPhases));
}

}  // namespace gpubench
