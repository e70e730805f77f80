#include "models/workload_common.h"

#include <utility>

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

}  // namespace gpubench::models
