// Error types that carry the process exit code (CLI11 style), and the checks that throw them.
//
// Exit codes (also in README.md):
//   0  everything ran
//   1  a job failed (out of memory at the smallest batch, a crash, a timeout); the other jobs
//      still ran and were saved
//   2  bad input: unknown model, bad flag value, malformed or wrong-typed config, unwritable path
//   3  no usable device: --gpu past the device count, or a CUDA device asked of a CPU-only build
//   4  the run stopped early: the journal or a work file could not be written
//   128 + N  stopped by signal N (Ctrl-C: 130) while a worker ran; the finished jobs stay
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace gpubench {

/// Exit codes of the `gpubench` process.
enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,
  kExitBadInput = 2,
  kExitNoDevice = 3,
  kExitAborted = 4,  ///< the run stopped early (journal or work files could not be written)
};

/// Base of every error a user can see; knows the exit code it maps to.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int exit_code)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

/// Bad input: a flag, a config file or key, a path. Exit code 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, kExitBadInput) {}
};

/// An unknown workload name; the message names the closest match. Exit code 2.
class UnknownWorkloadError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// No usable device. Exit code 3.
class DeviceError : public Error {
 public:
  explicit DeviceError(const std::string& message) : Error(message, kExitNoDevice) {}
};

/// A job (one model on one device) failed for a reason other than bad input. Exit code 1.
class JobError : public Error {
 public:
  explicit JobError(const std::string& message) : Error(message, kExitJobFailed) {}
};

/// The run cannot go on (the journal or a work file cannot be written): the jobs after it do
/// not run. What was journaled stays. Exit code 4.
class AbortError : public Error {
 public:
  explicit AbortError(const std::string& message) : Error(message, kExitAborted) {}
};

/// The user asked the run to stop (SIGINT from Ctrl-C, SIGTERM, SIGHUP) while a worker ran: the
/// worker's process group was stopped and its work files removed; the journal keeps every job
/// that finished. The CLI says so, then ends as the signal would have (exit 128 + signal).
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal_number)
      : Error(fmt::format("stopped by signal {}", signal_number), 128 + signal_number),
        signal_(signal_number) {}
  int signal_number() const { return signal_; }

 private:
  int signal_;
};

}  // namespace gpubench

/// Throws `ErrorType(fmt::format(...))` unless `cond` holds.
#define GPUBENCH_CHECK(cond, ErrorType, ...)                \
  do {                                                      \
    if (!(cond)) throw ErrorType(fmt::format(__VA_ARGS__)); \
  } while (false)

/// Internal invariant: a failure is a gpubench bug, reported with file and line.
#define GPUBENCH_ASSERT(cond)                                                     \
  do {                                                                            \
    if (!(cond))                                                                  \
      throw std::logic_error(                                                     \
          fmt::format("internal error at {}:{}: {}", __FILE__, __LINE__, #cond)); \
  } while (false)
