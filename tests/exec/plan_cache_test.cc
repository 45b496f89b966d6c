// The session's plan per step program (exec/session.h, Note [Plan per step
// program]): each matching case with counters derived by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "exec/step_driver.h"
#include "hyperoffload/exec/plan_cache.h"
#include "hyperoffload/exec/session.h"
#include "hyperoffload/runtime/host_backend.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::StepDriver;

std::unique_ptr<HostBackend> backend_of(std::int64_t capacity) {
  Result<std::unique_ptr<HostBackend>> backend =
      HostBackend::create({.device_capacity_bytes = capacity, .device_alignment_bytes = 64});
  EXPECT_TRUE(backend.has_value());
  return std::move(*backend);
}

std::unique_ptr<Session> session_of(Backend& backend, SessionOptions options) {
  Result<std::unique_ptr<Session>> session = Session::create(backend, std::move(options));
  EXPECT_TRUE(session.has_value()) << session.error().message;
  return std::move(*session);
}

// A four-op chain whose storages are `bytes` each ("a batch of length
// bytes"), ids from `base`; with `ops` = 3 the last op is left out (a shorter
// program); "relu"'s output is `relu_bytes` when given (a program that differs
// late). Everything is freed before the step ends.
Status run_chain(Session& session, std::int64_t bytes, StorageId base, int ops = 4,
                 std::optional<std::uint64_t> tag = std::nullopt,
                 std::optional<std::int64_t> relu_bytes = std::nullopt) {
  HO_RETURN_IF_ERROR(session.begin_step());
  if (tag) HO_RETURN_IF_ERROR(session.set_program_tag(*tag));
  StepDriver step(session);
  HO_RETURN_IF_ERROR(step.op("embed", {}, {{base, bytes}}));
  HO_RETURN_IF_ERROR(step.op("mm", {base}, {{base + 1, bytes}}));
  HO_RETURN_IF_ERROR(step.op("relu", {base + 1}, {{base + 2, relu_bytes.value_or(bytes)}}));
  if (ops == 4) HO_RETURN_IF_ERROR(step.op("loss", {base, base + 2}, {{base + 3, 64}}));
  for (StorageId id = base; id < base + ops; ++id) HO_RETURN_IF_ERROR(step.free(id));
  return session.end_step();
}

void expect_cache(const Session& session, std::int64_t cached, std::int64_t hits, std::int64_t misses,
                  std::int64_t warmups, std::int64_t switches, std::int64_t evictions) {
  const PlanCacheStats& stats = session.plan_cache_stats();
  EXPECT_EQ(stats.plans_cached, cached);
  EXPECT_EQ(stats.hits, hits);
  EXPECT_EQ(stats.misses, misses);
  EXPECT_EQ(stats.warmups, warmups);
  EXPECT_EQ(stats.switches, switches);
  EXPECT_EQ(stats.evictions, evictions);
}

// An unlimited budget: no plan has an action, so every replay stays
// reversible to its end.
TEST(PlanCache, AStepOfAnotherShapeWarmsUpThenEachShapeReplaysItsOwnPlan) {
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, {});
  // 1: warmup (cache empty): warmups 1, misses 1, plan A cached.
  ASSERT_TRUE(run_chain(*session, 1024, 10));
  expect_cache(*session, 1, 0, 1, 1, 0, 0);
  // 2: replays A; embed's output is 2048 bytes, not 1024: no other plan, so
  // the step continues as a warmup from there: warmups 2, misses 2, plan B.
  ASSERT_TRUE(run_chain(*session, 2048, 20));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kWarmup);
  EXPECT_EQ(session->last_step_stats().ops, 4);
  expect_cache(*session, 2, 0, 2, 2, 0, 0);
  // 3: replays B (most recent); differs at embed's output; A matches: switch.
  ASSERT_TRUE(run_chain(*session, 1024, 30));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kReplay);
  expect_cache(*session, 2, 1, 2, 2, 1, 0);
  // 4: A again. Note [Next program]: the last time A ran (step 1), B came
  // next, so the step starts on B: a switch to A at embed.
  ASSERT_TRUE(run_chain(*session, 1024, 40));
  expect_cache(*session, 2, 2, 2, 2, 2, 0);
  // 5: B. After A (step 3) came A (step 4): it starts on A, switches to B.
  ASSERT_TRUE(run_chain(*session, 2048, 50));
  expect_cache(*session, 2, 3, 2, 2, 3, 0);
  // One note per plan cached.
  int plan_notes = 0;
  for (const std::string& note : session->notes()) plan_notes += note.starts_with("plan ") ? 1 : 0;
  EXPECT_EQ(plan_notes, 2);
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
}

