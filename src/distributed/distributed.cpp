// Data-parallel training through c10d (include/gpubench/distributed/distributed.h). The only file that
// includes c10d: compat.h's c10d section names what differs between libtorch 1.13 and 2.x.
#define GPUBENCH_COMPAT_C10D 1
#include "gpubench/base/compat.h"

#include "gpubench/distributed/distributed.h"

#include "gpubench/device/device.h"
#include "gpubench/run/process.h"
#include "gpubench/records/result.h"
#include "gpubench/base/strings.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace gpubench::distributed {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(seconds, 0.001) * 1000.0));
}

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

/// A whole number in [low, high] from `value`, or ConfigError naming `what`.
int parse_int(const std::string& value, const std::string& what, int low, int high) {
  const bool digits = !value.empty() && value.size() <= 9 &&
                      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  GPUBENCH_CHECK(digits, ConfigError, "{}: expected a whole number, got '{}'", what,
                 terminal_safe(value));
  const int n = std::stoi(value);
  GPUBENCH_CHECK(n >= low && n <= high, ConfigError, "{}: expected {} to {}, got {}", what, low,
                 high, n);
  return n;
}

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
      group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, spec.rank, spec.world_size,
                                                          options);
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

 private:
  RankSpec spec_;
  torch::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<compat::CollectiveGroup> group_;
};

// ---- NVML, for the interconnect (loaded at run time: no link-time dependency) ----

struct Nvml {
  using Init = int (*)();
  using ByIndex = int (*)(unsigned, void**);
  using LinkState = int (*)(void*, unsigned, int*);
  void* lib = nullptr;
  Init init = nullptr;
  ByIndex by_index = nullptr;
  LinkState link_state = nullptr;
  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    by_index = reinterpret_cast<ByIndex>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    link_state = reinterpret_cast<LinkState>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
    if (!init || !by_index || !link_state || init() != 0) init = nullptr;
  }
  bool ok() const { return init != nullptr; }
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

// ---- the environment ----

std::optional<EnvironmentRank> rank_from_environment(
    const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  EnvironmentRank env;
  std::string rank = get("RANK"), world = get("WORLD_SIZE"), local = get("LOCAL_RANK");
  env.source = "torchrun";
  if (rank.empty() && !get("SLURM_PROCID").empty()) {
    rank = get("SLURM_PROCID");
    world = get("SLURM_NTASKS");
    local = get("SLURM_LOCALID");
    env.source = "slurm";
    // Slurm sets these for every task, data-parallel or not: only with MASTER_ADDR exported
    // (what a data-parallel job script does) are its tasks ranks of one job.
    if (get("MASTER_ADDR").empty()) return std::nullopt;
  }
  if (rank.empty()) {
    GPUBENCH_CHECK(world.empty() || world == "1", ConfigError,
                   "WORLD_SIZE={} is set but RANK is not; torchrun sets both (or unset "
                   "WORLD_SIZE)",
                   terminal_safe(world));
    return std::nullopt;
  }
  const std::string rank_name = env.source == "slurm" ? "SLURM_PROCID" : "RANK";
  const std::string world_name = env.source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE";
  GPUBENCH_CHECK(!world.empty(), ConfigError, "{} is set but {} is not", rank_name, world_name);
  env.world_size = parse_int(world, world_name, 1, 65536);
  env.rank = parse_int(rank, rank_name, 0, 65535);
  GPUBENCH_CHECK(env.rank < env.world_size, ConfigError,
                 "{}={} is outside the world of {}={} (ranks are 0 to {})", rank_name, env.rank,
                 world_name, env.world_size, env.world_size - 1);
  env.local_rank = local.empty() ? 0 : parse_int(local, "LOCAL_RANK", 0, 65535);
  env.master_addr = get("MASTER_ADDR");
  const std::string port = get("MASTER_PORT");
  // One rank and nowhere to meet: a plain run (RANK=0 WORLD_SIZE=1 left in the environment).
  if (env.world_size == 1 && env.master_addr.empty()) return std::nullopt;
  GPUBENCH_CHECK(!env.master_addr.empty(), ConfigError,
                 "{}={} of {}: MASTER_ADDR is not set (the host of rank 0, where the ranks meet)",
                 rank_name, env.rank, env.world_size);
  env.master_port = port.empty() ? 29500 : parse_int(port, "MASTER_PORT", 1, 65535);
  return env;
}

