#include "hyperoffload/plan/budget.h"

#include <gtest/gtest.h>

#include <limits>

namespace hyperoffload {
namespace {

std::int64_t bytes(std::string_view text, std::int64_t peak = 0) {
  Result<BudgetSpec> spec = parse_budget(text);
  EXPECT_TRUE(spec) << text;
  return spec ? resolve_budget_bytes(*spec, peak) : -1;
}

TEST(Budget, ParsesPlainBytesAndUnits) {
  EXPECT_EQ(bytes("1048576"), 1048576);
  EXPECT_EQ(bytes("2GiB"), 2147483648);
  EXPECT_EQ(bytes("512 MiB"), 536870912);
  EXPECT_EQ(bytes("1.5gib"), 1610612736);
  EXPECT_EQ(bytes("3KB"), 3000);
  EXPECT_EQ(bytes("2GB"), 2000000000);
  EXPECT_EQ(bytes("7B"), 7);
  EXPECT_EQ(bytes("1TiB"), 1099511627776);
}

TEST(Budget, ResolvesPercentagesOfThePeakExactly) {
  EXPECT_EQ(bytes("40%", 1000), 400);
  EXPECT_EQ(bytes("12.5%", 1000), 125);
  EXPECT_EQ(bytes("30%", 10), 3);
  EXPECT_EQ(bytes("33.33%", 3), 0);      // 0.9999 rounds down
  EXPECT_EQ(bytes("100%", 25856303104), 25856303104);
}

// Found by fuzzing (fuzz/planners_fuzzer.cc, which compares at any budget):
// a spec of 2^63 bytes or more was converted to int64 with undefined behaviour.
TEST(Budget, ResolvesByteSpecsBeyondInt64ToTheLargestInt64) {
  using Unit = BudgetSpec::Unit;
  EXPECT_EQ(resolve_budget_bytes({Unit::kBytes, 0x1p62}, 0), std::int64_t{1} << 62);
  EXPECT_EQ(resolve_budget_bytes({Unit::kBytes, 0x1p63}, 0), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(resolve_budget_bytes({Unit::kBytes, 1e300}, 0), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(resolve_budget_bytes({Unit::kBytes, -5.0}, 0), 0);
}

TEST(Budget, RejectsMalformedText) {
  for (const char* text : {"", "abc", "-5", "12XB", "5%%", "1e9", "GiB", "nan"}) {
    Result<BudgetSpec> spec = parse_budget(text);
    ASSERT_FALSE(spec) << text;
    EXPECT_NE(spec.error().message.find("invalid budget"), std::string::npos);
  }
}

TEST(Budget, ParseBytesRejectsPercentages) {
  EXPECT_FALSE(parse_bytes("40%"));
  EXPECT_EQ(parse_bytes("4KiB").value(), 4096);
}

}  // namespace
}  // namespace hyperoffload
