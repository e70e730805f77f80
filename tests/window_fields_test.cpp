// A job record's clocks (ClocksRecord) and data_parallel (DataParallelRecord): every shape a
// gpubench wrote reads and writes back byte for byte, a value of the wrong type is refused naming
// its place, an empty one is written as before, and older records read with the keys they lack
// as none.
#include "gpubench/records/window_fields.h"

#include "gpubench/base/errors.h"
#include "gpubench/base/json.h"
#include "gpubench/records/result.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench {
namespace {

/// `text` as the record's field `field`, read with the record and written again.
std::string written_back(const char* field, const std::string& text) {
  Json before = JobRecord().to_json();
  before[field] = Json::parse(text);
  return dump_json(JobRecord::from_json(before).to_json()[field]);
}

/// A record whose field `field` is `text`, read.
JobRecord read_with(const char* field, const std::string& text) {
  Json before = JobRecord().to_json();
  before[field] = Json::parse(text);
  return JobRecord::from_json(before);
}

// ---- clocks ----

// One of each shape in docs/results and tests/ (the survey in journal_test.cpp reads them all).
const std::vector<std::string> kClockShapes = {
    // A CPU run: no NVML device (2026-12-06-cpu-readme-sample).
    R"({"samples":0,"available":false})",
    // A gpubench before 2026-12-02: available first, no limits (2026-11-30-h200-bert-base).
    R"({"available":true,"samples":52,"sm_clock_mhz":{"min":1950,"median":1965,"max":1980},)"
    R"("power_w":{"mean":656.002653846154,"max":677.687},"temperature_c_max":51,)"
    R"("throttle_reasons":["sw_power_cap"],"throttled":true})",
    // 2026-12-02: the limits, power_capped and the note, available last; no base clock, no
    // shares, no energy (2026-12-02-h200-speed-fp16).
    R"({"samples":95,"sm_clock_max_mhz":1980,"power_limit_w":700.0,"sm_clock_mhz":{"min":1485,)"
    R"("median":1875,"max":1965},"power_w":{"mean":667.9663157894737,"max":698.135},)"
    R"("temperature_c_max":63,"throttle_reasons":["sw_power_cap"],"power_capped":true,)"
    R"("throttled":true,"throttle_note":"the power limit held the median SM clock at 1875 MHz, )"
    R"(95% of 1980 MHz","available":true})",
    // 2026-12-03: the base clock, the reasons' shares ({} for none) and the energy with its mean
    // power but not the counter's seconds (2026-12-03-h200-bf16-suite-fidelity).
    R"({"samples":68,"sm_clock_max_mhz":1980,"power_limit_w":700.0,"sm_clock_default_mhz":1980,)"
    R"("sm_clock_mhz":{"min":1980,"median":1980,"max":1980},"power_w":{"mean":576.2286323529411,)"
    R"("max":599.521},"temperature_c_max":57,"throttle_reasons":[],"throttle_reason_share":{},)"
    R"("power_capped":false,"throttled":false,"available":true,"energy":{"joules":3953.4,)"
    R"("joules_per_step":790.6800000000001,"units_per_joule":0.57039510294936,)"
    R"("mean_power_w":584.9524830511675}})",
    // Today's: every key, the counter's seconds too (2026-12-06-h100-cache-ddp's, with a
    // hardware slowdown and its note added).
    R"({"samples":96,"sm_clock_max_mhz":1980,"power_limit_w":700.0,"sm_clock_default_mhz":1980,)"
    R"("sm_clock_mhz":{"min":1815,"median":1965,"max":1980},"power_w":{"mean":619.3222499999998,)"
    R"("max":662.93},"temperature_c_max":70,"throttle_reasons":["sw_power_cap","hw_slowdown"],)"
    R"("throttle_reason_share":{"sw_power_cap":0.9479166666666666,"hw_slowdown":0.25},)"
    R"("power_capped":true,"throttled":true,"throttle_note":"a thermal or hardware slowdown: )"
    R"(hw_slowdown","available":true,"energy":{"joules":5945.847,)"
    R"("joules_per_step":247.74362499999998,"units_per_joule":212.00040969772684,)"
    R"("mean_power_w":617.7042089880828,"counter_seconds":9.625718772}})",
    // A window NVML took no sample of: the limits alone (device/nvml.cpp
    // summarize_clock_samples).
    R"({"samples":0,"sm_clock_max_mhz":1980,"power_limit_w":700.0,"sm_clock_default_mhz":1980,)"
    R"("available":true})",
    // A search-only or failed job.
    R"({})"};

