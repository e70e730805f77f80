// The activation trace, a diagnosis of StyleGAN's training in fp16 (GPUBENCH_TRACE_ACTIVATIONS=1,
// or N for N step iterations instead of 6): the largest value and the non-finite values of
// every traced tensor of G's and D's forward passes and of the networks' parameters after each
// update, on stderr or to a test's sink. Host reads: never on in a timed run.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>

namespace gpubench::train {
class Updater;
}

namespace gpubench::models {

/// Diagnosis (GPUBENCH_TRACE_ACTIVATIONS): one traced tensor of a G or D forward, or a
/// network's parameters after an update.
struct ActivationTraceRecord {
  int64_t iteration = 0;      ///< the step's iteration, from 1 (0 outside a step)
  std::string pass;           ///< "d-step G(z)", "g-step D(G(z))", ...; "" outside a step
  std::string layer;          ///< "G.mapping", "G.1024.conv1.norm", "D.mbstd", ...
  torch::ScalarType dtype{};  ///< the tensor's
  double max_abs = 0;         ///< largest |x| among its finite values
  int64_t nonfinite = 0;      ///< inf and NaN values
};

/// Whether the activation trace is on now: GPUBENCH_TRACE_ACTIVATIONS set (or a test sink
/// installed) and the step still within its first traced iterations. One static flag.
bool activation_trace_active();
/// Sends the activation trace to `sink` for the next `iterations` step iterations (tests);
/// an empty sink turns it off again.
void set_activation_trace_sink(std::function<void(const ActivationTraceRecord&)> sink,
                               int64_t iterations);
/// Traces `x` as `layer` (a host read); call only when activation_trace_active().
void trace_activation(const std::string& layer, const torch::Tensor& x);

/// Once per step iteration, before it runs: counts it and says so (when the trace is on).
void trace_iteration_begins();
/// Names what the step runs next ("d-step G(z)"), for the records that follow.
void trace_pass(const char* pass);
/// After an update of `network` ("G", "D"): the largest |p| of `module` (and which), its
/// non-finite values (and the first parameter holding one), and `updater`'s loss scale, on
/// stderr (a host read); call only when activation_trace_active().
void trace_parameters(const char* network, const torch::nn::Module& module,
                      const train::Updater& updater);

}  // namespace gpubench::models
