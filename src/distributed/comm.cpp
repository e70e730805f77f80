// Data-parallel communication through c10d (include/gpubench/distributed/comm.h). The only file
// that includes c10d: compat.h's c10d section names what differs between libtorch 1.13 and 2.x.
#define GPUBENCH_COMPAT_C10D 1
#include "gpubench/base/compat.h"

#include "gpubench/distributed/comm.h"

#include "gpubench/base/strings.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace gpubench::distributed {

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(seconds, 0.001) * 1000.0));
}

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

/// A TCPStore client (or the server, `is_server`) at addr:port; RendezvousError when it cannot
/// be reached within `timeout_s`.
c10::intrusive_ptr<c10d::Store> open_store(const std::string& addr, int port, bool is_server,
                                           double timeout_s) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  options.waitWorkers = false;
  options.timeout = to_ms(timeout_s);
  try {
    return c10::make_intrusive<c10d::TCPStore>(addr, options);
  } catch (const std::exception& e) {
    throw RendezvousError(fmt::format(
        "rendezvous: cannot {} the TCPStore at {}:{} within {} s ({}); check MASTER_ADDR and "
        "MASTER_PORT, that rank 0 runs, and --rendezvous-timeout",
        is_server ? "open" : "reach", addr, port, format_number(timeout_s),
        std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
  }
}

/// Waits up to `timeout_s` for `keys` on `store`; RendezvousError naming `what` past it.
void wait_keys(c10d::Store& store, const std::vector<std::string>& keys, double timeout_s,
               const std::string& what) {
  try {
    store.wait(keys, to_ms(timeout_s));
  } catch (const std::exception& e) {
    const std::string why = e.what();
    throw RendezvousError(fmt::format("rendezvous: {} did not complete within {} s ({})", what,
                                      format_number(timeout_s),
                                      why.substr(0, std::min<std::size_t>(why.find('\n'), 200))));
  }
}

// ---- the c10d communicator ----

class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(const RankSpec& spec, const torch::Device& device)
      : spec_(spec), device_(device) {
    auto tcp = open_store(spec.master_addr, spec.master_port, false, spec.timeout_s);
    store_ = c10::make_intrusive<c10d::PrefixStore>(spec.prefix, tcp);
    // Every rank says it is here, then waits for the others: a clear timeout instead of a
    // backend's opaque one.
    store_->set(fmt::format("arrived/{}", spec.rank), bytes(std::to_string(spec.world_size)));
    std::vector<std::string> keys;
    for (int r = 0; r < spec.world_size; ++r) keys.push_back(fmt::format("arrived/{}", r));
    wait_keys(*store_, keys, spec.timeout_s,
              fmt::format("{} of {} ranks", spec.world_size, spec.world_size));
    for (int r = 0; r < spec.world_size; ++r) {
      const std::string theirs = text(store_->get(keys[static_cast<std::size_t>(r)]));
      GPUBENCH_CHECK(theirs == std::to_string(spec.world_size), ConfigError,
                     "rendezvous: rank {} runs with world size {}, this rank (rank {}) with {}; "
                     "every rank must be started with the same WORLD_SIZE",
                     r, theirs, spec.rank, spec.world_size);
    }
    if (spec.backend == "nccl") {
#if GPUBENCH_HAS_C10D_NCCL
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = to_ms(spec.timeout_s);
      nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, spec.rank, spec.world_size,
                                                         options);
      group_ = nccl_;
#else
      throw JobError(fmt::format("data-parallel training over NCCL: {}", backend_support()));
#endif
    } else if (spec.backend == "gloo") {
#if GPUBENCH_HAS_C10D_GLOO
      auto options = c10d::ProcessGroupGloo::Options::create(to_ms(spec.timeout_s));
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname && *ifname) {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (spec.master_addr == "127.0.0.1" || spec.master_addr == "localhost") {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, spec.rank, spec.world_size,
                                                          options);
#else
      throw JobError(fmt::format("data-parallel training over Gloo: {}", backend_support()));
#endif
    } else {
      throw ConfigError(fmt::format("unknown data-parallel backend '{}'", spec.backend));
    }
  }

  ~C10dCommunicator() override {
#if GPUBENCH_HAS_C10D_NCCL
    // NCCL's group is shut down here, not left to exit: libtorch 2.x otherwise warns that
    // destroy_process_group() was never called (and frees the communicators later).
    if (nccl_ && group_) {
      try {
        compat::shutdown_group(*nccl_);
      } catch (const std::exception& e) {
        fmt::print(stderr, "gpubench: rank {}: ending the NCCL group: {}\n", spec_.rank, e.what());
      }
    }
#endif
  }

  int rank() const override { return spec_.rank; }
  int world_size() const override { return spec_.world_size; }
  std::string backend() const override { return spec_.backend; }

  std::function<void()> allreduce_sum(torch::Tensor tensor) override {
    std::vector<torch::Tensor> tensors{std::move(tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    auto work = group_->allreduce(tensors, options);
    return [work]() { work->wait(); };
  }

  std::vector<std::string> exchange(const std::string& key, const std::string& value) override {
    store_->set(fmt::format("{}/{}", key, spec_.rank), bytes(value));
    std::vector<std::string> keys;
    for (int r = 0; r < spec_.world_size; ++r) keys.push_back(fmt::format("{}/{}", key, r));
    wait_keys(*store_, keys, spec_.timeout_s, fmt::format("the exchange of '{}'", key));
    std::vector<std::string> values;
    for (const auto& k : keys) values.push_back(text(store_->get(k)));
    return values;
  }

  std::string from_rank_zero(const std::string& key, const std::string& value) override {
    // Host-side only: rank 0 does not wait for the others, which wait for it at their next
    // all-reduce anyway.
    if (spec_.rank == 0) {
      store_->set(key, bytes(value));
      return value;
    }
    wait_keys(*store_, {key}, spec_.timeout_s, fmt::format("rank 0's '{}'", key));
    return text(store_->get(key));
  }

 private:
  RankSpec spec_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<compat::CollectiveGroup> group_;
#if GPUBENCH_HAS_C10D_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_;  ///< group_, when the backend is NCCL
#endif
};

}  // namespace

