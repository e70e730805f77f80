#include "gpubench/train/runtime.h"

#include "gpubench/base/env.h"
#include "gpubench/base/errors.h"
#include "gpubench/train/attention_softmax.h"
#include "gpubench/train/losses.h"
#include "gpubench/train/residual_norm.h"

#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/torch.h>

#include <fmt/format.h>

#if GPUBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace gpubench {

ParamSchema RuntimeSettings::schema() {
  return {
      {"cuda_graphs", ParamKind::kBool, false,
       "capture forward, backward and update once per batch shape (after one eager run of it) "
       "and replay the CUDA graph; CUDA only, never with amp-fp16"},
      {"cuda_graphs_if_host_bound", ParamKind::kBool, false,
       "with cuda_graphs off: capture CUDA graphs in the timed run when its warm-up's steps wait "
       "on the host (the host's work at least 90% of each step's time); a step that fills the "
       "device stays eager"},
      {"optimizer_kernels",
       ParamKind::kString,
       "fused",
       "fused: on CUDA, libtorch's fused Adam/AdamW/SGD and device-side rates for the other "
       "optimizers (CUDA graphs need this); foreach: multi-tensor kernels, host-side rates",
       {"fused", "foreach"}},
      {"cudnn_benchmark", ParamKind::kBool, true,
       "cuDNN autotuning in the timed run (also needs run.cudnn_benchmark); false where the "
       "workload's reference trains without it"},
      {"cudnn_benchmark_limit", ParamKind::kInt, -1,
       "algorithms cuDNN's autotuner tries per convolution (0: all); -1: the run's "
       "run.cudnn_benchmark_limit",
       {},
       -1.0},
      {"fast_paths", ParamKind::kBool, true,
       "language models: vocab projections on a weight padded to a multiple of 64 rows, "
       "log-softmax straight to fp32, q/k/v views without copies in the backward, the scale "
       "and cached causal masks in stored attention (the same math); false: the plain paths"},
      {"fused_loss", ParamKind::kBool, false,
       "language models: the vocabulary cross-entropy as one fused function (one read of the "
       "logits forward and one backward, no fp32 copy; CUDA needs a build with gpubench's "
       "kernels, else the ATen path runs)"},
      {"fused_norm", ParamKind::kBool, false,
       "language models: each sub-layer's LayerNorm(residual + dropout(x)) as one fused "
       "function (one kernel forward, one backward; CUDA needs a build with gpubench's "
       "kernels, else the ATen path runs; its dropout mask is drawn apart from ATen's)"},
      {"fused_softmax", ParamKind::kBool, false,
       "language models with stored attention on the fast paths: the masks, softmax and dropout "
       "of the attention probabilities as one fused function keeping the same tensors (CUDA "
       "needs a build with gpubench's kernels, else the ATen path runs; its dropout mask is "
       "drawn apart from ATen's)"},
  };
}

RuntimeSettings RuntimeSettings::from_params(const Params& params) {
  RuntimeSettings s;
  s.cuda_graphs = params.flag("cuda_graphs");
  s.cuda_graphs_if_host_bound = params.flag("cuda_graphs_if_host_bound");
  s.optimizer_kernels = params.str("optimizer_kernels");
  s.cudnn_benchmark = params.flag("cudnn_benchmark");
  s.cudnn_benchmark_limit = static_cast<int>(params.i64("cudnn_benchmark_limit"));
  s.fast_paths = params.flag("fast_paths");
  s.fused_loss = params.flag("fused_loss");
  s.fused_norm = params.flag("fused_norm");
  s.fused_softmax = params.flag("fused_softmax");
  return s;
}

namespace train {

/// The CUDA side of graph launches: a side stream for capture (and for the eager runs before
/// it, as PyTorch's recipe warms up), one memory pool shared by the step's graphs (they replay
/// one at a time and keep nothing in it across replays: losses go to buffers outside it), and
/// per variant its eager runs so far, its graph, what its iteration returned and the updates it
/// holds (each updater, and how many of its updates: one scalar slot each).
struct Runtime::Graphs {
  struct Variant {
    int eager_runs = 0;
    double units = 0;
    std::vector<std::pair<Updater*, int>> updates;
#if GPUBENCH_WITH_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  };

