#include "hyperoffload/exec/replay_guide.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TraceDsl;

TEST(ReplayGuide, SplitsEachOpsAccessesIntoInputsOutputsAndMutatedInputs) {
  // Storage indices follow declaration order: 10→0, 11→1, 12→2.
  //   op 0 writes 10 (first access: output)
  //   op 1 reads 10, writes 11 (output) and 10 (in place: mutated)
  //   op 2 reads 11 twice and 10, writes 12
  Trace trace = TraceDsl()
                    .storage(10, 64)
                    .storage(11, 64)
                    .storage(12, 64)
                    .op("a", "W10")
                    .op("b", "R10 W11 W10")
                    .op("c", "R11 R11 R10 W12")
                    .build();
  Result<ReplayGuide> guide = ReplayGuide::from_trace(trace);
  ASSERT_TRUE(guide.has_value()) << guide.error().message;
  EXPECT_EQ(guide->op_count(), 3);
  EXPECT_THAT(guide->inputs(0), ElementsAre());
  EXPECT_THAT(guide->outputs(0), ElementsAre(0));
  EXPECT_THAT(guide->inputs(1), ElementsAre(0));
  EXPECT_THAT(guide->outputs(1), ElementsAre(1));
  EXPECT_THAT(guide->mutated(1), ElementsAre(0));
  EXPECT_THAT(guide->inputs(2), ElementsAre(1, 1, 0));
  EXPECT_THAT(guide->outputs(2), ElementsAre(2));
  EXPECT_THAT(guide->mutated(2), ElementsAre());
}

TEST(ReplayGuide, RejectsATraceThatReadsAStorageBeforeProducingIt) {
  Trace trace = TraceDsl().storage(1, 8).storage(2, 8).op("a", "W2").op("b", "R1 R2").build();
  Result<ReplayGuide> guide = ReplayGuide::from_trace(trace);
  ASSERT_FALSE(guide.has_value());
  EXPECT_THAT(guide.error().message, HasSubstr("ops[1] (b): storage 1 is read before any op writes it"));
}

}  // namespace
}  // namespace hyperoffload
