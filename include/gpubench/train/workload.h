// The workload interface: an architecture builds a TrainStep (model, optimizer and one synthetic
// batch on the device) for a batch size and precision; the runner times TrainStep::run().
#pragma once

#include "gpubench/base/json.h"
#include "gpubench/base/params.h"
#include "gpubench/base/precision.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

struct ModelConfig;
namespace train {
class GradientSync;
}

/// How a workload's steps are run, from its config's `runtime:` section (train/runtime.h does
/// the running).
struct RuntimeSettings {
  /// Capture forward, backward and update once per batch shape and replay the CUDA graph
  /// (CUDA only; never with amp-fp16, whose overflow check reads the host). Default: false
  bool cuda_graphs = false;
  /// With cuda_graphs off: the timed run measures its warm-up, and when its steps wait on the
  /// host (the host's enqueueing takes at least kHostBoundShare of each step's device time,
  /// timing.h) it turns CUDA graphs on there and then, and warms up until every batch shape is
  /// captured. A step that fills the device stays eager, so the search's max batch and its
  /// memory are unchanged. Default: false
  bool cuda_graphs_if_host_bound = false;
  /// "fused": on CUDA, libtorch's fused Adam, AdamW and SGD kernels and device-side rates for
  /// the other optimizers (what CUDA graphs need); "foreach": multi-tensor kernels with host
  /// scalars (always on the CPU). Default: "fused"
  std::string optimizer_kernels = "fused";
  /// cuDNN autotuning (torch.backends.cudnn.benchmark) in the timed run: the workload's
  /// `runtime.cudnn_benchmark` and the run's `run.cudnn_benchmark` both on; the runner applies it
  /// before the model is built. Default: true
  bool cudnn_benchmark = true;
  /// How many algorithms cuDNN's autotuner tries per convolution
  /// (torch.backends.cudnn.benchmark_limit; 0: all it has): the workload's own number, or -1 for
  /// the run's `run.cudnn_benchmark_limit`. Default: -1
  int cudnn_benchmark_limit = -1;
  /// The language models' fast paths (issue 44), the same math as the plain ones: vocab
  /// projections on a weight padded to a multiple of 64 rows (models/fast_paths.h), log-softmax
  /// straight to fp32 in the losses, q/k/v views whose backward writes one buffer, and for
  /// stored attention the scale in the GEMM and causal masks built once per shape. false runs
  /// the plain paths, so that one build can time both; other workloads ignore it. Default: true
  bool fast_paths = true;
  /// The language models' vocabulary cross-entropy as one fused autograd function (issue 44
  /// item 2; train::vocab_loss_sums): one read of the logits forward, one backward, their
  /// gradient written in their own type, no fp32 copy. On CUDA it needs a build with gpubench's
  /// kernels (else the ATen path runs); on the CPU the same algorithm runs in plain loops.
  /// Default: false until its gain is measured on the GPU
  bool fused_loss = false;
  /// Each post-norm sub-layer's LayerNorm(residual + dropout(x)) in the language models as one
  /// fused autograd function (issue 44 item 4; train::residual_layer_norm): one kernel forward,
  /// one backward. On CUDA it needs a build with gpubench's kernels (else the ATen path runs);
  /// on the CPU the same formulas run in double, except under autocast. Its dropout keeps
  /// elements by its own draw (on CUDA not the one ATen's fused dropout makes). Default: false
  /// until its gain is measured on the GPU
  bool fused_norm = false;
  /// Stored attention's masks + softmax + dropout on the language models' fast paths as one
  /// fused autograd function (issue 44 item 3; train::fused_attention_probs), keeping the same
  /// tensors for the backward (the probabilities in softmax's type, the keep-mask). On CUDA it
  /// needs a build with gpubench's kernels; on the CPU the same formulas in double, except
  /// under autocast. Its dropout keeps elements by its own draw (on CUDA not ATen's). Default:
  /// false until its gain is measured on the GPU
  bool fused_softmax = false;

  /// The keys of the `runtime:` section.
  static ParamSchema schema();
  /// The settings of a resolved `runtime:` section.
  static RuntimeSettings from_params(const Params& params);
};

