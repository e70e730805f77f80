// Configuration: the shipped configs (embedded in the binary), a user's --config file (YAML or
// JSON, one schema) and flags, resolved in that order into one ModelConfig per workload and one
// RunSettings per run.
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/base/params.h"
#include "gpubench/base/precision.h"
#include "gpubench/config/reference.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

class Registry;

/// Bounds and resolution of the max-batch search, in the workload's batch unit.
struct SearchSettings {
  int64_t min_batch = 1;        ///< smallest batch the model can train at. Default: 1
  int64_t max_batch = 1 << 20;  ///< the search never probes above this. Default: 2^20
  int64_t granularity = 1;      ///< the answer is a multiple of this. Default: 1
  int64_t first_probe = 0;      ///< first (cheap) probe; 0 = 4 x min_batch rounded. Default: 0
  /// Hard cap on probes per search (the target is at most 8; the margin keeps a search that
  /// needs one or two more exact, and its record says how many it took). Default: 10
  int max_probes = 14;
  /// cuDNN autotuning during the probes. Off, the probes use cuDNN's heuristics: no autotuning
  /// at every new shape (the cost of a conv workload's probe) and workspaces chosen by shape,
  /// not by what memory is free. The timed run autotunes (run.cudnn_benchmark). Default: false
  bool cudnn_benchmark = false;
  /// Memory a probe leaves free, as a share of what the search may use (the device's free
  /// memory, or under a memory cap the allocator's part of it): each probe holds that much in a
  /// ballast tensor, so a batch "fits" only with this headroom. The timed run in a fresh
  /// process lays memory out differently: on the H200 its need at the searched batch exceeded
  /// the probe's by 10 to 250 MiB (docs/search.md, "Headroom"). Default: 0.0025 (358 MiB of an
  /// H200)
  double headroom = 0.0025;
};

/// The 2020 numbers of one workload, as its config states them (checked against the table).
struct ModelReference {
  std::string row;                           ///< row name in configs/reference/lambda-2020.yaml
  std::map<std::string, double> max_batch;   ///< GPU id -> max batch (0 = could not train)
  std::map<std::string, double> throughput;  ///< GPU id -> throughput (0 = could not train)
};

/// One runnable workload: an architecture with its defaults, fully resolved.
struct ModelConfig {
  std::string name;             ///< "bert-base": CLI, registry and output spelling
  std::string architecture;     ///< registry key of the code: "bert"
  std::string family;           ///< "image" | "language"
  std::string description;      ///< one line: variant and what it mirrors
  std::string batch_unit;       ///< "images" | "sequences" | "tokens"
  std::string throughput_unit;  ///< "images/s" | "examples/s" | "words/s"
  /// Exact trainable-parameter targets: {"total": n}, or per network ({"generator": ..}).
  std::map<std::string, int64_t> trainable_params;
  std::optional<ModelReference> reference_2020;  ///< absent for peer twins
  int64_t cpu_batch = 2;                         ///< fixed batch on the CPU (no search). Default: 2
  /// Training FLOPs per throughput unit (forward + backward, analytic; derived in
  /// docs/workloads/ at one batch); none where not derived. A record takes it only where the
  /// step derives no FLOPs of its own from the shapes it ran (TrainStep::step_flops) and the
  /// model is as shipped (FlopsPerUnit, measure/timing.h).
  std::optional<double> flops_per_unit;
  SearchSettings search;
  Params model;             ///< architecture parameters (the `model:` section)
  Params optimizer;         ///< optimizer parameters (the `optimizer:` section)
  int64_t smoke_batch = 2;  ///< batch of the CPU smoke test
  Params smoke_model;       ///< `model:` overlaid with `smoke.model:` (reduced size)
  /// `optimizer:` overlaid with `smoke.optimizer:` (say, no warm-up, so that one smoke step
  /// visibly moves every parameter).
  Params smoke_optimizer;
  /// How its steps run (the `runtime:` section, RuntimeSettings::schema()): CUDA graphs and
  /// optimizer kernels. Not part of the workload's definition, so changing it keeps the 2020
  /// score.
  Params runtime;
  std::vector<std::string> sources;  ///< the files this config was built from, in order
  /// A user config changed the model or optimizer section: no longer the 2020 workload, so no
  /// normalized score is computed.
  bool modified = false;

