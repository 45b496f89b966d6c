// The peak planner's steps on their own (plan/peak/): job sequencing on a
// copy engine and the issue order of copies to host, with hand-derived
// orders and times.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "hyperoffload/plan/peak/engine_jobs.h"
#include "hyperoffload/plan/peak/host_copies.h"
#include "testing/trace_dsl.h"

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

TEST(EngineJobs, LeastLatenessRunsAShortCopyThatCanMakeItBeforeALongLateOne) {
  // Both can start at 0. Job 0 (needed by 1, takes 3) is late whatever runs
  // first; job 1 (needed by 1.5, takes 0.5) is on time if it runs first. By
  // modified due date max(deadline, now + duration) at 0: job 0 max(1, 3) = 3,
  // job 1 max(1.5, 0.5) = 1.5: [1 0-0.5][0 0.5-3.5], lateness 0 + 2.5 = 2.5.
  // The soonest-needed order runs [0 0-3][1 3-3.5]: lateness 2 + 2 = 4, though
  // its latest copy is only 2 late instead of 2.5.
  const std::vector<EngineJob> jobs = {{0.0, 1.0, tie_key(0, 0), 3.0}, {0.0, 1.5, tie_key(0, 1), 0.5}};
  std::vector<double> finish;
  EXPECT_THAT(sequence_jobs(jobs, EngineRule::kLeastLateness, &finish), ElementsAre(1, 0));
  EXPECT_THAT(finish, ElementsAre(3.5, 0.5));
  EXPECT_THAT(sequence_jobs(jobs, EngineRule::kWorkConserving, &finish), ElementsAre(0, 1));
  EXPECT_THAT(finish, ElementsAre(3.0, 3.5));
}

TEST(EngineJobs, LeastLatenessRunsTheLateByDurationAndTheOnTimeByDeadline) {
  // All can start at 0 (deadline, duration): job 0 (1, 3) and job 2 (0.5, 2)
  // are late at 0, job 1 (2.5, 1) is not. Keys at 0: job 0 3, job 1 2.5,
  // job 2 2: [2 0-2]. At 2 job 1 is late too (2 + 1 > 2.5), keys job 0 5,
  // job 1 3: [1 2-3][0 3-6].
  const std::vector<EngineJob> jobs = {
      {0.0, 1.0, tie_key(0, 0), 3.0}, {0.0, 2.5, tie_key(0, 1), 1.0}, {0.0, 0.5, tie_key(0, 2), 2.0}};
  std::vector<double> finish;
  EXPECT_THAT(sequence_jobs(jobs, EngineRule::kLeastLateness, &finish), ElementsAre(2, 1, 0));
  EXPECT_THAT(finish, ElementsAre(6.0, 3.0, 2.0));
}

TEST(EngineJobs, LeastLatenessIdlesOnlyUntilTheNextJobCanStart) {
  // Job 0 can start at 0 and takes 1; job 1 can start at 4: [0 0-1], idle,
  // [1 4-5]. three_jobs() has no late job while it sequences, as in
  // WorkConservingNeverIdlesWhileAJobCanStart: [2 0-1][0 1-5][1 5-7].
  const std::vector<EngineJob> jobs = {{0.0, 5.0, tie_key(0, 0), 1.0}, {4.0, 4.5, tie_key(0, 1), 1.0}};
  std::vector<double> finish;
  EXPECT_THAT(sequence_jobs(jobs, EngineRule::kLeastLateness, &finish), ElementsAre(0, 1));
  EXPECT_THAT(finish, ElementsAre(1.0, 5.0));
  EXPECT_THAT(sequence_jobs(three_jobs(), EngineRule::kLeastLateness, &finish), ElementsAre(2, 0, 1));
  EXPECT_THAT(finish, ElementsAre(5.0, 7.0, 1.0));
}