/// Everything an architecture needs to prepare one training step.
struct StepContext {
  const ModelConfig* config = nullptr;  ///< the workload (name, units, ...)
  Params model;                         ///< architecture parameters (full or smoke size)
  Params optimizer;                     ///< optimizer parameters
  int64_t batch = 0;                    ///< in the workload's batch unit; > 0
  Precision precision = Precision::kFp32;
  torch::Device device = torch::kCPU;
  uint64_t seed = 0;        ///< weights and synthetic data
  RuntimeSettings runtime;  ///< how the step is launched and updated
  /// Data-parallel gradient synchronization between backward and update (train::GradientSync);
  /// none: one process, one GPU.
  std::shared_ptr<train::GradientSync> gradient_sync;
};

/// A prepared training step. Owns the model, the optimizer and the synthetic batch on the
/// device; destroying it releases all of that memory (the batch search relies on this).
class TrainStep {
 public:
  virtual ~TrainStep() = default;

  /// One training iteration as the reference runs it: zero grads, forward, the real loss,
  /// backward, optimizer step (a GAN runs its D and G steps). Enqueues device work only: never
  /// .item(), .cpu() or a synchronize, since the runner owns timing. Returns the throughput
  /// units this iteration processed (examples, images, target tokens), known on the host.
  virtual double run() = 0;

  /// The losses of the last run(), by name ("loss", "mlm", "nsp", "d", "g", ...). Reading them
  /// synchronizes, so only tests and the end of a timed run call this.
  virtual std::map<std::string, torch::Tensor> losses() const = 0;

  /// Every trainable parameter, by network ("model", or "generator" and "discriminator").
  virtual std::map<std::string, std::vector<torch::Tensor>> parameters() const = 0;

  /// Facts about the synthetic batch for the record ({"sentences": 528, ...}).
  virtual Json batch_info() const { return Json::object(); }

  /// The training FLOPs of the last run(), computed analytically from the shapes that step
  /// actually ran (its sentence lengths and tokens, RoIs, image size) by the workload's own
  /// formula (docs/workloads/<name>.md, "FLOPs"): matmul and convolution multiply-adds, 2 FLOPs
  /// each, every input and weight gradient the backward computes at the cost of the forward.
  /// The timed window sums it over its steps and divides by the units they trained, so the
  /// record's FLOPs per unit follow the batch that ran. Host arithmetic only (never reads the
  /// device). None where the workload has no formula (the record then takes the config's
  /// constant for a model as shipped, and nothing for a changed one). Default: none
  virtual std::optional<double> step_flops() const { return std::nullopt; }
  /// The FLOPs the last run()'s kernels computed by the same formula, padding included: what
  /// a count of its matrix products finds (tests/flop_counter.h, the workloads' FLOPs test).
  /// Differs from step_flops() where the unit counts useful work only (translation: words
  /// without padding). Default: step_flops()
  virtual std::optional<double> computed_step_flops() const { return step_flops(); }

  /// Steps after which every distinct batch this step cycles through has run once, so cuDNN
  /// autotuning and allocator growth are over for all of them. The warm-up runs at least this
  /// many. Default: 1
  virtual int64_t warmup_steps() const { return 1; }

  /// Whether every run() does the same work. When it does not (tasks or sentence lengths that
  /// vary from step to step), warm-up ends after warmup_steps() instead of waiting for step
  /// times to settle, and the timed window averages over the mix. Default: true
  virtual bool uniform_steps() const { return true; }

  /// For a step whose work varies (uniform_steps() false): whether the first run of a batch
  /// shape builds something its later runs reuse (cuDNN autotuning of the shape's
  /// convolutions, a CUDA graph's capture), so that the warm-up must run every shape before any
  /// is timed (warmup_steps()). A step that builds nothing per shape warms up until nothing is
  /// left to build (opening_steps() at least, and the allocator no longer growing), and its
  /// window's whole cycles meet each shape's first run at its steady time. Default: true
  virtual bool builds_per_shape() const { return true; }
  /// Steps the step runs once before its repeating cycle (representative_steps()) begins, never
  /// again: the warm-up of a step that builds nothing per shape runs at least these, so that the
  /// window's whole cycles are the cycle's. Default: 0
  virtual int64_t opening_steps() const { return 0; }

