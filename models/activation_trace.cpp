#include "models/activation_trace.h"

#include "gpubench/base/env.h"
#include "gpubench/train/update.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace gpubench::models {

namespace {

// What the trace knows between calls: whether it is on, and where the step is.
struct TraceState {
  bool enabled = false;    // the environment asked, or a test sink is installed
  int64_t iterations = 6;  // traced step iterations
  int64_t iteration = 0;   // the current step's, from 1
  std::string pass;        // what the step is running
  std::function<void(const ActivationTraceRecord&)> sink;  // tests; else stderr
};

TraceState& trace_state() {
  static TraceState state = [] {
    TraceState t;
    const char* v = env::get(env::Switch::kTraceActivations);
    if (v != nullptr && *v != '\0' && std::string(v) != "0") {
      t.enabled = true;
      const long n = std::strtol(v, nullptr, 10);
      if (n > 1) t.iterations = n;  // "1" turns it on for the default 6
    }
    return t;
  }();
  return state;
}

}  // namespace

bool activation_trace_active() {
  static TraceState& t = trace_state();
  return t.enabled && t.iteration <= t.iterations;
}

void set_activation_trace_sink(std::function<void(const ActivationTraceRecord&)> sink,
                               int64_t iterations) {
  auto& t = trace_state();
  t.enabled = static_cast<bool>(sink);
  t.sink = std::move(sink);
  t.iterations = iterations;
  t.iteration = 0;
  t.pass.clear();
}

void trace_iteration_begins() {
  auto& t = trace_state();
  if (!t.enabled) return;
  ++t.iteration;
  t.pass.clear();
  if (!t.sink && t.iteration <= t.iterations) {
    std::fprintf(stderr, "activation trace: iteration %lld\n", static_cast<long long>(t.iteration));
  }
}

void trace_pass(const char* pass) {
  if (activation_trace_active()) trace_state().pass = pass;
}

void trace_parameters(const char* network, const torch::nn::Module& module,
                      const train::Updater& updater) {
  torch::NoGradGuard no_grad;
  double max_abs = 0;
  int64_t nonfinite = 0;
  std::string largest, first_bad;
  for (const auto& item : module.named_parameters()) {
    const auto p = item.value().detach();
    const auto finite = torch::isfinite(p);
    const auto stats = torch::stack({p.abs().masked_fill(~finite, 0).max().to(torch::kDouble),
                                     (~finite).sum().to(torch::kDouble)})
                           .cpu();
    const double m = stats[0].item<double>();
    const auto bad = static_cast<int64_t>(stats[1].item<double>());
    if (m > max_abs) max_abs = m, largest = item.key();
    if (bad > 0 && first_bad.empty()) first_bad = item.key();
    nonfinite += bad;
  }
  const auto& scaler = updater.scaler();
  const std::string scale =
      scaler.enabled()
          ? fmt::format("loss scale {:.6g}, skipped {} of {} updates", scaler.current_scale(),
                        scaler.updates_skipped(), scaler.updates_checked())
          : std::string("no loss scaling");
  std::fprintf(stderr,
               "activation trace: it %lld | after %s update | max|p| %.4g (%s) | nonfinite %lld%s "
               "| %s\n",
               static_cast<long long>(trace_state().iteration), network, max_abs, largest.c_str(),
               static_cast<long long>(nonfinite),
               first_bad.empty() ? "" : (" (first in " + first_bad + ")").c_str(), scale.c_str());
}

void trace_activation(const std::string& layer, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const auto& t = trace_state();
  const auto d = x.detach();
  const auto finite = torch::isfinite(d);
  const auto stats = torch::stack({d.abs().masked_fill(~finite, 0).max().to(torch::kDouble),
                                   (~finite).sum().to(torch::kDouble)})
                         .cpu();
  ActivationTraceRecord r;
  r.iteration = t.iteration;
  r.pass = t.pass;
  r.layer = layer;
  r.dtype = d.scalar_type();
  r.max_abs = stats[0].item<double>();
  r.nonfinite = static_cast<int64_t>(stats[1].item<double>());
  if (t.sink) return t.sink(r);
  std::string shape;
  for (const auto s : d.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(s);
  std::fprintf(
      stderr, "activation trace: it %lld | %s | %s | %s | max|x| %.4g | nonfinite %lld | %s\n",
      static_cast<long long>(r.iteration), r.pass.c_str(), layer.c_str(), c10::toString(r.dtype),
      r.max_abs, static_cast<long long>(r.nonfinite), shape.c_str());
}

}  // namespace gpubench::models