TEST(ClocksRecordTest, EveryShapeWritesBackTheSameBytes) {
  for (const std::string& text : kClockShapes) {
    EXPECT_EQ(written_back("clocks", text), text);
  }
}

TEST(ClocksRecordTest, ReadsTheMembersOfTodaysRecordsAndOlderOnes) {
  const ClocksRecord today = read_with("clocks", kClockShapes[4]).clocks;
  EXPECT_FALSE(today.available_first);
  EXPECT_EQ(today.samples, std::optional<int64_t>(96));
  EXPECT_EQ(today.power_limit_w, std::optional<double>(700.0));
  ASSERT_TRUE(today.sm_clock_mhz);
  EXPECT_EQ(today.sm_clock_mhz->median, 1965);
  ASSERT_TRUE(today.power_w);
  EXPECT_DOUBLE_EQ(today.power_w->max, 662.93);
  ASSERT_TRUE(today.throttle_reason_share);
  ASSERT_EQ(today.throttle_reason_share->size(), 2u);  // in the order written, not sorted
  EXPECT_EQ(today.throttle_reason_share->at(0).first, "sw_power_cap");
  EXPECT_EQ(today.throttle_reason_share->at(1),
            (std::pair<std::string, double>("hw_slowdown", 0.25)));
  EXPECT_EQ(today.throttled, std::optional<bool>(true));
  EXPECT_EQ(today.throttle_note,
            std::optional<std::string>("a thermal or hardware slowdown: hw_slowdown"));
  ASSERT_TRUE(today.energy);
  EXPECT_DOUBLE_EQ(today.energy->units_per_joule, 212.00040969772684);
  EXPECT_EQ(today.energy->counter_seconds, std::optional<double>(9.625718772));

  // Before 2026-12-02: no limits, shares, power_capped or note; available read where it is.
  const ClocksRecord old = read_with("clocks", kClockShapes[1]).clocks;
  EXPECT_TRUE(old.available_first);
  EXPECT_EQ(old.available, std::optional<bool>(true));
  EXPECT_FALSE(old.power_limit_w || old.sm_clock_max_mhz || old.sm_clock_default_mhz);
  EXPECT_FALSE(old.throttle_reason_share || old.power_capped || old.throttle_note || old.energy);
  EXPECT_EQ(old.throttle_reasons, std::optional<std::vector<std::string>>({"sw_power_cap"}));

  // The energy of 2026-12-03: its mean power without the counter's seconds.
  const ClocksRecord fidelity = read_with("clocks", kClockShapes[3]).clocks;
  ASSERT_TRUE(fidelity.energy);
  EXPECT_TRUE(fidelity.energy->mean_power_w.has_value());
  EXPECT_FALSE(fidelity.energy->counter_seconds.has_value());
  ASSERT_TRUE(fidelity.throttle_reason_share);
  EXPECT_TRUE(fidelity.throttle_reason_share->empty());
}

TEST(ClocksRecordTest, AnEmptyOneIsWrittenAsAnEmptyObjectAsBefore) {
  // A record without clocks (the oldest), with {}, or with null: empty, written as {}.
  const JobRecord none = JobRecord::from_json({{"model", "bert-base"}});
  EXPECT_TRUE(none.clocks.empty());
  EXPECT_EQ(dump_json(none.to_json()["clocks"]), "{}");
  EXPECT_TRUE(read_with("clocks", "null").clocks.empty());
  EXPECT_EQ(written_back("clocks", "null"), "{}");
  EXPECT_EQ(dump_json(ClocksRecord().to_json()), "{}");
  EXPECT_FALSE(read_with("clocks", kClockShapes[0]).clocks.empty());
}

TEST(ClocksRecordTest, ANewRecordWritesTodaysOrder) {
  // As the timed phase fills it: NVML's summary, then the energy counter's reading.
  ClocksRecord c;
  c.energy = WindowEnergy{10.0, 2.5, 4.0, std::nullopt, std::nullopt};
  c.available = true;
  c.throttled = false;
  c.sm_clock_mhz = ClockRange{1900, 1950, 1980};
  c.samples = 3;
  EXPECT_EQ(dump_json(c.to_json()),
            R"({"samples":3,"sm_clock_mhz":{"min":1900,"median":1950,"max":1980},)"
            R"("throttled":false,"available":true,"energy":{"joules":10.0,)"
            R"("joules_per_step":2.5,"units_per_joule":4.0}})");
}

