#include "hyperoffload/report/plan_summary.h"

#include <utility>

namespace hyperoffload {

PlanSummary summarize_plan(const Trace& trace, const Schedule& schedule, std::optional<UnavoidableFloor> floor,
                           const PlanSummaryOptions& options) {
  PlanSummary summary;
  summary.planner = schedule.planner;
  summary.budget_bytes = options.budget_bytes;
  summary.op_count = trace.op_count();
  summary.storage_count = trace.storage_count();
  summary.unplanned = unplanned_peak(trace);
  summary.floor = floor;
  for (const Action& action : schedule.actions) {
    (action.phase == Phase::kPre ? summary.pre_actions : summary.post_actions) += 1;
  }
  SimulatorOptions sim_options;
  sim_options.budget_bytes = options.budget_bytes;
  sim_options.device_memory = options.device_memory;
  sim_options.copy_engines = options.copy_engines;
  sim_options.record_timeline = options.record_timeline;
  summary.simulation = simulate(trace, schedule, sim_options);
  return summary;
}

}  // namespace hyperoffload
