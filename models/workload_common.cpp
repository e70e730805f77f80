#include "models/workload_common.h"

#include <utility>
#include <vector>

namespace gpubench::models {

Architecture make_architecture(std::string name, std::string summary, ParamSchema model_schema,
                               ParamSchema optimizer_schema, PrepareStep prepare,
                               CountParameters count) {
  Architecture a;
  a.name = std::move(name);
  a.summary = std::move(summary);
  a.model_schema = std::move(model_schema);
  a.optimizer_schema = std::move(optimizer_schema);
  a.prepare = std::move(prepare);
  a.count_parameters = std::move(count);
  return a;
}

train::Updater adam_updater(const torch::nn::Module& module, const StepContext& ctx) {
  std::vector<train::ParamGroup> groups{{module.parameters(), 0.0}};
  return train::Updater(train::make_adam(std::move(groups), ctx.optimizer), ctx.precision,
                        ctx.device);
}

}  // namespace gpubench::models
