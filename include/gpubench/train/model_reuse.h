// One model built once per worker and reused by the max-batch search's probes.
//
// A probe builds its whole training step: the model, the optimizer, the batch. For the language
// models the build is mostly the weights' initialization on the host (torch's CPU generator
// draws every value serially): 2 s for bert-base, 4-5 s for transformer-big, 7 s for BERT-large
// (mt-dnn) on the H200's host, up to half of their search. Inside a ModelReuse scope (the runner
// opens one around a worker's probes) build_model() keeps the first build of each model on the
// host side as initialized and, at the next build with the same key, hands out the same module
// with those initial parameters and buffers copied back and the host generator where the fresh
// build left it. A probe then trains exactly what a fresh build would, from the same device
// memory (park() drops the previous probe's gradients), in a fraction of the time. Outside a
// scope (the timed run, tests, the CPU smoke runs) build_model() is a plain build.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench::train {

class ModelReuse {
 public:
  /// Opens the scope: builds from now on are kept and reused. Scopes do not nest.
  ModelReuse();
  /// Drops every kept model (and its device memory).
  ~ModelReuse();
  ModelReuse(const ModelReuse&) = delete;
  ModelReuse& operator=(const ModelReuse&) = delete;

  static bool active();
  /// Drops the gradients of every kept model: call it once a probe's step is destroyed, so
  /// that between probes the device holds the kept weights and nothing else.
  static void park();
  /// Builds handed out from a kept model in this scope.
  static int64_t reused();

  /// A kept model: the module, its initial parameters and buffers (host copies, in the order
  /// of named_parameters() then named_buffers()), and the host generator's state after its
  /// fresh build.
  struct Kept {
    std::shared_ptr<torch::nn::Module> module;
    std::vector<torch::Tensor> initial;
    torch::Tensor generator_state;
  };
  /// The kept model of `key`, restored to its initial state on `device` (nullptr: none yet).
  static std::shared_ptr<torch::nn::Module> take(const std::string& key,
                                                 const torch::Device& device);
  /// Keeps `module`, just built on the host, under `key`.
  static void keep(const std::string& key, std::shared_ptr<torch::nn::Module> module);
};

/// The key of a build: the architecture's name for what is built, the model parameters (their
/// JSON) and the seed.
std::string reuse_key(const std::string& what, const std::string& model_json, uint64_t seed);

/// A model built by `make()` (on the host, after torch::manual_seed(seed) when a seed is given),
/// moved to `device` and in training mode; inside a ModelReuse scope the kept build of `key`
/// when there is one (see above). `Holder` is the model's torch::nn::ModuleHolder.
template <class Holder, class Make>
Holder build_model(const std::string& key, const torch::Device& device,
                   std::optional<uint64_t> seed, Make&& make) {
  if (seed) torch::manual_seed(*seed);
  using Impl = typename Holder::ContainedType;
  if (ModelReuse::active()) {
    if (auto kept = ModelReuse::take(key, device)) {
      Holder model(std::dynamic_pointer_cast<Impl>(kept));
      model->train();
      return model;
    }
  }
  Holder model = make();
  if (ModelReuse::active()) ModelReuse::keep(key, model.ptr());
  model->to(device);
  model->train();
  return model;
}

}  // namespace gpubench::train
