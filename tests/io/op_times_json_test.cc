// The op-times file format (io/op_times_json.h): a record reads back exactly,
// and each kind of bad document is refused naming its member.
#include "hyperoffload/io/op_times_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;

TEST(OpTimesJson, ARecordReadsBackExactly) {
  // 0.1 and 1/3 have no short binary form: they read back bit for bit only
  // when written with enough digits.
  const OpTimesRecord record{"torch 2.13; cpu; 1 thread(s)", 0x0123456789abcdefULL, {0.1, 1.0 / 3.0, 0.0, 16.0},
                             8.0, 0.5};
  const std::string text = op_times_to_json(record);
  EXPECT_THAT(text, HasSubstr("\"format\":\"hyperoffload.op_times\",\"version\":2,"));
  EXPECT_THAT(text, HasSubstr("\"program\":\"0123456789abcdef\",\"op_count\":4,"));
  Result<OpTimesRecord> read = parse_op_times_json(text);
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(read->machine, record.machine);
  EXPECT_EQ(read->program, record.program);
  EXPECT_EQ(read->durations_ms, record.durations_ms);
  EXPECT_EQ(read->d2h_gib_per_s, 8.0);
  EXPECT_EQ(read->h2d_gib_per_s, 0.5);
}

TEST(OpTimesJson, RefusesBadDocumentsNamingTheMember) {
  const std::string good_tail = R"("d2h_gib_per_s":1,"h2d_gib_per_s":2,"durations_ms":[1,2]})";
  const std::string head = R"({"format":"hyperoffload.op_times","version":2,"machine":"m","program":"00000000000000ff",)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not a JSON document"},
      {"[]", "the document must be an object"},
      {R"({"format":"hyperoffload.trace"})", "format: expected \"hyperoffload.op_times\", got \"hyperoffload.trace\""},
      {R"({"format":"hyperoffload.op_times","version":1})", "version: 1 is not supported (this build reads 2)"},
      {R"({"format":"hyperoffload.op_times","version":2,"program":"00"})", "machine: missing"},
      {R"({"format":"hyperoffload.op_times","version":2,"machine":"m","program":"XYZ"})",
       "program: must be 16 lower-case hex digits, got \"XYZ\""},
      {head + R"("op_count":2,"d2h_gib_per_s":0,"h2d_gib_per_s":2,"durations_ms":[1,2]})",
       "d2h_gib_per_s: must be a finite number > 0, got 0"},
      {head + R"("op_count":3,)" + good_tail, "durations_ms: 2 durations for op_count 3"},
      {head + R"("op_count":2,"d2h_gib_per_s":1,"h2d_gib_per_s":2,"durations_ms":[1,-2]})",
       "durations_ms[1]: must be a finite number >= 0, got -2"},
      {head + R"("op_count":2,"d2h_gib_per_s":1,"h2d_gib_per_s":2,"durations_ms":[1,"x"]})",
       "durations_ms[1]: must be a finite number >= 0, got \"x\""},
      {head + R"("op_count":2,"d2h_gib_per_s":1,"h2d_gib_per_s":2,"durations_ms":{}})",
       "durations_ms: must be an array"},
  };
  for (const auto& [text, message] : cases) {
    Result<OpTimesRecord> read = parse_op_times_json(text);
    ASSERT_FALSE(read.has_value()) << text;
    EXPECT_EQ(read.error().code, ErrorCode::kInvalidInput);
    EXPECT_THAT(read.error().message, HasSubstr(message)) << text;
  }
  EXPECT_TRUE(parse_op_times_json(head + R"("op_count":2,)" + good_tail).has_value());
}

}  // namespace
}  // namespace hyperoffload
