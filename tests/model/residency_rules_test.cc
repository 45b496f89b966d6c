// The residency rules every executor shares: outcomes and transitions, the
// recompute rules and resolving a schedule against a trace.
#include "hyperoffload/model/residency_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using testing::actions;
using testing::TraceDsl;

ResidencyState state(std::int32_t version, bool resident, bool host_present, std::int32_t host_version = -1) {
  ResidencyState s;
  s.version = version;
  s.host_version = host_version;
  s.seen = true;
  s.resident = resident;
  s.host_present = host_present;
  return s;
}

TEST(ResidencyRules, ClassifiesAccesses) {
  EXPECT_EQ(classify_access(ResidencyState{}), AccessOutcome::kFirstAccess);
  EXPECT_EQ(classify_access(state(1, true, false)), AccessOutcome::kResident);
  EXPECT_EQ(classify_access(state(1, false, true, 1)), AccessOutcome::kFault);
  EXPECT_EQ(classify_access(state(2, false, true, 1)), AccessOutcome::kDataLoss);  // stale host copy
  EXPECT_EQ(classify_access(state(1, false, false)), AccessOutcome::kDataLoss);
}

TEST(ResidencyRules, MakesAStorageResidentAtAnAccessAndANewVersionAtAWrite) {
  ResidencyState s;
  apply_access(s, AccessKind::kRead);
  EXPECT_TRUE(s.seen && s.resident);
  EXPECT_EQ(s.version, 0);
  apply_access(s, AccessKind::kWrite);
  EXPECT_EQ(s.version, 1);
}

TEST(ResidencyRules, ClassifiesAndAppliesCopies) {
  ResidencyState s = state(1, true, false);
  EXPECT_EQ(classify_d2h(s), CopyOutcome::kCopies);
  apply_d2h(s);
  EXPECT_TRUE(s.host_current());
  EXPECT_EQ(classify_d2h(s), CopyOutcome::kNoOp);  // already current
  EXPECT_EQ(classify_h2d(s), CopyOutcome::kNoOp);  // resident
  EXPECT_TRUE(apply_release_device(s));
  EXPECT_FALSE(apply_release_device(s));  // nothing left to release
  EXPECT_EQ(classify_h2d(s), CopyOutcome::kCopies);
  apply_h2d(s);
  EXPECT_TRUE(s.resident);
  EXPECT_TRUE(apply_release_host(s));
  EXPECT_FALSE(apply_release_host(s));
  EXPECT_TRUE(apply_release_device(s));
  EXPECT_EQ(classify_d2h(s), CopyOutcome::kError);  // neither copy
  EXPECT_EQ(classify_h2d(s), CopyOutcome::kError);
}

TEST(ResidencyRules, ClassifiesRecomputeInputsByResidencyAndVersion) {
  EXPECT_EQ(classify_recompute_input(state(1, true, false), 1), RecomputeInput::kReady);
  EXPECT_EQ(classify_recompute_input(state(2, true, false), 1), RecomputeInput::kStale);
  // Not resident is missing, even with a current host copy (no demand paging).
  EXPECT_EQ(classify_recompute_input(state(1, false, true, 1), 1), RecomputeInput::kMissing);
}

TEST(ResidencyRules, ClassifiesRecomputeOutputsByResidencyAndVersion) {
  EXPECT_EQ(classify_recompute_output(state(1, false, false), 1), RecomputeOutput::kRegenerates);
  EXPECT_EQ(classify_recompute_output(state(1, true, false), 1), RecomputeOutput::kResident);
  EXPECT_EQ(classify_recompute_output(state(2, false, false), 1), RecomputeOutput::kStale);
  EXPECT_EQ(classify_recompute_output(state(2, true, false), 1), RecomputeOutput::kStale);
}

