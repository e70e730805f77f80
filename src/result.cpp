#include "gpubench/result.h"

#include "gpubench/errors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace gpubench {

Json JobRecord::to_json() const {
  Json params = Json::object();
  for (const auto& [network, count] : trainable_params) params[network] = count;
  Json out = {{"model", model},
              {"family", family},
              {"precision", precision},
              {"batch_unit", batch_unit},
              {"throughput_unit", throughput_unit},
              {"device", device.to_json()},
              {"status", status},
              {"message", message},
              {"emulated", emulated},
              {"search_only", search_only},
              {"memory_cap_gib", memory_cap_gib ? Json(*memory_cap_gib) : Json(nullptr)},
              {"batch", batch},
              {"batch_source", batch_source},
              {"batch_info", batch_info},
              {"search", search ? search->to_json() : Json(nullptr)},
              {"confirm", confirm},
              {"warmup", warmup},
              {"timing", timing.to_json()},
              {"step_time_ms", step_time_ms},
              {"units_per_step", units_per_step},
              {"throughput", throughput},
              {"peak_memory_bytes", peak_memory_bytes},
              {"peak_allocated_bytes", peak_allocated_bytes},
              {"memory", memory},
              {"trainable_params", params},
              {"losses_start", losses_start},
              {"losses", losses},
              {"clocks", clocks}};
  if (normalized) {
    out["normalized"] = {{"reference_row", normalized->reference_row},
                         {"baseline_gpu", normalized->baseline_gpu},
                         {"baseline_throughput", normalized->baseline_throughput},
                         {"baseline_max_batch", normalized->baseline_max_batch},
                         {"score", normalized->score}};
  } else {
    out["normalized"] = nullptr;
  }
  if (status == "diverged") out["diverged_throughput"] = diverged_throughput;
  // Repeats (run.repeat >= 2) only: records of one timed run read and write as before.
  if (!repeats.empty()) out["repeats"] = repeats;
  if (throughput_stats) out["throughput_stats"] = throughput_stats->to_json();
  out["config"] = config;
  out["environment"] = environment;
  out["wall_seconds"] = wall_seconds;
  out["created_utc"] = created_utc;
  // How the step ran (launch, precision, optimizer kernels): written by timed runs only, so
  // records without one read and write as before.
  if (!runtime.empty()) out["runtime"] = runtime;
  if (!data_parallel.empty()) out["data_parallel"] = data_parallel;  // issue 15
  return out;
}

JobRecord JobRecord::from_json(const Json& j) {
  JobRecord r;
  r.model = j.value("model", std::string());
  r.family = j.value("family", std::string());
  r.precision = j.value("precision", std::string());
  r.batch_unit = j.value("batch_unit", std::string());
  r.throughput_unit = j.value("throughput_unit", std::string());
  if (j.contains("device")) r.device = DeviceInfo::from_json(j["device"]);
  r.status = j.value("status", std::string("ok"));
  r.message = j.value("message", std::string());
  r.emulated = j.value("emulated", false);
  r.search_only = j.value("search_only", false);
  if (j.contains("memory_cap_gib") && j["memory_cap_gib"].is_number()) {
    r.memory_cap_gib = j["memory_cap_gib"].get<double>();
  }
  r.batch = j.value("batch", int64_t{0});
  r.batch_source = j.value("batch_source", std::string());
  r.batch_info = j.value("batch_info", Json::object());
  r.runtime = j.value("runtime", Json::object());
  r.data_parallel = j.value("data_parallel", Json::object());
  if (j.contains("search") && j["search"].is_object())
    r.search = SearchRecord::from_json(j["search"]);
  r.confirm = j.value("confirm", Json::array());
  r.warmup = j.value("warmup", Json::object());
  if (j.contains("timing")) r.timing = TimingStats::from_json(j["timing"]);
  if (j.contains("step_time_ms")) r.step_time_ms = j["step_time_ms"].get<std::vector<double>>();
  r.units_per_step = j.value("units_per_step", 0.0);
  r.throughput = j.value("throughput", 0.0);
  r.peak_memory_bytes = j.value("peak_memory_bytes", int64_t{0});
  r.peak_allocated_bytes = j.value("peak_allocated_bytes", int64_t{0});
  r.memory = j.value("memory", Json::object());
  const Json params = j.value("trainable_params", Json::object());
  for (const auto& item : params.items())
    r.trainable_params[item.key()] = item.value().get<int64_t>();
  r.losses_start = j.value("losses_start", Json::object());
  r.losses = j.value("losses", Json::object());
  r.diverged_throughput = j.value("diverged_throughput", 0.0);
  r.repeats = j.value("repeats", Json::array());
  if (j.contains("throughput_stats") && j["throughput_stats"].is_object()) {
    r.throughput_stats = SampleStats::from_json(j["throughput_stats"]);
  }
  r.clocks = j.value("clocks", Json::object());
  if (j.contains("normalized") && j["normalized"].is_object()) {
    const Json& n = j["normalized"];
    NormalizedScore s;
    s.reference_row = n.value("reference_row", std::string());
    s.baseline_gpu = n.value("baseline_gpu", std::string());
    s.baseline_throughput = n.value("baseline_throughput", 0.0);
    s.baseline_max_batch = n.value("baseline_max_batch", 0.0);
    s.score = n.value("score", 0.0);
    r.normalized = s;
  }
  r.config = j.value("config", Json::object());
  r.environment = j.value("environment", Json::object());
  r.wall_seconds = j.value("wall_seconds", 0.0);
  r.created_utc = j.value("created_utc", std::string());
  return r;
}

