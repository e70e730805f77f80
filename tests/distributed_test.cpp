// Data-parallel training (issue 15): the environment and --gpus parsing, the bucketed
// gradient all-reduce against single-process training over Gloo, and `run --world-size` end to
// end through the real executable (records, report, a rank that crashes or hangs, bad input).
#include "gpubench/base/compat.h"
#include "gpubench/base/json.h"
#include "gpubench/distributed/comm.h"
#include "gpubench/distributed/environment.h"
#include "src/report/sections.h"
#include "tests/testing.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

namespace gpubench {
namespace {

using distributed::BucketedGradientSync;
using testing::TempDir;

// ---- the environment ----

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(DistributedEnvironment, ReadsTorchrunsVariables) {
  const auto env = distributed::rank_from_environment(env_of({{"RANK", "3"},
                                                              {"WORLD_SIZE", "8"},
                                                              {"LOCAL_RANK", "1"},
                                                              {"MASTER_ADDR", "node0"},
                                                              {"MASTER_PORT", "29400"}}));
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_EQ(env->master_port, 29400);
  EXPECT_EQ(env->source, "torchrun");
}

TEST(DistributedEnvironment, ReadsSlurmsVariablesWhenTorchrunsAreAbsent) {
  const auto env = distributed::rank_from_environment(env_of({{"SLURM_PROCID", "5"},
                                                              {"SLURM_NTASKS", "16"},
                                                              {"SLURM_LOCALID", "5"},
                                                              {"MASTER_ADDR", "10.0.0.1"}}));
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 16);
  EXPECT_EQ(env->local_rank, 5);
  EXPECT_EQ(env->master_port, 29500);  // torchrun's default
  EXPECT_EQ(env->source, "slurm");
  // Slurm tasks without a master are plain runs (srun sets its variables for every task).
  EXPECT_FALSE(distributed::rank_from_environment(
      env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}})));
  EXPECT_FALSE(distributed::rank_from_environment(env_of({})));
}

TEST(DistributedEnvironment, RefusesInconsistentValues) {
  EXPECT_THROWS_WITH(distributed::rank_from_environment(env_of(
                         {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}})),
                     ConfigError, "outside the world");
  EXPECT_THROWS_WITH(
      distributed::rank_from_environment(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}})),
      ConfigError, "MASTER_ADDR is not set");
  EXPECT_THROWS_WITH(distributed::rank_from_environment(env_of(
                         {{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}})),
                     ConfigError, "RANK: expected a whole number");
  EXPECT_THROWS_WITH(distributed::rank_from_environment(env_of({{"RANK", "0"},
                                                                {"WORLD_SIZE", "2"},
                                                                {"MASTER_ADDR", "h"},
                                                                {"MASTER_PORT", "70000"}})),
                     ConfigError, "MASTER_PORT");
  EXPECT_THROWS_WITH(distributed::rank_from_environment(env_of({{"WORLD_SIZE", "4"}})),
                     ConfigError, "RANK is not");
}

// ---- --gpus ----

// The communicator ends an NCCL group with shutdown() where the libtorch has one (2.x, which
// warns at exit otherwise) and leaves a group type without it to its destructor (1.13).
struct GroupWithShutdown {
  int shutdowns = 0;
  void shutdown() { ++shutdowns; }
};
struct GroupWithoutShutdown {
  int destroyed = 0;
};

TEST(DistributedShutdown, AGroupWithShutdownIsShutDownAndOneWithoutIsLeftAlone) {
  static_assert(compat::HasShutdown<GroupWithShutdown>::value);
  static_assert(!compat::HasShutdown<GroupWithoutShutdown>::value);
  GroupWithShutdown with;
  compat::shutdown_group(with);
  EXPECT_EQ(with.shutdowns, 1);
  GroupWithoutShutdown without;
  compat::shutdown_group(without);  // compiles to nothing
  EXPECT_EQ(without.destroyed, 0);
}