  std::map<int64_t, Variant> variants;
  Variant* capturing = nullptr;  // the variant being captured, if any
  std::map<std::string, torch::Tensor> loss_buffers;
  int captured = 0;
#if GPUBENCH_WITH_CUDA
  explicit Graphs(const torch::Device& device)
      : side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        pool(at::cuda::graph_pool_handle()) {}
  c10::cuda::CUDAStream side;
  at::cuda::MempoolId_t pool;
  at::cuda::CUDAEvent to_side, to_current;
#else
  explicit Graphs(const torch::Device&) {}
#endif
};

Runtime::Runtime(const StepContext& ctx)
    : precision_(ctx.precision),
      device_(ctx.device),
      settings_(ctx.runtime),
      sync_(ctx.gradient_sync ? ctx.gradient_sync : std::make_shared<GradientSync>()),
      loss_calls_at_start_(train::fused_vocab_loss_calls()),
      norm_calls_at_start_(train::fused_residual_norm_calls()),
      softmax_calls_at_start_(train::fused_attention_softmax_calls()) {
  if (!settings_.cuda_graphs) return;
  graphs_note_ = graphs_problem();
  if (graphs_note_.empty()) {
    graphs_active_ = true;
    graphs_ = std::make_unique<Graphs>(device_);
  }
}

std::string Runtime::graphs_problem() const {
  if (!device_.is_cuda()) return "CUDA graphs run on CUDA devices only; this step runs eagerly";
  if (!GPUBENCH_WITH_CUDA) return "this gpubench was built without CUDA";
  if (std::string sync_problem = sync_->capture_problem(); !sync_problem.empty()) {
    return sync_problem;
  }
  if (precision_ == Precision::kAmpFp16) {
    return "amp-fp16 skips an overflowing update after reading a flag on the host "
           "(GradScaler), which a CUDA graph cannot hold; this step runs eagerly";
  }
  if (!graphs_refused_.empty()) return graphs_refused_;
  for (const auto& [name, updater] : updaters_) {
    if (updater->optimizer().kernels() != UpdateKernels::kDevice) {
      return fmt::format(
          "the {} optimizer passes its rate as a host value (runtime.optimizer_kernels: {}), "
          "which a CUDA graph would freeze; this step runs eagerly",
          name, settings_.optimizer_kernels);
    }
  }
  return {};
}

std::string Runtime::enable_graphs() {
  if (graphs_active_) return {};
  std::string problem = graphs_problem();
  if (!problem.empty()) {
    graphs_note_ = problem;
    return problem;
  }
  graphs_active_ = true;
  graphs_enabled_late_ = true;
  graphs_note_.clear();
  graphs_ = std::make_unique<Graphs>(device_);
  replays_in_a_row_ = 0;
  return {};
}

Runtime::~Runtime() = default;

Updater& Runtime::add(const std::string& name, Updater updater) {
  TORCH_CHECK(!graphs_ || graphs_->variants.empty(), "Runtime::add: add updaters before run()");
  if (device_.is_cuda() && settings_.optimizer_kernels == "fused") {
    updater.optimizer().set_kernels(UpdateKernels::kDevice);
  }
  if (graphs_active_ && updater.optimizer().kernels() != UpdateKernels::kDevice) {
    disable_graphs(fmt::format(
        "the {} optimizer passes its rate as a host value (runtime.optimizer_kernels: {}), "
        "which a CUDA graph would freeze; this step runs eagerly",
        name, settings_.optimizer_kernels));
  }
  updaters_.emplace_back(name, std::make_unique<Updater>(std::move(updater)));
  sync_->attach(name, updaters_.back().second->optimizer().parameters());
  return *updaters_.back().second;
}

void Runtime::disable_graphs(const std::string& reason) {
  graphs_refused_ = reason;  // a later enable_graphs() is refused for it too
  if (!graphs_active_) return;
  graphs_active_ = false;
  graphs_.reset();
  graphs_note_ = reason;
}

namespace {
/// GPUBENCH_DETECT_ANOMALY=K (diagnosis only, never timed): from the K-th backward of the
/// process on (1: every one), backward runs under autograd's anomaly mode, so the first node
/// whose output holds a NaN throws, naming itself. 0 when unset. Read once.
int64_t detect_anomaly_from() {
  static const int64_t from = [] {
    const char* v = env::get(env::Switch::kDetectAnomaly);
    return v == nullptr ? int64_t{0} : std::max<int64_t>(0, std::strtoll(v, nullptr, 10));
  }();
  return from;
}
}  // namespace

void Runtime::backward(Updater& updater, const torch::Tensor& loss, bool retain_graph) {
  auto found = std::find_if(updaters_.begin(), updaters_.end(),
                            [&](const auto& entry) { return entry.second.get() == &updater; });
  TORCH_CHECK(found != updaters_.end(),
              "Runtime::backward: an updater this runtime does not hold");
  sync_->backward_for(found->first);
  if (detect_anomaly_from() > 0) {
    static int64_t calls = 0;
    if (++calls >= detect_anomaly_from()) {
      std::fprintf(stderr, "gpubench: GPUBENCH_DETECT_ANOMALY: backward %lld in anomaly mode\n",
                   static_cast<long long>(calls));
      torch::autograd::DetectAnomalyGuard anomaly;
      updater.backward(loss, retain_graph);
      return;
    }
  }
  updater.backward(loss, retain_graph);
}

void Runtime::update(Updater& updater) {
  auto found = std::find_if(updaters_.begin(), updaters_.end(),
                            [&](const auto& entry) { return entry.second.get() == &updater; });
  TORCH_CHECK(found != updaters_.end(), "Runtime::update: an updater this runtime does not hold");
  auto gradients = updater.gradients();
  sync_->synchronize(found->first, gradients);
  if (graphs_ && graphs_->capturing) {
    // Captured: this update reads the next free scalar slot of its optimizer, which
    // prepare_update() fills before every replay.
    auto& updates = graphs_->capturing->updates;
    auto entry = std::find_if(updates.begin(), updates.end(),
                              [&](const auto& u) { return u.first == &updater; });
    if (entry == updates.end()) entry = updates.emplace(updates.end(), &updater, 0);
    const int slot = entry->second++;
    TORCH_CHECK(slot < Optimizer::kMaxSlots, "a captured iteration updates '", found->first,
                "' more than ", Optimizer::kMaxSlots, " times");
    updater.update_kernels(slot);
    return;
  }
  updater.step();
}

void Runtime::record_loss(const std::string& name, const torch::Tensor& loss) {
  if (!graphs_) {
    losses_[name] = loss.detach();
    return;
  }
  auto found = graphs_->loss_buffers.find(name);
  if (graphs_->capturing) {
    // The buffer was made outside the graph's pool by the eager run of this variant.
    TORCH_CHECK(found != graphs_->loss_buffers.end(), "loss '", name,
                "' appears first in a captured iteration; record it in every iteration");
    found->second.copy_(loss.detach());
  } else if (found == graphs_->loss_buffers.end()) {
    graphs_->loss_buffers[name] = loss.detach().clone();
  } else {
    found->second.copy_(loss.detach());
  }
}

std::map<std::string, torch::Tensor> Runtime::losses() const {
  return graphs_ ? graphs_->loss_buffers : losses_;
}

int64_t Runtime::warmup_steps(int64_t eager_steps, const std::vector<int64_t>& order) const {
  if (!graphs_active_) return eager_steps;
  std::map<int64_t, int> seen;
  int64_t last_capture = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (++seen[order[i]] == kEagerRunsBeforeCapture + 1) {
      last_capture = static_cast<int64_t>(i) + 1;
    }
  }
  return std::max(eager_steps, last_capture);
}

double Runtime::run(int64_t variant, const std::function<double()>& body) {
  if (!graphs_active_) {
    replays_in_a_row_ = 0;
    return body();
  }
#if GPUBENCH_WITH_CUDA
  if (graphs_enabled_late_) {
    // Turned on by the timed run's warm-up: a capture that fails (out of memory, or a body
    // that reads the device after all) puts the step back on eager iterations instead of
    // ending the job; the record says why.
    try {
      return launch(variant, body);
    } catch (const std::exception& error) {
      graphs_active_ = false;
      graphs_enabled_late_ = false;
      graphs_.reset();
      graphs_note_ = fmt::format(
          "CUDA graphs, turned on for a host-bound step, failed to capture ({}); this step "
          "runs eagerly",
          error.what());
      return body();
    }
  }
  return launch(variant, body);
#else
  (void)variant;
  return body();
#endif
}

double Runtime::launch(int64_t variant, const std::function<double()>& body) {
#if GPUBENCH_WITH_CUDA
  Graphs& g = *graphs_;
  Graphs::Variant& v = g.variants[variant];
  const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
  if (v.eager_runs < kEagerRunsBeforeCapture || !v.graph) {
    replays_in_a_row_ = 0;
    // Eager runs and the capture go on the side stream, joined to the current one both ways.
    g.to_side.record(current);
    g.to_side.block(g.side);
    {
      c10::cuda::CUDAStreamGuard guard(g.side);
      if (v.eager_runs < kEagerRunsBeforeCapture) {
        ++v.eager_runs;
        v.units = body();
      } else {
        // Cached blocks of the eager runs go back to the device, so the graph's pool can have
        // that memory.
        c10::cuda::CUDACachingAllocator::emptyCache();
        v.graph = std::make_unique<at::cuda::CUDAGraph>();
        v.graph->capture_begin(g.pool);
        g.capturing = &v;
        try {
          v.units = body();
        } catch (...) {
          // Leave capture mode before anything else touches the device; the error (an
          // out-of-memory one included) goes on as it was.
          g.capturing = nullptr;
          try {
            v.graph->capture_end();
          } catch (...) {
          }
          v.graph.reset();
          v.updates.clear();
          throw;
        }
        g.capturing = nullptr;
        v.graph->capture_end();
        ++g.captured;
      }
    }
    g.to_current.record(g.side);
    g.to_current.block(current);
    if (!v.graph) return v.units;
  } else {
    ++replays_in_a_row_;
  }
  // A capture runs nothing: this replay is the iteration, captured or not. Each update's host
  // half writes its scalars first, on the stream the graph replays on.
  for (auto& [updater, slots] : v.updates) {
    for (int slot = 0; slot < slots; ++slot) updater->prepare_update(slot);
  }
  v.graph->replay();
  for (auto& [updater, slots] : v.updates) updater->finish_update();
  return v.units;
#else
  (void)variant;
  return body();
#endif
}

void Runtime::allocate_optimizer_state() {
  for (auto& [name, updater] : updaters_) {
    updater->optimizer().allocate_state(StateFor::kEveryParameter);
  }
}

Json Runtime::info() const {
  Json updaters = Json::array();
  for (const auto& [name, updater] : updaters_) {
    int64_t state_bytes = 0;  // what the optimizer holds, which does not grow with the batch
    for (const auto& t : updater->optimizer().state()) {
      state_bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
    Json entry = {{"name", name},
                  {"optimizer", updater->optimizer().describe()},
                  {"optimizer_state_bytes", state_bytes},
                  {"clip_norm", updater->clip_norm()},
                  {"schedule", updater->scheduled()}};
    if (updater->scaler().enabled()) {
      const GradScaler& scaler = updater->scaler();
      entry["updates_checked"] = scaler.updates_checked();
      entry["updates_skipped"] = scaler.updates_skipped();
      // Those of the timed window alone, once it has begun (begin_window).
      if (const auto it = window_start_.find(updater.get()); it != window_start_.end()) {
        entry["window_updates_checked"] = scaler.updates_checked() - it->second.first;
        entry["window_updates_skipped"] = scaler.updates_skipped() - it->second.second;
      }
    }
    updaters.push_back(entry);
  }
  const bool loss_ran =
      settings_.fused_loss && train::fused_vocab_loss_calls() > loss_calls_at_start_;
  const bool norm_ran =
      settings_.fused_norm && train::fused_residual_norm_calls() > norm_calls_at_start_;
  const bool softmax_ran =
      settings_.fused_softmax && train::fused_attention_softmax_calls() > softmax_calls_at_start_;
  Json out = {{"launch", graphs_active_ ? "cuda-graphs" : "eager"},
              {"cuda_graphs", settings_.cuda_graphs},
              {"cuda_graphs_if_host_bound", settings_.cuda_graphs_if_host_bound},
              {"optimizer_kernels", device_.is_cuda() ? settings_.optimizer_kernels : "foreach"},
              {"cudnn_benchmark", settings_.cudnn_benchmark},
              {"cudnn_benchmark_limit", settings_.cudnn_benchmark_limit},
              {"fast_paths", settings_.fast_paths},
              // Whether a loss or layer ran them (notes below say why not where they are on).
              {"fused_loss", loss_ran},
              {"fused_norm", norm_ran},
              {"fused_softmax", softmax_ran},
              {"precision", to_string(precision_)},
              {"autocast",
               is_amp(precision_) ? (precision_ == Precision::kAmpBf16 ? "bf16" : "fp16") : "off"},
              {"loss_scaling", precision_ == Precision::kAmpFp16 ? "dynamic" : "off"},
              {"gradient_sync", sync_->name()},
              {"updaters", updaters}};
  if (graphs_active_) {
    out["graphs_captured"] = graphs_->captured;
    out["eager_runs_before_capture"] = kEagerRunsBeforeCapture;
    // Turned on by the warm-up of a host-bound step, or from the first iteration.
    out["graphs_from"] = graphs_enabled_late_ ? "host-bound warm-up" : "start";
  }
  if (!graphs_note_.empty()) out["cuda_graphs_note"] = graphs_note_;
  // Why a setting that is on ran nowhere: the ATen path ran instead.
  const std::string ran_aten =
      "the ATen path ran (autocast on the CPU, a CUDA build without gpubench's kernels, or "
      "shapes the kernels do not take";
  if (settings_.fused_loss && !loss_ran) {
    out["fused_loss_note"] =
        "on, but no loss ran the fused cross-entropy: ATen's ran (a CUDA build without "
        "gpubench's kernels, or a workload with no vocabulary loss)";
  }
  if (settings_.fused_norm && !norm_ran) {
    out["fused_norm_note"] = "on, but no layer ran the fused norm: " + ran_aten + ")";
  }
  if (settings_.fused_softmax && !softmax_ran) {
    out["fused_softmax_note"] = "on, but no layer ran the fused softmax: " + ran_aten +
                                "; it runs in stored attention with fast_paths on only)";
  }
  return out;
}

void Runtime::begin_window() {
  window_start_.clear();
  for (const auto& [name, updater] : updaters_) {
    window_start_[updater.get()] = {updater->scaler().updates_checked(),
                                    updater->scaler().updates_skipped()};
  }
}

std::string Runtime::degeneracy() const {
  for (const auto& [name, updater] : updaters_) {
    const GradScaler& scaler = updater->scaler();
    if (!scaler.enabled()) continue;
    const auto start = window_start_.find(updater.get());
    const auto [checked0, skipped0] =
        start == window_start_.end() ? std::pair<int64_t, int64_t>{0, 0} : start->second;
    const int64_t checked = scaler.updates_checked() - checked0;
    const int64_t skipped = scaler.updates_skipped() - skipped0;
    if (checked > 0 && skipped == checked) {
      return fmt::format(
          "fp16 loss scaling skipped all {} updates of '{}' in the timed window (its scaled "
          "gradients overflowed every time; the scale is now {}), so the model did not change "
          "while it was timed",
          checked, name, scaler.current_scale());
    }
    if (skipped >= 2 && checked < scaler.growth_interval()) {
      return fmt::format(
          "fp16 loss scaling skipped {} of the {} updates of '{}' in the timed window (the scale "
          "was still falling; it is now {}), so the window timed steps that mostly did not "
          "update the model",
          skipped, checked, name, scaler.current_scale());
    }
  }
  return {};
}

std::string Runtime::unsettled() const {
  for (const auto& [name, updater] : updaters_) {
    const GradScaler& scaler = updater->scaler();
    if (!scaler.enabled() || scaler.updates_skipped() == 0) continue;
    if (scaler.last_skipped()) {
      return fmt::format("fp16 loss scaling skipped the last update of '{}' ({} of {} so far)",
                         name, scaler.updates_skipped(), scaler.updates_checked());
    }
    if (scaler.steps_since_skip() < kSettledUpdates) {
      return fmt::format(
          "fp16 loss scaling of '{}' stepped {} update{} since its last skip, fewer than the {} "
          "in a row that show its scale settled ({} of {} skipped so far)",
          name, scaler.steps_since_skip(), scaler.steps_since_skip() == 1 ? "" : "s",
          kSettledUpdates, scaler.updates_skipped(), scaler.updates_checked());
    }
  }
  return {};
}

}  // namespace train
}  // namespace gpubench