TEST(ClocksRecordTest, AValueOfTheWrongTypeIsRefusedNamingItsPlace) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"samples":"52"})", "clocks.samples: expected an integer, got '52'"},
      {R"({"sm_clock_mhz":{"min":1950,"median":1965.5,"max":1980}})",
       "clocks.sm_clock_mhz.median: expected an integer, got 1965.5"},
      {R"({"power_w":{"mean":"high","max":700.0}})",
       "clocks.power_w.mean: expected a number, got 'high'"},
      {R"({"power_limit_w":true})", "clocks.power_limit_w: expected a number, got true"},
      {R"({"throttled":"no"})", "clocks.throttled: expected true or false, got 'no'"},
      {R"({"throttle_reasons":"sw_power_cap"})",
       "clocks.throttle_reasons: expected a list, got 'sw_power_cap'"},
      {R"({"throttle_reasons":["sw_power_cap",3]})",
       "clocks.throttle_reasons[1]: expected a string, got 3"},
      {R"({"throttle_reason_share":{"sw_power_cap":"all"}})",
       "clocks.throttle_reason_share.sw_power_cap: expected a number, got 'all'"},
      {R"({"throttle_note":7})", "clocks.throttle_note: expected a string, got 7"},
      {R"({"energy":{"joules":1.0,"joules_per_step":0.5,"units_per_joule":null}})",
       "clocks.energy.units_per_joule: expected a number, got nothing"},
      {R"({"energy":[]})", "clocks.energy: expected an object, got array"},
      {R"([])", "clocks: expected an object, got array"}};
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    EXPECT_THROWS_WITH(read_with("clocks", text), ConfigError, message);
  }
}

// ---- data_parallel ----

const std::vector<std::string> kDataParallelShapes = {
    // 2026-12-03, the one-host launcher (2026-12-03-h200-rois-signals-ddp, lists cut to three):
    // device_index per rank, no gradients_from_other_backward, no throughput_per_gpu.
    R"j({"world_size":1,"backend":"nccl","interconnect":"none (one GPU)","devices":["cuda:0"],)j"
    R"("per_rank_batch":32,"global_batch":32,"scaling":"weak: every rank at the per-rank batch; )"
    R"(throughput summed","ranks":[{"rank":0,"device":"NVIDIA H200","status":"ok","message":"",)"
    R"("throughput":516.5060445427362,"units_per_step":32.0,"steps":243,)"
    R"("step_time_ms_median":61.957279205322266,"step_time_ms_mean":61.95474445672683,)"
    R"("step_time_ms":[62.79199981689453,61.88691329956055,61.99353790283203],)"
    R"("device_index":"cuda:0"}],"rank_throughput":516.5060445427362,)"
    R"("step_time_spread_pct":0.0,"gradient_sync":{"name":"nccl-allreduce-bucketed",)"
    R"("bucket_cap_bytes":26214400,"networks":{"model":{"buckets":18,)"
    R"("bucket_bytes":[24218864,18874368,18874368]}},"updates":247,)"
    R"("allreduces_started_in_backward":4446,"allreduces_started_at_update":0,)"
    R"("allreduces_repeated":0},"single_gpu_throughput":null,"scaling_efficiency":null})",
    // 2026-12-07 under torchrun (2026-12-07-h100-torchrun): no devices, no device_index, and
    // today's gradients_from_other_backward and throughput_per_gpu.
    R"({"world_size":1,"backend":"nccl","interconnect":"PCIe within a host; the network between )"
    R"(hosts","devices":[],"per_rank_batch":256,"global_batch":256,"scaling":"weak: every rank at )"
    R"(the per-rank batch; throughput summed","ranks":[{"rank":0,"device":"NVIDIA H100 80GB HBM3",)"
    R"("status":"ok","message":"","throughput":2796.449619800948,"units_per_step":256.0,)"
    R"("steps":56,"step_time_ms_median":91.54086303710938,"step_time_ms_mean":91.54464939662388,)"
    R"("step_time_ms":[91.8370590209961,91.49417877197266,91.48035430908203]}],)"
    R"("rank_throughput":2796.449619800948,"step_time_spread_pct":0.0,"gradient_sync":{"name":)"
    R"("nccl-allreduce-bucketed","bucket_cap_bytes":26214400,"networks":{"model":{"buckets":18,)"
    R"("bucket_bytes":[24218864,18874368,18874368]}},"updates":60,)"
    R"("allreduces_started_in_backward":1080,"allreduces_started_at_update":0,)"
    R"("allreduces_repeated":0,"gradients_from_other_backward":0},"single_gpu_throughput":null,)"
    R"("scaling_efficiency":null,"throughput_per_gpu":2796.449619800948})",
    // Two ranks over Gloo, two networks, rank 1 failed (distributed/rank.cpp
    // finish_timed_phase): no throughput_per_gpu.
    R"({"world_size":2,"backend":"gloo","interconnect":"unknown","devices":["cpu","cpu"],)"
    R"("per_rank_batch":4,"global_batch":8,"scaling":"weak: every rank at the per-rank batch; )"
    R"(throughput summed","ranks":[{"rank":0,"device":"CPU","status":"ok","message":"",)"
    R"("throughput":12.5,"units_per_step":4.0,"steps":10,"step_time_ms_median":320.0,)"
    R"("step_time_ms_mean":321.5,"step_time_ms":[320.0,323.0],"device_index":"cpu"},{"rank":1,)"
    R"("device":"CPU","status":"failed","message":"loss 'loss' is NaN","throughput":0.0,)"
    R"("units_per_step":0.0,"steps":0,"step_time_ms_median":0.0,"step_time_ms_mean":0.0,)"
    R"("step_time_ms":[],"device_index":"cpu"}],"rank_throughput":12.5,)"
    R"("step_time_spread_pct":0.0,"gradient_sync":{"name":"gloo-allreduce-bucketed",)"
    R"("bucket_cap_bytes":26214400,"networks":{"discriminator":{"buckets":1,)"
    R"("bucket_bytes":[1024]},"generator":{"buckets":2,"bucket_bytes":[4096,512]}},"updates":10,)"
    R"("allreduces_started_in_backward":30,"allreduces_started_at_update":0,)"
    R"("allreduces_repeated":1,"gradients_from_other_backward":2},)"
    R"("single_gpu_throughput":null,"scaling_efficiency":null})"};

