// The host budget (PlannerOptions::host_budget_bytes): the trimmer that keeps
// on the device what does not fit on the host (plan/common/host_budget.h)
// and the budget policy's host floor (plan/budget_policy.h), on a trace small
// enough to derive every number by hand.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/budget_policy.h"
#include "hyperoffload/plan/common/host_budget.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using testing::actions;
using testing::TraceDsl;

// Three activations, read back in reverse order:
//   op 0 W1 (100 B)   op 1 W2 (50 B)   op 2 W3 (10 B)   op 3 R3   op 4 R2   op 5 R1
Trace three_activations() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 50)
      .storage(3, 10)
      .op("a", "W1")
      .op("b", "W2")
      .op("c", "W3")
      .op("c'", "R3")
      .op("b'", "R2")
      .op("a'", "R1")
      .build();
}

// Storages 1 and 2 offloaded over their gaps. Device per op: 100, 50, 10, 10,
// 50, 100 (peak 100 at op 0). Host: 100 after op 0, 150 after op 1 (peak),
// 100 after op 4, 0 after op 5.
std::vector<Action> both_offloaded() {
  return actions(
      "post 0 copy_d2h 1; post 0 release_device 1; post 1 copy_d2h 2; post 1 release_device 2; "
      "post 3 release_device 3; pre 4 copy_h2d 2; post 4 release_device 2; post 4 release_host 2; "
      "pre 5 copy_h2d 1; post 5 release_device 1; post 5 release_host 1");
}

TEST(HostBudget, ASchedulesPeakHostBytesAreCountedAsTheValidatorCountsThem) {
  const Trace trace = three_activations();
  const ValidationReport report = validate_schedule(trace, Schedule{"test", both_offloaded()});
  ASSERT_TRUE(report.valid()) << report.problems.front();
  EXPECT_EQ(report.peak_host_bytes, 150);
  EXPECT_EQ(report.peak_bytes, 100);
  EXPECT_EQ(internal::peak_host_bytes(trace, both_offloaded()), 150);
}

TEST(HostBudget, AScheduleWithinTheHostBudgetIsLeftAsItIs) {
  const internal::HostTrim trim = internal::trim_to_host_budget(three_activations(), both_offloaded(), 150);
  EXPECT_EQ(trim.actions, both_offloaded());
  EXPECT_EQ(trim.storages_kept, 0);
  EXPECT_EQ(trim.peak_host_bytes, 150);
}

TEST(HostBudget, KeepsOnTheDeviceTheStorageWhoseGapsRaiseTheDevicePeakLeast) {
  // At the host peak (after op 1) storages 1 and 2 hold host copies. Keeping 1
  // on the device adds 100 B to ops 1-4: peak 50 + 100 = 150. Keeping 2 adds
  // 50 B to ops 2-3: 10 + 50 = 60, below the peak of 100. So 2 stays; host
  // peak 100 <= 120, device peak still 100 (op 0).
  const internal::HostTrim trim = internal::trim_to_host_budget(three_activations(), both_offloaded(), 120);
  EXPECT_EQ(trim.storages_kept, 1);
  EXPECT_EQ(trim.peak_host_bytes, 100);
  EXPECT_EQ(trim.peak_bytes, 100);
  EXPECT_EQ(trim.actions, actions("post 0 copy_d2h 1; post 0 release_device 1; post 3 release_device 3; "
                                  "post 4 release_device 2; pre 5 copy_h2d 1; post 5 release_device 1; "
                                  "post 5 release_host 1"));
}

TEST(HostBudget, ANoHostBudgetKeepsEverythingOnTheDevice) {
  // Both kept: ops 1-4 hold 1 and 2 (150) and ops 2-3 also 3: 160.
  const internal::HostTrim trim = internal::trim_to_host_budget(three_activations(), both_offloaded(), 0);
  EXPECT_EQ(trim.storages_kept, 2);
  EXPECT_EQ(trim.peak_host_bytes, 0);
  EXPECT_EQ(trim.peak_bytes, 160);
  EXPECT_EQ(trim.actions,
            actions("post 3 release_device 3; post 4 release_device 2; post 5 release_device 1"));
}

TEST(HostBudget, EveryPlannerKeepsTheHostBudget) {
  const Trace trace = three_activations();
  for (const std::string_view name : planner_names()) {
    PlannerOptions options;
    options.host_budget_bytes = 60;
    Result<std::unique_ptr<Planner>> planner = make_planner(name, options);
    ASSERT_TRUE(planner) << planner.error().message;
    Result<PlanResult> plan = (*planner)->plan(trace, 100);
    ASSERT_TRUE(plan) << plan.error().message;
    const ValidationReport report = validate_schedule(trace, plan->schedule);
    EXPECT_TRUE(report.valid()) << name;
    EXPECT_LE(report.peak_host_bytes, 60) << name;
  }
}

