#include "hyperoffload/plan/common/plan_order.h"

#include <gtest/gtest.h>

namespace hyperoffload::internal {
namespace {

// Budget 100 bytes throughout.
constexpr std::int64_t kBudget = 100;

TEST(PlanOrder, OneThatFitsBeatsOneThatDoesNotHoweverQuick) {
  // 100 fits (at the budget), 101 does not; the one over is 90 ms quicker.
  EXPECT_TRUE(better_outcome({100, 100.0}, {101, 10.0}, kBudget));
  EXPECT_FALSE(better_outcome({101, 10.0}, {100, 100.0}, kBudget));
}

TEST(PlanOrder, OfTwoOverTheBudgetTheLowerPeakWinsBeforeTheQuicker) {
  EXPECT_TRUE(better_outcome({120, 50.0}, {150, 10.0}, kBudget));
  // Same peak: the quicker.
  EXPECT_TRUE(better_outcome({120, 10.0}, {120, 50.0}, kBudget));
}

TEST(PlanOrder, OfTwoThatFitTheQuickerWinsThenTheLowerPeak) {
  EXPECT_TRUE(better_outcome({100, 10.0}, {50, 11.0}, kBudget));
  EXPECT_TRUE(better_outcome({50, 10.0}, {100, 10.0}, kBudget));
}

TEST(PlanOrder, AnEqualPlanDoesNotBeatTheOneEvaluatedFirst) {
  EXPECT_FALSE(better_outcome({80, 10.0}, {80, 10.0}, kBudget));
  EXPECT_FALSE(better_outcome({130, 10.0}, {130, 10.0}, kBudget));
}

}  // namespace
}  // namespace hyperoffload::internal
