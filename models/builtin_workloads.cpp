// The one explicit list of every architecture gpubench can run. Workloads (configs/models/*.yaml)
// select one of these by name; twins share code through configs.
#include "gpubench/registry.h"
#include "models/bert.h"
#include "models/unsupmt.h"

namespace gpubench {

void register_builtin_workloads(Registry& registry) {
  registry.add(models::bert_pretraining_architecture());  // bert-base, bert-base-mlm
  registry.add(models::unsupmt_architecture());           // unsupmt
}

}  // namespace gpubench
