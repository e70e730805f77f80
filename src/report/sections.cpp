#include "src/report/sections.h"

#include "gpubench/base/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace gpubench::report {

namespace {

std::string reference_cell(const ReferenceTable& reference, const ReferenceRow* row,
                           std::size_t gpu) {
  if (!row) return "";
  if (row->throughput[gpu] <= 0) return "OOM";
  return fmt::format("{} ({})", format_significant(reference.normalized(*row, gpu)),
                     format_number(row->max_batch[gpu]));
}

std::string cap_text(double gib) { return format_number(gib) + " GiB"; }

std::string memory_gb_text(double gb) { return format_number(gb) + " GB"; }

/// Whether the capped records of `device` at `precision` (any, when empty) took what the process
/// holds outside the allocator off the cap (memory.cap), or capped the allocator alone (older
/// records): {some did, some did not}.
std::pair<bool, bool> cap_kinds(const std::vector<JobRecord>& jobs, const std::string& device,
                                const std::string& precision) {
  bool whole = false, allocator_only = false;
  for (const auto& job : jobs) {
    if (!job.memory_cap_gib || job.device.type != "cuda") continue;
    if (!device.empty() && (job.device.name != device || job.precision != precision)) continue;
    (job.memory.cap ? whole : allocator_only) = true;
  }
  return {whole, allocator_only};
}

const char* kWholeCardCapNote =
    "the cap stands for the whole card: what the process held outside PyTorch's caching "
    "allocator when the cap was set (the CUDA context, cuBLAS and cuDNN kernels and handles; "
    "memory.cap.outside_allocator_bytes in the record) was taken off it, and the allocator "
    "got the rest; kernels loaded later still come on top, so a real card may fit slightly less";
const char* kAllocatorOnlyCapNote =
    "the cap limited PyTorch's caching allocator only (records from before the cap took the "
    "context off it): the CUDA context and the loaded kernels, about 0.5-0.7 GiB on an H200, "
    "came on top, so a real card of that size fits less";

}  // namespace

std::string modification_text(const JobRecord& job) {
  std::vector<std::string> parts;
  for (const std::string& what : job.modifications()) {
    if (what == "config") {
      parts.push_back("a user config changed its model or optimizer");
      continue;
    }
    const Json& variables = job.environment.value("variables", Json::object());
    const Json value = variables.is_object() ? variables.value(what, Json()) : Json();
    parts.push_back(value.is_string() ? fmt::format("{}={}", what, value.get<std::string>())
                                      : what + " set");
  }
  return join(parts, "; ");
}

std::string normalized_text(const RunCell& cell) {
  if (!cell.present) return "";
  if (cell.status == JobStatus::no_fit) return "OOM";
  if (cell.status != JobStatus::ok) return to_string(cell.status);
  if (!cell.normalized) return cell.modified ? "modified" : "n/a";
  return fmt::format("{} ({})", format_significant(*cell.normalized), cell.batch);
}

std::string max_batch_text(const MaxBatchCell& cell) {
  if (!cell.present) return "";
  if (cell.max_batch) return std::to_string(*cell.max_batch);
  if (cell.status == JobStatus::no_fit) return "OOM";
  if (cell.status == JobStatus::ok) return "-";
  return to_string(cell.status);
}

std::string reference_batch_text(const ReferenceRow& row, std::size_t gpu) {
  if (row.throughput[gpu] <= 0) return "OOM";
  return format_number(row.max_batch[gpu]);
}

std::string reference_tier_name(const ReferenceTier& tier, const ReferenceTable& reference) {
  std::vector<std::string> names;
  for (std::size_t g : tier.gpus) names.push_back(reference.gpus()[g].name);
  return fmt::format("{}: {}", memory_gb_text(tier.memory_gb), join(names, ", "));
}

std::string reference_tier_text(const ReferenceTier& tier, const ReferenceRow& row) {
  std::vector<std::string> values;
  for (std::size_t g : tier.gpus) {
    const std::string value = reference_batch_text(row, g);
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
  }
  return join(values, "/");
}

ReportView make_view(const std::vector<JobRecord>& jobs, const ReferenceTable& reference) {
  ReportView view;
  view.jobs = latest_records(jobs);
  view.superseded = jobs.size() - view.jobs.size();
  view.comparison = build_comparison(view.jobs, reference);
  view.summary = summarize_families(view.comparison, reference);
  view.tiers = build_memory_tiers(view.jobs, reference);
  return view;
}