TEST(DistributedGpuList, ParsesIndicesAndAll) {
  EXPECT_EQ(distributed::parse_gpu_list("0,1,3", 4), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(distributed::parse_gpu_list("all", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(distributed::parse_gpu_list("2", 4), (std::vector<int>{2}));
}

TEST(DistributedGpuList, RefusesDuplicatesMissingGpusAndBadSyntax) {
  EXPECT_THROWS_WITH(distributed::parse_gpu_list("0,1,0", 4), ConfigError, "GPU 0 is named twice");
  // A duplicate is bad input even where the GPUs do not exist (the syntax is checked first).
  EXPECT_THROWS_WITH(distributed::parse_gpu_list("1,1", 0), ConfigError, "named twice");
  EXPECT_THROWS_WITH(distributed::parse_gpu_list("0,4", 4), DeviceError,
                     "GPU 4 does not exist; only 4 CUDA devices are visible");
  EXPECT_THROWS_WITH(distributed::parse_gpu_list("all", 0), DeviceError, "no CUDA device");
  EXPECT_THROWS_WITH(distributed::parse_gpu_list("0,,1", 4), ConfigError, "empty entry");
  EXPECT_THROWS_WITH(distributed::parse_gpu_list("gpu0", 4), ConfigError, "whole number");
}

// ---- the reducer ----

/// A stand-in process group of `world` identical ranks: a sum is the tensor times the world
/// size. Records the size of each all-reduce, in order.
class FakeCommunicator final : public distributed::Communicator {
 public:
  explicit FakeCommunicator(int world) : world_(world) {}
  int rank() const override { return 0; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "fake"; }
  std::function<void()> allreduce_sum(torch::Tensor tensor) override {
    sizes.push_back(tensor.numel());
    tensor.mul_(world_);
    return [] {};
  }
  std::vector<std::string> exchange(const std::string&, const std::string& value) override {
    return std::vector<std::string>(static_cast<std::size_t>(world_), value);
  }
  std::vector<int64_t> sizes;

 private:
  int world_;
};

TEST(BucketedGradientSync, BucketsInReverseOrderUpToTheCapAndStartsThemDuringBackward) {
  torch::manual_seed(0);
  // Parameters of 100, 60, 30 and 50 floats; a cap of 100 floats (400 bytes).
  std::vector<torch::Tensor> params = {
      torch::randn({100}).requires_grad_(), torch::randn({60}).requires_grad_(),
      torch::randn({30}).requires_grad_(), torch::randn({50}).requires_grad_()};
  auto fake = std::make_shared<FakeCommunicator>(4);
  BucketedGradientSync sync(fake, 400);
  sync.attach("model", params);
  // Reverse order: [50, 30] (80 floats; 60 more would pass the cap), [60], [100].
  const GradientSyncRecord info = sync.info();
  ASSERT_EQ(info.networks.size(), 1u);
  EXPECT_EQ(info.networks[0].first, "model");
  EXPECT_EQ(info.networks[0].second.buckets, 3);
  EXPECT_EQ(info.networks[0].second.bucket_bytes, (std::vector<int64_t>{320, 240, 400}));

  torch::Tensor loss;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto term = (params[i] * params[i]).sum() * static_cast<double>(i + 1);
    loss = i == 0 ? term : loss + term;
  }
  loss.backward();
  // Every bucket's gradients arrived in backward: all three all-reduces started there.
  EXPECT_EQ(fake->sizes.size(), 3u);
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  sync.synchronize("model", grads);
  EXPECT_EQ(sync.info().allreduces_started_in_backward, 3);
  EXPECT_EQ(sync.info().allreduces_started_at_update, 0);
  // Four identical ranks: the average is each rank's own gradient, 2 (i + 1) p.
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i].grad(), params[i].detach() * 2.0 * double(i + 1)))
        << "parameter " << i;
  }
  EXPECT_EQ(sync.updates(), 1);
}

TEST(BucketedGradientSync, ABucketWithoutAllItsGradientsIsReducedAtTheUpdate) {
  std::vector<torch::Tensor> params = {torch::ones({4}).requires_grad_(),
                                       torch::ones({4}).requires_grad_()};
  auto fake = std::make_shared<FakeCommunicator>(2);
  BucketedGradientSync sync(fake);  // 25 MiB: one bucket
  sync.attach("model", params);
  (params[0] * 3).sum().backward();  // params[1] gets no gradient
  EXPECT_TRUE(fake->sizes.empty());
  std::vector<torch::Tensor> grads = {params[0].grad()};
  sync.synchronize("model", grads);
  EXPECT_EQ(fake->sizes, (std::vector<int64_t>{8}));
  EXPECT_TRUE(torch::allclose(params[0].grad(), torch::full({4}, 3.0)));
  EXPECT_FALSE(params[1].grad().defined());
  EXPECT_EQ(sync.info().allreduces_started_at_update, 1);
}

