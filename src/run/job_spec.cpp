#include "gpubench/run/job_spec.h"

#include "gpubench/measure/timing.h"
#include "gpubench/train/registry.h"

namespace gpubench {

namespace {
Json probes_json(const std::vector<ProbeRecord>& probes) {
  Json out = Json::array();
  for (const auto& p : probes) out.push_back(p.to_json());
  return out;
}
}  // namespace

Json MatmulPeak::to_json() const {
  return {{"device", device}, {"kind", kind}, {"tflops", tflops}, {"measured_by", measured_by}};
}

MatmulPeak MatmulPeak::from_json(const Json& json) {
  MatmulPeak p;
  p.device = json.at("device").get<std::string>();
  p.kind = json.at("kind").get<std::string>();
  p.tflops = json.at("tflops").get<double>();
  p.measured_by = json.value("measured_by", std::string());
  return p;
}

PeakChoice choose_matmul_peak(const std::optional<MatmulPeak>& given, const std::string& device,
                              const std::string& kind,
                              const std::function<std::optional<double>()>& measure) {
  PeakChoice choice;
  if (given && !kind.empty() && given->device == device && given->kind == kind &&
      given->tflops > 0) {
    choice.tflops = given->tflops;
    choice.source = "reused";
    choice.measured_by = given->measured_by;
    return choice;
  }
  choice.tflops = measure();
  if (choice.tflops) choice.source = "measured";
  return choice;
}

ComputeRecord compute_with_peak(double throughput, std::optional<double> flops_per_unit,
                                const std::string& kind, const PeakChoice& peak) {
  ComputeRecord out = compute_summary(throughput, flops_per_unit, kind, peak.tflops);
  if (out.peak_tflops) {
    out.peak_source = peak.source;
    if (!peak.measured_by.empty()) out.peak_measured_by = peak.measured_by;
  }
  return out;
}

ComputeRecord compute_with_peak(double throughput, const FlopsPerUnit& flops,
                                const std::string& kind, const PeakChoice& peak) {
  ComputeRecord out = compute_with_peak(throughput, flops.value, kind, peak);
  if (out.flops_per_unit) {
    if (!flops.source.empty()) out.flops_source = flops.source;
    out.flops_per_step = flops.per_step;
  }
  return out;
}

std::optional<MatmulPeak> measured_matmul_peak(const JobRecord& record, const std::string& device) {
  const ComputeRecord& c = record.compute;
  if (c.peak_source.value_or(std::string()) != "measured" || !c.peak_tflops || !c.peak_kind) {
    return std::nullopt;
  }
  MatmulPeak p;
  p.device = device;
  p.kind = *c.peak_kind;
  p.tflops = *c.peak_tflops;
  p.measured_by = record.model;
  if (!(p.tflops > 0) || p.kind.empty()) return std::nullopt;
  return p;
}

Json JobSpec::to_json() const {
  Json overlays_json = Json::array();
  for (const auto& [file, document] : overlays) {
    overlays_json.push_back({{"file", file}, {"document", document}});
  }
  return {{"model", model},
          {"phase", to_string(phase)},
          {"batch", batch},
          {"device", device},
          {"overlays", overlays_json},
          {"search_hint", search_hint ? search_hint->to_json() : Json(nullptr)},
          {"search_probes", probes_json(search_probes)},
          {"search_worker", search_worker},
          {"search_only", search_only},
          {"progress",
           {{"label", progress_label},
            {"started_unix", progress_started_unix},
            {"eta_unix", progress_eta_unix}}},
          {"distributed", distributed},
          {"matmul_peak", matmul_peak ? matmul_peak->to_json() : Json(nullptr)}};
}

JobSpec JobSpec::from_json(const Json& json) {
  JobSpec spec;
  spec.model = json.at("model").get<std::string>();
  spec.phase = require_worker_phase(json.at("phase").get<std::string>(), "phase");
  spec.batch = json.at("batch").get<int64_t>();
  spec.device = json.at("device").get<std::string>();
  for (const auto& overlay : json.at("overlays")) {
    spec.overlays.emplace_back(overlay.at("file").get<std::string>(), overlay.at("document"));
  }
  if (json.contains("search_hint")) spec.search_hint = SearchHint::from_json(json["search_hint"]);
  for (const auto& p : json.value("search_probes", Json::array())) {
    spec.search_probes.push_back(ProbeRecord::from_json(p));
  }
  spec.search_worker = json.value("search_worker", 0);
  spec.search_only = json.value("search_only", false);
  spec.distributed = json.value("distributed", Json());
  if (json.contains("matmul_peak") && json["matmul_peak"].is_object()) {
    spec.matmul_peak = MatmulPeak::from_json(json["matmul_peak"]);
  }
  if (json.contains("progress")) {
    spec.progress_label = json["progress"].value("label", std::string());
    spec.progress_started_unix = json["progress"].value("started_unix", 0.0);
    spec.progress_eta_unix = json["progress"].value("eta_unix", 0.0);
  }
  return spec;
}

ConfigStore resolve_store(const std::vector<ConfigOverlay>& overlays) {
  return resolve_store(overlays, ConfigStore::load_builtin(builtin_registry()));
}

ConfigStore resolve_store(const std::vector<ConfigOverlay>& overlays, ConfigStore shipped) {
  for (const auto& [file, document] : overlays) shipped.apply_document(document, file);
  return shipped;
}

}  // namespace gpubench