Section normalized_section(const ReportView& view, const ReferenceTable& reference) {
  const Comparison& c = view.comparison;
  Section s;
  s.id = "normalized";
  s.title = fmt::format(
      "Training throughput normalized to the {} (Lambda 2020); max batch in parentheses",
      reference.baseline().name);
  s.headers = {"model", "unit"};
  for (const auto& run : c.runs) s.headers.push_back(run.label);
  for (const auto& gpu : reference.gpus()) s.headers.push_back(gpu.name);
  s.left_columns = 2;
  s.reference_from = 2 + c.runs.size();
  for (std::size_t r = 0; r < c.models.size(); ++r) {
    std::vector<std::string> row = {c.models[r], c.units[r]};
    // A 2020 row probably not measured in fp32 is marked, and said why under the table.
    if (c.reference[r] && c.reference[r]->precision != "fp32") {
      row.front() += " (!)";
      s.notes.push_back(fmt::format(
          "{} (!): its 2020 number was probably {}, not fp32 (see the like-for-like table)",
          c.models[r], c.reference[r]->precision));
    }
    for (const auto& cell : c.cells[r]) row.push_back(normalized_text(cell));
    for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
      row.push_back(reference_cell(reference, c.reference[r], g));
    }
    s.rows.push_back(row);
  }
  return s;
}

std::optional<Section> summary_section(const ReportView& view, const ReferenceTable& reference) {
  if (view.summary.empty()) return std::nullopt;
  const Comparison& c = view.comparison;
  Section s;
  s.id = "summary";
  s.title = fmt::format("Geometric mean of normalized throughput per family ({} = 1.00)",
                        reference.baseline().name);
  s.headers = {"family", "models"};
  for (const auto& run : c.runs) s.headers.push_back(run.label);
  for (const auto& gpu : reference.gpus()) s.headers.push_back(gpu.name);
  s.left_columns = 2;
  s.reference_from = 2 + c.runs.size();
  bool short_2020 = false;
  for (const auto& summary : view.summary) {
    std::string models = fmt::format("{} of {}", summary.models.size(),
                                     summary.models.size() + summary.missing.size());
    if (!summary.missing.empty()) models += " (not " + join(summary.missing, ", ") + ")";
    std::vector<std::string> row = {summary.family, models};
    for (const auto& mean : summary.runs) {
      row.push_back(mean && mean->value ? format_significant(*mean->value) : "");
    }
    for (const auto& mean : summary.reference) {
      std::string text = mean.value ? format_significant(*mean.value) : "OOM";
      if (mean.counted.size() < mean.of) {
        text += fmt::format(" ({} of {})", mean.counted.size(), mean.of);
        short_2020 = true;
      }
      row.push_back(text);
    }
    s.rows.push_back(row);
  }
  s.notes.push_back(
      "a row's means are over the models its runs measured OK (\"models\"; twins without a 2020 "
      "row have no normalized score and are not counted), the 2020 GPUs' over the same models, "
      "so a row compares like with like");
  if (short_2020) {
    s.notes.push_back(
        "(k of n): the 2020 GPU could not train the others (the post's 0*), so its mean leaves "
        "them out and is over k models");
  }
  return s;
}

std::optional<Section> max_batch_section(const ReportView& view,
                                         const ReferenceTable& reference) {
  const Comparison& c = view.comparison;
  if (c.models.empty()) return std::nullopt;
  Section s;
  s.id = "max-batch";
  s.title = "Max batch: the search's largest fitting batch beside the 2020 max batch";
  s.headers = {"model", "batch unit"};
  for (const auto& run : c.runs) s.headers.push_back(run.label);
  for (const auto& gpu : reference.gpus()) s.headers.push_back(gpu.name);
  s.left_columns = 2;
  s.reference_from = 2 + c.runs.size();
  bool fixed = false;
  for (std::size_t r = 0; r < c.models.size(); ++r) {
    std::vector<std::string> row = {c.models[r], c.batch_units[r]};
    for (const auto& cell : c.cells[r]) {
      MaxBatchCell max;
      max.present = cell.present;
      max.status = cell.status;
      max.max_batch = cell.max_batch;
      row.push_back(max_batch_text(max));
      fixed = fixed || row.back() == "-";
    }
    for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
      row.push_back(c.reference[r] ? reference_batch_text(*c.reference[r], g) : "");
    }
    s.rows.push_back(row);
  }
  if (fixed) s.notes.push_back("-: the batch was fixed (--batch, or the CPU's batch); no search");
  return s;
}