TEST(PlanCache, TheLeastRecentlyUsedPlanIsEvictedAtMaxPlans) {
  auto backend = backend_of(std::int64_t{1} << 20);
  SessionOptions options;
  options.max_plans = 2;
  auto session = session_of(*backend, options);
  // Lengths 1, 2, 3 (x 1024): three warmups; the third evicts plan 1.
  ASSERT_TRUE(run_chain(*session, 1024, 10));
  ASSERT_TRUE(run_chain(*session, 2048, 20));
  ASSERT_TRUE(run_chain(*session, 3072, 30));
  expect_cache(*session, 2, 0, 3, 3, 0, 1);
  // Length 2 is cached (switch from 3); length 1 was evicted: warmup again,
  // evicting 3 (2 was used since).
  ASSERT_TRUE(run_chain(*session, 2048, 40));
  expect_cache(*session, 2, 1, 3, 3, 1, 1);
  ASSERT_TRUE(run_chain(*session, 1024, 50));
  expect_cache(*session, 2, 1, 4, 4, 1, 2);
  ASSERT_TRUE(run_chain(*session, 2048, 60));  // still cached: switch
  expect_cache(*session, 2, 2, 4, 4, 2, 2);
}

TEST(PlanCache, AStepThatEndsEarlyMatchesAShorterProgramOrWarmsUp) {
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, {});
  ASSERT_TRUE(run_chain(*session, 1024, 10));
  // Ends after 3 of 4 ops: a warmup from the end (nothing left to run).
  ASSERT_TRUE(run_chain(*session, 1024, 20, 3));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kWarmup);
  EXPECT_EQ(session->trace()->op_count(), 3);
  expect_cache(*session, 2, 0, 2, 2, 0, 0);
  // The 4-op step replays the 3-op plan first (the most recently used; no
  // precedent after the 3-op program): it runs a 4th op, so it switches to
  // the 4-op plan at that op.
  ASSERT_TRUE(run_chain(*session, 1024, 30));
  expect_cache(*session, 2, 1, 2, 2, 1, 0);
  // The 3-op step: after the 4-op program (step 1) came the 3-op one, so it
  // starts on the 3-op plan (Note [Next program]): a plain hit.
  ASSERT_TRUE(run_chain(*session, 1024, 40, 3));
  expect_cache(*session, 2, 2, 2, 2, 1, 0);
  // And once more the 4-op step: after the 3-op program (step 2) came the
  // 4-op one: a plain hit.
  ASSERT_TRUE(run_chain(*session, 1024, 50));
  expect_cache(*session, 2, 3, 2, 2, 1, 0);
}

TEST(PlanCache, OneWarmupPerProgramEvenWhenProgramsAlternate) {
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, {});
  // Gradient accumulation's pattern: program 1, 2, 2, 1, 2, 2, ...
  const std::int64_t lengths[] = {1024, 2048, 2048, 1024, 2048, 2048, 1024};
  StorageId base = 10;
  for (std::int64_t bytes : lengths) {
    ASSERT_TRUE(run_chain(*session, bytes, base));
    base += 10;
  }
  // Warmups: steps 1 and 2 (A, then B, which starts on A). Note [Next
  // program]: step 3 (after A B) has no precedent for B and starts on the
  // most recent plan, B: a hit. Step 4 (after A B B): the longest run seen
  // before is B, followed by B: it starts on B and switches to A (the only
  // switch). Step 5 (after ..B A): A was followed by B: B. Step 6 (after
  // ..A B): A B was followed by B: B. Step 7 (after A B B A B B): A B B was
  // followed by A: A. Hits: steps 3-7.
  expect_cache(*session, 2, 5, 2, 2, 1, 0);
}

