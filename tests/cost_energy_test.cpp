// Issue 46's CPU parts on synthetic records: the cost of a unit of work from a price per hour
// (run --price-per-hour, report --price-per-hour), the energy of one from NVML's counter, the
// throttle mark and its footnote in every human format (issue 42), and a run set against
// gpubench's recorded numbers for its card. One end-to-end run on the CPU at the end.
#include "gpubench/base/errors.h"
#include "gpubench/base/strings.h"
#include "gpubench/config/config.h"
#include "gpubench/config/settings.h"
#include "gpubench/records/result.h"
#include "gpubench/report/reporter.h"
#include "src/cli/app.h"
#include "tests/builtin_store.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

namespace gpubench {
namespace {

using testing::builtin_store;

constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";
constexpr int64_t kH100Bytes = 85520809984;

/// A timed fp32 record of `model` on an H100 at `throughput`, searched at batch 256, with an
/// energy reading when `units_per_joule` is above 0.
JobRecord timed(const std::string& model, double throughput, double units_per_joule = 0) {
  const ModelConfig& config = builtin_store().model(model);
  JobRecord r;
  r.model = model;
  r.family = config.family;
  r.precision = "fp32";
  r.batch_unit = config.batch_unit;
  r.throughput_unit = config.throughput_unit;
  r.device.type = "cuda";
  r.device.index = 0;
  r.device.name = kH100;
  r.device.memory_bytes = kH100Bytes;
  r.batch = 256;
  r.batch_source = "search";
  r.throughput = throughput;
  r.timing = summarize_steps({100, 100, 100}, 0.3);
  r.created_utc = "2026-12-07T00:00:00Z";
  if (units_per_joule > 0) {
    r.clocks.samples = 10;
    r.clocks.throttled = false;
    r.clocks.energy = WindowEnergy{100.0, 0, units_per_joule, std::nullopt, std::nullopt};
  }
  return r;
}

std::string render(const std::string& format, const std::vector<JobRecord>& jobs,
                   const ReferenceTable& reference = builtin_store().reference()) {
  std::ostringstream out;
  make_reporter(format, out)->report(jobs, reference);
  return out.str();
}

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), "gpubench");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

/// Splits a CSV line without quoted cells.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out(1);
  for (char ch : line) {
    if (ch == ',') {
      out.emplace_back();
    } else {
      out.back().push_back(ch);
    }
  }
  return out;
}

TEST(CostEnergyTest, CostPerMillionUnitsAndUnitsPerDollarFollowThePricePerHour) {
  JobRecord j = timed("bert-base", 1000);
  EXPECT_FALSE(usd_per_million_units(j).has_value());  // no price, no cost
  j.cost = JobCost{3.6, "run --price-per-hour"};
  // $3.60 an hour is $0.001 a second; a million units at 1000 a second take 1000 s: $1.
  ASSERT_TRUE(usd_per_million_units(j).has_value());
  EXPECT_NEAR(*usd_per_million_units(j), 1.0, 1e-12);
  EXPECT_NEAR(*units_per_usd(j), 1e6, 1e-6);
  // Data parallel: each of the 4 cards costs the price, and the throughput is their sum.
  j.data_parallel = DataParallelRecord();
  j.data_parallel->world_size = 4;
  EXPECT_EQ(priced_cards(j), 4);
  EXPECT_NEAR(*usd_per_million_units(j), 4.0, 1e-12);
  EXPECT_NEAR(*units_per_usd(j), 250000, 1e-6);
  // A job that did not train has no throughput to price.
  j.status = JobStatus::failed;
  EXPECT_FALSE(usd_per_million_units(j).has_value());
  EXPECT_FALSE(units_per_usd(j).has_value());
}

