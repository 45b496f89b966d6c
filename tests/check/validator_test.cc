// Validator: schedule semantics on hand-built traces with exact expectations.
#include "hyperoffload/check/validator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::actions;
using testing::TraceDsl;

Schedule schedule_of(std::string_view text) { return Schedule{"test", actions(text)}; }

// op:          0    1    2    3
// storage 1:   W    .    .    R      (100 B)
// storage 2:   .    W    R    .      (50 B)
Trace four_op_trace() {
  return TraceDsl().storage(1, 100).storage(2, 50).op("a", "W1").op("b", "W2").op("c", "R2").op("d", "R1").build();
}

TEST(Validator, CountsEveryStorageFromItsFirstAccessWithoutASchedule) {
  // Nothing is ever released: 100, 150, 150, 150.
  const ValidationReport report =
      validate_schedule(four_op_trace(), Schedule{}, ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid());
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 150, 150, 150));
  EXPECT_EQ(report.peak_bytes, 150);
  EXPECT_EQ(report.peak_op, 1);
  EXPECT_EQ(report.resident_at_end_bytes, 150);
}

TEST(Validator, MeasuresAnOpAfterItsPreActionsAndBeforeItsPostActions) {
  // Storage 1 offloaded after op 0 and prefetched before op 3:
  //   op 0: 100 (release is post), op 1: 50, op 2: 50 (storage 2 released post 2),
  //   op 3: 0 + 100 prefetched = 100.
  const ValidationReport report = validate_schedule(
      four_op_trace(),
      schedule_of("post 0 copy_d2h 1; post 0 release_device 1; post 2 release_device 2; pre 3 copy_h2d 1"),
      ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 50, 50, 100));
  EXPECT_EQ(report.peak_bytes, 100);
  EXPECT_EQ(report.peak_op, 0);
  EXPECT_EQ(report.d2h_bytes, 100);
  EXPECT_EQ(report.h2d_bytes, 100);
  EXPECT_EQ(report.d2h_count, 1);
  EXPECT_EQ(report.h2d_count, 1);
  EXPECT_EQ(report.peak_host_bytes, 100);
  EXPECT_TRUE(report.faults.empty());
}

TEST(Validator, CountsAFaultWhenAReleasedStorageWithAHostCopyIsAccessed) {
  // No prefetch: op 3 demand-pages storage 1 (a fault, 100 B of H2D).
  const ValidationReport report =
      validate_schedule(four_op_trace(), schedule_of("post 0 copy_d2h 1; post 0 release_device 1"));
  EXPECT_TRUE(report.valid());
  ASSERT_EQ(report.faults.size(), 1u);
  EXPECT_EQ(report.faults[0].op, 3);
  EXPECT_EQ(report.faults[0].storage, 1);
  EXPECT_EQ(report.h2d_bytes, 100);
  EXPECT_EQ(report.h2d_count, 0);
}

TEST(Validator, ReportsDataLossWhenAReleasedStorageHasNoHostCopy) {
  const ValidationReport report = validate_schedule(four_op_trace(), schedule_of("post 0 release_device 1"));
  EXPECT_FALSE(report.valid());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_THAT(report.problems[0], HasSubstr("op 3 read of storage 1: data lost"));
  EXPECT_THAT(report.problems[0], HasSubstr("without a host copy"));
}

TEST(Validator, ReportsDataLossWhenTheHostCopyIsStale) {
  // Copied at op 0, written again at op 1, released: the host holds version 1,
  // the data at op 2 is version 2.
  const Trace trace = TraceDsl().storage(1, 8).op("a", "W1").op("b", "W1").op("c", "R1").build();
  const ValidationReport report =
      validate_schedule(trace, schedule_of("post 0 copy_d2h 1; post 1 release_device 1"));
  ASSERT_EQ(report.problem_count, 1u);
  EXPECT_THAT(report.problems[0], HasSubstr("op 2 read of storage 1: data lost"));
  EXPECT_THAT(report.problems[0], HasSubstr("stale (written at op 1)"));
}

