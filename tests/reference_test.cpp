#include "gpubench/config/reference.h"

#include "gpubench/config/config.h"
#include "gpubench/base/errors.h"
#include "gpubench/train/registry.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

namespace gpubench {
namespace {

const ReferenceTable& table() {
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  return store.reference();
}

TEST(ReferenceTest, HoldsBothTablesForTheEightGpusOfThePost) {
  ASSERT_EQ(table().gpus().size(), 8u);
  EXPECT_EQ(table().baseline().id, "quadro-rtx-8000");
  EXPECT_EQ(table().baseline().memory_gb, 48);
  EXPECT_EQ(table().gpus().front().name, "RTX 2060");
  EXPECT_EQ(table().rows().size(), 12u);
  const ReferenceRow* bert = table().find_row("BERT Base");
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ(bert->max_batch, (std::vector<double>{8, 16, 16, 32, 32, 64, 64, 128}));
  EXPECT_EQ(bert->throughput, (std::vector<double>{34, 47, 58, 60, 83, 102, 98, 94}));
  const ReferenceRow* pix2pix = table().find_row("Pix2Pix HD");
  ASSERT_NE(pix2pix, nullptr);
  EXPECT_EQ(pix2pix->max_batch[0], 0);  // the post's "0*": too little memory
}

TEST(ReferenceTest, NormalizesToTheRtx8000OfTheSameModel) {
  const ReferenceRow& bert = *table().find_row("BERT Base");
  EXPECT_DOUBLE_EQ(table().baseline_throughput(bert), 94);
  EXPECT_DOUBLE_EQ(table().normalized(bert, 0), 34.0 / 94.0);  // RTX 2060
  EXPECT_DOUBLE_EQ(table().normalized(bert, 7), 1.0);          // RTX 8000 itself
  EXPECT_DOUBLE_EQ(normalized_score(1880, 94), 20.0);
  EXPECT_DOUBLE_EQ(normalized_score(5, 0), 0.0);  // no baseline: no score, not a division by 0
  const ReferenceRow& mtdnn = *table().find_row("MT-DNN");
  EXPECT_DOUBLE_EQ(table().normalized(mtdnn, 0), 0.0);  // could not train on the RTX 2060
  EXPECT_DOUBLE_EQ(table().normalized(mtdnn, 5), 18.0 / 28.0);
}

TEST(ReferenceTest, RejectsATableWithoutTheBaselineGpu) {
  Json doc = parse_yaml(R"(
source: x
normalize_to: quadro-rtx-9000
gpus:
  - {id: quadro-rtx-8000, name: RTX 8000, memory_gb: 48}
models: []
)",
                        "t.yaml");
  EXPECT_THROWS_WITH(ReferenceTable::parse(doc, {"t.yaml", ""}), ConfigError,
                     "t.yaml: normalize_to: expected one of quadro-rtx-8000");
}

TEST(ReferenceTest, RejectsARowWithTheWrongNumberOfGpus) {
  Json doc = parse_yaml(R"(
normalize_to: a
gpus: [{id: a, name: A, memory_gb: 1}, {id: b, name: B, memory_gb: 2}]
models:
  - {row: M, family: image, batch_unit: images, throughput_unit: images/s,
     max_batch: [1], throughput: [1, 2]}
)",
                        "t.yaml");
  EXPECT_THROWS_WITH(ReferenceTable::parse(doc, {"t.yaml", ""}), ConfigError,
                     "t.yaml: models[0].max_batch: expected a list of 2 numbers, one per GPU");
}

}  // namespace
}  // namespace gpubench
