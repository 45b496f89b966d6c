// PlanCache: a session's plans, one per step program (exec/session.h, Note
// [Plan per step program]), and the one ladder by which a step picks the plan
// it replays (Note [Step start]).
//
// Note [Step start]. Every place a step (re)chooses its plan — its beginning,
// its program tag, a divergence before the plan acted — asks choose(tag,
// seen), which climbs one ladder and returns the first rung that holds:
//   1. the predicted plan (Note [Next program]), if it has the step's tag and
//      its traced step begins with the ops seen so far;
//   2. the most recently used plan of the tag whose traced step begins with
//      them;
//   3. none: the step warms up.
// At a step's beginning nothing is seen and the tag is not known yet (any tag
// fits), so rung 1 holds; a tag set before the first op climbs again with it
// unless the plan chosen has it (untagged steps all have tag 0). A caller
// adds its own condition (`admits`: a switch needs the recorded calls the
// plan re-runs, and excludes the plan that diverged).
//
// Note [Next program]. Programs that differ only after the step has acted
// (gradient accumulation: the first micro-batch creates .grad, the others add
// into it; an optimizer step inside the last one) cannot switch plans, so a
// step that starts on the wrong plan warms up again (Note [Leaving a plan] in
// exec/session.h). Training loops repeat their pattern, so the cache numbers
// each program (a re-warmed plan keeps its program's number), remembers the
// programs of the last 64 completed steps, and predicts the program that
// followed the latest earlier occurrence of the longest run of recent programs
// (at most 16) that occurred before: A B A B: after A, B; A B B B A B B B:
// after A B B B, A (a context of one program would say B). Without such a
// precedent (or with its plan evicted) it predicts the most recently used
// plan. A wrong guess costs a switch before any action, a warmup after one;
// once a pattern of at most 16 steps has run twice, every guess holds.
//
// Size: at most max_plans entries; the least recently used (the one a
// completed step ran longest ago) is evicted.
//
// Thread-safety: none; the session's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>

#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/exec/step_log.h"
#include "hyperoffload/plan/budget_policy.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

struct CachedPlan {
  std::shared_ptr<const ReplayPlan> plan;
  PlanResult result;  // its schedule is empty: plan->schedule() holds it
  std::optional<UnavoidableFloor> floor;
  std::optional<BudgetOutcome> outcome;
  std::uint64_t program_tag = 0;  // of the step it was traced from (Session::set_program_tag)
  std::uint64_t program = 0;      // the step program's number (Note [Next program])
  // The most pinned-pool bytes (in size classes) a replay of it held at once:
  // what the pool keeps for it between steps (Note [Pinned pool between
  // steps] in exec/session.h).
  std::int64_t host_pool_peak_bytes = 0;
};

// The plan cache so far (Note [Plan per step program]).
struct PlanCacheStats {
  std::int64_t plans_cached = 0;
  std::int64_t hits = 0;       // steps that ended as a replay of a cached plan
  std::int64_t misses = 0;     // steps no cached plan served: each warmup, each replay that diverged after acting
  std::int64_t warmups = 0;    // warmup steps begun (the first, re-warmups, replays continued as warmups)
  std::int64_t switches = 0;   // replays that switched to another cached plan mid-step (hits too)
  std::int64_t evictions = 0;  // plans evicted to keep max_plans
};

class PlanCache {
 public:
  // Precondition: max_plans >= 1.
  explicit PlanCache(std::int64_t max_plans) : max_plans_(max_plans) {}

  bool empty() const { return plans_.empty(); }
  std::int64_t size() const { return static_cast<std::int64_t>(plans_.size()); }
  std::int64_t max_plans() const { return max_plans_; }
  const PlanCacheStats& stats() const { return stats_; }
  PlanCacheStats& stats() { return stats_; }

  // Note [Step start]: the plan a step of `tag` (nullopt: not known yet, any
  // fits) replays, having seen `seen` (with `complete`, the step has ended:
  // the plan's traced step must have no more ops), among the plans `admits`
  // accepts; nullptr: warm up.
  using Admits = std::function<bool(const CachedPlan&)>;
  const CachedPlan* choose(std::optional<std::uint64_t> tag, const StepLog& seen, bool complete = false,
                           const Admits& admits = nullptr) const;

  // The entry of `plan`, or nullptr.
  const CachedPlan* find(const ReplayPlan* plan) const;
  // Whether any plan of `tag` re-runs `op` (a step that may still switch to it
  // must record that op's call).
  bool any_recomputes(std::uint64_t tag, OpIndex op) const;

  // After a warmup: caches `entry` as the most recently used plan. A plan of
  // the same tag and step program (same_program) is replaced and its program
  // number kept; otherwise the entry gets a new number. Beyond max_plans the
  // least recently used goes. Returns the cached entry.
  const CachedPlan& insert(CachedPlan entry);
  // A replay ran `plan` to its end: it becomes the most recently used, its
  // program is remembered (Note [Next program]) and its pinned-pool peak
  // raised to `host_pool_peak_bytes`. No-op for a plan not cached.
  void completed(const ReplayPlan* plan, std::int64_t host_pool_peak_bytes);
  // The pinned-pool bytes to keep between steps: the largest peak of any
  // cached plan's replays.
  std::int64_t host_pool_footprint_bytes() const;
  // Drops `plan` (the re-warmup policy: it does not describe the steps to come).
  void erase(const ReplayPlan* plan);

 private:
  // Note [Next program]: the plan predicted for the next step (the most
  // recently used without a precedent); nullptr when empty.
  const CachedPlan* predicted() const;
  void remember_program(std::uint64_t program);

  std::int64_t max_plans_;
  std::list<CachedPlan> plans_;  // most recently used first
  PlanCacheStats stats_;
  std::uint64_t next_program_ = 0;             // the number the next new program gets
  std::deque<std::uint64_t> recent_programs_;  // of the last kRecentPrograms completed steps, oldest first
  static constexpr std::size_t kRecentPrograms = 64;
  static constexpr std::size_t kPredictionContext = 16;  // the longest run of programs a prediction matches
};

}  // namespace hyperoffload