// ---- support ----

bool nccl_compiled() { return GPUBENCH_HAS_C10D_NCCL != 0; }
bool gloo_compiled() { return GPUBENCH_HAS_C10D_GLOO != 0; }

std::string backend_support() {
  std::string nccl = "NCCL: yes";
  if (!nccl_compiled()) {
    nccl = !GPUBENCH_WITH_CUDA
               ? "NCCL: no (a CPU-only libtorch)"
               : "NCCL: no (this build found no nccl.h or no ProcessGroupNCCL.hpp in the libtorch "
                 "headers; install NCCL's headers, e.g. pip's nvidia-nccl, and rebuild)";
  }
  const std::string gloo = gloo_compiled()
                               ? "Gloo: yes"
                               : "Gloo: no (no gloo headers at build time: install libgloo-dev "
                                 "or use a libtorch that ships them, and rebuild)";
  return nccl + "; " + gloo;
}

// ---- joining a process group ----

std::shared_ptr<Communicator> connect(const RankSpec& spec, const torch::Device& device) {
  GPUBENCH_CHECK(spec.world_size >= 1 && spec.rank >= 0 && spec.rank < spec.world_size,
                 ConfigError, "rank {} of a world of {}", spec.rank, spec.world_size);
  return std::make_shared<C10dCommunicator>(spec, device);
}

// ---- the store ----

struct Store::Impl {
  c10::intrusive_ptr<c10d::Store> store;
};

Store::Store(const std::string& addr, int port, bool is_server, double timeout_s)
    : impl_(std::make_unique<Impl>()) {
  impl_->store = open_store(addr, port, is_server, timeout_s);
}
Store::~Store() = default;
int Store::port() const { return compat::store_port(impl_->store); }
void Store::set(const std::string& key, const std::string& value) {
  impl_->store->set(key, bytes(value));
}
std::string Store::get(const std::string& key) { return text(impl_->store->get(key)); }
bool Store::check(const std::string& key) { return impl_->store->check({key}); }
void Store::wait(const std::vector<std::string>& keys, double timeout_s, const std::string& what) {
  wait_keys(*impl_->store, keys, timeout_s, what);
}

StoreServer::StoreServer(double timeout_s) : Store("127.0.0.1", 0, true, timeout_s) {}

// ---- the reducer ----