TEST(HostBudget, BelowTheHostFloorThePolicyNamesBothFloors) {
  // Device budget 100 = the floor (op 0 and op 5 touch 100 B). Ops 1-4 then
  // need storage 1 off the device (150 > 100 at op 1), and nothing is
  // recomputable: the host floor is storage 1's 100 B. The recompute-only
  // floor is the unplanned peak, 160 B (ops 2 and 3).
  const Trace trace = three_activations();
  PlannerOptions options;
  options.host_budget_bytes = 50;
  Result<BudgetedPlan> planned = plan_within_budget(trace, 100, "hybrid", options);
  ASSERT_TRUE(planned) << planned.error().message;
  EXPECT_EQ(planned->outcome, BudgetOutcome::kBelowHostFloor);
  EXPECT_EQ(planned->host_floor_bytes, 100);
  EXPECT_EQ(planned->recompute_floor_bytes, 160);
  EXPECT_LE(planned->validation.peak_host_bytes, 50);
  EXPECT_EQ(describe_host_shortfall(*planned, 100, 50),
            "no plan found keeps both the device budget of 100 B (100 bytes; floor 100 B) and the host budget of 50 "
            "B (50 bytes; host floor 100 B = 100 bytes): raise the host budget to 100 B or the device budget to 160 B (160 "
            "bytes), where recompute needs no host memory");

  // At the host floor the plan keeps both.
  options.host_budget_bytes = 100;
  planned = plan_within_budget(trace, 100, "hybrid", options);
  ASSERT_TRUE(planned) << planned.error().message;
  EXPECT_EQ(planned->outcome, BudgetOutcome::kWithinBudget);
  EXPECT_LE(planned->validation.peak_bytes, 100);
  EXPECT_LE(planned->validation.peak_host_bytes, 100);
}

//   op0 a W1 | op1 b R1 | op2 c W2 | op3 d W3 | op4 e R2     s1..s3 100 B, s1 retained
// Op 3 holds s1 (retained), s2 and s3: 300 B unplanned. `c` says whether op c
// (which reads nothing) is recomputable.
Trace retained_and_two(Recomputable c) {
  return TraceDsl()
      .storage(1, 100, Retention::kRetained)
      .storage(2, 100)
      .storage(3, 100)
      .op("a", "W1", 1.0)
      .op("b", "R1", 1.0)
      .op("c", "W2", 1.0, c)
      .op("d", "W3", 1.0)
      .op("e", "R2", 1.0)
      .build();
}

TEST(HostBudget, WithoutTheFallbackAPlanOverTheDeviceBudgetIsKeptAndTheNoteNamesWhoWouldFit) {
  // The floor is 200 B (op 3's s3 and the retained s1): s2 offloaded over op 3
  // (the peak planner's plan, 100 B of host: the host floor). Greedy's model
  // counts a retained storage only up to its last access, so it plans nothing
  // at 200 B and peaks at 300 B; without the fallback its plan is kept.
  const Trace trace = retained_and_two(Recomputable::kNo);
  PlannerOptions options;
  options.host_budget_bytes = 1000;
  Result<BudgetedPlan> planned = plan_within_budget(trace, 200, "greedy", options, FallbackToPeak::kNo);
  ASSERT_TRUE(planned) << planned.error().message;
  EXPECT_EQ(planned->outcome, BudgetOutcome::kOverBudget);
  EXPECT_EQ(planned->result.schedule.planner, "greedy");
  EXPECT_EQ(planned->validation.peak_bytes, 300);
  EXPECT_EQ(planned->host_floor_bytes, 100);
  ASSERT_FALSE(planned->result.notes.empty());
  EXPECT_EQ(planned->result.notes.front(),
            "planner \"greedy\" peaked at 300 B (300 bytes), over the budget of 200 B by 100 B; \"peak\", \"hybrid\" "
            "or \"recompute\" would fit: at or above the floors (200 B device, 100 B host) one of them keeps both "
            "budgets (the budget policy's fallback takes the first that does)");
  // With it (the session's policy) the peak planner's plan keeps both.
  planned = plan_within_budget(trace, 200, "greedy", options);
  ASSERT_TRUE(planned) << planned.error().message;
  EXPECT_EQ(planned->outcome, BudgetOutcome::kWithinBudget);
  EXPECT_EQ(planned->result.schedule.planner, "peak");
}

