// Planner comparison: plan one trace with several planners at one or more
// budgets, validate and simulate every schedule, and collect one row per
// (budget, planner) — the data behind `hyperoffload compare`. Formatting lives in
// comparison_table.h (text, JSON) and memory_plot.h (SVG).
//
//   ComparisonOptions options;
//   options.budgets = {*parse_budget("30%"), *parse_budget("50%")};
//   Result<Comparison> comparison = run_comparison(trace, options);
//
// Thread-safety: run_comparison is a pure function of its inputs (it reads the
// clock for planning times).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {

struct ComparisonOptions {
  // Planner names (make_planner); rows follow this order within each budget.
  std::vector<std::string> planners = {"greedy", "peak", "hybrid", "recompute"};
  // Budgets to compare at; percentages are of the unplanned op-granular peak.
  // Empty: the trace's memory_limit_bytes (an error when it has none).
  std::vector<BudgetSpec> budgets;
  // Score weights NAME=VALUE for the peak planner and the hybrid planner,
  // which places its offloads with it (an error when no planner takes them).
  std::vector<std::pair<std::string, double>> score_weights;
  CopyEngines copy_engines = kDefaultCopyEngines;
  // kBudget simulates a device that holds only the budget (sim/simulator.h):
  // waiting for memory becomes stall and the timed peak stays within the budget.
  DeviceMemory device_memory = kDefaultDeviceMemory;
  // kYes keeps each row's memory curve (for memory_plot.h).
  RecordTimeline record_timeline = RecordTimeline::kNo;
  // The optimal planner's solve: wall-clock limit per budget, in seconds, and
  // its progress reports (PlannerOptions); other planners ignore both.
  double time_limit_s = PlannerOptions{}.time_limit_s;
  std::function<void(const SolverProgress&)> solver_progress;
  // Host bytes every plan may hold in host copies (nullopt: unlimited;
  // PlannerOptions::host_budget_bytes). With one, each row also reports its
  // peak host bytes, and a plan over it is invalid.
  std::optional<std::int64_t> host_budget_bytes;
};

struct ComparisonRow {
  std::string planner;
  std::int64_t budget_bytes = 0;
  bool valid = false;  // the validator found no problem
  std::size_t problem_count = 0;
  std::string first_problem;  // empty when valid
  std::size_t faults = 0;
  std::int64_t op_peak_bytes = 0;     // validator, op-granular
  std::int64_t timed_peak_bytes = 0;  // simulator, over time
  double stall_ms = 0.0;
  double memory_stall_ms = 0.0;   // part of stall_ms waiting for memory (DeviceMemory::kBudget)
  double recompute_ms = 0.0;      // compute-stream time re-running ops (recompute actions)
  std::int64_t recompute_count = 0;
  // (stall + recompute) as a percentage of compute: makespan / compute - 1
  // whenever an op ends last.
  double overhead_percent = 0.0;
  double makespan_ms = 0.0;
  std::int64_t d2h_bytes = 0;
  std::int64_t h2d_bytes = 0;  // includes faults
  std::int64_t peak_host_bytes = 0;  // validator: the most bytes held in host copies
  double planning_ms = 0.0;
  std::optional<UnavoidableFloor> floor;  // when the planner computes one
  std::vector<std::string> notes;         // the planner's
  std::optional<SolverReport> solver;     // the optimal planner's objective, bound and gap
  // Non-empty when the planner refused this budget (plan() failed with
  // kInvalidArgument, e.g. the optimal planner below its floor or on a trace
  // too large for it): its message; nothing was planned or simulated.
  std::string refused;
  std::vector<MemorySample> memory;       // only with RecordTimeline::kYes
  double end_ms = 0.0;                    // when the memory curve ends (makespan)

