// What several commands share: the built-in configs.
#include "gpubench/train/registry.h"
#include "src/cli/internal.h"

namespace gpubench::cli {

ConfigStore builtin_store() {
  static const ConfigStore builtin = ConfigStore::load_builtin(builtin_registry());
  return builtin;
}

ConfigStore load_store(const std::string& config_file) {
  ConfigStore store = builtin_store();
  if (!config_file.empty()) store.apply_file(config_file);
  return store;
}

}  // namespace gpubench::cli