// The same trace with c recomputable (it reads nothing, so s2 can be made
// again before e): recompute-only reaches 200 B (s2 dropped after c, c re-run
// before e), so the host floor is 0. Under a host budget of 50 B the peak
// planner's offload of s2 (100 B of host) is trimmed and its plan peaks at
// 300 B; asked for by name, the note names the planners that would fit and
// leaves "peak" out, which just did not.
TEST(HostBudget, TheNoteOfANamedPlannerThatMissedLeavesItOutOfWhoWouldFit) {
  const Trace trace = retained_and_two(Recomputable::kYes);
  PlannerOptions options;
  options.host_budget_bytes = 50;
  Result<BudgetedPlan> planned = plan_within_budget(trace, 200, "peak", options, FallbackToPeak::kNo);
  ASSERT_TRUE(planned) << planned.error().message;
  EXPECT_EQ(planned->outcome, BudgetOutcome::kOverBudget);
  EXPECT_EQ(planned->validation.peak_bytes, 300);
  EXPECT_EQ(planned->host_floor_bytes, 0);
  ASSERT_FALSE(planned->result.notes.empty());
  EXPECT_EQ(planned->result.notes.front(),
            "planner \"peak\" peaked at 300 B (300 bytes), over the budget of 200 B by 100 B; \"hybrid\" or "
            "\"recompute\" would fit: at or above the floors (200 B device, 0 B host) one of them keeps both budgets "
            "(the budget policy's fallback takes the first that does)");
}

// Note [Keeping storages lazily]: on a transformer step every storage kept
// raises the device profile under every other's gaps, so many rounds find
// their leaders stale and some stop at the cap of re-evaluations. A 20-layer
// step, greedy at half its peak, a tenth of that for the host (measured: 226
// storages kept, 102 rounds cut): the trim still keeps the host budget, the
// schedule stays valid and fault-free, and the planner's note counts the cut
// rounds.
TEST(HostBudget, RoundsCutAtTheCapStillKeepTheHostBudget) {
  TransformerOptions shape = demo_transformer_options();
  shape.layers = 20;
  shape.hidden = 256;
  shape.heads = 4;
  shape.seq = 128;
  shape.batch = 4;
  shape.vocab = 1000;
  shape.dropout = Dropout::kOn;
  const Trace trace = value_or_throw(generate_transformer_trace(shape));
  const std::int64_t budget = unplanned_peak(trace).bytes / 2;
  const std::int64_t host_budget = budget / 10;
  Result<std::unique_ptr<Planner>> greedy = make_planner("greedy", {});
  ASSERT_TRUE(greedy);
  const PlanResult untrimmed = value_or_throw((*greedy)->plan(trace, budget));
  const internal::HostTrim trim = internal::trim_to_host_budget(trace, untrimmed.schedule.actions, host_budget);
  EXPECT_GT(trim.storages_kept, 0);
  EXPECT_GT(trim.cut_rounds, 0);
  EXPECT_LE(trim.cut_rounds, trim.storages_kept);
  EXPECT_LE(trim.peak_host_bytes, host_budget);
  Schedule trimmed;
  trimmed.actions = trim.actions;
  const ValidationReport report = validate_schedule(trace, trimmed);
  ASSERT_TRUE(report.valid()) << report.problems.front();
  EXPECT_TRUE(report.faults.empty());
  EXPECT_EQ(report.peak_host_bytes, trim.peak_host_bytes);
  EXPECT_EQ(report.peak_bytes, trim.peak_bytes);

  PlannerOptions options;
  options.host_budget_bytes = host_budget;
  Result<std::unique_ptr<Planner>> trimming = make_planner("greedy", options);
  ASSERT_TRUE(trimming);
  const PlanResult plan = value_or_throw((*trimming)->plan(trace, budget));
  EXPECT_TRUE(std::ranges::any_of(plan.notes, [&](const std::string& note) {
    return note.ends_with(fmt::format("; {} round(s) of the host-budget trim stopped re-evaluating at the cap and "
                                      "kept the best storage re-evaluated so far",
                                      trim.cut_rounds));
  })) << (plan.notes.empty() ? "" : plan.notes.front());
}

TEST(HostBudget, ANegativeHostBudgetIsRefusedByName) {
  PlannerOptions options;
  options.host_budget_bytes = -1;
  Result<std::unique_ptr<Planner>> planner = make_planner("greedy", options);
  ASSERT_FALSE(planner);
  EXPECT_EQ(planner.error().message, "host budget: -1 bytes is negative");
}

}  // namespace
}  // namespace hyperoffload
