#include "gpubench/process.h"

#include "gpubench/errors.h"

#include <fmt/format.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace gpubench {

std::string ProcessResult::describe() const {
  if (timed_out) return fmt::format("timed out after {:.0f} s", seconds);
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exited with code {}", exit_code);
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s) {
  GPUBENCH_ASSERT(!argv.empty());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw JobError(fmt::format("cannot start a worker: {}", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills everything the worker started
    execv(args[0], args.data());
    std::fprintf(stderr, "error: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);

  ProcessResult result;
  int status = 0;
  bool terminated = false;
  auto deadline_passed = [&](double extra) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return timeout_s > 0 && elapsed > timeout_s + extra;
  };
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (!terminated && deadline_passed(0)) {
      result.timed_out = true;
      kill(-pid, SIGTERM);
      terminated = true;
    } else if (terminated && deadline_passed(10)) {
      kill(-pid, SIGKILL);  // ignored SIGTERM for 10 s
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

std::string current_executable() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "gpubench";
  buffer[n] = '\0';
  return buffer;
}

}  // namespace gpubench