// Pix2PixHD's order: G's loss runs through D, so its backward reaches D's parameters; G
// updates, D's gradients are zeroed, D's own backward and update follow. Told whose backward it
// is, the reducer starts no all-reduce of D's bucket in G's backward (it would be repeated at
// D's update, as it was before) and D's average is of D's own gradients only.
TEST(BucketedGradientSync, AnotherNetworksBackwardStartsNoAllReduceOfItsBucket) {
  std::vector<torch::Tensor> g = {torch::ones({4}).requires_grad_()};
  std::vector<torch::Tensor> d = {torch::full({3}, 2.0).requires_grad_()};
  auto fake = std::make_shared<FakeCommunicator>(2);
  BucketedGradientSync sync(fake);
  sync.attach("generator", g);
  sync.attach("discriminator", d);

  const auto g_loss = (g[0].sum() * d[0]).sum();  // reaches both
  sync.backward_for("generator");
  g_loss.backward();
  EXPECT_EQ(fake->sizes, (std::vector<int64_t>{4})) << "only G's bucket started";
  std::vector<torch::Tensor> g_grads = {g[0].grad()};
  sync.synchronize("generator", g_grads);
  EXPECT_TRUE(torch::allclose(g[0].grad(), torch::full({4}, 6.0)));

  d[0].grad().zero_();
  const auto d_loss = (d[0] * 5).sum();
  sync.backward_for("discriminator");
  d_loss.backward();
  EXPECT_EQ(fake->sizes, (std::vector<int64_t>{4, 3})) << "D's bucket started once, in its own";
  std::vector<torch::Tensor> d_grads = {d[0].grad()};
  sync.synchronize("discriminator", d_grads);
  EXPECT_TRUE(torch::allclose(d[0].grad(), torch::full({3}, 5.0)));
  const GradientSyncRecord info = sync.info();
  EXPECT_EQ(info.allreduces_repeated, 0);
  EXPECT_EQ(info.allreduces_started_in_backward, 2);
  EXPECT_EQ(info.gradients_from_other_backward, std::optional<int64_t>(1));
}

// A gradient that reaches a network whose bucket is already in flight (D's backward first, then
// G's through D before D's update) is not lost: the bucket is reduced again at D's update, as
// one process would apply the sum of both.
TEST(BucketedGradientSync, AGradientAfterItsBucketStartedIsReducedAgainAtTheUpdate) {
  std::vector<torch::Tensor> g = {torch::ones({2}).requires_grad_()};
  std::vector<torch::Tensor> d = {torch::ones({2}).requires_grad_()};
  auto fake = std::make_shared<FakeCommunicator>(2);
  BucketedGradientSync sync(fake);
  sync.attach("generator", g);
  sync.attach("discriminator", d);
  sync.backward_for("discriminator");
  (d[0] * 3).sum().backward();
  sync.backward_for("generator");
  (g[0] * d[0] * 2).sum().backward();
  std::vector<torch::Tensor> d_grads = {d[0].grad()};
  sync.synchronize("discriminator", d_grads);
  EXPECT_TRUE(torch::allclose(d[0].grad(), torch::full({2}, 5.0)));
  EXPECT_EQ(sync.info().allreduces_repeated, 1);
}

/// The model of the equivalence test: small enough to check every gradient.
torch::nn::Sequential small_model() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 4));
}