/// One bucket: its parameters (reverse registration order), where each sits in the flat
/// buffer, which have reported since the last update, and the all-reduce in flight.
struct Bucket {
  std::vector<torch::Tensor> params;
  std::vector<int64_t> offsets;
  int64_t numel = 0;
  torch::Tensor flat;
  std::vector<bool> ready;
  std::size_t ready_count = 0;
  std::function<void()> wait;  // set while an all-reduce of this bucket is in flight
  bool dirty = false;          // a gradient changed after its all-reduce started
};

struct Network {
  std::vector<Bucket> buckets;
  /// Kept alive (a parameter holds its accumulator weakly), with the key of the hook on each.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> accumulators;
};

struct BucketedGradientSync::State {
  std::shared_ptr<Communicator> comm;
  int64_t bucket_bytes = kDefaultBucketBytes;
  std::map<std::string, Network> networks;
  std::mutex mutex;  // hooks of different devices' backward threads
  int64_t updates = 0;
  int64_t launched_in_backward = 0;
  int64_t launched_at_update = 0;
  int64_t relaunched = 0;
  /// The network the current backward is for (backward_for); empty until first told, when
  /// every network's buckets start in any backward.
  std::string backward_for;
  /// Gradients that reached a parameter in another network's backward (left to its own).
  int64_t stray_gradients = 0;

  /// Copies the bucket's gradients into its flat buffer (zeros for a parameter without one)
  /// and starts its all-reduce. One concatenation kernel fills the buffer: a copy per
  /// parameter cost a launch each, which a short step's host time felt (bert-base amp-bf16 at
  /// batch 32, world size 1: 0.81 of the plain run, docs/results/2026-12-03-h200-rois-signals-ddp).
  void launch(Bucket& b) {
    if (!b.flat.defined()) {
      b.flat = torch::zeros({b.numel}, b.params.front().options().requires_grad(false));
    }
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> pieces;
    pieces.reserve(b.params.size());
    for (const auto& p : b.params) {
      pieces.push_back(p.grad().defined() ? p.grad().reshape({-1})
                                          : torch::zeros({p.numel()}, b.flat.options()));
    }
    torch::cat_out(b.flat, pieces, 0);
    b.wait = comm->allreduce_sum(b.flat);
  }
};

