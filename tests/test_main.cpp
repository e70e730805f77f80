// One test binary for the whole suite (libtorch links once). Tests that need a GPU end in
// _CUDA and are filtered out where no CUDA device is visible.
#include "gpubench/config/config.h"
#include "gpubench/device/device.h"
#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gpubench::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/gpubench-test-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!mkdtemp(buffer.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buffer.data();
}

TempDir::~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string gpubench_exe() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  std::string self(buffer, n > 0 ? static_cast<std::size_t>(n) : 0);
  return self.substr(0, self.find_last_of('/')) + "/gpubench";
}

CommandResult run_gpubench(const std::string& args, const std::string& cwd,
                           const std::string& env) {
  TempDir dir;
  const std::string command =
      fmt::format("{}{}'{}' {} > '{}' 2> '{}'", cwd.empty() ? "" : "cd '" + cwd + "' && ",
                  env.empty() ? "" : "env " + env + " ", gpubench_exe(), args, dir.file("out"),
                  dir.file("err"));
  const int status = std::system(command.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(dir.file("out"));
  result.err = read_file(dir.file("err"));
  return result;
}

std::string smoke_config_json(const std::string& model) {
  const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& m = store.model(model);
  const Json document = {
      {"run",
       {{"cpu_timing",
         {{"warmup_steps", 1}, {"max_warmup_steps", 1}, {"min_steps", 2}, {"min_seconds", 0}}}}},
      {"models", {{model, {{"cpu_batch", m.smoke_batch}, {"model", m.smoke_model.json()}}}}}};
  return document.dump(2);
}

std::string smoke_configs_json(const std::vector<std::string>& models) {
  Json merged = Json::object();
  for (const auto& model : models) merged.merge_patch(Json::parse(smoke_config_json(model)));
  return merged.dump();
}

int journal_job_lines(const std::string& journal) {
  const std::string text = read_file(journal);
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return std::max(0, lines - 1);  // minus the header
}

std::string hanging_worker(const TempDir& dir, const std::string& model) {
  const std::string path = dir.file("worker.sh");
  write_file(path, "#!/bin/sh\nif grep -q '\"model\":\"" + model +
                       "\"' \"$3\"; then sleep 600; fi\nexec '" + gpubench_exe() +
                       "' \"$@\"\n");
  chmod(path.c_str(), 0755);
  return path;
}

}  // namespace gpubench::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (gpubench::cuda_device_count() == 0) {
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += filter.find('-') == std::string::npos ? "-*_CUDA*" : ":*_CUDA*";
    ::testing::GTEST_FLAG(filter) = filter;
  }
  torch::set_num_threads(2);
  // Journals of runs without --journal (in-process and in child processes) go here, not into
  // the home folder.
  const gpubench::testing::TempDir journals;
  setenv("GPUBENCH_JOURNAL_DIR", journals.path().c_str(), 1);
  // The same for the cache of search answers of runs on a GPU: none read from, none written to
  // the user's.
  const gpubench::testing::TempDir search_cache;
  setenv("GPUBENCH_CACHE_DIR", search_cache.path().c_str(), 1);
  return RUN_ALL_TESTS();
}