std::vector<int> parse_gpu_list(const std::string& value, int device_count) {
  std::vector<int> gpus;
  if (value == "all") {
    GPUBENCH_CHECK(device_count > 0, DeviceError,
                   "--gpus all: no CUDA device is visible (see 'gpubench info')");
    for (int i = 0; i < device_count; ++i) gpus.push_back(i);
    return gpus;
  }
  std::set<int> seen;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = value.find(',', start);
    const std::string item = value.substr(start, comma == std::string::npos ? comma : comma - start);
    GPUBENCH_CHECK(!item.empty(), ConfigError,
                   "--gpus: expected indices like 0,1,2,3 or 'all', got '{}' (an empty entry)",
                   terminal_safe(value));
    const int gpu = parse_int(item, "--gpus", 0, 4096);
    GPUBENCH_CHECK(seen.insert(gpu).second, ConfigError,
                   "--gpus: GPU {} is named twice in '{}'; each GPU runs one rank", gpu,
                   terminal_safe(value));
    gpus.push_back(gpu);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  // The whole list is well formed; now whether its GPUs are there.
  for (int gpu : gpus) {
    GPUBENCH_CHECK(gpu < device_count, DeviceError,
                   "--gpus: GPU {} does not exist; {} CUDA device{} visible (see 'gpubench info')",
                   gpu, device_count == 0 ? std::string("no") : fmt::format("only {}", device_count),
                   device_count == 1 ? " is" : "s are");
  }
  return gpus;
}

// ---- joining a process group ----

std::shared_ptr<Communicator> connect(const RankSpec& spec, const torch::Device& device) {
  GPUBENCH_CHECK(spec.world_size >= 1 && spec.rank >= 0 && spec.rank < spec.world_size,
                 ConfigError, "rank {} of a world of {}", spec.rank, spec.world_size);
  return std::make_shared<C10dCommunicator>(spec, device);
}

// ---- the store server ----

struct StoreServer::Impl {
  c10::intrusive_ptr<c10d::Store> store;
};

StoreServer::StoreServer(double timeout_s) : impl_(std::make_unique<Impl>()) {
  impl_->store = open_store("127.0.0.1", 0, true, timeout_s);
}
StoreServer::~StoreServer() = default;
int StoreServer::port() const { return compat::store_port(impl_->store); }

// ---- RankSpec and DataParallelPlan ----

Json RankSpec::to_json() const {
  return {{"rank", rank},
          {"world_size", world_size},
          {"backend", backend},
          {"master_addr", master_addr},
          {"master_port", master_port},
          {"prefix", prefix},
          {"timeout_s", timeout_s},
          {"devices", devices},
          {"interconnect", interconnect}};
}

RankSpec RankSpec::from_json(const Json& json) {
  RankSpec s;
  s.rank = json.at("rank").get<int>();
  s.world_size = json.at("world_size").get<int>();
  s.backend = json.at("backend").get<std::string>();
  s.master_addr = json.at("master_addr").get<std::string>();
  s.master_port = json.at("master_port").get<int>();
  s.prefix = json.value("prefix", std::string());
  s.timeout_s = json.value("timeout_s", 300.0);
  s.devices = json.value("devices", std::vector<std::string>());
  s.interconnect = json.value("interconnect", std::string("unknown"));
  return s;
}

Json DataParallelPlan::to_json() const {
  Json out = {{"world_size", world_size},
              {"backend", backend},
              {"devices", devices},
              {"rendezvous_timeout_s", rendezvous_timeout_s}};
  if (environment) {
    out["environment"] = {{"rank", environment->rank},
                          {"world_size", environment->world_size},
                          {"local_rank", environment->local_rank},
                          {"master_addr", environment->master_addr},
                          {"master_port", environment->master_port},
                          {"source", environment->source}};
  }
  return out;
}