TEST(Validator, RejectsCopyH2DFromAStaleHostCopy) {
  const Trace trace = TraceDsl().storage(1, 8).op("a", "W1").op("b", "W1").op("c", "R1").build();
  const ValidationReport report = validate_schedule(
      trace, schedule_of("post 0 copy_d2h 1; post 1 release_device 1; pre 2 copy_h2d 1"));
  EXPECT_EQ(report.problem_count, 2u);  // the stale copy, then the lost access
  EXPECT_THAT(report.problems[0], HasSubstr("op 2 pre copy_h2d storage 1: host copy is stale"));
}

TEST(Validator, RejectsCopyH2DWithoutAHostCopy) {
  const ValidationReport report =
      validate_schedule(four_op_trace(), schedule_of("post 0 release_device 1; pre 3 copy_h2d 1"));
  EXPECT_THAT(report.problems[0], HasSubstr("op 3 pre copy_h2d storage 1: no host copy"));
}

TEST(Validator, RejectsCopyD2HOfANonResidentStorage) {
  const ValidationReport before_first_access = validate_schedule(four_op_trace(), schedule_of("pre 0 copy_d2h 1"));
  EXPECT_THAT(before_first_access.problems[0], HasSubstr("not resident (before its first access)"));
  const ValidationReport after_release =
      validate_schedule(four_op_trace(), schedule_of("post 0 release_device 1; post 1 copy_d2h 1"));
  EXPECT_THAT(after_release.problems[0], HasSubstr("op 1 post copy_d2h storage 1: storage is not resident"));
}

TEST(Validator, TreatsACopyD2HOfTheCurrentVersionAsANoOp) {
  // The second copy (host already current) needs no residency and moves nothing.
  const ValidationReport report = validate_schedule(
      four_op_trace(), schedule_of("post 0 copy_d2h 1; post 0 release_device 1; post 1 copy_d2h 1; pre 3 copy_h2d 1"));
  EXPECT_TRUE(report.valid());
  EXPECT_EQ(report.d2h_bytes, 100);
  EXPECT_EQ(report.d2h_count, 1);
}

TEST(Validator, RecopiesAfterAWriteMadeTheHostCopyStale) {
  // version 1 copied after op 0; op 1 writes version 2; the copy after op 1 is real.
  const Trace trace = TraceDsl().storage(1, 8).op("a", "W1").op("b", "W1").op("c", "").op("d", "R1").build();
  const ValidationReport report = validate_schedule(
      trace, schedule_of("post 0 copy_d2h 1; post 1 copy_d2h 1; post 1 release_device 1; pre 3 copy_h2d 1"));
  EXPECT_TRUE(report.valid());
  EXPECT_EQ(report.d2h_count, 2);
  EXPECT_EQ(report.d2h_bytes, 16);
  EXPECT_EQ(report.peak_host_bytes, 8);  // one host copy, refreshed in place
}

TEST(Validator, TreatsCopyH2DOfAResidentStorageAsANoOp) {
  const ValidationReport report = validate_schedule(four_op_trace(), schedule_of("post 0 copy_d2h 1; pre 3 copy_h2d 1"));
  EXPECT_TRUE(report.valid());
  EXPECT_EQ(report.h2d_bytes, 0);
}

TEST(Validator, ReportsUnknownStoragesAndOpsOutOfRange) {
  const ValidationReport report = validate_schedule(four_op_trace(), schedule_of("post 0 copy_d2h 9; pre 4 copy_h2d 1"));
  ASSERT_EQ(report.problem_count, 2u);
  EXPECT_EQ(report.problems[0], "actions[0] (op 0 post copy_d2h storage 9): unknown storage 9");
  EXPECT_EQ(report.problems[1], "actions[1] (op 4 pre copy_h2d storage 1): op 4 is out of range (the trace has 4 ops)");
}

