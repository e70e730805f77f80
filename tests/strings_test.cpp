#include "gpubench/base/json.h"
#include "gpubench/base/strings.h"

#include <gtest/gtest.h>

namespace gpubench {
namespace {

TEST(StringsTest, EditDistanceCountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("bert", "bert"), 0u);
  EXPECT_EQ(edit_distance("bert-bsae", "bert-base"), 2u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
}

TEST(StringsTest, ClosestMatchSuggestsTyposAndPrefixesButNotStrangers) {
  const std::vector<std::string> names = {"bert-base", "bert-base-mlm", "yolov3"};
  EXPECT_EQ(closest_match("bert-bsae", names), "bert-base");
  EXPECT_EQ(closest_match("yolo3", names), "yolov3");
  EXPECT_EQ(closest_match("bert", names), "bert-base");
  EXPECT_FALSE(closest_match("stylegan", names).has_value());
  EXPECT_EQ(did_you_mean("yolov", names), " (did you mean 'yolov3'?)");
  EXPECT_EQ(did_you_mean("zzzzzzzz", names), "");
}

TEST(StringsTest, TerminalSafeEscapesControlBytesAndKeepsTheRest) {
  EXPECT_EQ(terminal_safe("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(terminal_safe(std::string("a\rb\x07") + "c\x7f"), "a\\x0db\\x07c\\x7f");
  EXPECT_EQ(terminal_safe("two\nlines\tand a tab"), "two\nlines\tand a tab");
  EXPECT_EQ(terminal_safe("caf\xc3\xa9 \xff"), "caf\xc3\xa9 \\xff");  // invalid UTF-8 escaped
  EXPECT_EQ(terminal_safe(std::string("nul\0byte", 8)), "nul\\x00byte");
}

TEST(StringsTest, FormatsNumbersForTables) {
  EXPECT_EQ(with_thousands(110106428), "110,106,428");
  EXPECT_EQ(with_thousands(-1234), "-1,234");
  EXPECT_EQ(with_thousands(12), "12");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.00 GiB");
  EXPECT_EQ(format_bytes(139.5 * (1 << 30)), "139.5 GiB");
  EXPECT_EQ(format_significant(1234.5), "1234");
  EXPECT_EQ(format_significant(12.345), "12.3");
  EXPECT_EQ(format_significant(0.4567), "0.457");
  EXPECT_EQ(format_significant(1.0), "1.00");
  EXPECT_EQ(format_number(0.1), "0.1");
  EXPECT_EQ(format_number(1e-6), "1e-06");
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
}

}  // namespace
}  // namespace gpubench

TEST(JsonPathTest, FindsAValueByItsKeysAndNothingWhereAKeyOrAnObjectIsMissing) {
  const gpubench::Json j = {{"clocks", {{"power_w", {{"mean", 612.5}}}, {"throttled", true}}},
                            {"name", "H100"}};
  ASSERT_NE(gpubench::json_at(j, {"clocks", "throttled"}), nullptr);
  EXPECT_TRUE(gpubench::json_at(j, {"clocks", "throttled"})->get<bool>());
  EXPECT_EQ(gpubench::number_at(j, {"clocks", "power_w", "mean"}), 612.5);
  EXPECT_EQ(gpubench::json_at(j, {}), &j);
  EXPECT_EQ(gpubench::json_at(j, {"clocks", "energy"}), nullptr);         // missing key
  EXPECT_EQ(gpubench::json_at(j, {"name", "first"}), nullptr);            // not an object
  EXPECT_FALSE(gpubench::number_at(j, {"clocks", "throttled"}).has_value());  // not a number
  EXPECT_FALSE(gpubench::number_at(gpubench::Json(), {"clocks"}).has_value());  // null
}