  std::int64_t bytes_moved() const { return d2h_bytes + h2d_bytes; }
  // Valid, fault-free and within the budget at op granularity: what every
  // planner promises. The timed peak is reported separately.
  bool feasible() const { return refused.empty() && valid && faults == 0 && op_peak_bytes <= budget_bytes; }
  bool timed_within_budget() const { return timed_peak_bytes <= budget_bytes; }
  // How much more this row stalls than the budget's lower bound on the stall
  // of offload-only plans; nullopt when the row is not feasible (the bound
  // holds for feasible plans only) or there is no bound.
  std::optional<double> stall_above_bound_ms(std::optional<double> bound_ms) const {
    if (!feasible() || !bound_ms) return std::nullopt;
    return stall_ms - *bound_ms;
  }
  // The same for everything the plan adds to compute, stall and recompute:
  // negative where recomputing beats every offload-only plan.
  std::optional<double> overhead_above_bound_ms(std::optional<double> bound_ms) const {
    if (!feasible() || !bound_ms) return std::nullopt;
    return stall_ms + recompute_ms - *bound_ms;
  }
};

struct Comparison {
  OpIndex op_count = 0;
  StorageIndex storage_count = 0;
  double compute_ms = 0.0;
  std::int64_t unplanned_peak_bytes = 0;
  OpIndex unplanned_peak_op = -1;
  double d2h_bandwidth_gib_per_s = 0.0;
  double h2d_bandwidth_gib_per_s = 0.0;
  CopyEngines copy_engines = kDefaultCopyEngines;
  DeviceMemory device_memory = kDefaultDeviceMemory;
  std::vector<std::int64_t> budgets_bytes;  // in the requested order
  std::optional<std::int64_t> host_budget_bytes;  // ComparisonOptions'
  // When the recompute-only planner is compared: the lowest peak any
  // recompute-only plan can reach (plan/planner.h, recompute_only_limit),
  // printed beside that planner's own floor.
  std::optional<UnavoidableFloor> recompute_only_limit;
  // Per budget: the least stall any offload-only plan within it can have
  // (plan/common/stall_bound.h) under these copy engines and memory cap; nullopt
  // when no such plan fits it. Plans that recompute can go below it.
  std::vector<std::optional<double>> stall_bounds_ms;
  // Per budget: the least stall plus recompute of any plan within it, with
  // recomputes or not (plan/common/overhead_bound.h); nullopt when no plan fits it.
  std::vector<std::optional<double>> overhead_bounds_ms;
  // Per budget: the least recompute time of any plan within it that copies
  // nothing (recompute_only_lower_bound_ms, overhead_bound.h): +infinity when
  // re-runs alone cannot reach it, nullopt when no plan fits it.
  std::vector<std::optional<double>> recompute_only_bounds_ms;
  // Budget-major: rows[b * planners + p] is planner p at budgets_bytes[b].
  std::vector<ComparisonRow> rows;
  std::size_t planner_count = 0;

  // The stall bound of budgets_bytes[b]; nullopt when none (or not computed).
  std::optional<double> stall_bound_ms(std::size_t b) const {
    return b < stall_bounds_ms.size() ? stall_bounds_ms[b] : std::nullopt;
  }

  // The overhead bound of budgets_bytes[b]; nullopt when none (or not computed).
  std::optional<double> overhead_bound_ms(std::size_t b) const {
    return b < overhead_bounds_ms.size() ? overhead_bounds_ms[b] : std::nullopt;
  }

  // The recompute-only bound of budgets_bytes[b]; nullopt when none (or not computed).
  std::optional<double> recompute_only_bound_ms(std::size_t b) const {
    return b < recompute_only_bounds_ms.size() ? recompute_only_bounds_ms[b] : std::nullopt;
  }

  double budget_percent(std::int64_t budget_bytes) const {
    return unplanned_peak_bytes > 0
               ? 100.0 * static_cast<double>(budget_bytes) / static_cast<double>(unplanned_peak_bytes)
               : 0.0;
  }
};

// Errors (kInvalidArgument): an empty planner list, an unknown planner, a bad
// score weight, no budget at all. A planner that refuses one budget gives a
// row with `refused` set instead.
Result<Comparison> run_comparison(const Trace& trace, const ComparisonOptions& options);

}  // namespace hyperoffload