  /// The resolved config as JSON (what `--config-dump` shows and records embed).
  Json to_json() const;
};

/// Warm-up and timed-window bounds.
struct TimingSettings {
  int warmup_steps = 3;            ///< minimum warm-up steps. Default: 3
  int max_warmup_steps = 50;       ///< warm-up ends here even if not steady. Default: 50
  /// ... or after this long, once autotuning is over: never before the steps that autotune
  /// (see warmup_done) [s]. Default: 30
  double max_warmup_seconds = 30;
  double steady_tolerance =
      0.05;                  ///< last 3 warm-up steps within this of their median. Default: 0.05
  /// Timed window: at least this many steps. Default: 2, the fewest a noise is measured over:
  /// a step of 5 s or more meets min_seconds alone, and a third step was 5-13 s that the noise
  /// rule did not ask for (it goes on by itself while the noise is above its target)
  int min_steps = 2;
  double min_seconds = 5.0;  ///< ... and at least this long [s]. Default: 5
  /// Past its minimum the window goes on while its noise (the 95% interval of the mean step
  /// time, over whole cycles, relative to it) is above noise_target, up to this long [s];
  /// at or below min_seconds the window stops at its minimum. Default: 15
  double max_seconds = 15.0;
  double noise_target = 0.005;  ///< relative half-width of that interval. Default: 0.005 (0.5%)
};

/// Settings of one `gpubench run`, shared by all its jobs.
struct RunSettings {
  Precision precision = Precision::kFp32;            ///< Default: fp32 (strict, TF32 off)
  TimingSettings timing;                             ///< on a GPU
  TimingSettings cpu_timing{1, 3, 60, 0.5, 2, 0.0, 0.0};  ///< on the CPU fallback: short
  std::optional<double> memory_cap_gib;  ///< cap the caching allocator [GiB]; results emulated
  double job_timeout_s = 1800;           ///< a worker running longer is killed [s]. Default: 1800
  /// Timed runs of each job, each in a fresh process at the job's batch (the first is the
  /// confirm); with two or more the record keeps each one, and the throughput is their median
  /// with a 95% interval (docs/internals.md, "Repetitions"). Default: 1
  int repeat = 1;
  uint64_t seed = 0;                     ///< weights and synthetic data. Default: 0
  bool cudnn_benchmark = true;  ///< cuDNN autotuning, as the references train. Default: true
  /// cuDNN algorithms the autotuner times per convolution (PyTorch's
  /// torch.backends.cudnn.benchmark_limit; 0 = all). Default: 3. PyTorch's 10 made the first
  /// step on an H200 take 132.6 s (nasnet-large fp32 at 224) and 62.6 s (deeplabv3 at 87): the
  /// autotuner runs each of them on the full-size tensors (docs/search.md, "Short warm-ups").
  /// A workload's runtime.cudnn_benchmark_limit replaces it (deeplabv3-resnet101, the twin of
  /// eager PyTorch, tries PyTorch's 10)
  int cudnn_benchmark_limit = 3;
  /// Empty the caching allocator after each autotuning of a convolution, as PyTorch does by
  /// default. Off, the trial workspace stays cached for the next autotuning instead of being
  /// freed and allocated again; the allocator still frees cached blocks before it runs out of
  /// memory, so what fits does not change. Default: false
  bool cudnn_benchmark_empty_cache = false;
  /// The CUDA caching allocator grows segments in place (PYTORCH_CUDA_ALLOC_CONF
  /// expandable_segments:True) instead of reserving one block per large request. Fixed-size
  /// segments left 10-19 GiB reserved but unallocated at the edge on the H200 (the timed runs
  /// of yolov3, mask-rcnn, transformer-big and conv-seq2seq ran out of memory at batches their
  /// searches had trained), so what "fits" depended on fragmentation (docs/search.md,
  /// "Allocator"). A user's own PYTORCH_CUDA_ALLOC_CONF keeps its other options. Default: true
  bool expandable_segments = true;
  /// A searched batch is looked up in the local cache of search answers (keyed by the device,
  /// its driver and libraries, gpubench's commit and the job's config) and verified with two
  /// probes instead of searched; each search's answer is stored there (run/search_cache.h,
  /// docs/search.md "The cache of answers"). `run --no-cache` turns both off. Default: true
  bool search_cache = true;
  /// The price of one of the run's cards (or of the CPU machine) per hour in USD (issue 46):
  /// each record keeps it (JobRecord::cost), and the reports give the cost per million units
  /// and the units per dollar from it. Measures nothing. Default: none
  std::optional<double> price_per_hour_usd;
  /// While a worker runs, the next one is started and waits, at a lower CPU priority and
  /// without touching the GPU, having loaded libtorch and the configs; the next phase goes to
  /// it once the running worker has exited (run/launcher.h). Each record says how many of its
  /// workers were (runtime.workers). `run --no-prestart` starts each worker as its phase comes.
  /// Measures nothing. Default: true
  bool prestart_workers = true;

