#include "hyperoffload/report/comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/budget_policy.h"
#include "hyperoffload/plan/common/overhead_bound.h"
#include "hyperoffload/report/plan_summary.h"
#include "hyperoffload/plan/common/stall_bound.h"

namespace hyperoffload {
namespace {

struct NamedPlanner {
  std::string name;
  PlannerOptions options;  // checked by make_planner
};

Result<std::vector<NamedPlanner>> make_planners(const ComparisonOptions& options) {
  if (options.planners.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("no planner to compare (available: {})", fmt::join(planner_names(), ", ")));
  }
  std::vector<NamedPlanner> planners;
  bool weights_used = false;
  for (const std::string& name : options.planners) {
    // The peak planner and the hybrid planner (for its offloads) take score
    // weights; every planner is tuned to the simulated device.
    PlannerOptions planner_options;
    planner_options.device_memory = options.device_memory;
    planner_options.time_limit_s = options.time_limit_s;
    planner_options.solver_progress = options.solver_progress;
    planner_options.host_budget_bytes = options.host_budget_bytes;
    if (name == "peak" || name == "hybrid") {
      planner_options.score_weights = options.score_weights;
      weights_used = true;
    }
    HO_RETURN_IF_ERROR(make_planner(name, planner_options));  // an unknown name or bad options fail here
    planners.push_back({name, std::move(planner_options)});
  }
  if (!options.score_weights.empty() && !weights_used) {
    return make_error(ErrorCode::kInvalidArgument,
                      "score weights apply to the peak and hybrid planners, neither of which is compared");
  }
  return planners;
}

Result<ComparisonRow> run_one(const Trace& trace, const NamedPlanner& planner, std::int64_t budget,
                              const ComparisonOptions& options) {
  ComparisonRow row;
  row.planner = planner.name;
  row.budget_bytes = budget;
  // The budget policy every caller applies (plan/budget_policy.h), without
  // the fallback to the peak planner: each row shows its planner as it is.
  const auto start = std::chrono::steady_clock::now();
  Result<BudgetedPlan> planned =
      plan_within_budget(trace, budget, planner.name, planner.options, FallbackToPeak::kNo);
  row.planning_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!planned) {
    return make_error(planned.error().code, fmt::format("planner {} at budget {}: {}", planner.name,
                                                        format_bytes(budget), planned.error().message));
  }
  if (planned->outcome == BudgetOutcome::kRefused) {
    row.refused = planned->refusal;
    row.valid = true;  // nothing was planned, so nothing is invalid
    return row;
  }
  const PlanResult& plan = planned->result;
  row.floor = plan.floor;
  row.notes = plan.notes;
  row.solver = plan.solver;

  PlanSummary summary = summarize_plan(trace, plan.schedule, plan.floor,
                                       {.budget_bytes = budget,
                                        .device_memory = options.device_memory,
                                        .copy_engines = options.copy_engines,
                                        .record_timeline = options.record_timeline,
                                        .host_budget_bytes = options.host_budget_bytes});
  SimulationResult& sim = summary.simulation;
  row.valid = sim.valid();
  row.problem_count = sim.validation.problem_count;
  if (!sim.validation.problems.empty()) row.first_problem = sim.validation.problems.front();
  row.faults = sim.faults();
  row.op_peak_bytes = sim.peak_bytes();
  row.timed_peak_bytes = sim.peak_bytes_timed;
  row.stall_ms = sim.stall_ms;
  row.memory_stall_ms = sim.memory_stall_ms;
  row.recompute_ms = sim.recompute_ms;
  row.recompute_count = sim.recompute_count;
  row.overhead_percent = sim.overhead_percent();
  row.makespan_ms = sim.makespan_ms;
  row.d2h_bytes = sim.d2h_bytes;
  row.h2d_bytes = sim.h2d_bytes;
  row.peak_host_bytes = sim.validation.peak_host_bytes;
  row.end_ms = sim.makespan_ms;
  if (options.record_timeline == RecordTimeline::kYes) row.memory = std::move(sim.timeline.memory);
  return row;
}

}  // namespace

Result<Comparison> run_comparison(const Trace& trace, const ComparisonOptions& options) {
  HO_ASSIGN_OR_RETURN(std::vector<NamedPlanner> planners, make_planners(options));

  Comparison comparison;
  comparison.op_count = trace.op_count();
  comparison.storage_count = trace.storage_count();
  comparison.compute_ms = trace.total_compute_ms();
  const PeakBytes unplanned = unplanned_peak(trace);
  comparison.unplanned_peak_bytes = unplanned.bytes;
  comparison.unplanned_peak_op = unplanned.op;
  comparison.d2h_bandwidth_gib_per_s = trace.d2h_bandwidth_gib_per_s();
  comparison.h2d_bandwidth_gib_per_s = trace.h2d_bandwidth_gib_per_s();
  comparison.copy_engines = options.copy_engines;
  comparison.device_memory = options.device_memory;
  comparison.planner_count = planners.size();
  comparison.host_budget_bytes = options.host_budget_bytes;
  if (std::any_of(planners.begin(), planners.end(), [](const NamedPlanner& p) { return p.name == "recompute"; })) {
    comparison.recompute_only_limit = recompute_only_limit(trace);
  }

  if (options.budgets.empty()) {
    if (!trace.memory_limit_bytes()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "no budget to compare at: the trace has no memory_limit_bytes; give one or more budgets");
    }
    comparison.budgets_bytes.push_back(*trace.memory_limit_bytes());
  }
  for (const BudgetSpec& spec : options.budgets) {
    comparison.budgets_bytes.push_back(resolve_budget_bytes(spec, unplanned.bytes));
  }

  StallBoundOptions bound_options;
  bound_options.copy_engines = options.copy_engines;
  bound_options.device_memory = options.device_memory;
  for (const std::int64_t budget : comparison.budgets_bytes) {
    comparison.stall_bounds_ms.push_back(stall_lower_bound_ms(trace, budget, bound_options));
    comparison.overhead_bounds_ms.push_back(overhead_lower_bound_ms(trace, budget, bound_options));
    comparison.recompute_only_bounds_ms.push_back(recompute_only_lower_bound_ms(trace, budget));
    for (const NamedPlanner& planner : planners) {
      HO_ASSIGN_OR_RETURN(ComparisonRow row, run_one(trace, planner, budget, options));
      comparison.rows.push_back(std::move(row));
    }
  }
  return comparison;
}

}  // namespace hyperoffload