// Two ranks over Gloo (two threads of this process, each with its own process group through a
// TCPStore on the loopback), each on half of a batch, give after one step the gradients and
// weights of one process on the whole batch: mean-reduced losses over equal halves average to
// the whole batch's. Tolerance: 1e-6 absolute + 1e-5 relative, float32 summation order.
TEST(BucketedGradientSync, TwoGlooRanksOnHalvesEqualOneProcessOnTheWholeBatch) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  torch::manual_seed(11);
  const auto x = torch::randn({8, 8});
  const auto y = torch::randn({8, 4});
  constexpr double kRate = 0.1;

  // One process, the whole batch.
  auto whole = small_model();
  torch::optim::SGD whole_sgd(whole->parameters(), kRate);
  torch::mse_loss(whole->forward(x), y).backward();
  std::vector<torch::Tensor> expected_grads;
  for (const auto& p : whole->parameters()) expected_grads.push_back(p.grad().clone());
  whole_sgd.step();

  const distributed::StoreServer server(30);
  // Both replicas built here: the seeded initialization draws from one global generator.
  std::vector<torch::nn::Sequential> replicas = {small_model(), small_model()};
  std::vector<std::vector<torch::Tensor>> grads(2), weights(2);
  std::vector<GradientSyncRecord> infos(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    try {
      distributed::RankSpec spec;
      spec.rank = rank;
      spec.world_size = 2;
      spec.backend = "gloo";
      spec.master_addr = "127.0.0.1";
      spec.master_port = server.port();
      spec.prefix = "equivalence/";
      spec.timeout_s = 60;
      auto communicator = distributed::connect(spec, torch::kCPU);
      auto& model = replicas[static_cast<std::size_t>(rank)];
      torch::optim::SGD sgd(model->parameters(), kRate);
      // Buckets of 600 bytes: the 500 parameters' gradients go in several all-reduces.
      BucketedGradientSync sync(communicator, 600);
      sync.attach("model", model->parameters());
      const auto half = torch::indexing::Slice(rank * 4, rank * 4 + 4);
      torch::mse_loss(model->forward(x.index({half})), y.index({half})).backward();
      std::vector<torch::Tensor> g;
      for (const auto& p : model->parameters()) g.push_back(p.grad());
      sync.synchronize("model", g);
      for (const auto& p : model->parameters()) grads[rank].push_back(p.grad().clone());
      sgd.step();
      for (const auto& p : model->parameters()) weights[rank].push_back(p.detach().clone());
      infos[rank] = sync.info();
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread rank1(rank_main, 1);
  rank_main(0);
  rank1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  const auto whole_params = whole->parameters();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(grads[rank].size(), expected_grads.size());
    for (std::size_t i = 0; i < expected_grads.size(); ++i) {
      EXPECT_TRUE(torch::allclose(grads[rank][i], expected_grads[i], 1e-5, 1e-6))
          << "rank " << rank << " gradient " << i << ": max difference "
          << (grads[rank][i] - expected_grads[i]).abs().max().item<double>();
      EXPECT_TRUE(torch::allclose(weights[rank][i], whole_params[i].detach(), 1e-5, 1e-6))
          << "rank " << rank << " weight " << i;
    }
    // The halves differ, so the averaged gradient is not a rank's own: the all-reduce ran.
    ASSERT_EQ(infos[rank].networks.size(), 1u) << infos[rank].to_json().dump();
    EXPECT_GT(infos[rank].networks[0].second.buckets, 1) << infos[rank].to_json().dump();
    EXPECT_EQ(infos[rank].allreduces_started_at_update, 0) << infos[rank].to_json().dump();
  }
}

TEST(BucketedGradientSync, ARankThatNeverComesIsARendezvousTimeout) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  const distributed::StoreServer server(30);
  distributed::RankSpec spec;
  spec.world_size = 2;
  spec.master_port = server.port();
  spec.prefix = "lonely/";
  spec.timeout_s = 1;
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THROWS_WITH(distributed::connect(spec, torch::kCPU), RendezvousError,
                     "2 of 2 ranks did not complete within 1 s");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
}

// ---- end to end: `run --device cpu --world-size N` ----

/// A TCP port nobody listens on now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::vector<Json> journal_records(const std::string& path) {
  std::vector<Json> out;
  std::istringstream lines(testing::read_file(path));
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    if (!line.empty()) out.push_back(Json::parse(line).at("job"));  // {"job": record, ...}
  }
  return out;
}