// Program tags: an evaluation step (tag 0, no autograd) whose ops are a
// prefix of the training step's (tag 1) never replays its plan, nor the other
// way round.
TEST(PlanCache, StepsOfAnotherProgramTagNeverShareAPlan) {
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, {});
  // 1: training (4 ops, tag 1): warmup, plan A.
  ASSERT_TRUE(run_chain(*session, 1024, 10, 4, 1));
  expect_cache(*session, 1, 0, 1, 1, 0, 0);
  // 2: evaluation (3 ops, tag 0): begins as a replay of A, the tag makes it a
  // warmup before its first op: plan B.
  ASSERT_TRUE(run_chain(*session, 1024, 20, 3, 0));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kWarmup);
  expect_cache(*session, 2, 0, 2, 2, 0, 0);
  // 3: training: begins on B (most recent), moves to A before its first op: a
  // plain hit, no switch.
  ASSERT_TRUE(run_chain(*session, 1024, 30, 4, 1));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kReplay);
  expect_cache(*session, 2, 1, 2, 2, 0, 0);
  // 4: evaluation: B.
  ASSERT_TRUE(run_chain(*session, 1024, 40, 3, 0));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kReplay);
  expect_cache(*session, 2, 2, 2, 2, 0, 0);
  // 5: A's program under tag 0: B is the only tag-0 plan and it is shorter, so
  // the step warms up at its 4th op (A, of tag 1, is not switched to): plan C.
  ASSERT_TRUE(run_chain(*session, 1024, 50, 4, 0));
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kWarmup);
  expect_cache(*session, 3, 2, 3, 3, 0, 0);
  // 6: and tag 1 still replays A.
  ASSERT_TRUE(run_chain(*session, 1024, 60, 4, 1));
  expect_cache(*session, 3, 3, 3, 3, 0, 0);
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
}

TEST(PlanCache, AProgramTagAfterTheFirstOpOrOutsideAStepIsAnError) {
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, {});
  Status outside = session->set_program_tag(1);
  ASSERT_FALSE(outside);
  EXPECT_THAT(outside.error().message, HasSubstr("set_program_tag outside a step"));
  ASSERT_TRUE(session->begin_step());
  StepDriver step(*session);
  ASSERT_TRUE(step.op("embed", {}, {{10, 1024}}));
  Status late = session->set_program_tag(1);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(late.error().message, HasSubstr("after the step's first op"));
  (void)session->abort_step();
}

// Budget 2688 bytes, greedy planner: there run_chain's programs with "relu"
// outputs of 1024 and 1536 bytes differ only after the plan has offloaded
// "embed"'s output (see the test below).
SessionOptions late_divergence_options() {
  SessionOptions options;
  options.budget_bytes = 2688;
  options.planner = "greedy";
  return options;
}

TEST(PlanCache, ADivergenceAfterAnOffloadContinuesAsAWarmupFromThatOp) {
  // Budget 2688 bytes with 1 KiB storages: the plan offloads "embed"'s output
  // (read again by "loss") before "relu" allocates (3 KiB live); the other
  // program's floor is 1024 + 1536 + 64 = 2624 bytes, at "loss"; a step whose "relu"
  // output is larger has then acted, so it cannot switch plans: it continues
  // as a warmup (the first ops only recorded), reading the offloaded storage
  // back when "loss" reads it.
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, late_divergence_options());
  ASSERT_TRUE(run_chain(*session, 1024, 10));
  ASSERT_GT(session->schedule()->actions.size(), 0u);
  // The step driver checks the data of every input: 21 at "relu", and 20 at
  // "loss", offloaded by the plan.
  Status ended = run_chain(*session, 1024, 20, 4, std::nullopt, 1536);
  ASSERT_TRUE(ended) << ended.error().message;
  EXPECT_EQ(session->last_step_stats().kind, StepKind::kWarmup);
  EXPECT_EQ(session->last_step_stats().ops, 4);
  expect_cache(*session, 2, 0, 2, 2, 0, 0);
  // The 1536-byte program is the most recent plan: a plain hit.
  ASSERT_TRUE(run_chain(*session, 1024, 30, 4, std::nullopt, 1536));
  expect_cache(*session, 2, 1, 2, 2, 0, 0);
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
}

