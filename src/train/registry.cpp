#include "gpubench/train/registry.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"

#include <torch/torch.h>

namespace gpubench {

void Registry::add(Architecture architecture) {
  const std::string name = architecture.name;
  if (!entries_.emplace(name, std::move(architecture)).second) {
    throw std::logic_error("architecture registered twice: " + name);
  }
}

const Architecture& Registry::get(const std::string& name) const {
  auto found = entries_.find(name);
  if (found == entries_.end()) {
    throw UnknownWorkloadError(fmt::format("unknown architecture '{}'{}; known: {}", name,
                                           did_you_mean(name, names()), join(names(), ", ")));
  }
  return found->second;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& entry : entries_) out.push_back(entry.first);
  return out;
}

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    register_builtin_workloads(r);
    return r;
  }();
  return registry;
}

int64_t count_trainable(const std::vector<torch::Tensor>& parameters) {
  int64_t total = 0;
  for (const auto& p : parameters) {
    if (p.requires_grad()) total += p.numel();
  }
  return total;
}

}  // namespace gpubench
