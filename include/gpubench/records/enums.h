// The closed sets of words a job record and a job spec hold: a job's status, the phase a worker
// runs, the phase of a timed-run attempt. Each is an enum class with one formatter (to_string,
// the string the JSON holds: the schema is unchanged) and one parser (parse_*, none for a string
// outside the set). Files are read through require_* (records/result.cpp, run/job_spec.cpp): a
// string outside the set is a ConfigError naming the field, the value and the allowed values,
// never silently another value.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpubench {

/// How a job (or one worker's part of it) ended. "oom" is a worker's answer only (its timed run
/// or confirm ran out of memory); the parent steps down on it and never journals it.
enum class JobStatus {
  ok,        ///< "ok": it measured something
  no_fit,    ///< "no-fit": not even search.min_batch fits
  diverged,  ///< "diverged": losses not finite, or the model degenerate (not a result)
  failed,    ///< "failed"
  timeout,   ///< "timeout": the job's --timeout ran out
  crashed,   ///< "crashed": the worker died of a signal
  oom,       ///< "oom": a worker's run ran out of memory
};

/// What a worker is asked to do (JobSpec::phase).
enum class WorkerPhase {
  search,   ///< "search": the max-batch search (or a part of it)
  time,     ///< "time": warm-up and the timed window at the spec's batch
  confirm,  ///< "confirm": a memory tier's batch trained once in a fresh process
};

/// Which timed-run attempt of a job an entry of JobRecord::confirm is.
enum class AttemptPhase {
  confirm,    ///< "confirm": the search's batch
  step_down,  ///< "step-down": a smaller batch after an out-of-memory
  bisect,     ///< "bisect": between the largest batch that ran and the smallest that did not
};

const char* to_string(JobStatus status);
const char* to_string(WorkerPhase phase);
const char* to_string(AttemptPhase phase);

std::optional<JobStatus> parse_job_status(std::string_view text);
std::optional<WorkerPhase> parse_worker_phase(std::string_view text);
std::optional<AttemptPhase> parse_attempt_phase(std::string_view text);

/// `text` read from the field `field` of a file: the value, or a ConfigError naming the field,
/// the value and the allowed values: "status 'no_fit' is not a job status (did you mean
/// 'no-fit'?); the allowed values are: ok, no-fit, diverged, failed, timeout, crashed, oom".
JobStatus require_job_status(std::string_view text, std::string_view field);
WorkerPhase require_worker_phase(std::string_view text, std::string_view field);
AttemptPhase require_attempt_phase(std::string_view text, std::string_view field);

}  // namespace gpubench