TEST(PlanCache, AlternatingProgramsThatDifferAfterActingReplayOnceThePatternIsSeen) {
  // Note [Next program]. Programs A (relu 1024 B) and B (1536 B) alternate,
  // as the first and later micro-batches of an accumulation window do. Each
  // plan offloads before "relu", so a step started on the wrong plan warms up.
  //   1 A: warmup (empty cache).                 warmups 1
  //   2 B: no precedent; starts on A: warmup.    warmups 2
  //   3 A: no precedent for B; starts on B:
  //        warmup, replacing A's plan.           warmups 3
  //   4 B: after A came B (step 2): hit.         hits 1
  //   5 A: after B came A (step 3): hit.         hits 2
  //   6 B, 7 A, 8 B: hits.                       hits 5
  // Under the most-recently-used rule every step from 2 on warmed up.
  auto backend = backend_of(std::int64_t{1} << 20);
  auto session = session_of(*backend, late_divergence_options());
  const std::int64_t relu[] = {1024, 1536, 1024, 1536, 1024, 1536, 1024, 1536};
  const StepKind kinds[] = {StepKind::kWarmup, StepKind::kWarmup, StepKind::kWarmup, StepKind::kReplay,
                            StepKind::kReplay, StepKind::kReplay, StepKind::kReplay, StepKind::kReplay};
  StorageId base = 10;
  for (std::size_t i = 0; i < std::size(relu); ++i) {
    Status ran = run_chain(*session, 1024, base, 4, std::nullopt, relu[i]);
    ASSERT_TRUE(ran) << "step " << i + 1 << ": " << ran.error().message;
    EXPECT_EQ(session->last_step_stats().kind, kinds[i]) << "step " << i + 1;
    base += 10;
  }
  expect_cache(*session, 2, 5, 3, 3, 0, 0);
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
}

TEST(PlanCache, MaxPlansBelowOneIsRejected) {
  auto backend = backend_of(std::int64_t{1} << 20);
  SessionOptions options;
  options.max_plans = 0;
  Result<std::unique_ptr<Session>> session = Session::create(*backend, options);
  ASSERT_FALSE(session.has_value());
  EXPECT_THAT(session.error().message, HasSubstr("max_plans must be >= 1, got 0"));
}


// ---- PlanCache alone (exec/plan_cache.h) -------------------------------------------

// A plan of a chain of `names`, each op writing a 64-byte storage its
// successor reads; no actions.
std::shared_ptr<const ReplayPlan> chain_plan(const std::vector<std::string>& names) {
  TraceBuilder builder;
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_TRUE(builder.add_storage(static_cast<StorageId>(i), 64));
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_TRUE(builder.add_op(names[i]));
    if (i > 0) builder.add_access(static_cast<StorageId>(i - 1), AccessKind::kRead);
    builder.add_access(static_cast<StorageId>(i), AccessKind::kWrite);
  }
  Result<Trace> trace = std::move(builder).build();
  EXPECT_TRUE(trace.has_value());
  Result<std::shared_ptr<const ReplayPlan>> plan = ReplayPlan::create(std::move(*trace), Schedule{"test", {}});
  EXPECT_TRUE(plan.has_value());
  return *plan;
}

CachedPlan entry_of(std::shared_ptr<const ReplayPlan> plan, std::uint64_t tag = 0) {
  CachedPlan entry;
  entry.plan = std::move(plan);
  entry.program_tag = tag;
  return entry;
}

// Logs the first op of a chain plan: "a" writing storage 0.
StepLog first_op_logged(std::string_view name) {
  StepLog log;
  log.op_begin(name, {}, {});
  return log;
}

TEST(PlanCacheLadder, TheFirstStepOfACachedProgramReplaysTheMostRecentlyUsedPlan) {
  PlanCache cache(4);
  const StepLog nothing;
  EXPECT_EQ(cache.choose(std::nullopt, nothing), nullptr);  // rung 3: warm up
  const auto a = chain_plan({"a", "b"});
  const auto b = chain_plan({"c", "d"});
  cache.insert(entry_of(a));
  cache.insert(entry_of(b));
  // History: A B (each warmup ran its program). No run of programs occurred
  // twice, so the prediction is the most recently used plan: B.
  EXPECT_EQ(cache.choose(std::nullopt, nothing)->plan, b);
  // Rung 2: the first op seen is "a", which B's traced step does not begin
  // with; A's does.
  EXPECT_EQ(cache.choose(std::nullopt, first_op_logged("a"))->plan, a);
  EXPECT_EQ(cache.choose(std::nullopt, first_op_logged("x")), nullptr);
  // A caller's condition excludes a plan (the one that diverged).
  EXPECT_EQ(cache.choose(std::nullopt, nothing, false, [&](const CachedPlan& c) { return c.plan != b; })->plan, a);
}