TEST(Validator, ReportsActionsOutOfExecutionOrder) {
  const ValidationReport report =
      validate_schedule(four_op_trace(), schedule_of("post 1 release_device 2; post 0 copy_d2h 1"));
  EXPECT_THAT(report.problems[0], HasSubstr("actions[1] (op 0 post copy_d2h storage 1): out of execution order"));
}

TEST(Validator, ReleasingAHostCopyDropsIt) {
  // After release_host the device copy is the only one; releasing it then
  // loses the data.
  const ValidationReport report = validate_schedule(
      four_op_trace(), schedule_of("post 0 copy_d2h 1; post 1 release_host 1; post 1 release_device 1"));
  EXPECT_THAT(report.problems[0], HasSubstr("op 3 read of storage 1: data lost"));
}

TEST(Validator, CountsHostBytesAcrossStoragesAndGivesBackWhatReleaseHostFrees) {
  // op:          0    1    2    3    4    5
  // storage 1:   W    .    .    R              (100 B)
  // storage 2:        W    .    .    R         (50 B)
  // storage 3:             W    .    .    R    (30 B)
  // Bytes of host copies after each action, in execution order:
  //   post 0 copy_d2h 1        100
  //   post 1 copy_d2h 2        150  <- peak
  //   post 2 release_host 2    100  (storage 2 keeps its device copy)
  //   post 2 copy_d2h 3        130
  //   post 3 release_host 1     30
  //   post 3 release_host 1     30  (no host copy left: a no-op)
  //   post 4 copy_d2h 2         80  (its host copy is gone, so a real copy)
  // Counting the copies without the releases would give 230.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(3, 30)
                          .op("a", "W1")
                          .op("b", "W2")
                          .op("c", "W3")
                          .op("d", "R1")
                          .op("e", "R2")
                          .op("f", "R3")
                          .build();
  const ValidationReport report =
      validate_schedule(trace, schedule_of("post 0 copy_d2h 1; post 1 copy_d2h 2; post 2 release_host 2;"
                                           "post 2 copy_d2h 3; post 3 release_host 1; post 3 release_host 1;"
                                           "post 4 copy_d2h 2"));
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_EQ(report.peak_host_bytes, 150);
  EXPECT_EQ(report.d2h_count, 4);
  EXPECT_EQ(report.d2h_bytes, 230);
}

TEST(Validator, ReleasingAHostCopyThatIsNotThereFreesNothing) {
  // release_host of storage 2 before it has a host copy is a no-op: it must
  // not lower the count below what the later copies hold.
  //   pre 0 release_host 2 (no copy: 0), post 0 d2h 1 (100), post 1 d2h 2
  //   (150), post 1 release_host 2 (100), post 1 release_host 2 (no-op, 100),
  //   post 2 d2h 2 (150).
  const Trace trace = TraceDsl().storage(1, 100).storage(2, 50).op("a", "W1").op("b", "W2").op("c", "R1 R2").build();
  const ValidationReport report = validate_schedule(
      trace, schedule_of("pre 0 release_host 2; post 0 copy_d2h 1; post 1 copy_d2h 2; post 1 release_host 2;"
                         "post 1 release_host 2; post 2 copy_d2h 2; post 2 copy_d2h 2"));
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_EQ(report.peak_host_bytes, 150);
  EXPECT_EQ(report.d2h_count, 3);  // the last copy finds the host current
}

TEST(Validator, LimitsDescribedProblemsButCountsThemAll) {
  ValidatorOptions options;
  options.max_described_problems = 1;
  const ValidationReport report =
      validate_schedule(four_op_trace(), schedule_of("pre 0 copy_h2d 1; pre 0 copy_h2d 2; pre 0 copy_h2d 1"), options);
  EXPECT_EQ(report.problem_count, 3u);
  EXPECT_EQ(report.problems.size(), 1u);
}

// ---- Recompute (schedule format v2; docs/FORMATS.md, "Recompute") ------------------

