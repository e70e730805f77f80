#include "flop_counter.h"

#include <ATen/core/ivalue.h>

#include <cstring>
#include <vector>

namespace gpubench::testing {
namespace {

std::atomic<FlopCounter*> active{nullptr};
// Depth inside counted ops (nested ones are not counted again) and inside autograd's backward
// functions, per thread: the autograd engine runs backward functions on its own threads.
thread_local int counted_depth = 0;
thread_local int backward_depth = 0;

/// The observer context of a counted op: its multiply-adds, or -1 when nested.
struct Counted : at::ObserverContext {
  int64_t macs = -1;
  bool backward_scope = false;
};

std::vector<int64_t> ints(const c10::IValue& v) {
  std::vector<int64_t> out;
  if (v.isIntList()) return v.toIntVector();
  if (v.isList()) {
    for (const auto& e : v.toListRef()) out.push_back(e.isInt() ? e.toInt() : 0);
  } else if (v.isInt()) {
    out.push_back(v.toInt());
  }
  return out;
}

int64_t at_or(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  if (v.empty()) return fallback;
  return i < v.size() ? v[i] : v.back();
}

/// MACs of a forward convolution: (input, weight, bias, stride, padding, dilation, transposed,
/// output_padding, groups, ...).
int64_t convolution_macs(c10::ArrayRef<const c10::IValue> in) {
  if (in.size() < 9 || !in[0].isTensor() || !in[1].isTensor()) return 0;
  const auto& input = in[0].toTensor();
  const auto& weight = in[1].toTensor();
  const int64_t per_output = weight.numel() / std::max<int64_t>(weight.size(0), 1);
  const bool transposed = in[6].isBool() && in[6].toBool();
  // A transposed convolution: every input element meets weight[ci] (Cout/groups x kernel).
  if (transposed) return input.numel() * per_output;
  const int64_t spatial = weight.dim() - 2;
  const bool batched = input.dim() == weight.dim();
  const int64_t n = batched ? input.size(0) : 1;
  const auto stride = ints(in[3]), padding = ints(in[4]), dilation = ints(in[5]);
  int64_t out = n * weight.size(0);
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t size = input.size(input.dim() - spatial + d);
    const int64_t k = weight.size(2 + d);
    const int64_t o = (size + 2 * at_or(padding, d, 0) - at_or(dilation, d, 1) * (k - 1) - 1) /
                          at_or(stride, d, 1) +
                      1;
    out *= std::max<int64_t>(o, 0);
  }
  return out * per_output;
}

/// MACs of convolution_backward: (grad_output, input, weight, bias_sizes, stride, padding,
/// dilation, transposed, output_padding, groups, output_mask): each of the input and weight
/// gradients costs the forward's multiply-adds.
int64_t convolution_backward_macs(c10::ArrayRef<const c10::IValue> in) {
  if (in.size() < 11 || !in[0].isTensor() || !in[1].isTensor() || !in[2].isTensor()) return 0;
  const auto& grad_output = in[0].toTensor();
  const auto& input = in[1].toTensor();
  const auto& weight = in[2].toTensor();
  const bool transposed = in[7].isBool() && in[7].toBool();
  const int64_t per = weight.numel() / std::max<int64_t>(weight.size(0), 1);
  const int64_t forward = (transposed ? input.numel() : grad_output.numel()) * per;
  int64_t passes = 0;
  if (in[10].isBoolList()) {
    const auto mask = in[10].toBoolList();
    passes = (mask.size() > 0 && mask.get(0) ? 1 : 0) + (mask.size() > 1 && mask.get(1) ? 1 : 0);
  } else {
    passes = 2;
  }
  return forward * passes;
}

int64_t size_or_zero(const c10::IValue& v, int64_t d) {
  if (!v.isTensor()) return 0;
  const auto& t = v.toTensor();
  if (d < 0) d += t.dim();
  return d >= 0 && d < t.dim() ? t.size(d) : 0;
}

}  // namespace