TEST(ResidencyRules, ListsARecomputesDistinctInputsAndOutputsWithTheirVersions) {
  // Op 1 reads storage 1 twice and writes storage 3 twice (versions 1 and 2):
  // one input at the version read, one output at its last write's version.
  const Trace trace = TraceDsl()
                          .storage(1, 8)
                          .storage(2, 8)
                          .storage(3, 8)
                          .op("a", "W1")
                          .op("f", "R1 W2 R1 W3 W3", 0.0, Recomputable::kYes)
                          .build();
  AccessVersions versions(trace);
  std::vector<ResidencyState> states(3);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (std::size_t a = 0; a < trace.accesses(op).size(); ++a) {
      const Access& access = trace.accesses(op)[a];
      apply_access(states[static_cast<std::size_t>(access.storage)], access.kind);
      versions.record(trace.access_offset(op) + a, states[static_cast<std::size_t>(access.storage)].version);
    }
  }
  RecomputeAccesses out;
  recompute_accesses(trace, versions, 1, out);
  ASSERT_EQ(out.inputs.size(), 1u);
  EXPECT_EQ(out.inputs[0].storage, 0);
  EXPECT_EQ(out.inputs[0].version, 1);
  EXPECT_EQ(out.inputs[0].access, 0u);
  ASSERT_EQ(out.outputs.size(), 2u);
  EXPECT_EQ(out.outputs[0].storage, 1);
  EXPECT_EQ(out.outputs[0].version, 1);
  EXPECT_EQ(out.outputs[1].storage, 2);
  EXPECT_EQ(out.outputs[1].version, 2);
  EXPECT_EQ(out.outputs[1].access, 4u);
}

TEST(ResidencyRules, RegeneratesOnlyReleasedOutputsAtTheirVersion) {
  std::vector<ResidencyState> states = {state(1, false, false), state(1, true, false), state(2, false, false)};
  RecomputeAccesses accesses;
  accesses.outputs = {{0, 1, 0}, {1, 1, 1}, {2, 1, 2}};
  const std::int64_t bytes = regenerate_outputs(
      accesses, [&](StorageIndex s) -> ResidencyState& { return states[static_cast<std::size_t>(s)]; },
      [](StorageIndex s) { return std::int64_t{10} << s; });
  EXPECT_EQ(bytes, 10);  // only storage 0: 1 is resident, 2 is stale
  EXPECT_TRUE(states[0].resident);
  EXPECT_FALSE(states[2].resident);
}

TEST(ResidencyRules, ResolvesActionsDroppingWhatCannotRunAndSortingTheRest) {
  const Trace trace = TraceDsl()
                          .storage(1, 8)
                          .storage(2, 8)
                          .op("a", "W1")
                          .op("f", "R1 W2", 0.0, Recomputable::kYes)
                          .op("g", "R2")
                          .build();
  std::vector<std::string> problems;
  Schedule schedule{"test", actions("post 1 release_device 2; pre 2 recompute 1; pre 2 recompute 0; "
                                    "post 0 copy_d2h 1; pre 1 copy_h2d 9; post 5 release_device 1")};
  const std::vector<ResolvedAction> resolved =
      resolve_actions(trace, schedule, [&](std::string text) { problems.push_back(std::move(text)); });
  EXPECT_THAT(problems,
              ElementsAre("actions[2] (op 2 pre recompute op 0): op 0 (a) is not recomputable; only ops the trace "
                          "marks ops[0].recomputable can be re-run",
                          "actions[3] (op 0 post copy_d2h storage 1): out of execution order (after op 2 pre "
                          "recompute op 1)",
                          "actions[4] (op 1 pre copy_h2d storage 9): unknown storage 9",
                          "actions[5] (op 5 post release_device storage 1): op 5 is out of range (the trace has 3 "
                          "ops)"));
  ASSERT_EQ(resolved.size(), 3u);
  EXPECT_EQ(resolved[0].index, 3u);  // sorted into execution order
  EXPECT_EQ(resolved[0].storage, 0);
  EXPECT_EQ(resolved[1].index, 0u);
  EXPECT_EQ(resolved[1].storage, 1);
  EXPECT_EQ(resolved[2].index, 1u);
  EXPECT_EQ(resolved[2].storage, -1);  // a recompute has no storage
}

}  // namespace
}  // namespace hyperoffload