// op:          0      1          2     3
// storage 1:   W      R          .     R     (100 B, the input)
// storage 2:   .      W (remat)  R     R     (50 B, op 1's output)
// op 1 is recomputable: it reads storage 1 and creates storage 2.
Trace remat_trace() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 50)
      .op("x", "W1")
      .op("f", "R1 W2", 1.0, Recomputable::kYes)
      .op("g", "R2")
      .op("h", "R2 R1")
      .build();
}

TEST(ValidatorRecompute, RegeneratesAStorageReleasedWithoutAHostCopyBeforeItsNextAccess) {
  // Storage 2 is dropped after op 2 with no host copy (lost, were it not for the
  // recompute) and regenerated before op 3 from storage 1, still resident:
  //   op 0: 100, op 1: 150, op 2: 150, post 2 release -> 100,
  //   pre 3 recompute op 1 -> 150 (storage 2 allocated again), op 3: 150.
  const ValidationReport report = validate_schedule(
      remat_trace(), schedule_of("post 2 release_device 2; pre 3 recompute 1"), ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 150, 150, 150));
  EXPECT_TRUE(report.faults.empty());
  EXPECT_EQ(report.recompute_count, 1);
  EXPECT_EQ(report.h2d_bytes, 0);
  EXPECT_EQ(report.peak_bytes, 150);
  EXPECT_EQ(report.peak_op, 1);  // op 1 reached 150 first
  EXPECT_EQ(report.peak_recompute_source, -1);
}

TEST(ValidatorRecompute, ReportsARecomputeOfAnOpNotMarkedRecomputable) {
  // Op 0 is not recomputable: the action is dropped and named; storage 2,
  // released without a host copy, is then lost at op 3.
  const ValidationReport report =
      validate_schedule(remat_trace(), schedule_of("post 2 release_device 2; pre 3 recompute 0"));
  ASSERT_EQ(report.problem_count, 2u);
  EXPECT_EQ(report.problems[0],
            "actions[1] (op 3 pre recompute op 0): op 0 (x) is not recomputable; only ops the trace marks "
            "ops[0].recomputable can be re-run");
  EXPECT_THAT(report.problems[1], HasSubstr("op 3 read of storage 2: data lost"));
  EXPECT_EQ(report.recompute_count, 0);
}

TEST(ValidatorRecompute, ReportsAnInputThatIsNotResident) {
  // Storage 1 is offloaded after op 1, so the recompute before op 3 finds its
  // input missing (a recompute does not demand-page). Op 3's own read of
  // storage 1 is then a fault, which is allowed: one problem.
  const ValidationReport report = validate_schedule(
      remat_trace(),
      schedule_of("post 1 copy_d2h 1; post 1 release_device 1; post 2 release_device 2; pre 3 recompute 1"));
  ASSERT_EQ(report.problem_count, 1u);
  EXPECT_EQ(report.problems[0],
            "actions[3] (op 3 pre recompute op 1): input storage 1 (ops[1].accesses[0]) is not resident (released "
            "after op 1); copy_h2d or recompute it before the recompute");
  EXPECT_EQ(report.faults.size(), 1u);
}

TEST(ValidatorRecompute, ReportsAnInputWrittenSinceTheOpReadIt) {
  // Op 2 updates storage 1 in place (version 1 -> 2) after op 1 read version 1:
  // re-running op 1 at op 3 would compute from the wrong data.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .op("x", "W1")
                          .op("f", "R1 W2", 1.0, Recomputable::kYes)
                          .op("update", "R1 W1")
                          .op("h", "R2")
                          .build();
  const ValidationReport report =
      validate_schedule(trace, schedule_of("post 1 release_device 2; pre 3 recompute 1"));
  ASSERT_EQ(report.problem_count, 1u);
  EXPECT_EQ(report.problems[0],
            "actions[1] (op 3 pre recompute op 1): input storage 1 (ops[1].accesses[0]) is stale: op 1 read it "
            "before op 2 wrote it again, so re-running op 1 would not reproduce its outputs");
}