TEST(DataParallelCli, TwoCpuRanksSumTheirThroughputAndTheReportShowsTheScaling) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const std::string common = "--model bert-base --device cpu --config '" + dir.file("smoke.json") +
                             "' --format none ";
  const auto one = testing::run_gpubench("run " + common + "--json '" + dir.file("one.json") + "'");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto two = testing::run_gpubench("run " + common + "--world-size 2 --json '" +
                                         dir.file("two.json") + "' --journal '" +
                                         dir.file("j.jsonl") + "'");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.err.find("data-parallel: 2 ranks over gloo"), std::string::npos) << two.err;
  const Json doc = Json::parse(testing::read_file(dir.file("two.json")));
  ASSERT_EQ(doc["jobs"].size(), 1u);
  const Json& job = doc["jobs"][0];
  ASSERT_EQ(job["status"], "ok") << job.dump();
  const Json& dp = job["data_parallel"];
  EXPECT_EQ(dp["world_size"], 2);
  EXPECT_EQ(dp["backend"], "gloo");
  EXPECT_EQ(dp["interconnect"], "loopback (CPU ranks)");
  EXPECT_EQ(dp["global_batch"].get<int64_t>(), 2 * job["batch"].get<int64_t>());
  ASSERT_EQ(dp["ranks"].size(), 2u);
  double sum = 0;
  for (const auto& r : dp["ranks"]) {
    EXPECT_EQ(r["status"], "ok");
    EXPECT_GT(r["step_time_ms_median"].get<double>(), 0);
    EXPECT_FALSE(r["step_time_ms"].empty());
    sum += r["throughput"].get<double>();
  }
  EXPECT_NEAR(job["throughput"].get<double>(), sum, 1e-9 * sum);
  // Every update went through the bucketed all-reduce.
  EXPECT_EQ(job["runtime"]["gradient_sync"], "gloo-allreduce-bucketed");
  EXPECT_GT(dp["gradient_sync"]["updates"].get<int>(), 0);
  EXPECT_EQ(journal_records(dir.file("j.jsonl")).size(), 1u);

  // The report: the two runs in their own columns and a scaling table with an efficiency.
  const auto report = testing::run_gpubench("report '" + dir.file("one.json") + "' '" +
                                            dir.file("two.json") + "'");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("Data-parallel scaling"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("CPU x2 fp32"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("(baseline)"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("2 (gloo)"), std::string::npos) << report.out;
}

TEST(DataParallelCli, ACrashedRankFailsTheJobOnEveryRankAndTheNextJobRuns) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"),
                      testing::smoke_configs_json({"bert-base", "transformer-big"}));
  const auto started = std::chrono::steady_clock::now();
  const auto run = testing::run_gpubench(
      "run --model bert-base,transformer-big --device cpu --world-size 2 --format none "
      "--timeout 120 --config '" +
          dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'",
      "", "GPUBENCH_FAULT_RANK=1:crash");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(120));
  const auto records = journal_records(dir.file("j.jsonl"));
  ASSERT_EQ(records.size(), 2u) << run.err;  // one record per job, the crashed one included
  for (const auto& r : records) {
    EXPECT_EQ(r["status"], "crashed") << r.dump() << "\nstderr:\n" << run.err;
    EXPECT_NE(r["message"].get<std::string>().find("rank 1 (cpu) worker killed by signal 9"),
              std::string::npos)
        << r["message"];
    EXPECT_NE(r["message"].get<std::string>().find("the other ranks were stopped"),
              std::string::npos);
  }
  EXPECT_EQ(records[1]["model"], "transformer-big");  // the job after the failure ran
}

TEST(DataParallelCli, AHangingRankFailsTheJobWithinTheTimeout) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto started = std::chrono::steady_clock::now();
  const auto run = testing::run_gpubench(
      "run --model bert-base --device cpu --world-size 2 --format none --timeout 25 --config '" +
          dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'",
      "", "GPUBENCH_FAULT_RANK=1:hang");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(90));
  const auto records = journal_records(dir.file("j.jsonl"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["status"], "timeout") << records[0].dump();
  EXPECT_NE(records[0]["message"].get<std::string>().find("every rank was stopped"),
            std::string::npos)
      << records[0]["message"];
}

TEST(DataParallelCli, BadInputIsRefusedBeforeAnythingRuns) {
  struct Case {
    std::string args, env, message;
    int exit_code;
  };
  const std::vector<Case> cases = {
      {"--gpus 0,1,0", "", "GPU 0 is named twice", 2},
      {"--gpus 0 --gpu 0", "", "--gpus and --gpu contradict each other", 2},
      {"--gpus 99", "", "GPU 99 does not exist", 3},
      {"--gpus 0 --device cpu", "", "--gpus and --device cpu contradict", 2},
      {"--world-size 2", "", "without --device cpu", 2},
      {"--device cpu --world-size 0", "", "--world-size: expected a number of ranks >= 1", 2},
      {"--device cpu --world-size 3", "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1",
       "--world-size 3 does not match the environment's world of 2 ranks", 2},
      {"--device cpu", "RANK=0 WORLD_SIZE=2", "MASTER_ADDR is not set", 2},
      {"--gpus 0", "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1", "drop --gpus", 2},
  };
  TempDir dir;
  for (const auto& c : cases) {
    const auto run = testing::run_gpubench(
        "run --model bert-base --format none --journal '" + dir.file("j.jsonl") + "' " + c.args,
        "", c.env);
    EXPECT_EQ(run.exit_code, c.exit_code) << c.args << ": " << run.err;
    EXPECT_NE(run.err.find(c.message), std::string::npos) << c.args << ": " << run.err;
    EXPECT_FALSE(testing::file_exists(dir.file("j.jsonl"))) << c.args;
  }
}