TEST(CostEnergyTest, EnergyPerUnitAndUnitsPerKwhComeFromTheEnergyCounter) {
  const JobRecord j = timed("bert-base", 500, /*units_per_joule=*/2.0);
  ASSERT_TRUE(joules_per_unit(j).has_value());
  EXPECT_DOUBLE_EQ(*joules_per_unit(j), 0.5);
  EXPECT_DOUBLE_EQ(*units_per_kwh(j), 7.2e6);  // 2 units a joule, 3.6e6 joules a kWh
  for (const char* format : {"table", "summary", "md", "html"}) {
    SCOPED_TRACE(format);
    const std::string out = render(format, {j});
    const auto at = out.find("Energy and cost per unit of work");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string section = out.substr(at);
    EXPECT_NE(section.find("J/unit"), std::string::npos) << section;
    EXPECT_NE(section.find("units/kWh"), std::string::npos) << section;
    EXPECT_NE(section.find("0.500"), std::string::npos) << section;
    EXPECT_NE(section.find("7.20 M"), std::string::npos) << section;
    EXPECT_EQ(section.find("$/M units"), std::string::npos) << section;  // no price given
  }
  // Without an energy reading or a price there is no such table.
  EXPECT_EQ(render("table", {timed("bert-base", 500)}).find("Energy and cost"), std::string::npos);
  JobRecord failed = j;
  failed.status = JobStatus::failed;
  EXPECT_FALSE(joules_per_unit(failed).has_value());
}

