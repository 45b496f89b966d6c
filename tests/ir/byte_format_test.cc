#include "hyperoffload/ir/byte_format.h"

#include <gtest/gtest.h>

namespace hyperoffload {
namespace {

TEST(ByteFormat, FormatsBytesInBinaryUnitsWithTwoDecimals) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(4096), "4.00 KiB");
  EXPECT_EQ(format_bytes(1536 << 20), "1.50 GiB");
  EXPECT_EQ(format_bytes(std::int64_t{3} << 40), "3.00 TiB");
  EXPECT_EQ(format_bytes(-2048), "-2.00 KiB");  // a shortfall, say
}

TEST(ByteFormat, GroupsDigitsInThrees) {
  EXPECT_EQ(group_digits(0), "0");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(1000), "1,000");
  EXPECT_EQ(group_digits(1234567), "1,234,567");
  EXPECT_EQ(group_digits(-1234567), "-1,234,567");
}

}  // namespace
}  // namespace hyperoffload
