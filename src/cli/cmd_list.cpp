// `gpubench list`: the workloads, or one resolved config (--config-dump).
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/report/reporter.h"
#include "src/cli/internal.h"

#include <CLI/CLI.hpp>

#include <ostream>

namespace gpubench::cli {

namespace {

int64_t total_target(const ModelConfig& m) {
  int64_t total = 0;
  for (const auto& [network, count] : m.trainable_params) total += count;
  return total;
}

std::string params_text(const ModelConfig& m) {
  if (m.trainable_params.size() == 1) return with_thousands(total_target(m));
  std::vector<std::string> parts;
  for (const auto& [network, count] : m.trainable_params) {
    parts.push_back(fmt::format("{} {}", network, with_thousands(count)));
  }
  return join(parts, " + ");
}

}  // namespace

void setup_list(CLI::App& app, ListOptions& o) {
  auto* cmd = app.add_subcommand("list", "List the workloads with units and parameter counts");
  with_choices(cmd->add_option("--format,-f", o.format,
                               "table (default): a line per workload; json: every field"),
               {"table", "json"}, "format");
  cmd->add_flag("--json", o.json, "Deprecated: --format json")->group("");
  cmd->add_option("--config", o.config_file, "Overlay a YAML or JSON config first")
      ->type_name("FILE");
  cmd->add_option("--config-dump", o.config_dump,
                  "Print the resolved config of one workload (what a run uses), as a document "
                  "that --config takes back")
      ->type_name("MODEL");
  cmd->footer(
      "Examples:\n"
      "  gpubench list                            the workloads, units, parameter counts\n"
      "  gpubench list --format json              the same, every field as JSON\n"
      "  gpubench list --config-dump bert-base    the config a run of bert-base uses");
}

int run_list(const ListOptions& o, std::ostream& out, std::ostream& err) {
  const bool json = wants_json("list", o.format, o.json, err);
  const ConfigStore store = load_store(o.config_file);
  if (!o.config_dump.empty()) {
    // The settings alone, so that the dump reads back as a --config (a single workload's keys
    // with `name:` at the top); where they came from goes to stderr.
    Json dump = store.model(o.config_dump).to_json();
    const Json sources = dump.value("sources", Json::array());
    dump.erase("sources");
    dump.erase("modified");
    std::vector<std::string> from;
    for (const auto& s : sources) from.push_back(s.get<std::string>());
    if (!from.empty()) err << "gpubench: " << o.config_dump << " from " << join(from, ", ") << '\n';
    out << dump_json(dump, 2) << '\n';
    return kExitOk;
  }
  if (json) {
    Json list = Json::array();
    for (const auto& name : store.model_names()) {
      const ModelConfig& m = store.model(name);
      Json params = Json::object();
      for (const auto& [network, count] : m.trainable_params) params[network] = count;
      list.push_back(
          {{"name", m.name},
           {"family", m.family},
           {"architecture", m.architecture},
           {"batch_unit", m.batch_unit},
           {"throughput_unit", m.throughput_unit},
           {"trainable_params", params},
           {"trainable_params_total", total_target(m)},
           {"reference_2020", m.reference_2020 ? Json(m.reference_2020->row) : Json(nullptr)},
           {"description", m.description}});
    }
    out << dump_json(list, 2) << '\n';
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& name : store.model_names()) {
    const ModelConfig& m = store.model(name);
    rows.push_back({m.name, m.family, m.batch_unit, m.throughput_unit,
                    m.reference_2020 ? m.reference_2020->row : "(peer twin)", params_text(m)});
  }
  render_grid(out,
              {"model", "family", "batch unit", "throughput unit", "2020 row", "trainable params"},
              rows, 5, GridStyle::kPlain);
  return kExitOk;
}

}  // namespace gpubench::cli