  /// Consecutive steps whose work represents the workload's mix (every frequent task or length
  /// bucket in its share). The timed window runs a multiple of this many. Default: 1
  virtual int64_t representative_steps() const { return 1; }

  /// How the step ran, for the record's `runtime` field: launch (eager or CUDA graphs),
  /// precision, loss scaling, optimizer kernels (train::Runtime::info()). Default: {}
  virtual Json runtime_info() const { return Json::object(); }

  /// A workload's own check that its training is still sound after the last run(), beyond
  /// finite losses (which the runner checks for every workload): for a GAN, that its
  /// discriminator still depends on its input. Returns why the model is degenerate, or "" when
  /// it is healthy. May synchronize: the runner calls it outside the timed region.
  virtual std::string degeneracy() const { return {}; }
  /// Called once before the timed window (outside it), so that degeneracy() can judge the
  /// window's steps alone. Default: nothing
  virtual void begin_window() {}
  /// Readies the step for a search probe of one run(): the optimizer state of every parameter
  /// allocated (as after a first update; it changes no update) and the next run() on the batch
  /// with the most memory of those it cycles through (where an estimate ranks them, every batch
  /// it cannot tell from the heaviest, one after the other). That one run() then peaks as a steady
  /// training step does, which the probe measures; a step that was not readied needs two, the
  /// first to allocate the state. Returns whether it is ready: false when one run cannot stand
  /// for the steady state (with CUDA graphs the second run captures). Default: false
  virtual bool prepare_probe() { return false; }
  /// Gives every parameter its optimizer state now, as a first update would (zeros, or what the
  /// optimizer starts from: it changes no update), and nothing else. The timed run and a tier's
  /// confirm call it once, right after the step is built and before its first run(), so that
  /// the state lies where a search probe put it (prepare_probe()), below the activations,
  /// instead of among the blocks the first step's activations freed. Default: nothing (a step
  /// without optimizer state)
  virtual void allocate_optimizer_state() {}
  /// Why the warm-up must go on after its step times settled, or "": with amp-fp16, a loss
  /// scale still backing off from its initial 65536 (the last update was skipped), so a window
  /// started now would time steps that update nothing. Host state only. Default: ""
  virtual std::string unsettled() const { return {}; }
  /// Turns CUDA graphs on from the next run() (the runner's answer to a host-bound warm-up,
  /// RuntimeSettings::cuda_graphs_if_host_bound): each batch shape then runs once eagerly, is
  /// captured on its next run and replayed after. Returns "" when graphs are on, else why they
  /// cannot be. Default: a step outside the training runtime cannot
  virtual std::string enable_graphs() {
    return "this step does not run through the training runtime";
  }
  /// How many run() calls in a row, up to the last one, replayed a captured graph (no eager
  /// run, no capture). 0 without CUDA graphs. Default: 0
  virtual int64_t replays_in_a_row() const { return 0; }
};

/// Code that builds a workload's training step. Named configs (configs/models/*.yaml) select an
/// architecture and set its parameters, so twins share code.
struct Architecture {
  std::string name;              ///< registry key: "bert"
  std::string summary;           ///< one line for `gpubench list --json`
  ParamSchema model_schema;      ///< keys of the `model:` section
  ParamSchema optimizer_schema;  ///< keys of the `optimizer:` section
  /// Builds the step on ctx.device. Throws c10::OutOfMemoryError when it does not fit.
  std::function<std::unique_ptr<TrainStep>(const StepContext& ctx)> prepare;
  /// Trainable parameters of the model(s) as built with these parameters, by network
  /// ("total", or "generator" and "discriminator"). Builds the model on the CPU.
  std::function<std::map<std::string, int64_t>(const Params& model)> count_parameters;
};

/// Number of elements over tensors that require gradients.
int64_t count_trainable(const std::vector<torch::Tensor>& parameters);

}  // namespace gpubench
