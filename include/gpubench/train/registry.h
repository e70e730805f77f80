// The registry of architectures. models/builtin_workloads.cpp is the one explicit list that
// fills it (no static-initialisation registration: it silently drops entries in static
// libraries, google/benchmark #1498).
#pragma once

#include "gpubench/train/workload.h"

#include <map>
#include <string>
#include <vector>

namespace gpubench {

class Registry {
 public:
  /// Adds an architecture; throws std::logic_error on a duplicate name.
  void add(Architecture architecture);
  /// Throws UnknownWorkloadError naming the closest match.
  const Architecture& get(const std::string& name) const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  /// Sorted names.
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Architecture> entries_;
};

/// The registry holding every built-in architecture (built once).
const Registry& builtin_registry();

/// Defined in models/builtin_workloads.cpp: the single list of all architectures.
void register_builtin_workloads(Registry& registry);

}  // namespace gpubench
