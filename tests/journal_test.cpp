// The results journal: appended line by line, read back, and continued after a torn write.
#include "gpubench/records/journal.h"

#include "gpubench/base/errors.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gpubench {
namespace {

using testing::TempDir;

JournalHeader header() {
  JournalHeader h;
  h.created_utc = "2026-11-30T00:00:00Z";
  h.command_line = {"gpubench", "run", "--suite", "all"};
  h.plan = {{"models", {"bert-base", "yolov3"}}};
  return h;
}

JobRecord record(const std::string& model, double throughput) {
  JobRecord r;
  r.model = model;
  r.precision = "fp32";
  r.batch = 12;
  r.throughput = throughput;
  return r;
}

TEST(JournalTest, AppendsOneLinePerJobAndReadsThemBack) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  {
    auto writer = JournalWriter::create(path, header());
    writer.append(record("bert-base", 10.5));
    writer.append(record("yolov3", 3.25));
  }
  const std::string text = testing::read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_TRUE(is_journal_file(path));
  const Journal j = read_journal(path);
  EXPECT_EQ(j.header.command_line, header().command_line);
  EXPECT_EQ(j.header.plan, header().plan);
  ASSERT_EQ(j.jobs.size(), 2u);
  EXPECT_EQ(j.jobs[0].model, "bert-base");
  EXPECT_DOUBLE_EQ(j.jobs[1].throughput, 3.25);
  EXPECT_FALSE(j.torn_tail);
}

TEST(JournalTest, NeverOverwritesAnExistingJournal) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalWriter::create(path, header()).append(record("bert-base", 1));
  EXPECT_THROWS_WITH(JournalWriter::create(path, header()), ConfigError, "--resume");
  EXPECT_EQ(read_journal(path).jobs.size(), 1u);
}

TEST(JournalTest, ATornLastLineIsIgnoredAndCutOffWhenContinued) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalWriter::create(path, header()).append(record("bert-base", 1));
  // A kill in the middle of a write leaves half a line without its newline.
  testing::write_file(path, testing::read_file(path) + "{\"job\": {\"model\": \"yol");
  Journal j = read_journal(path);
  EXPECT_TRUE(j.torn_tail);
  ASSERT_EQ(j.jobs.size(), 1u);

  JournalWriter::resume(path).append(record("yolov3", 2));
  j = read_journal(path);
  EXPECT_FALSE(j.torn_tail);
  ASSERT_EQ(j.jobs.size(), 2u);
  EXPECT_EQ(j.jobs[1].model, "yolov3");
}

TEST(JournalTest, AWholeRecordMissingOnlyItsNewlineIsKept) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalWriter::create(path, header()).append(record("bert-base", 1));
  std::string text = testing::read_file(path);
  text.pop_back();  // the kill came between the record and its newline
  testing::write_file(path, text);
  EXPECT_EQ(read_journal(path).jobs.size(), 1u);
  JournalWriter::resume(path).append(record("yolov3", 2));
  const Journal j = read_journal(path);
  ASSERT_EQ(j.jobs.size(), 2u);  // the first record survived the resume
  EXPECT_EQ(j.jobs[0].model, "bert-base");
  EXPECT_EQ(j.jobs[1].model, "yolov3");
}

TEST(JournalTest, OneWriterAtATime) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  auto first = JournalWriter::create(path, header());
  EXPECT_THROWS_WITH(JournalWriter::resume(path), ConfigError, "is in use by another gpubench");
  first.append(record("bert-base", 1));
  EXPECT_EQ(read_journal(path).jobs.size(), 1u);  // reading needs no lock
}

TEST(JournalTest, CreateIfAbsentLeavesAnExistingFileAlone) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  testing::write_file(path, "precious");
  EXPECT_FALSE(JournalWriter::create_if_absent(path, header()).has_value());
  EXPECT_EQ(testing::read_file(path), "precious");
}

TEST(JournalTest, DamageInTheMiddleIsAnErrorNamingTheLine) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  testing::write_file(path, header().to_json().dump() + "\nnot json\n{\"job\": {}}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError, "j.jsonl:2:");
  testing::write_file(path, "{\"schema\": \"gpubench-result\"}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError, "is a result document");
  testing::write_file(path, "{\"schema\": \"other\"}\n");
  EXPECT_THROWS_WITH(read_journal(path), ConfigError, "not a gpubench journal");
  EXPECT_FALSE(is_journal_file(path));
  EXPECT_THROWS_WITH(read_journal(dir.file("missing.jsonl")), ConfigError, "cannot be read");
}

}  // namespace
}  // namespace gpubench