// An in-place unit (Note [In-place units] in ir/trace.h): op 1 (bn) makes
// storage 1 from storage 9; op 2 (relu_) rewrites it in place (version 2);
// op 3 reads it, op 4 only storage 9, op 5 reads storage 1 again.
//   sizes: s9 10 (retained), s1 100
Trace unit_trace() {
  return TraceDsl()
      .storage(1, 100)
      .storage(9, 10, Retention::kRetained)
      .op("load", "W9")
      .op("bn", "R9 W1", 1.0, Recomputable::kYes)
      .op("relu_", "R1 W1", 0.5, Recomputable::kYes)
      .op("conv", "R1")
      .op("mid", "R9")
      .op("use", "R1")
      .build();
}

TEST(ValidatorRecompute, AFollowersRecomputeReRunsItsUnitAndRegeneratesTheVersionItMade) {
  // Released after op 3 and regenerated before op 5 by re-running bn then
  // relu_: storage 1 comes back at version 2, which op 5 reads.
  //   op 0: 10, ops 1-3: 110, post 3 release -> 10, op 4: 10,
  //   pre 5 recompute op 2 -> 110 (input s9, output s1), op 5: 110.
  const ValidationReport report = validate_schedule(
      unit_trace(), schedule_of("post 3 release_device 1; pre 5 recompute 2"), ValidatorOptions{KeepProfile::kYes});
  ASSERT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(10, 110, 110, 110, 10, 110));
  EXPECT_EQ(report.recompute_count, 1);
  EXPECT_EQ(report.regenerated_bytes, 100);
}

TEST(ValidatorRecompute, ARecomputeOfAUnitsHeadAloneAfterItsFollowerIsStale) {
  // bn alone would bring back version 1, which relu_ overwrote.
  const ValidationReport report =
      validate_schedule(unit_trace(), schedule_of("post 3 release_device 1; pre 5 recompute 1"));
  ASSERT_EQ(report.problem_count, 2u);
  EXPECT_EQ(report.problems[0],
            "actions[1] (op 5 pre recompute op 1): output storage 1 (ops[1].accesses[1]) is stale: op 2 wrote it "
            "after op 1, so a recompute would bring back an older version");
  EXPECT_THAT(report.problems[1], HasSubstr("op 5 read of storage 1: data lost"));
}

TEST(ValidatorRecompute, AUnitsInputsAreWhatItsMembersReadAndNamedByTheMemberThatReadsThem) {
  // add_ (op 3) rewrites storage 1 reading storage 2, which the plan offloads
  // and does not bring back: the unit's input is missing, named as add_'s.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(9, 10, Retention::kRetained)
                          .op("load", "W9 W2")
                          .op("bn", "R9 W1", 1.0, Recomputable::kYes)
                          .op("relu_", "R1 W1", 0.5, Recomputable::kYes)
                          .op("add_", "R1 R2 W1", 0.5, Recomputable::kYes)
                          .op("mid", "R9")
                          .op("use", "R1 R2")
                          .build();
  const ValidationReport report = validate_schedule(
      trace, schedule_of("post 3 copy_d2h 2; post 3 release_device 2; post 3 release_device 1; pre 5 recompute 3"));
  ASSERT_EQ(report.problem_count, 1u);
  EXPECT_EQ(report.problems[0],
            "actions[3] (op 5 pre recompute op 3): input storage 2 (ops[3].accesses[1]) is not resident (released "
            "after op 3); copy_h2d or recompute it before the recompute");
}

