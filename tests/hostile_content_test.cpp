// Hostile content (issue 14, item 4): model names, device names, config strings and messages that
// hold HTML, markdown, ANSI and C1 escapes, invalid UTF-8 and very long lines come out as literal
// text in every report format, and the journal and the JSON writers never throw on them.
#include "gpubench/config/config.h"
#include "gpubench/records/journal.h"
#include "gpubench/train/registry.h"
#include "gpubench/report/reporter.h"
#include "gpubench/base/strings.h"
#include "src/report/svg.h"
#include "tests/builtin_store.h"
#include "tests/testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>

namespace gpubench {
namespace {

using testing::TempDir;

using testing::builtin_store;

const std::string kEsc = "\x1b[31m\x1b]0;pwned\x07";  // SGR colour, window title, bell
const std::string kCsi8 =
    "\xc2\x9b"
    "2J";  // U+009B: the 8-bit CSI, then "clear screen"
const std::string kInvalid = "\xff\xfe\xc3(\xed\xa0\x80";  // stray, truncated, a surrogate
const std::string kHtml =
    "<script>document.body.dataset.pwned=1</script><img src=x onerror=alert(1)>";
const std::string kMarkdown = "| [x](javascript:alert(1)) ![i](http://x/i.png) *b* _i_ `c` #h ~s~";

JobRecord hostile(const std::string& model, const std::string& precision) {
  JobRecord r;
  r.model = model;
  r.family = "language" + kHtml;
  r.precision = precision;
  r.batch_unit = "sequences" + kEsc;
  r.throughput_unit = "examples/s" + kInvalid;
  r.device.type = "cuda";
  r.device.name = "NVIDIA " + kHtml + kEsc + kCsi8 + kInvalid;
  r.status = JobStatus::crashed;
  r.message = "worker said: " + kHtml + kMarkdown + kEsc + kCsi8 + kInvalid + "\nsecond line\r" +
              std::string(5000, 'A') + "\xe2\x82\xac";
  r.batch = 8;
  r.batch_source = "flag" + kMarkdown;
  r.created_utc = "2026-12-03T00:00:00Z" + kEsc;
  r.config = {{"name", kHtml + kMarkdown}};
  r.environment = {{"gpubench", {{"git_commit", kHtml}}}, {"host", kEsc + kInvalid}};
  return r;
}

std::vector<JobRecord> hostile_jobs() {
  JobRecord ok = hostile("bert-base", "fp32");
  ok.status = JobStatus::ok;
  ok.throughput = 100;
  ok.timing = summarize_steps({10, 11, 12}, 0.1);
  return {ok, hostile(kHtml + kMarkdown + kEsc + kCsi8 + kInvalid + std::string(3000, 'm'),
                      "amp" + kHtml)};
}

std::string render(const std::string& format) {
  std::ostringstream out;
  make_reporter(format, out)->report(hostile_jobs(), builtin_store().reference());
  return out.str();
}

bool has_control_bytes(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char c) {
    const auto b = static_cast<unsigned char>(c);
    return (b < 0x20 && c != '\n' && c != '\t') || b == 0x7f;
  });
}

std::size_t longest_line(const std::string& text) {
  std::size_t longest = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) longest = std::max(longest, line.size());
  return longest;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

TEST(HostileContentTest, TerminalFormatsEscapeControlsAndInvalidUtf8AndCutLongLines) {
  for (const char* format : {"table", "summary"}) {
    const std::string out = render(format);
    SCOPED_TRACE(format);
    EXPECT_FALSE(has_control_bytes(out));
    EXPECT_EQ(valid_utf8(out), out);                     // no invalid byte reaches the terminal
    EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos);  // nor a C1 control
    EXPECT_NE(out.find("\\x1b[31m"), std::string::npos) << out;  // shown, escaped
    EXPECT_LE(longest_line(out), 1100u);
    EXPECT_NE(out.find("bytes cut"), std::string::npos);
  }
}

TEST(HostileContentTest, MarkdownShowsEveryNameAndMessageAsLiteralText) {
  const std::string md = render("md");
  EXPECT_FALSE(has_control_bytes(md));
  EXPECT_EQ(valid_utf8(md), md);
  EXPECT_EQ(lower(md).find("<script"), std::string::npos);
  EXPECT_EQ(lower(md).find("<img"), std::string::npos);
  // No link survives: every bracket of one is escaped.
  for (auto at = md.find("](javascript"); at != std::string::npos;
       at = md.find("](javascript", at + 1)) {
    EXPECT_EQ(md[at - 1], '\\') << md.substr(at - 20, 40);
  }
  EXPECT_EQ(md.find("!["), std::string::npos);  // nor an image
  EXPECT_NE(md.find("&lt;script&gt;"), std::string::npos);
  // Every table row has exactly as many unescaped cell separators as its header.
  std::istringstream lines(md);
  std::size_t columns = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| ", 0) != 0) {
      columns = 0;  // a new table starts after a non-table line
      continue;
    }
    std::size_t bars = 0;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\') {
        ++i;
      } else if (line[i] == '|') {
        ++bars;
      }
    }
    if (columns == 0) columns = bars;
    EXPECT_EQ(bars, columns) << line.substr(0, 300);
  }
}

