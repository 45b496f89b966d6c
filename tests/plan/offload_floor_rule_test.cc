// The offload floor's rule (plan/common/offload_floor_rule.h) on hand-made
// gaps; offload_floor and the peak model's floor are compared on whole
// traces in planner_test.cc and the augmented trace's walk in
// recompute_internals_test.cc.
#include "hyperoffload/plan/common/offload_floor_rule.h"

#include <gtest/gtest.h>

#include <vector>

namespace hyperoffload::internal {
namespace {

TEST(OffloadFloorRule, OnlyAGapOfTwoOpsOrMoreCoversItsInterior) {
  // Six ops (one entry past the last). Accesses at 0 and 1: adjacent, no
  // interior. At 1 and 3: interior op 2 only. At 0 and 5: interior ops 1-4.
  std::vector<std::int64_t> delta(7, 0);
  add_offloadable_gap(delta, 0, 1, 100);
  add_offloadable_gap(delta, 1, 3, 10);
  add_offloadable_gap(delta, 0, 5, 1);
  EXPECT_EQ(delta, (std::vector<std::int64_t>{0, 1, 10, -10, 0, -1, 0}));
  // Running sums: reducible per op 0, 1, 11, 1, 1, 0.
  std::vector<std::int64_t> reducible;
  std::int64_t running = 0;
  for (std::size_t op = 0; op < 6; ++op) reducible.push_back(running += delta[op]);
  EXPECT_EQ(reducible, (std::vector<std::int64_t>{0, 1, 11, 1, 1, 0}));
}

TEST(FloorScan, KeepsTheLargestAndTheFirstOpOnTies) {
  FloorScan scan;
  EXPECT_EQ(scan.floor().op, -1);
  // Resident less reducible: 5, 7, 7, 6 -> 7, first at op 1.
  scan.add(0, 5, 0);
  scan.add(1, 9, 2);
  scan.add(2, 8, 1);
  scan.add(3, 16, 10);
  EXPECT_EQ(scan.floor().op, 1);
  EXPECT_EQ(scan.floor().bytes, 7);
  // A floor below zero is still a floor (nothing resident, say).
  FloorScan negative;
  negative.add(0, 0, 3);
  EXPECT_EQ(negative.floor().op, 0);
  EXPECT_EQ(negative.floor().bytes, -3);
}

}  // namespace
}  // namespace hyperoffload::internal
