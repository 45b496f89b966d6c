#include "hyperoffload/plan/optimal_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "hyperoffload/ir/byte_format.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/optimal/cbc_solver.h"
#include "hyperoffload/plan/optimal/residency_milp.h"
#include "hyperoffload/plan/peak_planner.h"

namespace hyperoffload {

const char* to_string(SolverStatus status) {
  switch (status) {
    case SolverStatus::kOptimal: return "optimal";
    case SolverStatus::kTimeLimit: return "time limit";
  }
  return "?";
}

bool optimal_planner_accepts(const Trace& trace, const OptimalPlannerOptions& options) {
  return trace.op_count() <= options.max_ops;
}

Result<PlanResult> OptimalPlanner::plan_below_floor(const Trace& trace, std::int64_t budget_bytes,
                                                    UnavoidableFloor floor) const {
  PeakPlannerOptions peak_options;
  peak_options.device_memory = options_.device_memory;
  HO_ASSIGN_OR_RETURN(PlanResult result, PeakPlanner(peak_options).plan(trace, budget_bytes));
  result.schedule.planner = "optimal";
  result.floor = floor;
  result.notes.insert(
      result.notes.begin(),
      fmt::format("budget {} ({} bytes) is below the floor of {} ({} bytes) at op {} ({}), what the op touches plus "
                  "retained storages: no schedule fits, so there is no program to solve; the best effort is the "
                  "peak planner's plan",
                  format_bytes(budget_bytes), budget_bytes, format_bytes(floor.bytes), floor.bytes, floor.op,
                  trace.op_name(floor.op)));
  return result;
}

Result<PlanResult> OptimalPlanner::plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const {
  if (!(options_.time_limit_s > 0.0) || !std::isfinite(options_.time_limit_s)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("time limit {} s: expected a positive number of seconds", options_.time_limit_s));
  }
  const auto start = std::chrono::steady_clock::now();
  PlanResult result;
  result.schedule.planner = "optimal";
  const PeakBytes unplanned = unplanned_peak(trace);
  result.initial_peak_bytes = unplanned.bytes;
  result.planned_peak_bytes = unplanned.bytes;
  if (!budget_bytes) {
    result.notes.push_back("no budget, nothing to plan");
    return result;
  }

  if (optimal_planner_accepts(trace, options_)) {
    // Below the floor no schedule fits, and the program has no solution: as
    // every planner does there, plan as close to the budget as possible (the
    // peak planner's plan, which stops at its floor) and say so.
    const UnavoidableFloor floor = internal::ResidencyMilp::floor_of(trace);
    if (floor.op >= 0 && floor.bytes > *budget_bytes) return plan_below_floor(trace, *budget_bytes, floor);
  }
  internal::ResidencyMilpOptions model_options;
  model_options.device_memory = options_.device_memory;
  model_options.max_ops = options_.max_ops;
  model_options.max_columns = options_.max_columns;
  HO_ASSIGN_OR_RETURN(const internal::ResidencyMilp milp,
                      internal::ResidencyMilp::build(trace, *budget_bytes, model_options));
  result.floor = milp.floor();
  const internal::MilpProblem& problem = milp.problem();

  internal::MilpSolveOptions solve_options;
  // The limit covers the whole plan: building the program counts against it.
  const double built_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  solve_options.time_limit_s = std::max(0.05, options_.time_limit_s - built_s);
  // Proven optimal means within 1e-4 of the compute time (0.01% of a makespan).
  const double unit_ms = milp.time_unit_ms();
  solve_options.absolute_gap = std::max(1e-9, 1e-4 * problem.cost_offset);
  if (options_.progress) {
    solve_options.progress = [&](const SolverProgress& progress) {
      SolverProgress in_ms = progress;
      in_ms.bound_ms *= unit_ms;
      if (in_ms.incumbent_ms) *in_ms.incumbent_ms *= unit_ms;
      options_.progress(in_ms);
    };
  }
  // The schedule to fall back on when the search finds none in time.
  const std::vector<double> fallback = milp.offload_everything();
  if (const double violation = problem.max_violation(fallback); violation > 1e-6) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("optimal planner: its offload-everything assignment violates the program by {}",
                                  violation));
  }
  HO_ASSIGN_OR_RETURN(internal::MilpSolution solution, internal::solve_milp(problem, solve_options));
  if (solution.status == internal::MilpStatus::kInfeasible) {
    return make_error(ErrorCode::kInternal,
                      "optimal planner: CBC proved the program infeasible although its offload-everything "
                      "assignment is feasible");
  }
  if (!solution.has_solution) {
    solution.values = fallback;
    solution.objective = problem.objective(solution.values);
    solution.bound = std::min(solution.bound, solution.objective);
  }
  HO_ASSIGN_OR_RETURN(const internal::MilpPlan plan, milp.decode(solution.values));
  result.schedule.actions = plan.actions;
  result.planned_peak_bytes = plan.peak_bytes;

  SolverReport report;
  report.solver = internal::cbc_version();
  report.status = solution.status == internal::MilpStatus::kOptimal ? SolverStatus::kOptimal : SolverStatus::kTimeLimit;
  // decode() drops what serves nothing, so its makespan can only be lower.
  report.objective_ms = std::min(solution.objective * unit_ms, plan.makespan_ms);
  report.bound_ms = std::min(solution.bound * unit_ms, report.objective_ms);
  report.gap = report.objective_ms > 0 ? (report.objective_ms - report.bound_ms) / report.objective_ms : 0.0;
  report.solve_seconds = solution.seconds;
  report.nodes = solution.nodes;
  report.columns = static_cast<std::int64_t>(problem.column_count());
  report.integer_columns = static_cast<std::int64_t>(problem.integer_count());
  report.rows = static_cast<std::int64_t>(problem.row_count());
  result.solver = report;

  result.notes.push_back(fmt::format(
      "{}; model makespan {:.6g} ms (compute {:.6g} + recompute {:.6g} in {} + stall {:.6g}), "
      "lower bound {:.6g} ms, gap {:.2f}%",
      report.status == SolverStatus::kOptimal ? "proven optimal"
                                              : fmt::format("time limit ({:g} s) reached", options_.time_limit_s),
      report.objective_ms, trace.total_compute_ms(), plan.recompute_ms, plan.recompute_count, plan.stall_ms,
      report.bound_ms, 100.0 * report.gap));
  result.notes.push_back(fmt::format(
      "{} in {:.2f} s, {} nodes; {} variables ({} integer), {} constraints; {} residency cells free, {} recompute "
      "candidates",
      report.solver, report.solve_seconds, report.nodes, report.columns, report.integer_columns, report.rows,
      milp.free_cells(), milp.candidate_count()));
  return result;
}

}  // namespace hyperoffload
