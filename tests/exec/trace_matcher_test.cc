#include "hyperoffload/exec/trace_matcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::TraceDsl;

// The traced step (storage indices follow declaration order: 10→0, 11→1, 12→2):
//   op 0 "a" produces 10 (64 B)
//   op 1 "b" reads 10, produces 11 (32 B), writes 10 in place
//   op 2 "c" reads 11 and 10, produces 12 (16 B)
Trace Step() {
  return TraceDsl()
      .storage(10, 64)
      .storage(11, 32)
      .storage(12, 16)
      .op("a", "W10")
      .op("b", "R10 W11 W10")
      .op("c", "R11 R10 W12")
      .build();
}

OpOutput Out(StorageId id, std::int64_t size_bytes) { return OpOutput{id, size_bytes, nullptr, {}}; }

TEST(TraceMatcher, BindsTheStepsOwnIdsToTheTracedStoragesAndAcceptsTheTracedProgram) {
  const Trace trace = Step();
  const ReplayGuide guide = ReplayGuide::from_trace(trace).value();
  TraceMatcher matcher(trace, guide);
  // The step names its storages 100, 101, 102: bound by position, not by id.
  const std::vector<StorageId> none;
  EXPECT_FALSE(matcher.check_begin(0, "a", none));
  EXPECT_FALSE(matcher.check_allocation(0, 0));
  const std::vector<OpOutput> a_out{Out(100, 64)};
  EXPECT_FALSE(matcher.check_outputs(0, a_out));
  EXPECT_FALSE(matcher.check_mutated(0, none));
  matcher.bind_outputs(0, a_out);
  EXPECT_EQ(matcher.traced(100), StorageIndex{0});

  const std::vector<StorageId> b_in{100};
  EXPECT_FALSE(matcher.check_begin(1, "b", b_in));
  const std::vector<OpOutput> b_out{Out(101, 32)};
  EXPECT_FALSE(matcher.check_outputs(1, b_out));
  EXPECT_FALSE(matcher.check_mutated(1, b_in));
  matcher.bind_outputs(1, b_out);

  const std::vector<StorageId> c_in{101, 100};
  EXPECT_FALSE(matcher.check_begin(2, "c", c_in));
  matcher.bind_outputs(2, std::vector<OpOutput>{Out(102, 16)});
  EXPECT_FALSE(matcher.check_end(3));
}

TEST(TraceMatcher, NamesWhatDiffersAndHowInEachCheck) {
  const Trace trace = Step();
  const ReplayGuide guide = ReplayGuide::from_trace(trace).value();
  TraceMatcher matcher(trace, guide);
  matcher.bind_outputs(0, std::vector<OpOutput>{Out(100, 64)});
  matcher.bind_outputs(1, std::vector<OpOutput>{Out(101, 32)});

  std::optional<Mismatch> name = matcher.check_begin(1, "x", std::vector<StorageId>{100});
  ASSERT_TRUE(name);
  EXPECT_EQ(name->differs, Differs::kOps);
  EXPECT_EQ(name->what, "op 1: the step runs \"x\" where the traced step ran \"b\"");

  // c reads 11 then 10; reading them swapped is another program.
  std::optional<Mismatch> swapped = matcher.check_begin(2, "c", std::vector<StorageId>{100, 101});
  ASSERT_TRUE(swapped);
  EXPECT_EQ(swapped->what, "op 2 (c): input 0 is the storage traced as 10; the traced op read storage 11 there");

  std::optional<Mismatch> untracked = matcher.check_begin(2, "c", std::vector<StorageId>{101, 7});
  ASSERT_TRUE(untracked);
  EXPECT_EQ(untracked->differs, Differs::kUntracked);
  EXPECT_THAT(untracked->what, HasSubstr("op 2 (c): input storage 7 is not tracked in this step"));

  // Same op, an output of 48 bytes where 32 were traced: a shape change.
  std::optional<Mismatch> shape = matcher.check_outputs(1, std::vector<OpOutput>{Out(101, 48)});
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->differs, Differs::kShapes);
  EXPECT_EQ(shape->what, "op 1 (b): output 0 is 48 bytes; the traced output (storage 11) was 32");

  std::optional<Mismatch> second = matcher.check_allocation(1, 1);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->what, "op 1 (b): it allocates more than the 1 outputs the traced op produced");

  // b wrote 10 in place; a step whose b writes nothing is another program.
  EXPECT_TRUE(matcher.check_mutated(1, std::vector<StorageId>{}));
  EXPECT_TRUE(matcher.check_begin(3, "d", std::vector<StorageId>{}));

  std::optional<Mismatch> early = matcher.check_end(2);
  ASSERT_TRUE(early);
  EXPECT_EQ(early->what, "it ended after 2 ops; the traced step has 3 (op 2 was \"c\")");
}

TEST(TraceMatcher, AFreedStorageIsNoLongerBound) {
  const Trace trace = Step();
  const ReplayGuide guide = ReplayGuide::from_trace(trace).value();
  TraceMatcher matcher(trace, guide);
  matcher.bind_outputs(0, std::vector<OpOutput>{Out(100, 64)});
  EXPECT_EQ(matcher.unbind(100), StorageIndex{0});
  EXPECT_FALSE(matcher.unbind(100));
  std::optional<Mismatch> read = matcher.check_begin(1, "b", std::vector<StorageId>{100});
  ASSERT_TRUE(read);
  EXPECT_EQ(read->differs, Differs::kUntracked);
}

}  // namespace
}  // namespace hyperoffload
