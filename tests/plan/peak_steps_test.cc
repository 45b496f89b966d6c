// The peak planner's steps on their own (plan/internal/): job sequencing on a
// copy engine and the issue order of copies to host, with hand-derived
// orders and times.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hyperoffload/plan/internal/engine_jobs.h"
#include "hyperoffload/plan/internal/host_copies.h"

namespace hyperoffload::internal {
namespace {

using ::testing::ElementsAre;

// Three copies for one engine (times in ms):
//   job 0: can start at 0, needed by 20, takes 4
//   job 1: can start at 2, needed by 5,  takes 2
//   job 2: can start at 0, needed by 10, takes 1
std::vector<EngineJob> three_jobs() {
  return {{0.0, 20.0, tie_key(0, 0), 4.0}, {2.0, 5.0, tie_key(0, 1), 2.0}, {0.0, 10.0, tie_key(0, 2), 1.0}};
}

TEST(EngineJobs, SoonestNeededRunsInDeadlineOrderAndWaitsForEachJob) {
  // 1 waits until 2: [1 2-4][2 4-5][0 5-9].
  std::vector<double> finish;
  EXPECT_THAT(sequence_jobs(three_jobs(), EngineRule::kSoonestNeeded, &finish), ElementsAre(1, 2, 0));
  EXPECT_THAT(finish, ElementsAre(9.0, 4.0, 5.0));
}

TEST(EngineJobs, FillIdleEngineRunsALaterJobOnlyWhereItFitsBeforeTheDueOne) {
  // At 0 job 1 (due first) cannot start; job 2 (1 ms) fits before 2, job 0
  // (4 ms) would not: [2 0-1] idle [1 2-4][0 4-8].
  std::vector<double> finish;
  EXPECT_THAT(sequence_jobs(three_jobs(), EngineRule::kFillIdleEngine, &finish), ElementsAre(2, 1, 0));
  EXPECT_THAT(finish, ElementsAre(8.0, 4.0, 1.0));
}

TEST(EngineJobs, WorkConservingNeverIdlesWhileAJobCanStart) {
  // [2 0-1][0 1-5][1 5-7]: job 0 runs although it delays job 1 past its deadline.
  std::vector<double> finish;
  EXPECT_THAT(sequence_jobs(three_jobs(), EngineRule::kWorkConserving, &finish), ElementsAre(2, 0, 1));
  EXPECT_THAT(finish, ElementsAre(5.0, 7.0, 1.0));
}

TEST(EngineJobs, BreaksDeadlineTiesByTieKey) {
  const std::vector<EngineJob> jobs = {{0.0, 3.0, tie_key(2, 0), 1.0}, {0.0, 3.0, tie_key(1, 5), 1.0}};
  EXPECT_THAT(sequence_jobs(jobs, EngineRule::kSoonestNeeded), ElementsAre(1, 0));
}

TEST(HostCopies, IssuesInTheGivenOrderButNoLaterThanEachFirstRelease) {
  // Versions 0 (copy op 2), 1 (copy op 1) and 2 (copy op 5), listed in that
  // order. Version 0 goes after op 2. Version 1 would follow it (FIFO: after
  // op 2), but its first release is after op 1, so it overtakes: after op 1.
  // Version 2 is never released: not copied.
  PeakModel model;
  model.versions = {{0, 2}, {1, 1}, {2, 5}};
  const std::vector<std::int32_t> order = {0, 1, 2};
  const std::vector<OpIndex> latest = {4, 1, kNoRelease};
  const std::vector<HostCopy> copies = issue_host_copies(model, order, latest);
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0].issue_op, 2);
  EXPECT_EQ(copies[0].rank, 0);
  EXPECT_EQ(copies[1].issue_op, 1);
  EXPECT_EQ(copies[1].rank, 1);
  EXPECT_EQ(copies[2].issue_op, -1);
}

}  // namespace
}  // namespace hyperoffload::internal
