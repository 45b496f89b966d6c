#include "hyperoffload/ir/op_names.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload {
namespace {

// Three names back to back in one buffer: "mm" ends at 2, "" at 2, "layer0.attn"
// at 13; each reads back as given, in order, empty one included.
TEST(OpNames, ReadsBackEachNameByItsIndex) {
  OpNames names;
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(names.append("mm"), 0u);
  EXPECT_EQ(names.append(""), 1u);
  EXPECT_EQ(names.append("layer0.attn"), 2u);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], "mm");
  EXPECT_EQ(names[1], "");
  EXPECT_EQ(names[2], "layer0.attn");
  const std::vector<std::string_view> all(names.begin(), names.end());
  EXPECT_EQ(all, (std::vector<std::string_view>{"mm", "", "layer0.attn"}));
}

// A derived trace shares the table (the same object, no copy) until it interns
// a name of its own; then it copies, and the source's table stays as it was
// (2 names, the derived one 3).
TEST(OpNames, ADerivedTraceSharesTheTableUntilItAddsAName) {
  TraceBuilder source_builder;
  ASSERT_TRUE(source_builder.add_op("mm"));
  ASSERT_TRUE(source_builder.add_op("add"));
  const Trace source = value_or_throw(std::move(source_builder).build());

  TraceBuilder shared_builder;
  shared_builder.use_op_names(source.op_names_shared());
  ASSERT_TRUE(shared_builder.add_named_op(1));
  const Trace shared = value_or_throw(std::move(shared_builder).build());
  EXPECT_EQ(&shared.op_names(), &source.op_names());
  EXPECT_EQ(shared.op_name(0), "add");

  TraceBuilder grown_builder;
  grown_builder.use_op_names(source.op_names_shared());
  ASSERT_TRUE(grown_builder.add_named_op(0));
  ASSERT_TRUE(grown_builder.add_op("relu"));
  const Trace grown = value_or_throw(std::move(grown_builder).build());
  EXPECT_NE(&grown.op_names(), &source.op_names());
  EXPECT_EQ(grown.op_names().size(), 3u);
  EXPECT_EQ(grown.op_name(0), "mm");
  EXPECT_EQ(grown.op_name(1), "relu");
  EXPECT_EQ(source.op_names().size(), 2u);
}

}  // namespace
}  // namespace hyperoffload