Json ResultDocument::to_json() const {
  Json jobs_json = Json::array();
  for (const auto& job : jobs) jobs_json.push_back(job.to_json());
  return {{"schema", "gpubench-result"},
          {"schema_version", kResultSchemaVersion},
          {"created_utc", created_utc},
          {"command_line", command_line},
          {"run_settings", run_settings},
          {"environment", environment},
          {"jobs", jobs_json}};
}

ResultDocument ResultDocument::from_json(const Json& j, const std::string& file) {
  GPUBENCH_CHECK(j.is_object() && j.value("schema", std::string()) == "gpubench-result",
                 ConfigError, "{}: not a gpubench result file (no \"schema\": \"gpubench-result\")",
                 file);
  const int version = j.value("schema_version", 0);
  GPUBENCH_CHECK(version == kResultSchemaVersion, ConfigError,
                 "{}: result schema version {} is not supported by this gpubench (it reads "
                 "version {}); use the gpubench that wrote it",
                 file, version, kResultSchemaVersion);
  ResultDocument d;
  d.created_utc = j.value("created_utc", std::string());
  d.command_line = j.value("command_line", std::vector<std::string>());
  d.run_settings = j.value("run_settings", Json::object());
  d.environment = j.value("environment", Json::object());
  for (const auto& job : j.value("jobs", Json::array()))
    d.jobs.push_back(JobRecord::from_json(job));
  return d;
}

namespace {
std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  GPUBENCH_CHECK(fd >= 0, ConfigError, "cannot write '{}': {} (choose a writable folder)", path,
                 std::strerror(errno));
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw ConfigError(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
    }
    written += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw ConfigError(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  }
}

void check_writable(const std::string& path, const std::string& flag) {
  struct stat st {};
  GPUBENCH_CHECK(!(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)), ConfigError,
                 "{} '{}': is a folder (give a file path, such as {}/results.json)", flag, path,
                 path);
  const std::string folder = folder_of(path);
  GPUBENCH_CHECK(::access(folder.c_str(), W_OK) == 0, ConfigError,
                 "{} '{}': folder '{}' {} (create it or choose another path)", flag, path, folder,
                 ::access(folder.c_str(), F_OK) == 0 ? "is not writable" : "does not exist");
  if (::stat(path.c_str(), &st) == 0) {
    GPUBENCH_CHECK(::access(path.c_str(), W_OK) == 0, ConfigError,
                   "{} '{}': the file exists and is not writable (choose another path)", flag,
                   path);
  }
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

}  // namespace gpubench
