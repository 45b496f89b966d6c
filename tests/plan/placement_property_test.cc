// Placement property: a planner that places every prefetch as early and every
// eviction's release as late as the budget allows (docs/PEAK_PLANNER.md,
// "Placement") leaves no slack. On random traces with budgets between the
// floor and the unplanned peak, moving any copy_h2d one op earlier, or any
// release_device that evicts a storage one op later, must make the schedule
// invalid, faulting or over the budget, as the validator measures it.
//
// The one move that is not tried: a copy_h2d that another copy_h2d precedes
// in its own (op, phase) slot. The H2D engine runs copies in schedule order
// (a FIFO queue), and a planner keeps a prefetch behind the ones queued before
// it even where the budget would let it start sooner ("each no earlier than
// the one before"); moving it earlier would reorder the queue, not remove
// slack. Such prefetches are counted, not checked.
//
// The property is parameterised by planner name (and the device it tunes for)
// so that every planner that makes this claim runs it; it is about the plan
// made for the budget, not one made for a lower budget that the planner may
// keep instead (LowerBudgetPlans::kNone).
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/plan/planner.h"
#include "plan/random_plan_case.h"

namespace hyperoffload {
namespace {

struct PlannerUnderTest {
  std::string_view name;
  DeviceMemory device_memory = DeviceMemory::kUnlimited;
};

void PrintTo(const PlannerUnderTest& planner, std::ostream* out) {
  *out << planner.name << (planner.device_memory == DeviceMemory::kBudget ? " (capped device)" : "");
}

std::string planner_label(const ::testing::TestParamInfo<PlannerUnderTest>& info) {
  return fmt::format("{}_{}", info.param.name,
                     info.param.device_memory == DeviceMemory::kBudget ? "capped" : "unlimited");
}

// Position of an action kind within one (op, phase) slot: copies before
// releases (docs/PEAK_PLANNER.md, "Placement", last paragraph).
int slot_rank(ActionKind kind) {
  switch (kind) {
    case ActionKind::kCopyD2H: return 0;
    case ActionKind::kCopyH2D:
    case ActionKind::kRecompute: return 1;
    case ActionKind::kReleaseDevice: return 2;
    case ActionKind::kReleaseHost: return 3;
  }
  return 3;
}

// `schedule` with actions[index] moved to `op` (same phase). In its new slot
// it goes after the actions of its kind already there (a moved prefetch stays
// behind the copies the engine queued before it) and before those the slot
// order puts after it.
Schedule moved(const Schedule& schedule, std::size_t index, OpIndex op) {
  Schedule result = schedule;
  Action action = result.actions[index];
  result.actions.erase(result.actions.begin() + static_cast<std::ptrdiff_t>(index));
  action.op = op;
  const auto slot_end = std::find_if(result.actions.begin(), result.actions.end(), [&](const Action& other) {
    const auto here = std::pair(other.op, other.phase);
    const auto there = std::pair(action.op, action.phase);
    return here > there || (here == there && slot_rank(other.kind) > slot_rank(action.kind));
  });
  result.actions.insert(slot_end, action);
  return result;
}

// Empty when the schedule is valid, fault-free and within the budget; else why not.
std::string why_it_breaks(const Trace& trace, const Schedule& schedule, std::int64_t budget) {
  const ValidationReport report = validate_schedule(trace, schedule);
  if (!report.valid()) return "invalid: " + report.problems.front();
  if (!report.faults.empty()) return fmt::format("{} faults", report.faults.size());
  if (report.peak_bytes > budget) return fmt::format("peak {} over the budget", report.peak_bytes);
  return {};
}

bool follows_a_copy_in_its_slot(const Schedule& schedule, std::size_t index) {
  const Action& action = schedule.actions[index];
  for (std::size_t i = index; i-- > 0;) {
    const Action& other = schedule.actions[i];
    if (other.op != action.op || other.phase != action.phase) return false;
    if (other.kind == ActionKind::kCopyH2D) return true;
  }
  return false;
}

// Whether the storage is accessed after `action` runs: a release before such
// an access is an eviction, one after the last access ends the storage's life.
bool accessed_later(const Trace& trace, const StorageAccesses& accesses, const Action& action) {
  const StorageIndex s = *trace.find_storage(action.storage);
  if (!accesses.accessed(s)) return false;
  return action.phase == Phase::kPre ? accesses.last_op(s) >= action.op : accesses.last_op(s) > action.op;
}

class PlacementProperty : public ::testing::TestWithParam<PlannerUnderTest> {};

TEST_P(PlacementProperty, PrefetchesAsEarlyAndReleasesAsLateAsTheBudgetAllows) {
  // The plan made for the budget: the peak planner may return one made for a
  // lower budget instead when it is quicker (Note [Plans for lower budgets],
  // plan/common/lower_budgets.h), which is tight for that budget only.
  ASSERT_EQ(GetParam().name, "peak");
  PeakPlannerOptions options;
  options.device_memory = GetParam().device_memory;
  options.lower_budgets = LowerBudgetPlans::kNone;
  const std::unique_ptr<Planner> planner = std::make_unique<PeakPlanner>(options);
  int offloading_cases = 0, prefetches = 0, prefetches_in_engine_order = 0, releases = 0;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    testing::Case c = testing::random_case(seed);
    c.range = testing::BudgetRange::kFloorToPeak;
    const Trace trace = generate_random_trace(c.trace);
    const std::int64_t budget = testing::budget_for(c, trace);
    if (budget >= unplanned_peak(trace).bytes) continue;  // floor = peak: nothing can move
    SCOPED_TRACE(fmt::format("seed {}, {} ops, budget {} of {}", seed, trace.op_count(), budget,
                             unplanned_peak(trace).bytes));
    Result<PlanResult> plan = planner->plan(trace, budget);
    ASSERT_TRUE(plan.has_value()) << plan.error().message;
    const Schedule& schedule = plan->schedule;
    ASSERT_EQ(why_it_breaks(trace, schedule, budget), "");
    ++offloading_cases;
    const StorageAccesses accesses(trace);
    for (std::size_t i = 0; i < schedule.actions.size(); ++i) {
      const Action& action = schedule.actions[i];
      if (action.kind == ActionKind::kCopyH2D && action.op > 0) {
        if (follows_a_copy_in_its_slot(schedule, i)) {
          ++prefetches_in_engine_order;
          continue;
        }
        EXPECT_NE(why_it_breaks(trace, moved(schedule, i, action.op - 1), budget), "")
            << "actions[" << i << "] (" << describe(action) << ") also works one op earlier";
        ++prefetches;
      } else if (action.kind == ActionKind::kReleaseDevice && action.op + 1 < trace.op_count() &&
                 accessed_later(trace, accesses, action)) {
        EXPECT_NE(why_it_breaks(trace, moved(schedule, i, action.op + 1), budget), "")
            << "actions[" << i << "] (" << describe(action) << ") also works one op later";
        ++releases;
      }
    }
    if (::testing::Test::HasFailure()) return;
  }
  // The property must have been tried on real plans: most cases offload (the
  // others have floor = peak), and every offloading plan has at least one
  // release and one prefetch to move.
  EXPECT_GT(offloading_cases, 250);
  EXPECT_GE(prefetches + prefetches_in_engine_order, offloading_cases);
  EXPECT_GE(releases, offloading_cases);
  RecordProperty("offloading_cases", offloading_cases);
  RecordProperty("prefetches_moved", prefetches);
  RecordProperty("prefetches_held_by_engine_order", prefetches_in_engine_order);
  RecordProperty("releases_moved", releases);
}

// Planners that claim this placement. (Greedy prefetches at the last moment
// and releases at once by design, so it does not.)
INSTANTIATE_TEST_SUITE_P(Planners, PlacementProperty,
                         ::testing::Values(PlannerUnderTest{"peak", DeviceMemory::kUnlimited},
                                           PlannerUnderTest{"peak", DeviceMemory::kBudget}),
                         planner_label);

}  // namespace
}  // namespace hyperoffload