TEST(ValidatorRecompute, ReportsAnOutputWrittenSinceTheOpProducedIt) {
  // Op 2 updates storage 2 in place after op 1 created it: the storage is at
  // version 2, and a recompute of op 1 would bring back version 1. Resident or
  // released, it is stale; released, it is also still lost at op 3.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .op("x", "W1")
                          .op("f", "R1 W2", 1.0, Recomputable::kYes)
                          .op("scale_", "R2 W2")
                          .op("h", "R2 R1")
                          .build();
  const std::string stale =
      "(op 3 pre recompute op 1): output storage 2 (ops[1].accesses[1]) is stale: op 2 wrote it after op 1, so a "
      "recompute would bring back an older version";
  const ValidationReport resident = validate_schedule(trace, schedule_of("pre 3 recompute 1"));
  ASSERT_EQ(resident.problem_count, 1u);
  EXPECT_EQ(resident.problems[0], "actions[0] " + stale);
  const ValidationReport released =
      validate_schedule(trace, schedule_of("post 2 release_device 2; pre 3 recompute 1"));
  ASSERT_EQ(released.problem_count, 2u);
  EXPECT_EQ(released.problems[0], "actions[1] " + stale);
  EXPECT_THAT(released.problems[1], HasSubstr("op 3 read of storage 2: data lost"));
}

TEST(ValidatorRecompute, ReportsASourceOpThatDoesNotRunBeforeTheAction) {
  // A pre recompute needs source_op < op; a post one source_op <= op.
  const ValidationReport same_op_pre = validate_schedule(remat_trace(), schedule_of("pre 1 recompute 1"));
  ASSERT_EQ(same_op_pre.problem_count, 1u);
  EXPECT_EQ(same_op_pre.problems[0],
            "actions[0] (op 1 pre recompute op 1): source_op 1 does not run before op 1 pre (source_op < op, or <= "
            "op for post)");
  const ValidationReport later = validate_schedule(remat_trace(), schedule_of("post 0 recompute 1"));
  EXPECT_THAT(later.problems.at(0), HasSubstr("source_op 1 does not run before op 0 post"));
  // Right after the op itself: its output is resident at its version, a no-op.
  const ValidationReport same_op_post = validate_schedule(remat_trace(), schedule_of("post 1 recompute 1"));
  EXPECT_TRUE(same_op_post.valid());
  EXPECT_EQ(same_op_post.recompute_count, 1);
  EXPECT_EQ(same_op_post.peak_bytes, 150);
}

TEST(ValidatorRecompute, ReportsAMissingSourceOp) {
  Schedule schedule{"test", {}};
  schedule.actions.push_back(Action{3, Phase::kPre, ActionKind::kRecompute, 0, -1});
  const ValidationReport report = validate_schedule(remat_trace(), schedule);
  ASSERT_EQ(report.problem_count, 1u);
  EXPECT_EQ(report.problems[0],
            "actions[0] (op 3 pre recompute op -1): missing source_op (a recompute names the op it re-runs)");
}

TEST(ValidatorRecompute, CountsTheRecomputeWithItsInputsAndOutputsInThePeak) {
  // storage 1: 100 B, 2: 100 B (op 1's output), 3: 60 B.
  //   op 0 W1: 100; op 1 R1 W2: 200; post 1 release 2 -> 100;
  //   op 2 R1 W3: 160; pre 3 recompute op 1 -> 260 (1, 2 and 3 resident);
  //   pre 3 release 1 (its last use was the recompute) -> 160; op 3 R2 R3: 160.
  // The peak, 260, is reached during the recompute, before op 3.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 60)
                          .op("x", "W1")
                          .op("f", "R1 W2", 1.0, Recomputable::kYes)
                          .op("g", "R1 W3")
                          .op("h", "R2 R3")
                          .build();
  const ValidationReport report = validate_schedule(
      trace, schedule_of("post 1 release_device 2; pre 3 recompute 1; pre 3 release_device 1"),
      ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 200, 160, 160));
  EXPECT_EQ(report.peak_bytes, 260);
  EXPECT_EQ(report.peak_op, 3);
  EXPECT_EQ(report.peak_recompute_source, 1);
}