  Json to_json() const;
};

/// Every config a run uses. Built from the embedded configs, then a user file on top.
class ConfigStore {
 public:
  /// Parses the configs embedded at build time and validates each against `registry`.
  static ConfigStore load_builtin(const Registry& registry);

  /// Overlays a user file: `run:` and `models: {name: {...}}` sections, or a single model's
  /// keys at the top level with `name:`. Throws ConfigError naming the file, key and value.
  void apply_file(const std::string& path);
  /// Overlays an already parsed document (what apply_file does after reading).
  void apply_document(const Json& document, const std::string& file);

  /// Workload names, in the order of the `all` suite, then the peer twins.
  std::vector<std::string> model_names() const;
  /// The resolved config of a workload; throws UnknownWorkloadError with a did-you-mean.
  const ModelConfig& model(const std::string& name) const;
  bool has_model(const std::string& name) const;

  const ReferenceTable& reference() const { return reference_; }
  /// gpubench's own current numbers per measured card (configs/measured/cards.json); `run` and
  /// `report` hand them to the reference table they report with (set_card_numbers).
  const std::vector<CardNumber>& card_numbers() const { return card_numbers_; }
  const RunSettings& run() const { return run_; }
  RunSettings& run() { return run_; }
  /// Named model lists ("all", "image", "language", "twins").
  const std::map<std::string, std::vector<std::string>>& suites() const { return suites_; }

 private:
  explicit ConfigStore(const Registry& registry) : registry_(&registry) {}
  void add_model(const Json& document, const std::string& file);
  void rebuild_model(const std::string& name);

  const Registry* registry_;
  ReferenceTable reference_;
  std::vector<CardNumber> card_numbers_;
  RunSettings run_;
  std::map<std::string, std::vector<std::string>> suites_;
  std::vector<std::string> order_;
  std::map<std::string, Json> raw_;      // merged model documents
  std::map<std::string, Json> shipped_;  // model + optimizer as shipped
  std::map<std::string, std::vector<std::string>> sources_;
  std::map<std::string, ModelConfig> models_;
};

/// Reads a YAML or JSON file into JSON (by extension; YAML otherwise). Throws ConfigError for a
/// missing file or a syntax error, with line and column.
Json load_config_file(const std::string& path);
/// Parses YAML text (JSON is accepted too); `file` names it in errors.
Json parse_yaml(const std::string& text, const std::string& file);
/// Parses JSON text; `file` names it in errors.
Json parse_json(const std::string& text, const std::string& file);

/// The shipped config files: {relative path, contents}, embedded at build time.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_config_files();

}  // namespace gpubench
