#include "gpubench/train/model_reuse.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

namespace gpubench::train {
namespace {

struct Scope {
  std::map<std::string, ModelReuse::Kept> kept;
  int64_t reused = 0;
};

/// The open scope (one per process: a worker runs one search at a time).
std::unique_ptr<Scope>& scope() {
  static std::unique_ptr<Scope> s;
  return s;
}

/// Parameters then buffers, in module order.
std::vector<torch::Tensor> state_of(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters(/*recurse=*/true)) out.push_back(p);
  for (const auto& b : module.buffers(/*recurse=*/true)) out.push_back(b);
  return out;
}

}  // namespace

ModelReuse::ModelReuse() {
  TORCH_CHECK(!scope(), "ModelReuse scopes do not nest");
  scope() = std::make_unique<Scope>();
}

ModelReuse::~ModelReuse() { scope().reset(); }

bool ModelReuse::active() { return static_cast<bool>(scope()); }

int64_t ModelReuse::reused() { return scope() ? scope()->reused : 0; }

void ModelReuse::park() {
  if (!scope()) return;
  for (auto& [key, kept] : scope()->kept) {
    for (auto& p : kept.module->parameters(/*recurse=*/true)) {
      if (p.grad().defined()) p.mutable_grad().reset();
    }
  }
}

void ModelReuse::keep(const std::string& key, std::shared_ptr<torch::nn::Module> module) {
  TORCH_CHECK(scope(), "ModelReuse::keep outside a scope");
  Kept kept;
  {
    torch::NoGradGuard no_grad;
    for (const auto& t : state_of(*module)) {
      kept.initial.push_back(t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
    }
  }
  auto generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    kept.generator_state = generator.get_state();
  }
  kept.module = std::move(module);
  scope()->kept[key] = std::move(kept);
}

std::shared_ptr<torch::nn::Module> ModelReuse::take(const std::string& key,
                                                    const torch::Device& device) {
  if (!scope()) return nullptr;
  auto it = scope()->kept.find(key);
  if (it == scope()->kept.end()) return nullptr;
  Kept& kept = it->second;
  park();  // no gradient of an earlier probe survives into this one
  kept.module->to(device);
  const auto current = state_of(*kept.module);
  TORCH_CHECK(current.size() == kept.initial.size(), "ModelReuse: '", key,
              "' changed its parameters or buffers since it was kept");
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < current.size(); ++i) current[i].copy_(kept.initial[i]);
  }
  auto generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(kept.generator_state);
  }
  ++scope()->reused;
  return kept.module;
}

std::string reuse_key(const std::string& what, const std::string& model_json, uint64_t seed) {
  return what + "|" + model_json + "|" + std::to_string(seed);
}

}  // namespace gpubench::train