TEST(ValidatorRecompute, AllocatesEveryReleasedOutputAndDropsUnneededOnesRightAfter) {
  // Op 1 creates storages 2 (50 B) and 3 (30 B); only 2 is read again. Both are
  // released after op 2; the recompute brings both back, and storage 3 is
  // released right after it, in the same phase.
  //   op 0: 100; op 1: 180; op 2 R2 R3: 180; post 2 release 2, 3 -> 100;
  //   pre 3 recompute op 1 -> 180 (2 and 3 allocated); pre 3 release 3 -> 150;
  //   op 3 R2 R1: 150.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(3, 30)
                          .op("x", "W1")
                          .op("f", "R1 W2 W3", 1.0, Recomputable::kYes)
                          .op("g", "R2 R3")
                          .op("h", "R2 R1")
                          .build();
  const ValidationReport report = validate_schedule(
      trace,
      schedule_of("post 2 release_device 2; post 2 release_device 3; pre 3 recompute 1; pre 3 release_device 3"),
      ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 180, 180, 150));
  EXPECT_EQ(report.peak_bytes, 180);
  EXPECT_EQ(report.resident_at_end_bytes, 150);
}

TEST(ValidatorRecompute, AllocatesOnlyTheOutputsThatWereReleased) {
  // Storage 3 stays resident at op 1's version; only storage 2 (50 B) is
  // allocated by the recompute: 130 + 50 = 180 during it.
  //   op 0: 100; op 1: 180; post 1 release 2 -> 130; op 2 R3: 130;
  //   pre 3 recompute op 1 -> 180; op 3 R2 R3: 180.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(3, 30)
                          .op("x", "W1")
                          .op("f", "R1 W2 W3", 1.0, Recomputable::kYes)
                          .op("g", "R3")
                          .op("h", "R2 R3")
                          .build();
  const ValidationReport report = validate_schedule(trace, schedule_of("post 1 release_device 2; pre 3 recompute 1"),
                                                    ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 180, 130, 180));
}

TEST(ValidatorRecompute, StillReportsDataLossAtAnAccessBeforeTheRecompute) {
  // Storage 2 is released after op 1 without a host copy; op 2 reads it before
  // the recompute at op 3 regenerates it: lost at op 2, fine at op 3.
  const ValidationReport report =
      validate_schedule(remat_trace(), schedule_of("post 1 release_device 2; pre 3 recompute 1"));
  ASSERT_EQ(report.problem_count, 1u);
  EXPECT_THAT(report.problems[0], HasSubstr("op 2 read of storage 2: data lost"));
}

TEST(ValidatorRecompute, ChainsRecomputesThroughARegeneratedInput) {
  // Two levels, as checkpointing a layer does: op 1 makes 2 from 1, op 2 makes
  // 3 from 2; both are dropped after use and op 4 needs 3 again. The recompute
  // of op 1 brings back 2, which the recompute of op 2 reads.
  //   op 0: 100; op 1: 150; op 2: 180; post 2 release 2, 3 -> 100; op 3 (no
  //   accesses): 100; pre 4 recompute op 1 -> 150, recompute op 2 -> 180,
  //   release 2 -> 130; op 4 R3: 130.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(3, 30)
                          .op("x", "W1")
                          .op("f", "R1 W2", 1.0, Recomputable::kYes)
                          .op("g", "R2 W3", 1.0, Recomputable::kYes)
                          .op("idle", "")
                          .op("h", "R3")
                          .build();
  const ValidationReport report = validate_schedule(
      trace,
      schedule_of("post 2 release_device 2; post 2 release_device 3; pre 4 recompute 1; pre 4 recompute 2; "
                  "pre 4 release_device 2"),
      ValidatorOptions{KeepProfile::kYes});
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_THAT(report.resident_bytes, ElementsAre(100, 150, 180, 100, 130));
  EXPECT_EQ(report.recompute_count, 2);
  // In the other order the second level's input is missing.
  const ValidationReport reversed = validate_schedule(
      trace, schedule_of("post 2 release_device 2; post 2 release_device 3; pre 4 recompute 2; pre 4 recompute 1"));
  EXPECT_THAT(reversed.problems.at(0),
              HasSubstr("actions[2] (op 4 pre recompute op 2): input storage 2 (ops[2].accesses[0]) is not resident"));
}

}  // namespace
}  // namespace hyperoffload