TEST(PlanCacheLadder, ATagOnlyChoosesPlansOfThatTag) {
  PlanCache cache(4);
  const auto train = chain_plan({"a", "b"});
  const auto eval = chain_plan({"a", "b"});  // the same ops, another tag: its own entry
  cache.insert(entry_of(train, 1));
  cache.insert(entry_of(eval, 2));
  EXPECT_EQ(cache.size(), 2);
  const StepLog nothing;
  EXPECT_EQ(cache.choose(1, nothing)->plan, train);
  EXPECT_EQ(cache.choose(2, nothing)->plan, eval);
  EXPECT_EQ(cache.choose(3, nothing), nullptr);
}

TEST(PlanCacheLadder, APatternOfFourStepsIsPredictedOnceItRanTwice) {
  // A B B B A B B B ...: gradient accumulation 4, the first micro-batch its
  // own program. Programs: A = 0, B = 1 (numbered as first cached).
  PlanCache cache(4);
  const auto a = chain_plan({"a", "b"});
  const auto b = chain_plan({"c", "d"});
  cache.insert(entry_of(a));  // history: 0
  cache.insert(entry_of(b));  // 0 1
  cache.completed(b.get(), 0);  // 0 1 1
  cache.completed(b.get(), 0);  // 0 1 1 1
  const StepLog nothing;
  // After 0 1 1 1: the longest earlier run is "1 1" (ending at index 2), which
  // was followed by 1: B. (A context of one would say B too.) Wrong for this
  // step; the step's own log makes it A.
  EXPECT_EQ(cache.choose(std::nullopt, nothing)->plan, b);
  cache.completed(a.get(), 0);  // 0 1 1 1 0
  // The last program, 0, occurred at index 0, followed by 1: B.
  EXPECT_EQ(cache.choose(std::nullopt, nothing)->plan, b);
  cache.completed(b.get(), 0);  // 0 1 1 1 0 1
  cache.completed(b.get(), 0);  // 0 1 1 1 0 1 1
  cache.completed(b.get(), 0);  // 0 1 1 1 0 1 1 1
  // Now "0 1 1 1" occurred before (indices 0-3), followed by 0: A, as it should be.
  EXPECT_EQ(cache.choose(std::nullopt, nothing)->plan, a);
  cache.completed(a.get(), 0);  // ... 0
  EXPECT_EQ(cache.choose(std::nullopt, nothing)->plan, b);
}

TEST(PlanCacheLadder, TheSameProgramReplacesItsPlanAndKeepsItsNumberAndTheLeastRecentlyUsedGoes) {
  PlanCache cache(2);
  const auto a = chain_plan({"a", "b"});
  const auto a_again = chain_plan({"a", "b"});
  const auto b = chain_plan({"c", "d"});
  const auto c = chain_plan({"e", "f"});
  cache.insert(entry_of(a));
  EXPECT_EQ(cache.insert(entry_of(a_again)).program, 0u);  // replaced, same number
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.find(a.get()), nullptr);
  EXPECT_EQ(cache.insert(entry_of(b)).program, 1u);
  cache.completed(a_again.get(), 4096);  // A most recently used: B is the least
  EXPECT_EQ(cache.insert(entry_of(c)).program, 2u);
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.find(b.get()), nullptr);
  EXPECT_NE(cache.find(a_again.get()), nullptr);
  // The pool keeps what the hungriest cached plan's replays held.
  EXPECT_EQ(cache.host_pool_footprint_bytes(), 4096);
  cache.erase(a_again.get());
  EXPECT_EQ(cache.host_pool_footprint_bytes(), 0);
  EXPECT_EQ(cache.stats().plans_cached, 1);
}

}  // namespace
}  // namespace hyperoffload