TEST(DataParallelCli, ARendezvousThatNeverCompletesExitsWithCode3) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto started = std::chrono::steady_clock::now();
  // Rank 0 of 2: rank 1 never starts.
  const auto run = testing::run_gpubench(
      "run --model bert-base --device cpu --rendezvous-timeout 2 --format none --config '" +
          dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'",
      "", fmt::format("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}", free_port()));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find("rendezvous"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("did not complete within 2 s"), std::string::npos) << run.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  EXPECT_FALSE(testing::file_exists(dir.file("j.jsonl")));
}

// Many hosts as torchrun starts them: two `gpubench run` processes, RANK 0 and 1, meet at
// MASTER_ADDR:MASTER_PORT; rank 0 searches (here: the CPU's fixed batch), both time, both
// journals hold the same summed record.
TEST(DataParallelCli, TwoProcessesWithTorchrunsVariablesTrainAsOneJob) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const int port = free_port();
  const std::string env =
      fmt::format("WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} LOCAL_RANK=0", port);
  const std::string args = "run --model bert-base --device cpu --format none --config '" +
                           dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'";
  testing::CommandResult rank1;
  std::thread other([&] { rank1 = testing::run_gpubench(args, "", "RANK=1 " + env); });
  const auto rank0 = testing::run_gpubench(args, "", "RANK=0 " + env);
  other.join();
  ASSERT_EQ(rank0.exit_code, 0) << rank0.err;
  ASSERT_EQ(rank1.exit_code, 0) << rank1.err;
  const auto records0 = journal_records(dir.file("j.jsonl"));
  const auto records1 = journal_records(dir.file("j.jsonl.rank1"));
  ASSERT_EQ(records0.size(), 1u);
  ASSERT_EQ(records1.size(), 1u);
  EXPECT_EQ(records0[0]["data_parallel"]["world_size"], 2);
  EXPECT_EQ(records0[0]["throughput"], records1[0]["throughput"]);
  EXPECT_EQ(records0[0]["data_parallel"]["ranks"].size(), 2u);
}

// Slurm as an sbatch script with `srun` starts it: two nodes of two tasks each (simulated on
// the loopback), each task with SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_NODEID, and
// MASTER_ADDR/MASTER_PORT exported by the script. The four ranks train as one job.
TEST(DataParallelCli, FourSlurmTasksOnTwoNodesTrainAsOneJob) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const int port = free_port();
  const std::string args = "run --model bert-base --device cpu --format none --config '" +
                           dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'";
  std::vector<testing::CommandResult> results(4);
  std::vector<std::thread> tasks;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string env = fmt::format(
        "SLURM_PROCID={} SLURM_NTASKS=4 SLURM_LOCALID={} SLURM_NODEID={} "
        "MASTER_ADDR=127.0.0.1 MASTER_PORT={}",
        rank, rank % 2, rank / 2, port);
    tasks.emplace_back([&, rank, env] {
      results[static_cast<std::size_t>(rank)] = testing::run_gpubench(args, "", env);
    });
  }
  for (auto& t : tasks) t.join();
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(results[static_cast<std::size_t>(rank)].exit_code, 0)
        << "rank " << rank << ": " << results[static_cast<std::size_t>(rank)].err;
  }
  const auto records = journal_records(dir.file("j.jsonl"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["status"], "ok") << records[0].dump();
  EXPECT_EQ(records[0]["data_parallel"]["world_size"], 4);
  EXPECT_EQ(records[0]["data_parallel"]["ranks"].size(), 4u);
  EXPECT_EQ(records[0]["throughput"], journal_records(dir.file("j.jsonl.rank3"))[0]["throughput"]);
}