TEST(CostEnergyTest, ThePriceGivesCostColumnsInTheTablesAndTheReportJson) {
  JobRecord j = timed("bert-base", 1000, 2.0);
  j.cost = JobCost{3.6, "report --price-per-hour"};
  for (const char* format : {"table", "summary", "md", "html"}) {
    SCOPED_TRACE(format);
    const std::string out = render(format, {j});
    const auto at = out.find("Energy and cost per unit of work");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string section = out.substr(at);
    EXPECT_NE(section.find("$/M units"), std::string::npos) << section;
    EXPECT_NE(section.find("units/$"), std::string::npos) << section;
    EXPECT_NE(section.find("1.00 M"), std::string::npos) << section;  // units per $
    EXPECT_NE(section.find("--price-per-hour)"), std::string::npos) << section;  // its source
  }
  const Json doc = Json::parse(render("json", {j}));
  const Json& cell = doc["rows"][0]["measured"][0];
  EXPECT_NEAR(cell["usd_per_million_units"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(cell["units_per_usd"].get<double>(), 1e6, 1e-6);
  EXPECT_EQ(doc["jobs"][0]["cost"]["source"], "report --price-per-hour");
}

TEST(CostEnergyTest, CsvAppendsCostEnergyAndTheThrottleNoteAfterEveryOtherColumn) {
  JobRecord j = timed("bert-base", 500, 2.0);
  j.cost = JobCost{3.6, "run --price-per-hour"};
  j.clocks.throttled = true;
  j.clocks.throttle_note = "a thermal or hardware slowdown: hw_thermal_slowdown";
  const std::string csv = render("csv", {j});
  const std::string header = csv.substr(0, csv.find('\n'));
  const std::string row = csv.substr(header.size() + 1, csv.find('\n', header.size() + 1) -
                                                            header.size() - 1);
  const auto columns = cells(header);
  const auto values = cells(row);
  ASSERT_EQ(columns.size(), values.size()) << csv;
  const std::vector<std::string> appended = {"usd_per_hour",    "price_source",
                                             "usd_per_million_units", "units_per_usd",
                                             "joules_per_unit", "units_per_kwh",
                                             "throttle_note"};
  ASSERT_GE(columns.size(), appended.size());
  EXPECT_TRUE(std::equal(appended.begin(), appended.end(), columns.end() - 7)) << header;
  auto value = [&](const std::string& key) {
    const auto at = std::find(columns.begin(), columns.end(), key);
    return at == columns.end() ? std::string("?")
                               : values[static_cast<std::size_t>(at - columns.begin())];
  };
  EXPECT_EQ(value("schema_version"), "3");
  EXPECT_EQ(value("usd_per_hour"), "3.6");
  EXPECT_EQ(value("price_source"), "run --price-per-hour");
  EXPECT_NEAR(std::stod(value("usd_per_million_units")), 2.0, 1e-12);  // 3.6 / 3600 / 500 * 1e6
  EXPECT_NEAR(std::stod(value("units_per_usd")), 500000, 1e-6);
  EXPECT_EQ(value("joules_per_unit"), "0.5");
  EXPECT_EQ(value("units_per_kwh"), "7200000");
  EXPECT_EQ(value("throttled"), "true");
  EXPECT_EQ(value("throttle_note"), "a thermal or hardware slowdown: hw_thermal_slowdown");
}

TEST(CostEnergyTest, AThrottledJobIsMarkedAndFootnotedInEveryHumanFormat) {
  JobRecord hot = timed("bert-base", 1000, 2.0);
  hot.clocks.throttled = true;
  hot.clocks.throttle_note =
      "the power limit held the median SM clock at 1500 MHz, 76% of 1980 MHz";
  const JobRecord cool = timed("bert-finetune", 200, 1.0);
  for (const std::string format : {"table", "summary", "md", "html"}) {
    SCOPED_TRACE(format);
    const std::string out = render(format, {hot, cool});
    const std::string mark = format == "md" ? " \\*" : " *";  // markdown escapes the star
    EXPECT_NE(out.find("1000 examples/s" + mark), std::string::npos) << out;
    EXPECT_EQ(out.find("200.0 examples/s" + mark), std::string::npos) << out;
    // The footnote: the mark, why, and the job (the summary wraps it, so words are checked).
    EXPECT_NE(out.find("throttled over the timed window"), std::string::npos) << out;
    EXPECT_NE(out.find("76%"), std::string::npos) << out;
  }
  // No mark without the flag, and none in the CSV (it has the columns).
  EXPECT_EQ(render("table", {cool}).find("examples/s *"), std::string::npos);
  EXPECT_EQ(render("csv", {hot}).find("examples/s *"), std::string::npos);
}

TEST(CostEnergyTest, ReportPricesPerHourAreCheckedAndNameTheFlag) {
  EXPECT_THROWS_WITH(parse_hourly_prices({"-1"}), ConfigError,
                     "--price-per-hour: expected a price in USD per hour above 0, got '-1'");
  EXPECT_THROWS_WITH(parse_hourly_prices({"H100=-2"}), ConfigError,
                     "--price-per-hour H100: expected a price in USD per hour above 0, got "
                     "'H100=-2' (give GPU=USD, say H100=2.49");
  EXPECT_THROWS_WITH(parse_hourly_prices({"H100=abc"}), ConfigError,
                     "--price-per-hour H100: expected a price");
  EXPECT_THROWS_WITH(parse_hourly_prices({"H100=nan"}), ConfigError, "--price-per-hour H100");
  EXPECT_THROWS_WITH(parse_hourly_prices({"H100=0"}), ConfigError, "above 0");
  EXPECT_THROWS_WITH(parse_hourly_prices({"H100=2.49$"}), ConfigError, "got 'H100=2.49$'");
  EXPECT_THROWS_WITH(parse_hourly_prices({"=2"}), ConfigError, "--price-per-hour: expected GPU=USD");
  EXPECT_THROWS_WITH(parse_hourly_prices({"H100=2", "h100=3"}), ConfigError,
                     "is given twice; give each GPU one price");
  EXPECT_THROWS_WITH(parse_hourly_prices({"2", "H100=3"}), ConfigError,
                     "--price-per-hour: a plain price (2) is every record's");

  JobRecord h200 = timed("bert-base", 2000);
  h200.device.name = "NVIDIA H200";
  std::vector<JobRecord> jobs = {timed("bert-base", 1000), h200};
  EXPECT_THROWS_WITH(apply_hourly_prices(jobs, parse_hourly_prices({"A100=1"})), ConfigError,
                     "--price-per-hour A100: no record in these files ran on a device of that "
                     "name (measured: NVIDIA H100 80GB HBM3, NVIDIA H200)");
  EXPECT_THROWS_WITH(apply_hourly_prices(jobs, parse_hourly_prices({"3"})), ConfigError,
                     "--price-per-hour 3: these files hold records of 2 devices (NVIDIA H100 "
                     "80GB HBM3, NVIDIA H200); give each its price as GPU=USD");
  EXPECT_THROWS_WITH(apply_hourly_prices(jobs, parse_hourly_prices({"NVIDIA=1"})), ConfigError,
                     "--price-per-hour NVIDIA: that names 2 devices");
  // "H100" is a word of the H100's name, "h200" the H200's without its vendor.
  apply_hourly_prices(jobs, parse_hourly_prices({"H100=2.49", "h200=3.5"}));
  ASSERT_TRUE(jobs[0].cost.has_value());
  EXPECT_DOUBLE_EQ(jobs[0].cost->usd_per_hour, 2.49);
  EXPECT_EQ(jobs[0].cost->source, "report --price-per-hour");
  ASSERT_TRUE(jobs[1].cost.has_value());
  EXPECT_DOUBLE_EQ(jobs[1].cost->usd_per_hour, 3.5);
  // A plain price for records of one device, replacing the one the run recorded.
  std::vector<JobRecord> one = {timed("bert-base", 1000)};
  one[0].cost = JobCost{9, "run --price-per-hour"};
  apply_hourly_prices(one, parse_hourly_prices({"2"}));
  EXPECT_DOUBLE_EQ(one[0].cost->usd_per_hour, 2);
  EXPECT_EQ(one[0].cost->source, "report --price-per-hour");
}

TEST(CostEnergyTest, BadPricePerHourIsExitCodeTwoNamingTheFlag) {
  const std::string expected = "--price-per-hour: expected a price in USD per hour above 0 (say, "
                               "2.49), got ";
  for (const char* bad : {"--price-per-hour=abc", "--price-per-hour=-1", "--price-per-hour=0",
                          "--price-per-hour=inf", "--price-per-hour=H100=2.49"}) {
    SCOPED_TRACE(bad);
    const CliResult r = cli({"run", "--model", "bert-base", "--device", "cpu", bad});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'gpubench report --price-per-hour GPU=USD'"), std::string::npos) << r.err;
  }
  // report checks its prices before it reads a file, and names the devices it read otherwise.
  const CliResult report = cli({"report", "/nonexistent/r.json", "--price-per-hour=H100=-1"});
  EXPECT_EQ(report.code, 2);
  EXPECT_NE(report.err.find("--price-per-hour H100: expected a price in USD per hour above 0, "
                            "got 'H100=-1'"),
            std::string::npos)
      << report.err;
  // The run setting as a flag and in a config.
  EXPECT_EQ(settings::flag_overlay({{"--price-per-hour", Json(2.49)}}),
            Json({{"run", {{"price_per_hour_usd", 2.49}}}}));
  ConfigStore store = builtin_store();
  EXPECT_THROWS_WITH(
      store.apply_document(Json::parse(R"({"run": {"price_per_hour_usd": 0}})"), "prices.yaml"),
      ConfigError, "run.price_per_hour_usd: expected a price in USD per hour above 0");
  store.apply_document(Json::parse(R"({"run": {"price_per_hour_usd": 2.5}})"), "prices.yaml");
  ASSERT_TRUE(store.run().price_per_hour_usd.has_value());
  EXPECT_DOUBLE_EQ(*store.run().price_per_hour_usd, 2.5);
  EXPECT_EQ(store.run().to_json()["price_per_hour_usd"], 2.5);
  EXPECT_TRUE(builtin_store().run().to_json()["price_per_hour_usd"].is_null());
}

TEST(CostEnergyTest, ARecordKeepsItsPriceAndWhereItCameFrom) {
  JobRecord j = timed("bert-base", 1000);
  EXPECT_FALSE(j.to_json().contains("cost"));  // records without a price read as before
  j.cost = JobCost{2.49, "run.price_per_hour_usd in prices.yaml"};
  const Json json = j.to_json();
  EXPECT_EQ(json["cost"], Json({{"usd_per_hour", 2.49},
                                {"source", "run.price_per_hour_usd in prices.yaml"}}));
  const JobRecord back = JobRecord::from_json(json);
  ASSERT_TRUE(back.cost.has_value());
  EXPECT_DOUBLE_EQ(back.cost->usd_per_hour, 2.49);
  EXPECT_EQ(back.cost->source, "run.price_per_hour_usd in prices.yaml");
  Json bad = json;
  bad["cost"]["usd_per_hour"] = "two";
  EXPECT_THROW(JobRecord::from_json(bad), ConfigError);
}

/// gpubench's numbers for the H100 of timed(): bert-base and bert-finetune at 1000 and 100.
ReferenceTable with_recorded_numbers() {
  std::vector<CardNumber> numbers;
  for (const auto& [model, throughput] :
       std::vector<std::pair<std::string, double>>{{"bert-base", 1000}, {"bert-finetune", 100},
                                                   {"mt-dnn", 50}, {"bert-base-mlm", 900}}) {
    CardNumber n;
    n.card = kH100;
    n.memory_bytes = kH100Bytes;
    n.model = model;
    n.precision = "fp32";
    n.batch_source = "search";
    n.batch = 256;
    n.throughput = throughput;
    n.throughput_unit = "examples/s";
    n.created_utc = "2026-12-06T01:02:03Z";
    n.record = "2026-12-06-h100/fp32/journal.jsonl";
    n.sm_clock_mhz_median = 1980;
    n.power_limit_w = 700;
    n.driver = "580.159.04";
    n.libtorch = "2.11.0";
    numbers.push_back(n);
  }
  ReferenceTable reference = builtin_store().reference();
  reference.set_card_numbers(numbers, "mine.json");
  return reference;
}

std::vector<JobRecord> jobs_against_recorded() {
  JobRecord fine = timed("bert-base", 950);
  JobRecord slow = timed("bert-finetune", 80);
  slow.clocks.sm_clock_mhz = ClockRange{0, 1500, 0};
  slow.clocks.power_limit_w = 500;
  slow.environment = {{"software", {{"driver", "550.54.14"}, {"libtorch", "2.11.0"}}}};
  JobRecord fixed = timed("mt-dnn", 10);
  fixed.batch_source = "flag";  // the recorded numbers are max-batch jobs: not compared
  JobRecord smaller = timed("bert-base-mlm", 10);
  smaller.device.memory_bytes = kH100Bytes / 2;  // a card of another memory size
  JobRecord bf16 = timed("bert-base", 2000);
  bf16.precision = "amp-bf16";  // no recorded number at that precision
  return {fine, slow, fixed, smaller, bf16};
}

TEST(CostEnergyTest, AJobIsSetAgainstGpubenchsRecordedNumberForItsCard) {
  const ReferenceTable reference = with_recorded_numbers();
  const std::vector<JobRecord> jobs = jobs_against_recorded();
  const std::vector<RecordedComparison> matches = compare_with_recorded(jobs, reference);
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_EQ(matches[0].job->model, "bert-base");
  EXPECT_NEAR(matches[0].ratio, 0.95, 1e-12);
  EXPECT_FALSE(matches[0].below);  // within 10%
  EXPECT_TRUE(matches[0].causes.empty());
  EXPECT_EQ(matches[1].job->model, "bert-finetune");
  EXPECT_NEAR(matches[1].ratio, 0.8, 1e-12);
  EXPECT_TRUE(matches[1].below);
  const std::string causes = join(matches[1].causes, "; ");
  EXPECT_NE(causes.find("clocks: the SM clock's median was 1500 MHz against 1980 MHz recorded"),
            std::string::npos)
      << causes;
  EXPECT_NE(causes.find("power cap: a limit of 500 W against 700 W recorded"), std::string::npos)
      << causes;
  EXPECT_NE(causes.find("driver: 550.54.14 against 580.159.04 recorded"), std::string::npos)
      << causes;
  EXPECT_EQ(causes.find("libtorch"), std::string::npos) << causes;  // the same on both sides
  EXPECT_EQ(matches[1].compare_command,
            "gpubench compare docs/results/2026-12-06-h100/fp32/journal.jsonl mine.json");

  for (const char* format : {"table", "summary", "md", "html"}) {
    SCOPED_TRACE(format);
    const std::string out = render(format, jobs, reference);
    EXPECT_NE(out.find("Against gpubench"), std::string::npos) << out;
    EXPECT_NE(out.find("within 10%"), std::string::npos) << out;
    EXPECT_NE(out.find("20% below"), std::string::npos) << out;
    EXPECT_NE(out.find("0.80"), std::string::npos) << out;
    EXPECT_NE(out.find("mine.json"), std::string::npos) << out;
    // Without the numbers (a card gpubench has not measured) there is no such table.
    EXPECT_EQ(render(format, jobs).find("Against gpubench"), std::string::npos);
  }
  const std::string table = render("table", jobs, reference);
  EXPECT_NE(table.find("bert-finetune fp32 on NVIDIA H100 80GB HBM3: 20% below gpubench's 100.0 "
                       "examples/s (2026-12-06); likely causes: clocks:"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("compare the two records in detail (docs/results is in gpubench's "
                       "source tree): gpubench compare "
                       "docs/results/2026-12-06-h100/fp32/journal.jsonl mine.json"),
            std::string::npos)
      << table;
  const Json doc = Json::parse(render("json", jobs, reference));
  ASSERT_EQ(doc["recorded"].size(), 2u);
  EXPECT_EQ(doc["recorded"][1]["model"], "bert-finetune");
  EXPECT_EQ(doc["recorded"][1]["below"], true);
  EXPECT_EQ(doc["recorded"][1]["recorded_record"], "docs/results/2026-12-06-h100/fp32/journal.jsonl");
  EXPECT_FALSE(Json::parse(render("json", jobs)).contains("recorded"));
}

TEST(CostEnergyTest, TheShippedRecordedNumbersParseAndHoldTheH200) {
  const std::vector<CardNumber>& numbers = builtin_store().card_numbers();
  ASSERT_FALSE(numbers.empty()) << "configs/measured/cards.json holds no number";
  for (const auto& n : numbers) {
    EXPECT_GT(n.throughput, 0) << n.card << " " << n.model;
    EXPECT_EQ(n.batch_source, "search") << n.card << " " << n.model;
    EXPECT_FALSE(n.record.empty());
    EXPECT_TRUE(builtin_store().has_model(n.model)) << n.model;
  }
  EXPECT_TRUE(std::any_of(numbers.begin(), numbers.end(), [](const CardNumber& n) {
    return n.card == "NVIDIA H200" && n.model == "bert-base" && n.precision == "fp32" &&
           n.memory_bytes > 0;
  }));
  EXPECT_THROW(parse_card_numbers(Json{{"schema", "gpubench-result"}}, {"cards.json", ""}),
               ConfigError);
}

// End to end on the CPU: the run's price (a config's, then the flag's) is on its record, the
// summary shows the cost, and a report's own price replaces it.
TEST(CostEnergyTest, ARunKeepsItsPricePerHourAndAReportReplacesIt) {
  testing::TempDir dir;
  Json config = Json::parse(testing::smoke_config_json("bert-base"));
  config["run"]["price_per_hour_usd"] = 2.0;
  testing::write_file(dir.file("smoke.json"), config.dump());
  const std::string common = "run --model bert-base --device cpu --config '" +
                             dir.file("smoke.json") + "'";
  auto run = testing::run_gpubench(common + " --json '" + dir.file("a.json") + "' --journal '" +
                                   dir.file("a.jsonl") + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Json doc = Json::parse(testing::read_file(dir.file("a.json")));
  ASSERT_EQ(doc["jobs"].size(), 1u);
  EXPECT_EQ(doc["jobs"][0]["cost"],
            Json({{"usd_per_hour", 2.0},
                  {"source", "run.price_per_hour_usd in " + dir.file("smoke.json")}}));
  EXPECT_NE(run.out.find("Energy and cost per unit of work"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("$/M units"), std::string::npos) << run.out;

  run = testing::run_gpubench(common + " --price-per-hour 1.5 --json '" + dir.file("b.json") +
                              "' --journal '" + dir.file("b.jsonl") + "'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  doc = Json::parse(testing::read_file(dir.file("b.json")));
  EXPECT_EQ(doc["jobs"][0]["cost"],
            Json({{"usd_per_hour", 1.5}, {"source", "run --price-per-hour"}}));

  // Every record ran on this machine's CPU: a plain price fits them all.
  const auto report = testing::run_gpubench("report '" + dir.file("a.json") +
                                            "' --price-per-hour 3 --format json");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const Json r = Json::parse(report.out);
  EXPECT_EQ(r["jobs"][0]["cost"], Json({{"usd_per_hour", 3.0}, {"source", "report --price-per-hour"}}));
  EXPECT_TRUE(r["rows"][0]["measured"][0]["usd_per_million_units"].is_number());
  const auto unknown =
      testing::run_gpubench("report '" + dir.file("a.json") + "' --price-per-hour A100=1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("--price-per-hour A100: no record in these files ran on a device of "
                             "that name"),
            std::string::npos)
      << unknown.err;
}

}  // namespace
}  // namespace gpubench