std::optional<Section> precision_section(const ReportView& view, const ReferenceTable& reference) {
  const Comparison& c = view.comparison;
  // Only where some 2020 row of the report was probably not fp32.
  bool marked = false;
  for (const auto* row : c.reference) marked = marked || (row && row->precision != "fp32");
  if (!marked) return std::nullopt;
  std::vector<std::string> devices;  // uncapped runs' devices, in column order
  for (const auto& run : c.runs) {
    if (run.memory_cap_gib) continue;
    if (std::find(devices.begin(), devices.end(), run.device) == devices.end()) {
      devices.push_back(run.device);
    }
  }
  Section s;
  s.id = "like-precision";
  s.title = fmt::format(
      "Like-for-like precision: each model scored by the run at the precision its 2020 number "
      "was probably measured in ({} = 1.00)",
      reference.baseline().name);
  s.headers = {"model", "2020 precision"};
  for (const auto& device : devices) s.headers.push_back(device);
  s.left_columns = 2;
  for (std::size_t r = 0; r < c.models.size(); ++r) {
    const ReferenceRow* row = c.reference[r];
    if (!row) continue;
    const bool mark = row->precision != "fp32";
    std::vector<std::string> cells = {c.models[r] + (mark ? " (!)" : ""), row->precision};
    for (const auto& device : devices) {
      std::string text = "-";
      for (std::size_t k = 0; k < c.runs.size(); ++k) {
        const RunColumn& run = c.runs[k];
        if (run.memory_cap_gib || run.device != device || run.precision != row->precision) continue;
        text = normalized_text(c.cells[r][k]);
        if (text.empty()) text = "-";
      }
      cells.push_back(text);
    }
    s.rows.push_back(cells);
    if (mark) {
      s.notes.push_back(fmt::format("{} (!): the 2020 number was probably {}: {}", c.models[r],
                                    row->precision, row->precision_evidence));
    }
  }
  s.notes.push_back(
      "the post states no precision; rows are fp32 unless configs/reference says why not. A "
      "cell is the score of that device's run at the row's precision, max batch in parentheses; "
      "-: no such run (run that precision, e.g. --precision amp-fp16)");
  return s;
}

std::optional<Section> cost_section(const ReportView& view, const ReferenceTable& reference) {
  if (!reference.has_measured_prices() || view.summary.empty()) return std::nullopt;
  const Comparison& c = view.comparison;
  Section s;
  s.id = "per-dollar";
  s.title = fmt::format(
      "Performance per dollar: geometric mean of normalized throughput per $1000 ({} at its "
      "2020 price = {})",
      reference.baseline().name, format_significant(1000.0 / reference.baseline().price_usd));
  s.headers = {"family", "models"};
  std::vector<std::size_t> priced;  // run columns with a price
  for (std::size_t k = 0; k < c.runs.size(); ++k) {
    if (const auto price = reference.measured_price(c.runs[k].device)) {
      priced.push_back(k);
      s.headers.push_back(fmt::format("{} (${})", c.runs[k].label, format_number(*price)));
    }
  }
  for (const auto& gpu : reference.gpus()) {
    s.headers.push_back(fmt::format("{} (${})", gpu.name, format_number(gpu.price_usd)));
  }
  s.left_columns = 2;
  s.reference_from = 2 + priced.size();
  auto per_k = [](const std::optional<double>& mean, double price) {
    if (!mean || price <= 0) return std::string("-");
    return format_significant(*mean / price * 1000.0);
  };
  for (const auto& summary : view.summary) {
    std::vector<std::string> row = {summary.family,
                                    fmt::format("{} of {}", summary.models.size(),
                                                summary.models.size() + summary.missing.size())};
    for (std::size_t k : priced) {
      const auto& mean = summary.runs[k];
      row.push_back(mean ? per_k(mean->value, *reference.measured_price(c.runs[k].device))
                         : std::string());
    }
    for (std::size_t g = 0; g < reference.gpus().size(); ++g) {
      row.push_back(per_k(summary.reference[g].value, reference.gpus()[g].price_usd));
    }
    s.rows.push_back(row);
  }
  s.notes.push_back(
      "prices: the 2020 GPUs' street prices as the post quotes them (configs/reference), the "
      "measured GPUs' as given with report --price; the means are the geometric-mean table's");
  return s;
}