namespace {

/// Runs `fn` after the parameter's gradient accumulator ran (DDP's autograd hook).
class AccumulatedHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatedHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

BucketedGradientSync::BucketedGradientSync(std::shared_ptr<Communicator> communicator,
                                           int64_t bucket_bytes)
    : state_(std::make_unique<State>()) {
  GPUBENCH_ASSERT(communicator && bucket_bytes > 0);
  state_->comm = std::move(communicator);
  state_->bucket_bytes = bucket_bytes;
}

BucketedGradientSync::~BucketedGradientSync() {
  // The hooks point into the state: take them out of the accumulators that may outlive it.
  // (The step that owns the parameters is destroyed first in practice; this is for tests.)
  for (auto& [name, net] : state_->networks) {
    for (auto& [acc, key] : net.accumulators) acc->del_post_hook(key);
  }
}

void BucketedGradientSync::attach(const std::string& updater,
                                  const std::vector<torch::Tensor>& parameters) {
  State& s = *state_;
  if (auto old = s.networks.find(updater); old != s.networks.end()) {
    // A step built again (a new model of the same network): its hooks replace the old ones.
    for (auto& [acc, key] : old->second.accumulators) acc->del_post_hook(key);
    s.networks.erase(old);
  }
  Network& net = s.networks[updater];
  // Reverse order of registration: roughly the order backward produces the gradients.
  std::vector<torch::Tensor> trainable;
  for (const auto& p : parameters) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  std::reverse(trainable.begin(), trainable.end());
  for (const auto& p : trainable) {
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    const bool fresh = net.buckets.empty() ||
                       net.buckets.back().params.front().scalar_type() != p.scalar_type() ||
                       net.buckets.back().params.front().device() != p.device() ||
                       (net.buckets.back().numel * static_cast<int64_t>(p.element_size()) + size >
                        s.bucket_bytes);
    if (fresh) net.buckets.emplace_back();
    Bucket& b = net.buckets.back();
    b.params.push_back(p);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    b.ready.push_back(false);
  }
  for (std::size_t bi = 0; bi < net.buckets.size(); ++bi) {
    Bucket& b = net.buckets[bi];
    for (std::size_t i = 0; i < b.params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(b.params[i]);
      GPUBENCH_CHECK(acc != nullptr, JobError,
                     "gradient sync: a parameter of '{}' has no gradient accumulator", updater);
      State* state = state_.get();
      Bucket* bucket = &b;  // the vector does not change after this loop
      const std::string* network = &s.networks.find(updater)->first;  // a map key stays put
      const uintptr_t key = acc->add_post_hook(std::make_unique<AccumulatedHook>([state, bucket,
                                                                                  network, i] {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (bucket->wait) {
          bucket->dirty = true;  // a second backward before the update: reduce again there
          return;
        }
        if (!state->backward_for.empty() && state->backward_for != *network) {
          // Another network's backward reached this parameter (a GAN's G loss through D): its
          // gradient is in .grad, which this network's own backward or update copies when it
          // starts the bucket. Starting it now would only be repeated there.
          ++state->stray_gradients;
          return;
        }
        if (!bucket->ready[i]) {
          bucket->ready[i] = true;
          if (++bucket->ready_count == bucket->params.size()) {
            state->launch(*bucket);
            ++state->launched_in_backward;
          }
        }
      }));
      net.accumulators.emplace_back(std::move(acc), key);
    }
  }
}

void BucketedGradientSync::synchronize(const std::string& updater,
                                       std::vector<torch::Tensor>& gradients) {
  (void)gradients;  // the same tensors as the attached parameters' .grad, written in place
  State& s = *state_;
  auto found = s.networks.find(updater);
  GPUBENCH_CHECK(found != s.networks.end(), JobError,
                 "gradient sync: network '{}' was never attached", updater);
  std::lock_guard<std::mutex> lock(s.mutex);
  const double world = static_cast<double>(s.comm->world_size());
  // In bucket order, as every rank does: the collectives pair up across ranks.
  for (Bucket& b : found->second.buckets) {
    if (!b.wait) {
      s.launch(b);  // some parameter got no gradient in this backward
      ++s.launched_at_update;
    }
  }
  torch::NoGradGuard no_grad;
  for (Bucket& b : found->second.buckets) {
    b.wait();
    if (b.dirty) {
      s.launch(b);
      ++s.relaunched;
      b.wait();
    }
    if (world != 1) b.flat.div_(world);
    // Back into the gradients in one multi-tensor copy.
    std::vector<torch::Tensor> grads, slices;
    for (std::size_t i = 0; i < b.params.size(); ++i) {
      auto grad = b.params[i].grad();
      if (!grad.defined()) continue;
      slices.push_back(b.flat.narrow(0, b.offsets[i], b.params[i].numel()).view_as(grad));
      grads.push_back(std::move(grad));
    }
    compat::foreach_copy_(grads, slices);
    b.wait = nullptr;
    b.dirty = false;
    std::fill(b.ready.begin(), b.ready.end(), false);
    b.ready_count = 0;
  }
  ++s.updates;
  if (s.updates == 2) inject_fault_if_asked(s.comm->rank());
  delay_if_asked(s.comm->rank());
}

void BucketedGradientSync::backward_for(const std::string& updater) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->backward_for = updater;
}

std::string BucketedGradientSync::name() const {
  return state_->comm->backend() + "-allreduce-bucketed";
}

std::string BucketedGradientSync::capture_problem() const {
  return "data-parallel training all-reduces from autograd hooks and waits on the host for "
         "Gloo; capturing those collectives in a CUDA graph is not supported here yet, so this "
         "step runs eagerly";
}

GradientSyncRecord BucketedGradientSync::info() const {
  GradientSyncRecord out;
  out.name = name();
  out.bucket_cap_bytes = state_->bucket_bytes;
  for (const auto& [network, net] : state_->networks) {
    GradientBuckets buckets;
    buckets.buckets = static_cast<int64_t>(net.buckets.size());
    for (const auto& b : net.buckets) {
      buckets.bucket_bytes.push_back(b.numel *
                                     static_cast<int64_t>(b.params.front().element_size()));
    }
    out.networks.emplace_back(network, std::move(buckets));
  }
  out.updates = state_->updates;
  out.allreduces_started_in_backward = state_->launched_in_backward;
  out.allreduces_started_at_update = state_->launched_at_update;
  out.allreduces_repeated = state_->relaunched;
  out.gradients_from_other_backward = state_->stray_gradients;
  return out;
}

int64_t BucketedGradientSync::updates() const { return state_->updates; }

}  // namespace gpubench::distributed