int64_t op_macs(const std::string& name, c10::ArrayRef<const c10::IValue> in) {
  auto tensor = [&](size_t i) -> const at::Tensor* {
    return i < in.size() && in[i].isTensor() ? &in[i].toTensor() : nullptr;
  };
  if (name == "aten::convolution" || name == "aten::_convolution") return convolution_macs(in);
  if (name == "aten::convolution_backward") return convolution_backward_macs(in);
  // fairseq's ConvTBC: input [T, B, C_in], weight [k, C_in, C_out]; its backward computes the
  // input and weight gradients (2 x the forward) from grad_output [T_out, B, C_out].
  if (name == "aten::conv_tbc" || name == "aten::conv_tbc_backward") {
    const bool backward = name == "aten::conv_tbc_backward";
    const at::Tensor* rows = tensor(0);  // the input, or grad_output in backward
    const at::Tensor* weight = tensor(backward ? 2 : 1);
    if (!rows || !weight || rows->dim() != 3 || weight->dim() != 3) return 0;
    int64_t t_out = rows->size(0);
    if (!backward) {
      const int64_t pad = in.size() > 3 && in[3].isInt() ? in[3].toInt() : 0;
      t_out = rows->size(0) + 2 * pad - weight->size(0) + 1;
    }
    const int64_t forward = std::max<int64_t>(t_out, 0) * rows->size(1) * weight->numel();
    return backward ? 2 * forward : forward;
  }
  // (a [n, k], b [k, m]) at offset 0 (mm, bmm) or 1 (addmm, baddbmm, addbmm): batch x n x k x m.
  auto product = [&](size_t first, bool batched) -> int64_t {
    const at::Tensor* a = tensor(first);
    const at::Tensor* b = tensor(first + 1);
    if (!a || !b || a->dim() < 2 || b->dim() < 2) return 0;
    const int64_t batch = batched ? a->size(0) : 1;
    return batch * a->size(-2) * a->size(-1) * b->size(-1);
  };
  if (name == "aten::mm") return product(0, false);
  if (name == "aten::addmm") return product(1, false);
  if (name == "aten::bmm") return product(0, true);
  if (name == "aten::baddbmm" || name == "aten::addbmm") return product(1, true);
  if (name == "aten::mv") return size_or_zero(in[0], 0) * size_or_zero(in[0], 1);
  if (name == "aten::addmv")
    return in.size() > 1 ? size_or_zero(in[1], 0) * size_or_zero(in[1], 1) : 0;
  if (name == "aten::dot") return tensor(0) ? tensor(0)->numel() : 0;
  return -1;
}

FlopCounter::FlopCounter() {
  FlopCounter* expected = nullptr;
  TORCH_CHECK(active.compare_exchange_strong(expected, this), "one FlopCounter at a time");
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&FlopCounter::on_start, &FlopCounter::on_end).needsInputs(true));
}

FlopCounter::~FlopCounter() {
  at::removeCallback(handle_);
  active.store(nullptr);
}

std::unique_ptr<at::ObserverContext> FlopCounter::on_start(const at::RecordFunction& fn) {
  auto ctx = std::make_unique<Counted>();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ctx->backward_scope = true;
    ++backward_depth;
    return ctx;
  }
  if (fn.scope() != at::RecordScope::FUNCTION) return nullptr;
  const int64_t macs = op_macs(fn.name(), fn.inputs());
  if (macs < 0) return nullptr;  // not a counted op
  if (counted_depth++ == 0) {
    ctx->macs = macs;
    if (FlopCounter* c = active.load()) c->add(fn.name(), macs, backward_depth > 0);
  }
  return ctx;
}

void FlopCounter::on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  auto* counted = static_cast<Counted*>(ctx);
  if (counted == nullptr) return;
  if (counted->backward_scope) {
    --backward_depth;
  } else {
    --counted_depth;
  }
}

void FlopCounter::add(const char* op, int64_t macs, bool backward) {
  (backward ? backward_ : forward_) += macs;
  std::lock_guard<std::mutex> lock(mutex_);
  by_op_[op] += macs;
}

std::map<std::string, int64_t> FlopCounter::by_op() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_op_;
}

void FlopCounter::reset() {
  forward_ = 0;
  backward_ = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  by_op_.clear();
}

}  // namespace gpubench::testing
