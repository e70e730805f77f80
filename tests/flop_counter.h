// Counts the multiply-adds a piece of libtorch work executes, from the shapes of its
// convolutions and matrix products, through a global RecordFunction callback (the hook the
// autograd profiler uses). A dev and test tool for the analytic FLOPs per unit in
// configs/models/*.yaml (docs/workloads/*.md, "FLOPs per ..."): run one training step under a
// FlopCounter and divide by the units it processed.
//
// Counted: aten::convolution (and _convolution where called directly), convolution_backward
// (the input and weight gradients its output mask asks for, each as many MACs as the forward),
// conv_tbc and its backward, mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot. An op nested inside a
// counted one (the backend kernels, a matmul's mm) is not counted again. Not counted: element-wise
// work, normalizations, softmax, pooling, RoIAlign, embedding look-ups, the optimizer: the
// conventions of docs/workloads/bert-base.md. Work done under autograd's backward functions
// is reported apart from the rest ("forward", which includes no-grad work such as greedy
// decoding).
#pragma once

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gpubench::testing {

class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  /// Multiply-adds outside and inside autograd's backward functions, since construction or
  /// the last reset().
  int64_t forward_macs() const { return forward_.load(); }
  int64_t backward_macs() const { return backward_.load(); }
  int64_t macs() const { return forward_macs() + backward_macs(); }
  /// FLOPs: 2 per multiply-add.
  double flops() const { return 2.0 * static_cast<double>(macs()); }
  /// Multiply-adds per counted op name ("aten::mm", "aten::convolution_backward", ...).
  std::map<std::string, int64_t> by_op() const;
  void reset();

 private:
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn);
  static void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx);
  void add(const char* op, int64_t macs, bool backward);

  at::CallbackHandle handle_ = 0;
  std::atomic<int64_t> forward_{0};
  std::atomic<int64_t> backward_{0};
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> by_op_;
};

/// The multiply-adds of one op from its inputs, or -1 for an op that is not counted. Exposed
/// for tests.
int64_t op_macs(const std::string& name, c10::ArrayRef<const c10::IValue> inputs);

}  // namespace gpubench::testing
