// The steps of `gpubench run` that turn its options into a suite: the workloads and their
// batches, the device or the data-parallel ranks, the memory tiers, and what a resume may change.
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/config/settings.h"
#include "gpubench/device/device.h"
#include "gpubench/device/device_ref.h"
#include "gpubench/distributed/environment.h"
#include "src/cli/internal.h"

#include <algorithm>
#include <ostream>

namespace gpubench::cli {

FixedBatches split_batches(const std::vector<std::string>& values) {
  FixedBatches out;
  for (const auto& value : values) {
    const std::size_t eq = value.find('=');
    if (eq == std::string::npos) {
      GPUBENCH_CHECK(!out.all, ConfigError,
                     "--batch: given twice without a workload ({} and {}); give one number, or "
                     "MODEL=N for each workload",
                     *out.all, value);
      out.all = std::stoll(value);
      continue;
    }
    const std::string model = value.substr(0, eq);
    GPUBENCH_CHECK(!out.by_model.count(model), ConfigError,
                   "--batch: {} has two batches ({} and {}); give one", terminal_safe(model),
                   out.by_model[model], value.substr(eq + 1));
    out.by_model[model] = std::stoll(value.substr(eq + 1));
  }
  return out;
}

Json data_parallel_plan(const RunOptions& o) {
  const auto env = distributed::rank_from_environment();
  GPUBENCH_CHECK(!o.world_size || *o.world_size >= 1, ConfigError,
                 "--world-size: expected a number of ranks >= 1, got '{}'",
                 o.world_size.value_or(0));
  GPUBENCH_CHECK(!o.rendezvous_timeout_s || *o.rendezvous_timeout_s > 0, ConfigError,
                 "--rendezvous-timeout: expected seconds > 0, got '{}'",
                 format_number(o.rendezvous_timeout_s.value_or(0)));
  distributed::DataParallelPlan dp;
  dp.rendezvous_timeout_s = o.rendezvous_timeout_s.value_or(300);
  if (!o.gpus.empty()) {
    GPUBENCH_CHECK(!o.gpu, ConfigError,
                   "--gpus and --gpu contradict each other: --gpus {} runs one rank per GPU, "
                   "--gpu {} one GPU; give one",
                   o.gpus, *o.gpu);
    GPUBENCH_CHECK(o.device != "cpu", ConfigError,
                   "--gpus and --device cpu contradict each other; for ranks on the CPU give "
                   "--device cpu --world-size N");
    GPUBENCH_CHECK(!env, ConfigError,
                   "--gpus under {} (RANK={}, WORLD_SIZE={}): each process is already one rank "
                   "on GPU LOCAL_RANK={}; drop --gpus",
                   env ? env->source : "", env ? env->rank : 0, env ? env->world_size : 0,
                   env ? env->local_rank : 0);
    const std::vector<int> gpus = distributed::parse_gpu_list(o.gpus, cuda_device_count());
    GPUBENCH_CHECK(built_with_cuda(), DeviceError,
                   "--gpus: this gpubench was built against a CPU-only libtorch (no CUDA, no "
                   "NCCL); use --device cpu --world-size N for ranks on the CPU");
    GPUBENCH_CHECK(!o.world_size || *o.world_size == static_cast<int>(gpus.size()), ConfigError,
                   "--world-size {} does not match --gpus {} ({} GPU{}); drop --world-size",
                   o.world_size.value_or(0), o.gpus, gpus.size(), gpus.size() == 1 ? "" : "s");
    dp.world_size = static_cast<int>(gpus.size());
    dp.backend = "nccl";
    for (int g : gpus) dp.devices.push_back(DeviceRef::cuda(g).str());
    return dp.to_json();
  }
  if (env) {
    GPUBENCH_CHECK(!o.world_size || *o.world_size == env->world_size, ConfigError,
                   "--world-size {} does not match the environment's world of {} ranks ({}: "
                   "{}={}); drop --world-size or start as many ranks",
                   *o.world_size, env->world_size, env->source,
                   env->source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE", env->world_size);
    GPUBENCH_CHECK(!o.gpu, ConfigError,
                   "--gpu under {}: each rank runs on GPU LOCAL_RANK ({} here); drop --gpu",
                   env->source, env->local_rank);
    dp.world_size = env->world_size;
    dp.environment = env;
    if (o.device == "cpu") {
      dp.backend = "gloo";
      dp.devices = {DeviceRef::cpu().str()};
    } else {
      const int count = cuda_device_count();
      // A process that sees one GPU (Slurm's --gpus-per-task 1 sets CUDA_VISIBLE_DEVICES) runs
      // on it whatever its LOCAL_RANK; one that sees several takes GPU LOCAL_RANK.
      const int gpu = count == 1 ? 0 : env->local_rank;
      GPUBENCH_CHECK(built_with_cuda() && gpu < count, DeviceError,
                     "{} rank {} runs on GPU LOCAL_RANK={}, and {} CUDA device{} visible here "
                     "(give --device cpu for ranks on the CPU)",
                     env->source, env->rank, env->local_rank,
                     count == 0 ? std::string("no") : fmt::format("only {}", count),
                     count == 1 ? " is" : "s are");
      dp.backend = "nccl";
      dp.devices = {DeviceRef::cuda(gpu).str()};
    }
    return dp.to_json();
  }
  if (!o.world_size) return Json();
  GPUBENCH_CHECK(o.device == "cpu", ConfigError,
                 "--world-size {} without --device cpu: ranks on GPUs are chosen with --gpus "
                 "(0,1,... or all); --world-size alone runs CPU ranks with --device cpu",
                 *o.world_size);
  GPUBENCH_CHECK(!o.gpu, ConfigError, "--gpu and --device cpu contradict each other; give one");
  GPUBENCH_CHECK(*o.world_size <= 64, ConfigError,
                 "--world-size {}: at most 64 CPU ranks on one host", *o.world_size);
  dp.world_size = *o.world_size;
  dp.backend = "gloo";
  dp.devices.assign(static_cast<std::size_t>(dp.world_size), DeviceRef::cpu().str());
  return dp.to_json();
}

std::string select_device(const RunOptions& o, std::ostream& err) {
  if (!o.device.empty() && o.device != "cpu" && o.device != "cuda") {
    throw ConfigError(fmt::format("--device: expected cpu or cuda, got '{}'{}", o.device,
                                  did_you_mean(o.device, {"cpu", "cuda"})));
  }
  if (o.device == "cpu") {
    GPUBENCH_CHECK(!o.gpu, ConfigError, "--gpu and --device cpu contradict each other; give one");
    return "cpu";
  }
  GPUBENCH_CHECK(!o.gpu || *o.gpu >= 0, ConfigError, "--gpu: expected an index >= 0, got '{}'",
                 o.gpu.value_or(0));
  const int count = cuda_device_count();
  if (o.gpu || o.device == "cuda") {
    const int index = o.gpu.value_or(0);
    // Name what the user typed: --gpu N, or --device cuda (which means the first GPU).
    const std::string asked = o.gpu ? fmt::format("--gpu {}", index) : "--device cuda";
    GPUBENCH_CHECK(built_with_cuda(), DeviceError,
                   "{}: this gpubench was built against a CPU-only libtorch; build it against a "
                   "CUDA libtorch (README: Build against CUDA) or use --device cpu",
                   asked);
    GPUBENCH_CHECK(index < count, DeviceError, "{}: {} CUDA device{} visible (see 'gpubench info')",
                   asked, count == 0 ? std::string("no") : fmt::format("only {}", count),
                   count == 1 ? " is" : "s are");
    return DeviceRef::cuda(index).str();
  }
  if (count > 0) return DeviceRef::cuda(0).str();
  err << "gpubench: no CUDA device found; running on the CPU at each model's small fixed batch "
         "(no max-batch search). Results are marked cpu.\n";
  return DeviceRef::cpu().str();
}

std::vector<std::string> expand_models(const RunOptions& o, const ConfigStore& store) {
  std::vector<std::string> models;
  auto add = [&](const std::string& name) {
    store.model(name);  // throws UnknownWorkloadError with a did-you-mean
    if (std::find(models.begin(), models.end(), name) == models.end()) models.push_back(name);
  };
  std::vector<std::string> suite_names;
  for (const auto& [name, list] : store.suites()) suite_names.push_back(name);
  for (const auto& suite : o.suites) {
    auto found = store.suites().find(suite);
    if (found == store.suites().end()) {
      throw ConfigError(fmt::format("--suite: unknown suite '{}'{}; choose one of {}", suite,
                                    did_you_mean(suite, suite_names), join(suite_names, ", ")));
    }
    for (const auto& name : found->second) add(name);
  }
  for (const auto& name : o.models) add(name);
  GPUBENCH_CHECK(!models.empty(), ConfigError,
                 "no workload given: use --model NAME (see 'gpubench list') or --suite all");
  return models;
}

void apply_same_batch(const ConfigStore& store, std::vector<std::string>& models,
                      FixedBatches& batches, std::ostream& err) {
  // The baseline's 2020 batch, in the workload's unit; twins without a 2020 row have none.
  const std::string baseline = store.reference().baseline().id;
  std::vector<std::string> kept, left_out;
  for (const auto& m : models) {
    const auto& reference = store.model(m).reference_2020;
    const double batch = reference ? reference->max_batch.at(baseline) : 0;
    if (batch >= 1) {
      batches.by_model[m] = static_cast<int64_t>(batch);
      kept.push_back(m);
    } else {
      left_out.push_back(m);
    }
  }
  GPUBENCH_CHECK(!kept.empty(), ConfigError,
                 "--same-batch: none of {} has a 2020 row, so none has a 2020 batch",
                 join(models, ", "));
  if (!left_out.empty()) {
    err << "gpubench: --same-batch leaves out " << join(left_out, ", ")
        << " (no 2020 row, so no 2020 batch)\n";
  }
  models = kept;
}

void check_batches(const ConfigStore& store, const std::vector<std::string>& models,
                   const FixedBatches& batches) {
  for (const auto& [model, batch] : batches.by_model) {
    if (std::find(models.begin(), models.end(), model) != models.end()) continue;
    store.model(model);  // an unknown name: say so, with a did-you-mean
    throw ConfigError(fmt::format(
        "--batch {}={}: {} is not among this run's workloads ({}); add --model {} or drop it",
        model, batch, model, join(models, ", "), model));
  }
  if (!batches.all) return;
  // One number cannot be the batch of workloads that count it in different units.
  std::map<std::string, std::vector<std::string>> by_unit;
  for (const auto& m : models) {
    if (!batches.by_model.count(m)) by_unit[store.model(m).batch_unit].push_back(m);
  }
  if (by_unit.size() <= 1) return;
  std::vector<std::string> parts;
  for (const auto& [unit, names] : by_unit) {
    parts.push_back(fmt::format("{} ({})", unit, join(names, ", ")));
  }
  throw ConfigError(
      fmt::format("--batch {}: these workloads count their batch in different units: {}; give each "
                  "its own with --batch MODEL=N (e.g. --batch {}={}), or run each unit on its own",
                  *batches.all, join(parts, "; "), by_unit.begin()->second.front(), *batches.all));
}

std::string device_name_of(const std::string& device) {
  const DeviceRef ref = require_device_ref(device, "device");
  if (!ref.is_cuda()) return "cpu";
  return cuda_device_info(ref.index).name;
}

void check_tier_caps(const std::vector<double>& tiers, const std::string& device,
                     const char* what) {
  if (tiers.empty()) return;
  const DeviceRef ref = require_device_ref(device, "device");
  GPUBENCH_CHECK(ref.is_cuda(), DeviceError,
                 "--memory-tiers emulates smaller GPUs by capping a CUDA device's memory; no "
                 "CUDA device is in use (see 'gpubench info'; to continue a tier journal, give "
                 "--gpu N)");
  const DeviceInfo info = cuda_device_info(ref.index);
  const double device_gib = static_cast<double>(info.memory_bytes) / double(int64_t{1} << 30);
  const double largest = *std::max_element(tiers.begin(), tiers.end());
  GPUBENCH_CHECK(largest < device_gib, ConfigError,
                 "{}: {} GiB is not below the {:.1f} GiB of {}; a cap can only "
                 "emulate a smaller card",
                 what, format_number(largest), device_gib, info.name);
}

std::vector<double> checked_tiers(const RunOptions& o, const std::string& device) {
  if (o.memory_tiers_gib.empty()) return {};
  GPUBENCH_CHECK(!o.settings.count("--memory-cap"), ConfigError,
                 "--memory-tiers and --memory-cap contradict each other; give one");
  GPUBENCH_CHECK(o.batches.empty(), ConfigError,
                 "--memory-tiers searches the max batch under each cap; it cannot take --batch");
  std::vector<double> tiers = o.memory_tiers_gib;
  for (double gib : tiers) {
    GPUBENCH_CHECK(gib >= 0.25, ConfigError,
                   "--memory-tiers: expected sizes in GiB of at least 0.25, got '{}'",
                   format_number(gib));
  }
  std::sort(tiers.begin(), tiers.end());
  tiers.erase(std::unique(tiers.begin(), tiers.end()), tiers.end());
  check_tier_caps(tiers, device);
  return tiers;
}

void check_resume_options(const RunOptions& o) {
  std::vector<std::string> given;
  if (!o.models.empty()) given.push_back("--model");
  if (!o.suites.empty()) given.push_back("--suite");
  if (!o.config_file.empty()) given.push_back("--config");
  if (!o.batches.empty()) given.push_back("--batch");
  if (o.same_batch) given.push_back("--same-batch");
  std::vector<std::string> may_change = {"--gpu", "--device"};
  for (const settings::Setting* s : settings::flags()) {
    const std::string flag(s->flag.name);
    if (s->flag.on_resume) {
      may_change.push_back(flag);
    } else if (o.settings.count(flag)) {
      given.push_back(flag);
    }
  }
  may_change.push_back("--json");
  if (!o.memory_tiers_gib.empty()) given.push_back("--memory-tiers");
  if (!o.gpus.empty()) given.push_back("--gpus");
  if (o.world_size) given.push_back("--world-size");
  if (!o.journal_path.empty()) given.push_back("--journal");
  GPUBENCH_CHECK(given.empty(), ConfigError,
                 "--resume continues the suite exactly as its journal planned it; drop {} (only "
                 "{} and --csv may change)",
                 join(given, ", "), join(may_change, ", "));
}

}  // namespace gpubench::cli
