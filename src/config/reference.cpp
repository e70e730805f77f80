#include "gpubench/config/reference.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/precision.h"
#include "gpubench/base/strings.h"

namespace gpubench {

namespace {
std::vector<double> read_row_values(const Json& value, const Where& where, std::size_t count) {
  if (!value.is_array() || value.size() != count) {
    throw_bad_value(where, fmt::format("a list of {} numbers, one per GPU", count), value);
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    out.push_back(read_number(value[i], {where.file, fmt::format("{}[{}]", where.path, i)}, 0));
  }
  return out;
}
}  // namespace

ReferenceTable ReferenceTable::parse(const Json& document, const Where& where) {
  check_keys(document, where, {"source", "normalize_to", "gpus", "models"});
  ReferenceTable table;
  table.source_ = read_string(document.value("source", Json("")), where.at("source"));

  const Json& gpus = require_key(document, "gpus", where);
  if (!gpus.is_array() || gpus.empty()) throw_bad_value(where.at("gpus"), "a list of GPUs", gpus);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const Where at{where.file, fmt::format("gpus[{}]", i)};
    check_keys(gpus[i], at, {"id", "name", "memory_gb", "price_usd"});
    ReferenceGpu gpu;
    gpu.id = read_string(require_key(gpus[i], "id", at), at.at("id"));
    gpu.name = read_string(require_key(gpus[i], "name", at), at.at("name"));
    gpu.memory_gb = read_number(require_key(gpus[i], "memory_gb", at), at.at("memory_gb"), 0);
    gpu.price_usd = read_number(gpus[i].value("price_usd", Json(0)), at.at("price_usd"), 0);
    table.gpus_.push_back(gpu);
  }

  const std::string baseline = read_choice(require_key(document, "normalize_to", where),
                                           where.at("normalize_to"), table.gpu_ids());
  table.baseline_ = *table.gpu_index(baseline);

  const Json& rows = require_key(document, "models", where);
  if (!rows.is_array()) throw_bad_value(where.at("models"), "a list of model rows", rows);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Where at{where.file, fmt::format("models[{}]", i)};
    check_keys(rows[i], at,
               {"row", "family", "batch_unit", "throughput_unit", "max_batch", "throughput",
                "precision", "precision_evidence"});
    ReferenceRow row;
    row.model = read_string(require_key(rows[i], "row", at), at.at("row"));
    row.family =
        read_choice(require_key(rows[i], "family", at), at.at("family"), {"image", "language"});
    row.batch_unit = read_string(require_key(rows[i], "batch_unit", at), at.at("batch_unit"));
    row.throughput_unit =
        read_string(require_key(rows[i], "throughput_unit", at), at.at("throughput_unit"));
    row.max_batch =
        read_row_values(require_key(rows[i], "max_batch", at), at.at("max_batch"), gpus.size());
    row.throughput =
        read_row_values(require_key(rows[i], "throughput", at), at.at("throughput"), gpus.size());
    if (rows[i].contains("precision")) {
      row.precision = read_choice(rows[i]["precision"], at.at("precision"), precision_names());
    }
    if (rows[i].contains("precision_evidence")) {
      row.precision_evidence =
          read_string(rows[i]["precision_evidence"], at.at("precision_evidence"));
    }
    GPUBENCH_CHECK(row.precision == "fp32" || !row.precision_evidence.empty(), ConfigError,
                   "{}: a 2020 precision other than fp32 needs precision_evidence (why the "
                   "numbers point to it)",
                   at.at("precision").str());
    GPUBENCH_CHECK(row.throughput[table.baseline_] > 0, ConfigError,
                   "{}: the baseline GPU '{}' needs a throughput above 0 to normalize against",
                   at.at("throughput").str(), baseline);
    table.rows_.push_back(row);
  }
  return table;
}

const ReferenceRow* ReferenceTable::find_row(const std::string& model) const {
  for (const auto& row : rows_) {
    if (row.model == model) return &row;
  }
  return nullptr;
}

std::optional<std::size_t> ReferenceTable::gpu_index(const std::string& id) const {
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    if (gpus_[i].id == id) return i;
  }
  return std::nullopt;
}

std::vector<std::string> ReferenceTable::gpu_ids() const {
  std::vector<std::string> out;
  for (const auto& gpu : gpus_) out.push_back(gpu.id);
  return out;
}

double ReferenceTable::normalized(const ReferenceRow& row, std::size_t gpu) const {
  return normalized_score(row.throughput.at(gpu), baseline_throughput(row));
}

namespace {
std::optional<double> read_optional_number(const Json& row, const char* key, const Where& at) {
  if (!row.contains(key) || row[key].is_null()) return std::nullopt;
  return read_number(row[key], at.at(key), 0);
}

std::string read_optional_string(const Json& row, const char* key, const Where& at) {
  if (!row.contains(key) || row[key].is_null()) return "";
  return read_string(row[key], at.at(key));
}
}  // namespace

std::vector<CardNumber> parse_card_numbers(const Json& document, const Where& where) {
  check_keys(document, where, {"schema", "schema_version", "generated_by", "source", "numbers"});
  GPUBENCH_CHECK(document.value("schema", Json("")) == "gpubench-cards" &&
                     document.value("schema_version", Json(0)) == 1,
                 ConfigError, "{}: expected schema gpubench-cards, version 1", where.str());
  const Json& rows = require_key(document, "numbers", where);
  if (!rows.is_array()) throw_bad_value(where.at("numbers"), "a list of numbers", rows);
  std::vector<CardNumber> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    const Where at{where.file, fmt::format("numbers[{}]", i)};
    check_keys(row, at,
               {"card", "memory_bytes", "model", "precision", "batch_source", "batch",
                "throughput", "throughput_unit", "created_utc", "record", "sm_clock_mhz_median",
                "power_limit_w", "throttled", "driver", "cuda_runtime", "libtorch"});
    CardNumber n;
    n.card = read_string(require_key(row, "card", at), at.at("card"));
    n.memory_bytes = read_int(row.value("memory_bytes", Json(0)), at.at("memory_bytes"), 0);
    n.model = read_string(require_key(row, "model", at), at.at("model"));
    n.precision = read_choice(require_key(row, "precision", at), at.at("precision"),
                              precision_names());
    n.batch_source = read_string(require_key(row, "batch_source", at), at.at("batch_source"));
    n.batch = read_int(require_key(row, "batch", at), at.at("batch"), 1);
    n.throughput = read_number(require_key(row, "throughput", at), at.at("throughput"), 0);
    GPUBENCH_CHECK(n.throughput > 0, ConfigError, "{}: a recorded throughput must be above 0",
                   at.at("throughput").str());
    n.throughput_unit =
        read_string(require_key(row, "throughput_unit", at), at.at("throughput_unit"));
    n.created_utc = read_optional_string(row, "created_utc", at);
    n.record = read_string(require_key(row, "record", at), at.at("record"));
    n.sm_clock_mhz_median = read_optional_number(row, "sm_clock_mhz_median", at);
    n.power_limit_w = read_optional_number(row, "power_limit_w", at);
    n.throttled = row.contains("throttled") && read_bool(row["throttled"], at.at("throttled"));
    n.driver = read_optional_string(row, "driver", at);
    n.cuda_runtime = read_optional_string(row, "cuda_runtime", at);
    n.libtorch = read_optional_string(row, "libtorch", at);
    out.push_back(std::move(n));
  }
  return out;
}

double normalized_score(double throughput, double baseline_throughput) {
  return baseline_throughput > 0 ? throughput / baseline_throughput : 0.0;
}

}  // namespace gpubench