// The rule as stated, in O(n^2): whenever the engine is free, of the jobs that
// can start, the one with the smallest (max(deadline, now + duration), tie);
// idle until the next can start when none can.
std::vector<std::size_t> least_lateness_by_definition(const std::vector<EngineJob>& jobs) {
  std::vector<bool> done(jobs.size(), false);
  std::vector<std::size_t> order;
  double now = 0.0;
  while (order.size() < jobs.size()) {
    double next = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (!done[j]) next = std::min(next, jobs[j].available_ms);
    }
    now = std::max(now, next);
    std::size_t best = jobs.size();
    double best_key = 0.0;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (done[j] || jobs[j].available_ms > now) continue;
      const double key = std::max(jobs[j].deadline_ms, now + jobs[j].duration_ms);
      if (best == jobs.size() || key < best_key || (key == best_key && jobs[j].tie < jobs[best].tie)) {
        best = j;
        best_key = key;
      }
    }
    done[best] = true;
    order.push_back(best);
    now += jobs[best].duration_ms;
  }
  return order;
}

TEST(EngineJobs, LeastLatenessMatchesItsDefinitionOnRandomJobs) {
  // Times on a grid of 0.5 ms, so that deadlines, keys and the moments jobs
  // become late often tie.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> count(1, 30), grid(0, 40), length(0, 8);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<EngineJob> jobs(static_cast<std::size_t>(count(rng)));
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      jobs[j] = {0.5 * grid(rng), 0.5 * grid(rng), tie_key(grid(rng), static_cast<std::int32_t>(j)),
                 0.5 * length(rng)};
    }
    ASSERT_EQ(sequence_jobs(jobs, EngineRule::kLeastLateness), least_lateness_by_definition(jobs)) << "trial " << trial;
  }
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

TEST(HostCopies, LeastLatenessCopiesAShortVersionThatCanMakeItsReleaseBeforeALongLateOne) {
  // At 0.9765625 GiB/s a MiB moves in 1 ms; every op takes 1 ms, so op x
  // starts at x ms. Op 0 writes L (3 MiB) and S (1 MiB): both copies to host
  // can start at 1. L is released after op 0 and read at op 2; S is released
  // after op 1 and read at op 5. On a device that holds only the budget a
  // version is needed by its copy back's latest start and by the op after its
  // release: L by min(2 - 3, 1) = -1 (late whatever runs first), S by
  // min(5 - 1, 2) = 2.
  //  - soonest needed: [L 1-4][S 4-5]; S's release waits until 5 instead of 2;
  //  - least lateness at 1: L's key max(-1, 1 + 3) = 4, S's max(2, 1 + 1) = 2:
  //    [S 1-2][L 2-5]: S in time, L one more ms late.
  constexpr std::int64_t kMiB = 1 << 20;
  const Trace trace = testing::TraceDsl()
                          .storage(0, 3 * kMiB)
                          .storage(1, kMiB)
                          .op("write", "W0 W1", 1.0)
                          .op("a", "", 1.0)
                          .op("read_l", "R0", 1.0)
                          .op("b", "", 1.0)
                          .op("c", "", 1.0)
                          .op("read_s", "R1", 1.0)
                          .bandwidth(0.9765625)
                          .build();
  PeakModel model;
  model.versions = {{0, 0}, {1, 0}};
  model.interior = {{.storage = 0, .size_bytes = 3 * kMiB, .version = 0, .start_op = 0, .end_op = 2},
                    {.storage = 1, .size_bytes = kMiB, .version = 1, .start_op = 0, .end_op = 5}};
  const std::vector<Placement> placements = {
      {.candidate = 0, .release_op = 0, .prefetch_op = 1, .engine_rank = 0},
      {.candidate = 1, .release_op = 1, .prefetch_op = 4, .engine_rank = 1}};
  const std::vector<double> start_ms = op_start_ms(trace);
  const PeakPass pass{trace, model, start_ms, 0, DeviceMemory::kBudget};  // the host copies read no limit

  const HostCopyOrder soonest = order_host_copies(pass, placements, HostCopySequencing::kSoonestNeeded);
  EXPECT_THAT(soonest.versions, ElementsAre(0, 1));
  EXPECT_THAT(soonest.ready_ms, ElementsAre(4.0, 5.0));
  const HostCopyOrder least = order_host_copies(pass, placements, HostCopySequencing::kLeastLateness);
  EXPECT_THAT(least.versions, ElementsAre(1, 0));
  EXPECT_THAT(least.ready_ms, ElementsAre(5.0, 2.0));
}

}  // namespace
}  // namespace hyperoffload::internal