std::vector<Section> memory_tier_sections(const ReportView& view,
                                          const ReferenceTable& reference) {
  std::vector<Section> sections;
  for (std::size_t i = 0; i < view.tiers.size(); ++i) {
    const MemoryTierTable& t = view.tiers[i];
    Section s;
    s.id = fmt::format("memory-tiers-{}", i + 1);
    s.title = fmt::format("Memory tiers, {}: max batch under an emulated memory cap", t.label);
    s.headers = {"model", "batch unit"};
    for (double cap : t.caps_gib) s.headers.push_back(cap_text(cap));
    if (t.has_uncapped) s.headers.push_back("uncapped");
    std::vector<std::string> tier_names;
    for (const auto& tier : t.reference_tiers) {
      s.headers.push_back("2020 " + memory_gb_text(tier.memory_gb));
      tier_names.push_back(reference_tier_name(tier, reference));
    }
    s.left_columns = 2;
    s.reference_from = 2 + t.caps_gib.size() + (t.has_uncapped ? 1 : 0);
    for (std::size_t m = 0; m < t.models.size(); ++m) {
      std::vector<std::string> row = {t.models[m], t.batch_units[m]};
      for (const auto& cell : t.cells[m]) row.push_back(max_batch_text(cell));
      for (const auto& tier : t.reference_tiers) {
        row.push_back(t.reference[m] ? reference_tier_text(tier, *t.reference[m]) : "");
      }
      s.rows.push_back(row);
    }
    const auto [whole, allocator_only] = cap_kinds(view.jobs, t.device, t.precision);
    if (whole) s.notes.push_back(std::string("emulated: ") + kWholeCardCapNote);
    if (allocator_only) s.notes.push_back(std::string("emulated: ") + kAllocatorOnlyCapNote);
    s.notes.push_back(
        "caps are in GiB (2^30 bytes); the 2020 post gives card memory in GB, but that memory is "
        "binary (an \"11 GB\" RTX 2080 Ti carries 11 GiB, of which the driver and the CUDA context "
        "take a part); each 2020 column is the memory size closest to a cap");
    s.notes.push_back(fmt::format(
        "2020 N GB: the 2020 max batch of the cards of that size ({}), a/b where they differ",
        join(tier_names, "; ")));
    if (t.has_uncapped) {
      s.notes.push_back(
          "uncapped: the search without a cap on the same device at the same precision");
    }
    sections.push_back(std::move(s));
  }
  return sections;
}

Section measured_section(const ReportView& view, bool with_message) {
  static const std::vector<std::string> kMeasured = {"model",
                                                     "device",
                                                     "precision",
                                                     "status",
                                                     "batch",
                                                     "throughput",
                                                     "normalized_score",
                                                     "step_time_ms_median",
                                                     "sm_clock_mhz_median",
                                                     "power_w_mean",
                                                     "units_per_joule",
                                                     "tflops",
                                                     "peak_share",
                                                     "peak_memory_bytes",
                                                     "search_seconds",
                                                     "wall_seconds"};
  std::vector<const ResultColumn*> columns;
  for (const auto& key : kMeasured) {
    for (const auto& column : result_columns()) {
      if (column.key == key) columns.push_back(&column);
    }
  }
  if (with_message) {
    for (const auto& column : result_columns()) {
      if (column.key == "message") columns.push_back(&column);
    }
  }
  Section s;
  s.id = "measured";
  s.title = "Measured";
  for (const auto* column : columns) {
    s.headers.push_back(column->key == "search_seconds" ? "search" : column->header);
  }
  s.left_columns = 4;
  for (const auto& job : view.jobs) {
    if (job.search_only) continue;
    std::vector<std::string> row;
    for (const auto* column : columns) {
      row.push_back(column->pretty ? column->pretty(job) : column->raw(job));
      if (column->key == "throughput") row.back() += throttle_mark(job);  // see report_notes
    }
    s.rows.push_back(row);
  }
  return s;
}

std::vector<std::string> report_notes(const ReportView& view) {
  std::vector<std::string> lines;
  std::set<std::string> seen;
  for (const auto& job : view.jobs) {
    if (job.emulated && !job.search_only && seen.insert("emulated").second) {
      const auto [whole, allocator_only] = cap_kinds(view.jobs, "", "");
      if (whole) {
        lines.push_back(std::string("@N GiB columns are emulated: ") + kWholeCardCapNote + ".");
      }
      if (allocator_only || !whole) {
        lines.push_back(std::string("@N GiB columns are emulated: ") + kAllocatorOnlyCapNote + ".");
      }
    }
    if (job.device.type == "cpu" && seen.insert("cpu").second) {
      lines.push_back(
          "CPU rows ran without a GPU at the config's small fixed batch (no search): "
          "they show the pipeline works, not GPU speed.");
    }
    if (const auto why = modification_text(job); !why.empty() &&
        seen.insert("modified:" + job.model + why).second) {
      lines.push_back(fmt::format("{}: modified ({}), so it is not compared with 2020", job.model,
                                  why));
    }
    if (!job.message.empty()) {
      std::string who = job.model;
      if (job.search_only && job.memory_cap_gib) {
        who += fmt::format(" (memory tier {})", cap_text(*job.memory_cap_gib));
      }
      lines.push_back(fmt::format("{}: {}", who, job.message));
    }
  }
  for (const auto& note : throttle_notes(view.jobs)) lines.push_back(note);
  if (view.superseded > 0) {
    lines.push_back(fmt::format(
        "{} earlier record{} replaced by a later one of the same job (same model, device, "
        "precision and memory cap: the last one read wins)",
        view.superseded, view.superseded == 1 ? " was" : "s were"));
  }
  return lines;
}

}  // namespace gpubench::report
