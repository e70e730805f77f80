// What the model files share: the registry entry (Architecture) of a step type with its
// parameter count, the count's two shapes, and the Adam updater of a network trained alone.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace gpubench::models {

/// Builds a workload's training step (Architecture::prepare).
using PrepareStep = std::function<std::unique_ptr<TrainStep>(const StepContext& ctx)>;
/// Counts a workload's trainable parameters by network (Architecture::count_parameters).
using CountParameters = std::function<std::map<std::string, int64_t>(const Params& model)>;

/// The registry entry `name`, whose steps `prepare` builds and whose parameters `count` counts.
Architecture make_architecture(std::string name, std::string summary, ParamSchema model_schema,
                               ParamSchema optimizer_schema, PrepareStep prepare,
                               CountParameters count);

/// The registry entry `name`, whose step is `Step(ctx)`.
template <typename Step>
Architecture make_architecture(std::string name, std::string summary, ParamSchema model_schema,
                               ParamSchema optimizer_schema, CountParameters count) {
  return make_architecture(
      std::move(name), std::move(summary), std::move(model_schema), std::move(optimizer_schema),
      [](const StepContext& ctx) -> std::unique_ptr<TrainStep> {
        return std::make_unique<Step>(ctx);
      },
      std::move(count));
}

/// The trainable parameters of a model, or the sum over models that train as one, as "total".
/// Takes module holders (NasNet, not NasNetImpl).
template <typename... Models>
std::map<std::string, int64_t> total_parameters(const Models&... models) {
  return {{"total", (count_trainable(models->parameters()) + ...)}};
}

/// A GAN's trainable parameters, by network ("generator", "discriminator").
template <typename Generator, typename Discriminator>
std::map<std::string, int64_t> gan_parameters(const Generator& generator,
                                              const Discriminator& discriminator) {
  return {{"generator", count_trainable(generator->parameters())},
          {"discriminator", count_trainable(discriminator->parameters())}};
}

/// Adam (train::adam_options of ctx.optimizer) over every parameter of `module`, without weight
/// decay, clipping or schedule: each GAN network's own updater.
train::Updater adam_updater(const torch::nn::Module& module, const StepContext& ctx);

}  // namespace gpubench::models
