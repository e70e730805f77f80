#include "gpubench/records/enums.h"

#include "gpubench/base/word_table.h"

namespace gpubench {

namespace {

// One table per enum, in the enum's order: the only place its strings are spelled.
constexpr WordTable<JobStatus, 7> kJobStatuses = {{
    {JobStatus::ok, "ok"},
    {JobStatus::no_fit, "no-fit"},
    {JobStatus::diverged, "diverged"},
    {JobStatus::failed, "failed"},
    {JobStatus::timeout, "timeout"},
    {JobStatus::crashed, "crashed"},
    {JobStatus::oom, "oom"},
}};

constexpr WordTable<WorkerPhase, 3> kWorkerPhases = {{
    {WorkerPhase::search, "search"},
    {WorkerPhase::time, "time"},
    {WorkerPhase::confirm, "confirm"},
}};

constexpr WordTable<AttemptPhase, 3> kAttemptPhases = {{
    {AttemptPhase::confirm, "confirm"},
    {AttemptPhase::step_down, "step-down"},
    {AttemptPhase::bisect, "bisect"},
}};

}  // namespace

const char* to_string(JobStatus status) { return word_of(kJobStatuses, status); }
const char* to_string(WorkerPhase phase) { return word_of(kWorkerPhases, phase); }
const char* to_string(AttemptPhase phase) { return word_of(kAttemptPhases, phase); }

std::optional<JobStatus> parse_job_status(std::string_view text) {
  return value_of(kJobStatuses, text);
}
std::optional<WorkerPhase> parse_worker_phase(std::string_view text) {
  return value_of(kWorkerPhases, text);
}
std::optional<AttemptPhase> parse_attempt_phase(std::string_view text) {
  return value_of(kAttemptPhases, text);
}

JobStatus require_job_status(std::string_view text, std::string_view field) {
  return require_word(kJobStatuses, text, field, "a job status");
}

WorkerPhase require_worker_phase(std::string_view text, std::string_view field) {
  return require_word(kWorkerPhases, text, field, "a worker phase");
}

AttemptPhase require_attempt_phase(std::string_view text, std::string_view field) {
  return require_word(kAttemptPhases, text, field, "an attempt phase");
}

}  // namespace gpubench