DataParallelPlan DataParallelPlan::from_json(const Json& json) {
  DataParallelPlan p;
  p.world_size = json.at("world_size").get<int>();
  p.backend = json.at("backend").get<std::string>();
  p.devices = json.value("devices", std::vector<std::string>());
  p.rendezvous_timeout_s = json.value("rendezvous_timeout_s", 300.0);
  if (json.contains("environment")) {
    const Json& e = json["environment"];
    EnvironmentRank env;
    env.rank = e.at("rank").get<int>();
    env.world_size = e.at("world_size").get<int>();
    env.local_rank = e.value("local_rank", 0);
    env.master_addr = e.at("master_addr").get<std::string>();
    env.master_port = e.at("master_port").get<int>();
    env.source = e.value("source", std::string("torchrun"));
    p.environment = env;
  }
  return p;
}

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
      const uintptr_t key = acc->add_post_hook(std::make_unique<AccumulatedHook>([state, bucket, i] {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (bucket->wait) {
          bucket->dirty = true;  // a second backward before the update: reduce again there
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
}

std::string BucketedGradientSync::name() const {
  return state_->comm->backend() + "-allreduce-bucketed";
}

std::string BucketedGradientSync::capture_problem() const {
  return "data-parallel training all-reduces from autograd hooks and waits on the host for "
         "Gloo; capturing those collectives in a CUDA graph is not supported here yet, so this "
         "step runs eagerly";
}

Json BucketedGradientSync::info() const {
  Json networks = Json::object();
  for (const auto& [name, net] : state_->networks) {
    Json sizes = Json::array();
    for (const auto& b : net.buckets) {
      sizes.push_back(b.numel * static_cast<int64_t>(b.params.front().element_size()));
    }
    networks[name] = {{"buckets", net.buckets.size()}, {"bucket_bytes", sizes}};
  }
  return {{"name", name()},
          {"bucket_cap_bytes", state_->bucket_bytes},
          {"networks", networks},
          {"updates", state_->updates},
          {"allreduces_started_in_backward", state_->launched_in_backward},
          {"allreduces_started_at_update", state_->launched_at_update},
          {"allreduces_repeated", state_->relaunched}};
}

int64_t BucketedGradientSync::updates() const { return state_->updates; }

// ---- after the timed phase ----

void finish_timed_phase(JobRecord& record, Communicator& comm, const RankSpec& spec,
                        const BucketedGradientSync& sync) {
  if (record.ok() && sync.updates() == 0) {
    record.status = "failed";
    record.message =
        "data-parallel: this workload's step updated without the runtime's gradient sync "
        "(train::Runtime::update), so its ranks did not train one model";
  }
  const Json mine = {{"rank", spec.rank},
                     {"device", record.device.name},
                     {"status", record.status},
                     {"message", record.message},
                     {"throughput", record.throughput},
                     {"units_per_step", record.units_per_step},
                     {"steps", record.timing.steps},
                     {"step_time_ms_median", record.timing.median_ms},
                     {"step_time_ms_mean", record.timing.mean_ms},
                     {"step_time_ms", record.step_time_ms}};
  const std::vector<std::string> all = comm.exchange("result", mine.dump());
  Json ranks = Json::array();
  double total = 0, slowest = 0, fastest = 0;
  std::string failed;
  for (std::size_t r = 0; r < all.size(); ++r) {
    Json entry = Json::parse(all[r]);
    if (!spec.devices.empty() && r < spec.devices.size()) entry["device_index"] = spec.devices[r];
    const std::string status = entry.value("status", std::string("failed"));
    if (status != "ok" && failed.empty()) {
      failed = fmt::format("rank {}: {}", r, entry.value("message", status));
      if (record.ok()) record.status = status;
    }
    total += entry.value("throughput", 0.0);
    const double median = entry.value("step_time_ms_median", 0.0);
    slowest = r == 0 ? median : std::max(slowest, median);
    fastest = r == 0 ? median : std::min(fastest, median);
    ranks.push_back(std::move(entry));
  }
  Json dp = {{"world_size", spec.world_size},
             {"backend", spec.backend},
             {"interconnect", spec.interconnect},
             {"devices", spec.devices},
             {"per_rank_batch", record.batch},
             {"global_batch", record.batch * spec.world_size},
             {"scaling", "weak: every rank at the per-rank batch; throughput summed"},
             {"ranks", ranks},
             {"rank_throughput", record.throughput},
             {"step_time_spread_pct", fastest > 0 ? (slowest - fastest) / fastest * 100 : 0.0},
             {"gradient_sync", sync.info()},
             // Known once a one-GPU record of the same job sits beside it (report's scaling table).
             {"single_gpu_throughput", nullptr},
             {"scaling_efficiency", nullptr}};
  record.data_parallel = dp;
  if (!failed.empty()) {
    record.message = record.message.empty() ? failed : record.message;
    record.throughput = 0;
    return;
  }
  record.throughput = total;
}

namespace {
/// Whether NVML sees an active NVLink on CUDA device `gpu`; none without NVML. (NVML counts
/// devices as CUDA does when CUDA_DEVICE_ORDER=PCI_BUS_ID, the usual order on servers.)
std::optional<bool> has_active_nvlink(int gpu) {
  static Nvml nvml;
  if (!nvml.ok()) return std::nullopt;
  void* handle = nullptr;
  if (nvml.by_index(static_cast<unsigned>(gpu), &handle) != 0) return std::nullopt;
  for (unsigned link = 0; link < 18; ++link) {
    int state = 0;
    if (nvml.link_state(handle, link, &state) == 0 && state == 1) return true;
  }
  return false;
}
}  // namespace

std::string interconnect_of(const std::vector<int>& gpus) {
  if (gpus.empty()) return "unknown";
  if (gpus.size() == 1) return "none (one GPU)";
  int with_nvlink = 0;
  for (int gpu : gpus) {
    const auto active = has_active_nvlink(gpu);
    if (!active) return "unknown";
    with_nvlink += *active ? 1 : 0;
  }
  if (with_nvlink == static_cast<int>(gpus.size())) return "NVLink";
  if (with_nvlink == 0) return "PCIe";
  return "mixed (NVLink on some GPUs, PCIe on others)";
}

void inject_fault_if_asked(int rank) {
  const char* fault = std::getenv("GPUBENCH_FAULT_RANK");
  if (!fault || !*fault) return;
  const std::string value = fault;
  const auto colon = value.find(':');
  if (colon == std::string::npos || value.substr(0, colon) != std::to_string(rank)) return;
  const std::string what = value.substr(colon + 1);
  if (what == "crash") {
    std::fprintf(stderr, "gpubench: GPUBENCH_FAULT_RANK: rank %d kills itself\n", rank);
    raise(SIGKILL);
  } else if (what == "hang") {
    std::fprintf(stderr, "gpubench: GPUBENCH_FAULT_RANK: rank %d stops answering\n", rank);
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// ---- the launcher ----

namespace {

std::optional<JobRecord> read_record(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().empty()) return std::nullopt;
  try {
    return JobRecord::from_json(Json::parse(buffer.str()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// One rank's worker as the launcher watches it.
struct RankProcess {
  int rank = 0;
  std::string device;
  std::string spec_path, out_path;
  pid_t pid = -1;
  bool running = false;
  bool stopped_by_us = false;
  int exit_code = -1;
  int signal = 0;
  std::optional<JobRecord> record;
};

pid_t start_worker(const std::string& exe, const RankProcess& p, bool quiet) {
  std::vector<std::string> argv = {exe, "worker", "--spec", p.spec_path, "--out", p.out_path};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment, with the non-zero ranks' progress lines off (rank 0 speaks for all).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (quiet && std::strncmp(*e, "GPUBENCH_QUIET=", 15) == 0) continue;
    env_strings.emplace_back(*e);
  }
  if (quiet) env_strings.emplace_back("GPUBENCH_QUIET=1");
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    throw AbortError(fmt::format("cannot start a worker process: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);
    execve(args[0], args.data(), envp.data());
    static const char kMessage[] = "error: cannot start the gpubench worker executable\n";
    [[maybe_unused]] const ssize_t n = ::write(2, kMessage, sizeof kMessage - 1);
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

}  // namespace

struct DataParallelLauncher::Impl {
  DataParallelPlan plan;
  std::string executable;
  WorkerLauncher single;  // the search, on one GPU
  c10::intrusive_ptr<c10d::Store> store;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int timed_runs = 0;
  int searches = 0;

  /// Starts every rank's worker, watches them, stops all when one fails or the time is up.
  JobRecord launch_local(const JobSpec& spec, double timeout_s) {
    const std::string prefix = fmt::format("run-{}/", ++timed_runs);
    std::vector<RankProcess> ranks(static_cast<std::size_t>(plan.world_size));
    std::vector<int> gpus;
    for (const auto& d : plan.devices) {
      if (d.rfind("cuda:", 0) == 0) gpus.push_back(std::stoi(d.substr(5)));
    }
    const std::string interconnect =
        plan.backend == "gloo" && gpus.empty() ? "loopback (CPU ranks)" : interconnect_of(gpus);
    struct Cleanup {
      std::vector<RankProcess>& ranks;
      ~Cleanup() {
        for (auto& p : ranks) {
          if (p.running) kill(-p.pid, SIGKILL), waitpid(p.pid, nullptr, 0);
          if (!p.spec_path.empty()) std::remove(p.spec_path.c_str());
          if (!p.out_path.empty()) std::remove(p.out_path.c_str());
        }
      }
    } cleanup{ranks};
    for (int r = 0; r < plan.world_size; ++r) {
      RankProcess& p = ranks[static_cast<std::size_t>(r)];
      p.rank = r;
      p.device = plan.devices.at(static_cast<std::size_t>(r));
      p.spec_path = make_work_file("spec");
      p.out_path = make_work_file("out");
      std::remove(p.out_path.c_str());
      JobSpec rank_spec = spec;
      rank_spec.device = p.device;
      RankSpec rs;
      rs.rank = r;
      rs.world_size = plan.world_size;
      rs.backend = plan.backend;
      rs.master_addr = master_addr;
      rs.master_port = master_port;
      rs.prefix = prefix;
      rs.timeout_s = timeout_s;
      rs.devices = plan.devices;
      rs.interconnect = interconnect;
      rank_spec.distributed = rs.to_json();
      write_file_atomically(p.spec_path, rank_spec.to_json().dump());
    }
    for (auto& p : ranks) {
      p.pid = start_worker(executable, p, p.rank != 0);
      p.running = true;
    }
    const auto started = Clock::now();
    bool timed_out = false;
    double stop_at = -1;     // when the others were asked to stop (SIGTERM)
    bool escalated = false;  // and then killed (SIGKILL)
    auto stop_all = [&](double now) {
      if (stop_at >= 0) return;
      stop_at = now;
      for (auto& q : ranks) {
        if (q.running) kill(-q.pid, SIGTERM);
      }
    };
    while (std::any_of(ranks.begin(), ranks.end(), [](const RankProcess& p) { return p.running; })) {
      try {
        stop_if_asked();
      } catch (const Interrupted&) {
        for (auto& q : ranks) {
          if (q.running) kill(-q.pid, SIGKILL);
        }
        throw;  // Cleanup reaps them
      }
      const double now = seconds_since(started);
      for (auto& p : ranks) {
        if (!p.running) continue;
        int status = 0;
        if (waitpid(p.pid, &status, WNOHANG) != p.pid) continue;
        p.running = false;
        kill(-p.pid, SIGKILL);  // anything the worker left in its group
        if (WIFEXITED(status)) p.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) p.signal = WTERMSIG(status);
        // Ended by our stop, or by itself (a crash, or a kill from outside: the cause).
        p.stopped_by_us = stop_at >= 0 && (p.signal == SIGTERM || (p.signal == SIGKILL && escalated));
        p.record = read_record(p.out_path);
        const bool healthy = p.exit_code == 0 && p.record && p.record->ok();
        // A rank that ended badly leaves the others waiting in a collective: stop them now.
        if (!healthy) stop_all(now);
      }
      if (!timed_out && timeout_s > 0 && now > timeout_s) {
        timed_out = true;
        stop_all(now);
      }
      if (stop_at >= 0 && now > stop_at + 10 && !escalated) {
        escalated = true;
        for (auto& q : ranks) {
          if (q.running) kill(-q.pid, SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double seconds = seconds_since(started);
    // The record is rank 0's (it holds every rank's numbers) when all trained.
    const RankProcess& first = ranks.front();
    const bool all_ok = std::all_of(ranks.begin(), ranks.end(), [](const RankProcess& p) {
      return p.exit_code == 0 && p.record && p.record->ok();
    });
    if (all_ok && !timed_out) return *first.record;
    // Otherwise the cause: a rank that died on its own, else one whose record says why (an
    // out-of-memory first: the step-down reads it), else the timeout.
    JobRecord record;
    record.model = spec.model;
    auto describe = [&](const RankProcess& p) {
      return fmt::format("rank {} ({})", p.rank, p.device);
    };
    for (const auto& p : ranks) {
      if (p.stopped_by_us) continue;
      if (p.signal != 0 || (p.exit_code != 0 && p.exit_code != -1)) {
        record.status = p.signal ? "crashed" : "failed";
        record.message = fmt::format(
            "data-parallel timed run: {} worker {}; the other ranks were stopped", describe(p),
            p.signal ? fmt::format("killed by signal {} ({})", p.signal, strsignal(p.signal))
                     : fmt::format("exited with code {}", p.exit_code));
        return record;
      }
    }
    const RankProcess* cause = nullptr;
    for (const auto& p : ranks) {
      if (p.record && !p.record->ok() && (!cause || p.record->status == "oom")) cause = &p;
    }
    if (cause && !timed_out) {
      record = *cause->record;
      record.message = fmt::format("{}: {}", describe(*cause), record.message);
      return record;
    }
    record.status = "timeout";
    record.message = fmt::format(
        "data-parallel timed run: timed out after {:.0f} s on {} ranks (a rank that hangs holds "
        "the others in their all-reduce); every rank was stopped",
        seconds, plan.world_size);
    return record;
  }

  /// Many hosts: this rank's worker; the search runs on rank 0 and the others read its record.
  JobRecord launch_environment(const JobSpec& spec, double timeout_s) {
    const EnvironmentRank& env = *plan.environment;
    if (spec.phase == "search") {
      const std::string key = fmt::format("search-{}", ++searches);
      if (env.rank == 0) {
        JobRecord record = single.launch(spec, timeout_s);
        store->set(key, bytes(record.to_json().dump()));
        return record;
      }
      wait_keys(*store, {key}, timeout_s + plan.rendezvous_timeout_s, "rank 0's search");
      return JobRecord::from_json(Json::parse(text(store->get(key))));
    }
    JobSpec rank_spec = spec;
    RankSpec rs;
    rs.rank = env.rank;
    rs.world_size = env.world_size;
    rs.backend = plan.backend;
    rs.master_addr = env.master_addr;
    rs.master_port = env.master_port;
    rs.prefix = fmt::format("run-{}/", ++timed_runs);
    rs.timeout_s = timeout_s;
    const auto nvlink = plan.backend == "nccl" ? has_active_nvlink(env.local_rank) : std::nullopt;
    rs.interconnect = plan.backend != "nccl" ? "the network (Gloo over TCP)"
                      : !nvlink ? "unknown within a host; the network between hosts"
                      : *nvlink ? "NVLink within a host; the network between hosts"
                                : "PCIe within a host; the network between hosts";
    rank_spec.distributed = rs.to_json();
    return single.launch(rank_spec, timeout_s);
  }
};

DataParallelLauncher::DataParallelLauncher(DataParallelPlan plan, std::string executable)
    : impl_(std::make_unique<Impl>()) {
  Impl& i = *impl_;
  i.plan = std::move(plan);
  i.executable = executable.empty() ? current_executable() : executable;
  i.single = WorkerLauncher(i.executable);
  if (i.plan.backend == "nccl" && !nccl_compiled()) {
    throw DeviceError(fmt::format(
        "data-parallel training on GPUs needs NCCL, which this gpubench was built without: {}",
        backend_support()));
  }
  if (i.plan.backend == "gloo" && !gloo_compiled()) {
    throw DeviceError(fmt::format("data-parallel training on the CPU needs Gloo: {}",
                                  backend_support()));
  }
  if (i.plan.environment) {
    const EnvironmentRank& env = *i.plan.environment;
    i.master_addr = env.master_addr;
    i.master_port = env.master_port;
    // Rank 0 holds the suite's store; every rank checks in and waits for the others.
    i.store = open_store(env.master_addr, env.master_port, env.rank == 0,
                         i.plan.rendezvous_timeout_s);
    i.store->set(fmt::format("gpubench/rank/{}", env.rank), bytes(std::to_string(env.world_size)));
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(fmt::format("gpubench/rank/{}", r));
    wait_keys(*i.store, keys, i.plan.rendezvous_timeout_s,
              fmt::format("rank {} of {} waited for every rank at {}:{}; the rendezvous", env.rank,
                          env.world_size, env.master_addr, env.master_port));
    for (int r = 0; r < env.world_size; ++r) {
      const std::string theirs = text(i.store->get(keys[static_cast<std::size_t>(r)]));
      GPUBENCH_CHECK(theirs == std::to_string(env.world_size), ConfigError,
                     "rendezvous: rank {} has world size {}, rank {} has {}; start every rank "
                     "with the same WORLD_SIZE",
                     r, theirs, env.rank, env.world_size);
    }
    return;
  }
  // One host: a store on the loopback at a free port, which the workers reach.
  i.store = open_store("127.0.0.1", 0, true, i.plan.rendezvous_timeout_s);
  i.master_port = compat::store_port(i.store);
}

DataParallelLauncher::~DataParallelLauncher() = default;

JobRecord DataParallelLauncher::launch(const JobSpec& spec, double timeout_s) {
  if (impl_->plan.environment) return impl_->launch_environment(spec, timeout_s);
  if (spec.phase == "search") return impl_->single.launch(spec, timeout_s);  // once, one GPU
  return impl_->launch_local(spec, timeout_s);
}

}  // namespace gpubench::distributed