TEST(DataParallelRecordTest, EveryShapeWritesBackTheSameBytes) {
  for (const std::string& text : kDataParallelShapes) {
    EXPECT_EQ(written_back("data_parallel", text), text);
  }
}

TEST(DataParallelRecordTest, ReadsTheMembersOfTodaysRecordsAndOlderOnes) {
  const JobRecord today = read_with("data_parallel", kDataParallelShapes[1]);
  ASSERT_TRUE(today.data_parallel);
  const DataParallelRecord& dp = *today.data_parallel;
  EXPECT_EQ(dp.world_size, 1);
  EXPECT_EQ(dp.backend, "nccl");
  EXPECT_TRUE(dp.devices.empty());
  ASSERT_EQ(dp.ranks.size(), 1u);
  EXPECT_EQ(dp.ranks[0].status, JobStatus::ok);
  EXPECT_EQ(dp.ranks[0].steps, 56);
  EXPECT_EQ(dp.ranks[0].step_time_ms.size(), 3u);
  EXPECT_FALSE(dp.ranks[0].device_index.has_value());
  EXPECT_EQ(dp.gradient_sync.gradients_from_other_backward, std::optional<int64_t>(0));
  EXPECT_FALSE(dp.single_gpu_throughput || dp.scaling_efficiency);
  EXPECT_EQ(dp.throughput_per_gpu, std::optional<double>(2796.449619800948));

  // 2026-12-03's: the keys that came later read as none.
  const DataParallelRecord old = *read_with("data_parallel", kDataParallelShapes[0]).data_parallel;
  EXPECT_EQ(old.devices, std::vector<std::string>({"cuda:0"}));
  EXPECT_EQ(old.ranks[0].device_index, std::optional<std::string>("cuda:0"));
  EXPECT_FALSE(old.gradient_sync.gradients_from_other_backward.has_value());
  EXPECT_FALSE(old.throughput_per_gpu.has_value());
  ASSERT_EQ(old.gradient_sync.networks.size(), 1u);
  EXPECT_EQ(old.gradient_sync.networks[0].first, "model");
  EXPECT_EQ(old.gradient_sync.networks[0].second.buckets, 18);

  const DataParallelRecord failed =
      *read_with("data_parallel", kDataParallelShapes[2]).data_parallel;
  ASSERT_EQ(failed.ranks.size(), 2u);
  EXPECT_EQ(failed.ranks[1].status, JobStatus::failed);
  EXPECT_EQ(failed.ranks[1].message, "loss 'loss' is NaN");
  ASSERT_EQ(failed.gradient_sync.networks.size(), 2u);
  EXPECT_EQ(failed.gradient_sync.networks[1].first, "generator");
  EXPECT_EQ(failed.gradient_sync.networks[1].second.bucket_bytes,
            (std::vector<int64_t>{4096, 512}));
}

