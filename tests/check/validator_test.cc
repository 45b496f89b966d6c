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

}  // namespace
}  // namespace hyperoffload