// Many hosts (torchrun's variables): a rank whose worker crashes says so under the run's key in
// the store, and the other rank's launcher stops its worker, which waits in an all-reduce for
// the dead one (or reads the cause when its worker failed on its own), within seconds rather
// than at the job's --timeout (600 s here). Both journals keep a record of each job that names
// rank 1, and the second job runs too.
TEST(DataParallelCli, UnderTorchrunACrashedRankStopsTheOthersWithinAMinute) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"),
                      testing::smoke_configs_json({"bert-base", "transformer-big"}));
  const std::string env =
      fmt::format("WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} GPUBENCH_FAULT_RANK=1:crash",
                  free_port());
  const std::string args =
      "run --model bert-base,transformer-big --device cpu --timeout 600 --format none "
      "--config '" + dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'";
  const auto started = std::chrono::steady_clock::now();
  testing::CommandResult rank1;
  std::thread other([&] { rank1 = testing::run_gpubench(args, "", "RANK=1 " + env); });
  const auto rank0 = testing::run_gpubench(args, "", "RANK=0 " + env);
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(150));
  EXPECT_EQ(rank0.exit_code, 1) << rank0.err;
  EXPECT_EQ(rank1.exit_code, 1) << rank1.err;
  const auto records0 = journal_records(dir.file("j.jsonl"));
  ASSERT_EQ(records0.size(), 2u) << rank0.err;
  for (const auto& r : records0) {
    EXPECT_EQ(r["status"], "failed") << r.dump();
    const std::string message = r["message"];
    // Rank 1's cause, whether rank 0's launcher stopped its worker on it or the worker first
    // failed on its own ("Connection closed by peer") and the launcher then read the cause.
    EXPECT_EQ(message.rfind("data-parallel timed run: rank 1 (cpu) worker killed by signal 9", 0),
              0u)
        << message;
    EXPECT_LT(r["wall_seconds"].get<double>(), 90) << r.dump();
  }
  const auto records1 = journal_records(dir.file("j.jsonl.rank1"));
  ASSERT_EQ(records1.size(), 2u) << rank1.err;
  for (const auto& r : records1) EXPECT_EQ(r["status"], "crashed") << r.dump();
}

// Ranks started with different commands (here: different batches) fail the job on every rank
// with a message naming the rank and what differs, within the rendezvous timeout, instead of
// training apart or waiting for an all-reduce no partner joins.
TEST(DataParallelCli, RanksGivenDifferentJobsFailNamingTheDifference) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const std::string env = fmt::format("WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={}",
                                      free_port());
  const auto args = [&](int batch) {
    return fmt::format(
        "run --model bert-base --device cpu --batch {} --rendezvous-timeout 30 --format none "
        "--config '{}' --journal '{}'",
        batch, dir.file("smoke.json"), dir.file("j.jsonl"));
  };
  const auto started = std::chrono::steady_clock::now();
  testing::CommandResult rank1;
  std::thread other([&] { rank1 = testing::run_gpubench(args(3), "", "RANK=1 " + env); });
  const auto rank0 = testing::run_gpubench(args(2), "", "RANK=0 " + env);
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
  EXPECT_EQ(rank0.exit_code, 1) << rank0.err;
  EXPECT_EQ(rank1.exit_code, 1) << rank1.err;
  for (const std::string& journal : {dir.file("j.jsonl"), dir.file("j.jsonl.rank1")}) {
    const auto records = journal_records(journal);
    ASSERT_EQ(records.size(), 1u) << journal;
    EXPECT_EQ(records[0]["status"], "failed") << records[0].dump();
    const std::string message = records[0]["message"];
    EXPECT_NE(message.find("the ranks were not asked the same job: rank 1 was given batch 3, "
                           "rank 0 2"),
              std::string::npos)
        << message;
  }
}

// ---- the ranks agree (issue 41) ----

// Wall-clock windows where one rank is slower: each rank alone would end its warm-up and its
// window at a different step, and the one that took a step more would wait in an all-reduce
// without partners. Rank 0 decides for all: every rank runs the same steps and the job is ok.
void expect_ranks_agree_with_a_slow_rank(int world_size) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const auto started = std::chrono::steady_clock::now();
  const auto run = testing::run_gpubench(
      fmt::format("run --model bert-base --device cpu --world-size {} --min-seconds 1 "
                  "--max-seconds 2 --timeout 120 --format none --config '{}' --json '{}'",
                  world_size, dir.file("smoke.json"), dir.file("out.json")),
      "", fmt::format("GPUBENCH_TEST_RANK_DELAY_MS={}:15", world_size - 1));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(100));
  const Json job = Json::parse(testing::read_file(dir.file("out.json")))["jobs"][0];
  ASSERT_EQ(job["status"], "ok") << job.dump();
  const Json& ranks = job["data_parallel"]["ranks"];
  ASSERT_EQ(ranks.size(), static_cast<std::size_t>(world_size));
  const int steps = ranks[0]["steps"].get<int>();
  EXPECT_GT(steps, 0);
  for (const auto& r : ranks) {
    EXPECT_EQ(r["status"], "ok") << r.dump();
    EXPECT_EQ(r["steps"].get<int>(), steps) << ranks.dump();
  }
  // The throughput is the sum over ranks; per GPU, their mean, and the FLOP/s are one GPU's.
  const double total = job["throughput"].get<double>();
  EXPECT_NEAR(job["data_parallel"]["throughput_per_gpu"].get<double>(), total / world_size,
              1e-9 * total);
  ASSERT_TRUE(job["compute"].contains("tflops")) << job["compute"].dump();
  EXPECT_NEAR(job["compute"]["tflops_total"].get<double>(),
              world_size * job["compute"]["tflops"].get<double>(),
              1e-9 * job["compute"]["tflops_total"].get<double>());
  EXPECT_NEAR(job["compute"]["tflops"].get<double>(),
              total / world_size * job["compute"]["flops_per_unit"].get<double>() / 1e12,
              1e-6 * job["compute"]["tflops"].get<double>());
}

