// `gpubench info`: the devices, the software versions and each GPU's dense-matmul peak.
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/base/version.h"
#include "gpubench/device/device.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/distributed/comm.h"
#include "gpubench/report/reporter.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>

#include <ostream>

namespace gpubench::cli {

void setup_info(CLI::App& app, InfoOptions& o) {
  auto* cmd = app.add_subcommand(
      "info", "Show the devices and the driver, CUDA, cuDNN and libtorch versions");
  with_choices(cmd->add_option("--format,-f", o.format,
                               "table (default): for reading; json: every field"),
               {"table", "json"}, "format");
  cmd->add_flag("--json", o.json, "Deprecated: --format json")->group("");
  cmd->add_flag("--no-peak", o.no_peak,
                "Skip measuring each GPU's dense-matmul peak (fp32, tf32, bf16, fp16: a few "
                "seconds per GPU)");
  cmd->footer(
      "Examples:\n"
      "  gpubench info                          devices, versions, each GPU's matmul peak\n"
      "  gpubench info --no-peak --format json  the same without the peaks, as JSON");
}

int run_info(const InfoOptions& o, std::ostream& out, std::ostream& err) {
  const bool json = wants_json("info", o.format, o.json, err);
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(cuda_device_info(i));
  // The peaks a utilisation is a share of, measured rather than read off a datasheet.
  std::vector<Json> peaks;
  for (const auto& d : devices) {
    Json peak = Json::object();
    if (!o.no_peak) {
      const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index));
      for (const auto& kind : matmul_peak_kinds()) {
        const auto tflops = measure_matmul_peak_tflops(device, kind);
        peak[kind] = tflops ? Json(*tflops) : Json(nullptr);
      }
    }
    peaks.push_back(peak);
  }
  devices.push_back(cpu_device_info());
  peaks.push_back(Json::object());
  const Json software = software_versions();
  const Json gpubench = {{"version", version_info::kVersion},
                         {"git_commit", version_info::kGitCommit}};
  if (json) {
    Json list = Json::array();
    for (std::size_t i = 0; i < devices.size(); ++i) {
      Json d = devices[i].to_json();
      if (!peaks[i].empty()) d["matmul_peak_tflops"] = peaks[i];
      list.push_back(d);
    }
    out << dump_json(Json{{"gpubench", gpubench}, {"software", software}, {"devices", list}}, 2)
        << '\n';
    return kExitOk;
  }
  auto text = [](const Json& v) { return v.is_string() ? v.get<std::string>() : std::string("-"); };
  out << fmt::format("gpubench {} (commit {})\n", version_info::kVersion, version_info::kGitCommit);
  out << fmt::format("libtorch {}, CUDA runtime {}, cuDNN {}, driver {}{}\n\n",
                     text(software["libtorch"]), text(software["cuda_runtime"]),
                     text(software["cudnn"]), text(software["driver"]),
                     built_with_cuda() ? "" : " (CPU-only build)");
  out << fmt::format("data-parallel backends: {}\n", distributed::backend_support());
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : devices) {
    const DeviceRef ref = d.type == "cuda" ? DeviceRef::cuda(d.index) : DeviceRef::cpu();
    rows.push_back({ref.str(), d.name,
                    format_bytes(static_cast<double>(d.memory_bytes)),
                    std::to_string(d.multiprocessors),
                    d.compute_capability.empty() ? "-" : d.compute_capability});
  }
  render_grid(out, {"device", "name", "memory", "SMs / threads", "compute capability"}, rows, 2,
              GridStyle::kPlain);
  std::vector<std::vector<std::string>> peak_rows;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (peaks[i].empty()) continue;
    std::vector<std::string> row = {DeviceRef::cuda(devices[i].index).str()};
    for (const auto& kind : matmul_peak_kinds()) {
      row.push_back(peaks[i][kind].is_number() ? format_significant(peaks[i][kind].get<double>(), 3)
                                               : std::string("-"));
    }
    peak_rows.push_back(row);
  }
  if (!peak_rows.empty()) {
    out << "\nDense matmul peak, TFLOP/s (8192 x 8192 x 8192, best of five rounds):\n";
    std::vector<std::string> headers = {"device"};
    for (const auto& kind : matmul_peak_kinds()) headers.push_back(kind);
    render_grid(out, headers, peak_rows, 1, GridStyle::kPlain);
  }
  return kExitOk;
}

}  // namespace gpubench::cli
