// Budget sweep: plan one trace with several planners along a ladder of budgets,
// from the lowest budget any of them can reach (the floor) to the unplanned
// peak, validate and simulate every plan on the device of the options (by
// default one that holds only the budget), and flag where a planner's curve is
// not monotone — the data behind `hyperoffload compare --sweep`.
//
// Why: a budget knob is only usable when more budget never makes the step
// slower and never makes the plan use less of the memory it was given
// (PyTorch's activation memory budget is not, pytorch#197838). A plan that
// fits a budget fits every larger one, so a planner can always do at least as
// well with more (Note [Monotone in the budget], below).
//
//   BudgetSweepOptions options;
//   options.planners = {"peak", "hybrid"};
//   Result<BudgetSweep> sweep = run_budget_sweep(trace, options);
//   for (const SweepViolation& v : sweep->violations) ...
//
// Note [Monotone in the budget]
// On a device that holds only the budget (DeviceMemory::kBudget), per planner,
// over the budgets at which its plan is feasible (valid, fault-free, within the
// budget at op granularity; ComparisonRow::feasible):
//  (a) the timed peak (SimulationResult::peak_bytes_timed) is within the budget
//      and never lower than at a smaller budget;
//  (b) the overhead (stall plus recompute, SimulationResult::overhead_percent)
//      is never higher than at a smaller budget;
//  (c) a plan feasible at a budget is feasible at every larger one.
// Each point is compared with the extreme over all smaller budgets, not only
// with its neighbour: at budget B the plan chosen at any B' < B also fits, so
// the best of them bounds what B should reach. Peaks are integers and compared
// exactly. Overheads are compared with a relative tolerance (options): the same
// schedule simulates to the same bits, so any difference comes from a different
// plan, and two plans whose times are equal in exact arithmetic differ by the
// rounding of sums of at most a few million terms (each within 2^-53
// relative), below 1e-9 of the step.
//
// Thread-safety: run_budget_sweep is a pure function of its inputs (it reads
// the clock for planning times).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/report/comparison.h"

namespace hyperoffload {

struct BudgetSweepOptions {
  // Planner names (make_planner); the optimal planner is left out by default
  // (a MILP under a time limit: its plans need not be monotone).
  std::vector<std::string> planners = {"greedy", "peak", "hybrid", "recompute"};
  // The ladder (budget_ladder, plan/budget.h): the floor, then every
  // multiple of this percentage of the unplanned op-granular peak above it,
  // up to 100%. In (0, 100].
  double step_percent = 5.0;
  // Score weights NAME=VALUE for the peak and hybrid planners (ComparisonOptions).
  std::vector<std::pair<std::string, double>> score_weights;
  CopyEngines copy_engines = CopyEngines::kTwo;
  // The device simulated and planned for. The properties of Note [Monotone in
  // the budget] are about kBudget; on kUnlimited the timed peak may exceed the
  // budget and is flagged.
  DeviceMemory device_memory = DeviceMemory::kBudget;
  // kYes keeps each row's memory curve (for memory_plot.h).
  RecordTimeline record_timeline = RecordTimeline::kNo;
  // The optimal planner's limit per plan, in seconds, when it is swept.
  double time_limit_s = PlannerOptions{}.time_limit_s;
  // An overhead counts as higher than another when it exceeds it by more than
  // this share of the other's step (makespan, in units of compute: 100% plus
  // its overhead). >= 0.
  double overhead_relative_tolerance = 1e-9;
};

// Which property of Note [Monotone in the budget] a point breaks.
enum class SweepProperty : std::uint8_t {
  kTimedPeakAboveBudget,  // (a): feasible at op granularity, but over the budget in time
  kTimedPeakDecreases,    // (a): a lower timed peak than at a smaller budget
  kOverheadIncreases,     // (b): a higher overhead than at a smaller budget
  kFeasibilityLost,       // (c): infeasible, but feasible at a smaller budget
};
const char* to_string(SweepProperty property);  // "timed peak above the budget", ...

struct SweepViolation {
  std::size_t planner = 0;          // index into BudgetSweep::comparison's planners
  std::string planner_name;
  SweepProperty property = SweepProperty::kOverheadIncreases;
  std::size_t budget = 0;           // index into the ladder where it is seen
  // The smaller budget it is compared with (the one with the highest timed
  // peak, the lowest overhead or the first feasible one before `budget`);
  // == budget for kTimedPeakAboveBudget.
  std::size_t reference_budget = 0;
  // Bytes for the peak properties, overhead percent for kOverheadIncreases,
  // 0/1 (feasible) for kFeasibilityLost; for kTimedPeakAboveBudget `value` is
  // the timed peak and `reference_value` the budget.
  double value = 0.0;
  double reference_value = 0.0;
};

struct BudgetSweep {
  // The ladder's budgets (ascending) and one row per (budget, planner), with
  // the bounds, as run_comparison gives them.
  Comparison comparison;
  // The ladder's first budget: the lowest floor any planner reported
  // (PlanResult::floor) when asked to plan within 0 bytes; the unplanned peak
  // when none reports one. Below a planner's own floor its rows are
  // infeasible, which breaks nothing.
  std::int64_t floor_bytes = 0;
  double step_percent = 5.0;
  // In ladder order, then planner order.
  std::vector<SweepViolation> violations;

  const ComparisonRow& row(std::size_t budget, std::size_t planner) const {
    return comparison.rows[budget * comparison.planner_count + planner];
  }
  // Whether `planner` breaks a property at ladder point `budget`.
  bool violates(std::size_t budget, std::size_t planner) const;
};

// The violations of Note [Monotone in the budget] in `rows` (budget-major,
// budgets ascending, as Comparison::rows), in ladder order then planner order.
std::vector<SweepViolation> find_sweep_violations(const Comparison& comparison, double overhead_relative_tolerance);

// Errors (kInvalidArgument): those of run_comparison, a step outside (0, 100],
// a negative tolerance.
Result<BudgetSweep> run_budget_sweep(const Trace& trace, const BudgetSweepOptions& options);

}  // namespace hyperoffload
