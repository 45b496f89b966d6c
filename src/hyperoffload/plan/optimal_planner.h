// OptimalPlanner ("optimal"): a mixed-integer-programming reference for small
// traces — joint keep / offload / recompute at op granularity with copy-engine
// capacity per op interval, solved by COIN-OR CBC under a time limit. It tells
// how far the heuristic planners (hybrid, peak) are from the best schedule
// the model knows, with the solver's own proof: PlanResult::solver carries the
// model makespan of the schedule, CBC's lower bound on it and the gap.
//
// The model (plan/optimal/residency_milp.h; derivation and approximations in
// docs/OPTIMAL_PLANNER.md): per op interval ("slot"), the compute stream runs
// the recomputes issued before the op, then the op, after a stall; each copy
// engine (one D2H, one H2D) does at most a slot's length of copying in it, a
// copy needed by an op finishing in the stall before it. Memory during each op
// and each recompute stays within the budget; on a device that holds only the
// budget (DeviceMemory::kBudget) a release frees memory only once its copy to
// host is done. The objective is the makespan: compute + recompute + stall.
// Storages move only in the gaps that cover an op over the budget; recomputes
// run just before an op that needs their output (chains up to a few levels).
//
// Limits: traces of at most OptimalPlannerOptions::max_ops ops whose program
// stays within max_columns variables; larger ones are refused with
// kInvalidArgument before any solve. Below the floor (what an op accesses
// plus retained storages after their last access) no schedule fits and there
// is no program: as every planner does there, it plans as close to the budget
// as possible (the peak planner's plan), with a note naming the op. With no
// budget the schedule is empty.
//
// Guarantees: the schedule is valid (validator) with zero faults, and its
// op-granular peak, recomputes included, is within the budget. When the time
// limit stops the search the best schedule found so far is returned (at worst
// the offload-everything start, which is always feasible), status kTimeLimit.
// Deterministic when the search ends before the limit.
//
// Bound (Note [Planning bounds], planner.h): the time limit plus building the
// program, which the limits above keep to max_columns variables; memory the
// program's.
//
// Thread-safety: plan() may run concurrently; the solves are serialized.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

struct OptimalPlannerOptions {
  DeviceMemory device_memory = kDefaultDeviceMemory;
  // Wall clock for the plan, building the program included, in seconds (> 0);
  // decoding the solution after the solver stops adds a little (milliseconds
  // to tenths of a second on the largest programs).
  double time_limit_s = 60.0;
  // Traces beyond these are refused (see above).
  OpIndex max_ops = 500;
  std::int64_t max_columns = 100000;
  std::function<void(const SolverProgress&)> progress;  // see PlannerOptions::solver_progress
};

class OptimalPlanner final : public Planner {
 public:
  explicit OptimalPlanner(OptimalPlannerOptions options = {}) : options_(std::move(options)) {}
  std::string_view name() const override { return "optimal"; }
  Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const override;

 private:
  // A budget below the floor (what an op touches plus retained storages):
  // the peak planner's best effort, with a note.
  Result<PlanResult> plan_below_floor(const Trace& trace, std::int64_t budget_bytes, UnavoidableFloor floor) const;
  OptimalPlannerOptions options_;
};

// Whether `trace` is within the optimal planner's op limit (the variable limit
// depends on the budget and is checked by plan()).
bool optimal_planner_accepts(const Trace& trace, const OptimalPlannerOptions& options = {});

// `compare` lists the optimal planner without --planners on traces of at most
// this many ops: there a solve takes seconds to a minute per budget.
inline constexpr OpIndex kOptimalPlannerDefaultMaxOps = 200;

}  // namespace hyperoffload
