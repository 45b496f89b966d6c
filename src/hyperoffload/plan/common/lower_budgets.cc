#include "hyperoffload/plan/common/lower_budgets.h"

#include <algorithm>
#include <thread>

#include "hyperoffload/plan/budget.h"

namespace hyperoffload::internal {

std::size_t rungs_beside() {
  return std::clamp<std::size_t>(std::thread::hardware_concurrency() / 2, 1, 8);
}

bool lower_budget_plans_fit(const Trace& trace) {
  const std::int64_t work =
      static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count());
  return work <= kLowerBudgetMaxWork;
}

std::vector<std::int64_t> lower_budgets(const Trace& trace, std::int64_t floor_bytes,
                                        std::int64_t unplanned_peak_bytes, std::int64_t budget_bytes) {
  if (!lower_budget_plans_fit(trace) || budget_bytes >= unplanned_peak_bytes) return {};
  std::vector<std::int64_t> rungs = budget_ladder(floor_bytes, unplanned_peak_bytes, kLowerBudgetStepPercent);
  std::erase_if(rungs, [&](std::int64_t rung) { return rung >= budget_bytes; });
  return rungs;
}

}  // namespace hyperoffload::internal