TEST(DataParallelRecordTest, OneDeviceIsNoneAndNotWrittenAsBefore) {
  const JobRecord none = JobRecord::from_json({{"model", "bert-base"}});
  EXPECT_FALSE(none.data_parallel.has_value());
  EXPECT_FALSE(none.to_json().contains("data_parallel"));
  // {} and null (a record edited by hand) read the same.
  for (const char* empty : {"{}", "null"}) {
    const JobRecord r = read_with("data_parallel", empty);
    EXPECT_FALSE(r.data_parallel.has_value()) << empty;
    EXPECT_FALSE(r.to_json().contains("data_parallel")) << empty;
  }
}

TEST(DataParallelRecordTest, ANewRecordWritesEveryKeyAndTheBaselineSlotsAsNull) {
  DataParallelRecord dp;
  dp.world_size = 2;
  dp.backend = "gloo";
  dp.scaling_efficiency = 0.95;
  const Json written = dp.to_json();
  std::vector<std::string> keys;
  for (const auto& item : written.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "world_size", "backend", "interconnect", "devices", "per_rank_batch",
                      "global_batch", "scaling", "ranks", "rank_throughput", "step_time_spread_pct",
                      "gradient_sync", "single_gpu_throughput", "scaling_efficiency"}));
  EXPECT_TRUE(written["single_gpu_throughput"].is_null());
  EXPECT_EQ(written["scaling_efficiency"], 0.95);
  EXPECT_EQ(DataParallelRecord::from_json(written, "data_parallel").scaling_efficiency,
            std::optional<double>(0.95));
}

TEST(DataParallelRecordTest, AValueOfTheWrongTypeIsRefusedNamingItsPlace) {
  const auto with = [](const char* path, const Json& value) {
    Json dp = Json::parse(kDataParallelShapes[2]);
    Json* at = &dp;
    std::string rest = path;
    for (std::size_t dot; (dot = rest.find('/')) != std::string::npos; rest.erase(0, dot + 1)) {
      const std::string key = rest.substr(0, dot);
      at = key.find_first_not_of("0123456789") == std::string::npos ? &(*at)[std::stoul(key)]
                                                                    : &(*at)[key];
    }
    (*at)[rest] = value;
    return dump_json(dp);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with("world_size", "2"), "data_parallel.world_size: expected an integer, got '2'"},
      {with("world_size", 0), "data_parallel.world_size: expected a number of ranks from 1, got 0"},
      {with("world_size", int64_t{1} << 40),
       "data_parallel.world_size: expected a number of ranks from 1, got 1099511627776"},
      {with("backend", nullptr), "data_parallel.backend: expected a string, got nothing"},
      {with("devices", Json::array({"cpu", 1})),
       "data_parallel.devices[1]: expected a string, got 1"},
      {with("ranks", Json::object()), "data_parallel.ranks: expected a list, got {}"},
      {with("ranks/1/status", "fine"), "data_parallel.ranks[1].status 'fine' is not a job status"},
      {with("ranks/0/throughput", "12.5"),
       "data_parallel.ranks[0].throughput: expected a number, got '12.5'"},
      {with("ranks/0/step_time_ms", Json::array({320.0, "x"})),
       "data_parallel.ranks[0].step_time_ms[1]: expected a number, got 'x'"},
      {with("gradient_sync/networks/generator/bucket_bytes", Json::array({4096, 0.5})),
       "data_parallel.gradient_sync.networks.generator.bucket_bytes[1]: expected an integer, "
       "got 0.5"},
      {with("gradient_sync/updates", true),
       "data_parallel.gradient_sync.updates: expected an integer, got true"},
      {with("scaling_efficiency", "95%"),
       "data_parallel.scaling_efficiency: expected a number or null, got '95%'"},
      {"[1]", "data_parallel: expected an object, got array"}};
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text.substr(0, 200));
    EXPECT_THROWS_WITH(read_with("data_parallel", text), ConfigError, message);
  }
}

}  // namespace
}  // namespace gpubench
