// A run against gpubench's own recorded numbers for the same card (issue 46): the current
// numbers of docs/results ship in the binary (configs/measured/cards.json); a timed job on a card
// of the same name and memory, at the same workload, precision and batch source, gets the ratio
// of its throughput to the recorded one, and one more than 10% below gets the likely causes
// (what its record and the recorded one say differs) and the `gpubench compare` command that
// sets the two records side by side.
#include "gpubench/report/reporter.h"

#include "gpubench/base/strings.h"
#include "src/report/sections.h"

#include <fmt/format.h>

#include <cmath>

namespace gpubench {

namespace {

/// A text of a record's environment at `path` ("" where there is none).
std::string software_text(const JobRecord& job, const char* key) {
  const Json& env = job.environment;
  if (!env.is_object() || !env.contains("software") || !env["software"].is_object()) return "";
  const Json& software = env["software"];
  return software.contains(key) && software[key].is_string() ? software[key].get<std::string>()
                                                             : std::string();
}

bool same_memory(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return true;  // not known on one side: the name decides
  return std::fabs(static_cast<double>(a - b)) <= 0.02 * static_cast<double>(b);
}

/// `path` as one shell word.
std::string shell_word(const std::string& path) {
  const bool plain = !path.empty() && path.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_./-+=:,@%") == std::string::npos;
  if (plain) return path;
  std::string out = "'";
  for (char ch : path) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

/// What differs between a job and the recorded number it fell short of.
std::vector<std::string> likely_causes(const JobRecord& job, const CardNumber& recorded) {
  std::vector<std::string> causes;
  const std::optional<double> clock = job.clocks.sm_clock_median_mhz();
  if (clock && recorded.sm_clock_mhz_median && *clock < 0.97 * *recorded.sm_clock_mhz_median) {
    causes.push_back(fmt::format(
        "clocks: the SM clock's median was {:.0f} MHz against {:.0f} MHz recorded (a lower "
        "application clock, or power or thermal limits)",
        *clock, *recorded.sm_clock_mhz_median));
  }
  const std::optional<double> limit = job.clocks.power_limit_w;
  if (limit && recorded.power_limit_w && *limit < 0.95 * *recorded.power_limit_w) {
    causes.push_back(fmt::format(
        "power cap: a limit of {:.0f} W against {:.0f} W recorded (nvidia-smi -pl, or a PCIe "
        "card against an SXM one)",
        *limit, *recorded.power_limit_w));
  }
  if (throttled(job)) {
    const std::string note = throttle_note(job);
    causes.push_back("throttling: " + (note.empty() ? std::string("clocks.throttled") : note));
  }
  if (job.batch > 0 && static_cast<double>(job.batch) < 0.95 * static_cast<double>(recorded.batch)) {
    causes.push_back(fmt::format(
        "memory: a max batch of {} against {} recorded (less free memory: another process on "
        "the GPU, ECC, a memory cap)",
        job.batch, recorded.batch));
  }
  const std::pair<const char*, const std::string*> software[] = {
      {"driver", &recorded.driver},
      {"cuda_runtime", &recorded.cuda_runtime},
      {"libtorch", &recorded.libtorch}};
  for (const auto& [key, theirs] : software) {
    const std::string ours = software_text(job, key);
    if (!ours.empty() && !theirs->empty() && ours != *theirs) {
      causes.push_back(fmt::format("{}: {} against {} recorded",
                                   std::string(key) == "cuda_runtime" ? "CUDA" : key, ours,
                                   *theirs));
    }
  }
  if (causes.empty()) {
    causes.push_back(
        "none of clocks, power cap, throttling, batch or driver differs in the records: look "
        "for other work on the GPU or the host, a slower host CPU (for workloads the host holds "
        "back), or a PCIe card against an SXM one");
  }
  return causes;
}

}  // namespace

std::vector<RecordedComparison> compare_with_recorded(const std::vector<JobRecord>& jobs,
                                                      const ReferenceTable& reference) {
  std::vector<RecordedComparison> out;
  const std::string yours = reference.results_file().empty()
                                ? std::string("YOUR_RESULTS")
                                : shell_word(reference.results_file());
  for (const auto& job : jobs) {
    if (!job.ok() || job.search_only || job.emulated || job.memory_cap_gib || job.data_parallel ||
        job.device.type != "cuda" || !(job.throughput > 0)) {
      continue;
    }
    for (const auto& n : reference.card_numbers()) {
      if (n.card != job.device.name || n.model != job.model || n.precision != job.precision ||
          n.batch_source != job.batch_source || !same_memory(job.device.memory_bytes,
                                                             n.memory_bytes) ||
          !(n.throughput > 0)) {
        continue;
      }
      RecordedComparison c;
      c.job = &job;
      c.recorded = &n;
      c.ratio = job.throughput / n.throughput;
      c.below = c.ratio < kRecordedShortfall;
      if (c.below) c.causes = likely_causes(job, n);
      c.compare_command =
          fmt::format("gpubench compare {} {}", shell_word("docs/results/" + n.record), yours);
      out.push_back(std::move(c));
      break;
    }
  }
  return out;
}

namespace report {

std::optional<Section> recorded_section(const ReportView& view, const ReferenceTable& reference) {
  const std::vector<RecordedComparison> matches = compare_with_recorded(view.jobs, reference);
  if (matches.empty()) return std::nullopt;
  Section s;
  s.id = "recorded";
  s.title = "Against gpubench's recorded numbers for the same card (docs/results)";
  s.headers = {"model",      "device",   "precision", "batch", "recorded batch",
               "throughput", "recorded", "ratio",     "verdict"};
  s.left_columns = 3;
  for (const auto& m : matches) {
    const JobRecord& j = *m.job;
    std::string verdict = "within 10%";
    if (m.below) {
      verdict = fmt::format("{:.0f}% below (!)", 100 * (1 - m.ratio));
    } else if (m.ratio > 1 / kRecordedShortfall) {
      verdict = fmt::format("{:.0f}% above", 100 * (m.ratio - 1));
    }
    s.rows.push_back({j.model, j.device.name, j.precision, std::to_string(j.batch),
                      std::to_string(m.recorded->batch),
                      fmt::format("{} {}", format_significant(j.throughput, 4), j.throughput_unit) +
                          throttle_mark(j),
                      format_significant(m.recorded->throughput, 4),
                      fmt::format("{:.2f}", m.ratio), verdict});
    if (!m.below) continue;
    s.notes.push_back(fmt::format(
        "{} {} on {}: {:.0f}% below gpubench's {} {} ({}); likely causes: {}; compare the two "
        "records in detail (docs/results is in gpubench's source tree): {}",
        j.model, j.precision, j.device.name, 100 * (1 - m.ratio),
        format_significant(m.recorded->throughput, 4), m.recorded->throughput_unit,
        m.recorded->created_utc.substr(0, 10), join(m.causes, "; "), m.compare_command));
  }
  s.notes.insert(
      s.notes.begin(),
      "ratio: the throughput over gpubench's latest full max-batch job on a card of the same "
      "name and memory, at the same workload, precision and batch source (shipped in "
      "configs/measured/cards.json); (!): more than 10% below");
  return s;
}

}  // namespace report

}  // namespace gpubench