TEST(DataParallelAgreement, TwoRanksWithASlowOneRunTheSameStepsInAWallClockWindow) {
  expect_ranks_agree_with_a_slow_rank(2);
}

TEST(DataParallelAgreement, ThreeRanksWithASlowOneRunTheSameStepsInAWallClockWindow) {
  expect_ranks_agree_with_a_slow_rank(3);
}

// ---- launch modes (issue 41) ----

// torchrun's agent serves the store at MASTER_PORT and says so (TORCHELASTIC_USE_AGENT_STORE);
// this test plays the agent: rank 0 must join that store as a client, not bind the port again.
TEST(DataParallelLaunch, TorchrunsAgentServesTheStoreAndTheRanksJoinIt) {
  if (!distributed::gloo_compiled()) GTEST_SKIP() << distributed::backend_support();
  TempDir dir;
  testing::write_file(dir.file("smoke.json"), testing::smoke_config_json("bert-base"));
  const distributed::StoreServer agent(60);
  const std::string env = fmt::format(
      "WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
      "TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=gpubench-test",
      agent.port());
  const std::string args =
      "run --model bert-base --device cpu --format none --timeout 120 "
      "--rendezvous-timeout 30 --config '" +
      dir.file("smoke.json") + "' --journal '" + dir.file("j.jsonl") + "'";
  testing::CommandResult rank1;
  std::thread other([&] { rank1 = testing::run_gpubench(args, "", "RANK=1 LOCAL_RANK=1 " + env); });
  const auto rank0 = testing::run_gpubench(args, "", "RANK=0 LOCAL_RANK=0 " + env);
  other.join();
  ASSERT_EQ(rank0.exit_code, 0) << rank0.err;
  ASSERT_EQ(rank1.exit_code, 0) << rank1.err;
  EXPECT_EQ(rank0.err.find("Address already in use"), std::string::npos) << rank0.err;
  const auto records = journal_records(dir.file("j.jsonl"));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["status"], "ok") << records[0].dump();
  EXPECT_EQ(records[0]["data_parallel"]["world_size"], 2);
}

// ---- the scaling table (issue 41) ----

JobRecord scaling_record(int world_size, int64_t batch, double throughput) {
  JobRecord r;
  r.model = "bert-base";
  r.precision = "fp32";
  r.device.name = "CPU";
  r.status = JobStatus::ok;
  r.batch = batch;
  r.throughput = throughput;
  if (world_size > 1) {
    r.data_parallel = DataParallelRecord();
    r.data_parallel->world_size = world_size;
    r.data_parallel->backend = "gloo";
  }
  return r;
}

// A one-device run is the baseline only at the data-parallel job's per-rank batch; at another
// batch the table shows both batches and no efficiency.
TEST(DataParallelScaling, TheBaselineMustHaveTheSamePerRankBatch) {
  report::ReportView view;
  view.jobs = {scaling_record(1, 32, 100), scaling_record(2, 32, 190)};
  ASSERT_TRUE(report::scaling_efficiency(view.jobs[1], view.jobs));
  EXPECT_NEAR(*report::scaling_efficiency(view.jobs[1], view.jobs), 0.95, 1e-12);

  view.jobs = {scaling_record(1, 16, 100), scaling_record(2, 32, 190)};
  EXPECT_FALSE(report::scaling_efficiency(view.jobs[1], view.jobs));
  const auto section = report::scaling_section(view);
  ASSERT_TRUE(section);
  ASSERT_EQ(section->rows.size(), 2u);
  EXPECT_EQ(section->rows[1].back(), "- (one device at batch 16, 32 per rank)");
}

}  // namespace
}  // namespace gpubench