TEST(HostileContentTest, HtmlHasNoMarkupFromRecordsAndIsValidUtf8) {
  const std::string html = render("html");
  EXPECT_EQ(valid_utf8(html), html);
  EXPECT_FALSE(has_control_bytes(html));
  const std::string l = lower(html);
  EXPECT_EQ(l.find("<script"), std::string::npos);
  EXPECT_EQ(l.find("<img"), std::string::npos);
  // No tag carries an event handler (the payloads' "onerror=" stays text, between &lt; &gt;).
  EXPECT_FALSE(std::regex_search(l, std::regex("<[a-z][^<>]*\\son[a-z]+=")));
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
  EXPECT_NE(html.find("bytes cut"), std::string::npos);  // a name of kilobytes, cut
}

TEST(HostileContentTest, CsvAndJsonStayParseableWithInvalidUtf8Replaced) {
  const std::string csv = render("csv");
  EXPECT_EQ(valid_utf8(csv), csv);
  const std::string json = render("json");
  EXPECT_EQ(valid_utf8(json), json);
  const Json doc = Json::parse(json);                       // would throw on invalid UTF-8
  EXPECT_NE(json.find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD in place of the bad bytes
  EXPECT_FALSE(doc.empty());
}

TEST(HostileContentTest, CsvCellsThatASpreadsheetWouldRunAreNeutralized) {
  JobRecord r = hostile("=HYPERLINK(\"http://x\")", "fp32");
  std::ostringstream out;
  make_reporter("csv", out)->report({r}, builtin_store().reference());
  EXPECT_NE(out.str().find("\"'=HYPERLINK(\"\"http://x\"\")\""), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find(",=HYPERLINK"), std::string::npos);
}

TEST(HostileContentTest, TheJournalTakesARecordWithInvalidUtf8AndReadsItBack) {
  TempDir dir;
  const std::string path = dir.file("j.jsonl");
  JournalHeader header;
  header.created_utc = "2026-12-03T00:00:00Z";
  header.command_line = {"gpubench", "run", "--model", kInvalid};
  {
    JournalWriter writer = JournalWriter::create(path, header);
    writer.append(hostile_jobs()[1]);  // threw nlohmann type_error 316 before
  }
  const Journal journal = read_journal(path);
  ASSERT_EQ(journal.jobs.size(), 1u);
  EXPECT_FALSE(journal.torn_tail);
  EXPECT_EQ(journal.jobs[0].message, valid_utf8(hostile_jobs()[1].message));
  EXPECT_EQ(journal.header.command_line[3], valid_utf8(kInvalid));
}

TEST(HostileContentTest, StringHelpersEscapeWhatTheyPromise) {
  EXPECT_EQ(valid_utf8("ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(valid_utf8("\xff"), "\xef\xbf\xbd");
  EXPECT_EQ(valid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong '/'
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(valid_utf8("\xf4\x90\x80\x80").size(), 12u);                          // past U+10FFFF
  EXPECT_EQ(valid_utf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");  // truncated at the end
  EXPECT_EQ(terminal_safe("a\xc2\x9b"
                          "2Jb"),
            "a\\u009b2Jb");
  EXPECT_EQ(terminal_safe("\xc2\xa0"), "\xc2\xa0");  // U+00A0 is not a control
  EXPECT_EQ(terminal_text(std::string(10, 'x') + "\nshort", 5), "xxxxx... (5 bytes cut)\nshort");
  // A cut never splits a character.
  EXPECT_EQ(shortened("\xe2\x82\xac\xe2\x82\xac", 4), "\xe2\x82\xac... (3 bytes cut)");
  EXPECT_EQ(markdown_escape("a|b <i> [l](u) *x*\nnext"), "a\\|b &lt;i&gt; \\[l\\](u) \\*x\\* next");
  EXPECT_EQ(report::html_escape("<a href='x'>\x1b\xff</a>"),
            "&lt;a href=&#39;x&#39;&gt;&#xFFFD;\xef\xbf\xbd&lt;/a&gt;");
}

}  // namespace
}  // namespace gpubench
