#include "hyperoffload/check/residency_rules.h"

#include <algorithm>

#include <fmt/format.h>

namespace hyperoffload {

std::vector<ResolvedAction> resolve_actions(const Trace& trace, const Schedule& schedule,
                                            const std::function<void(std::string)>& problem) {
  std::vector<ResolvedAction> resolved;
  resolved.reserve(schedule.actions.size());
  bool ordered = true;
  for (std::size_t i = 0; i < schedule.actions.size(); ++i) {
    const Action& action = schedule.actions[i];
    if (action.op < 0 || action.op >= trace.op_count()) {
      if (problem) {
        problem(fmt::format("actions[{}] ({}): op {} is out of range (the trace has {} ops)", i, describe(action),
                            action.op, trace.op_count()));
      }
      continue;
    }
    const std::optional<StorageIndex> storage = trace.find_storage(action.storage);
    if (!storage) {
      if (problem) problem(fmt::format("actions[{}] ({}): unknown storage {}", i, describe(action), action.storage));
      continue;
    }
    if (ordered && !resolved.empty() && execution_slot(action) < execution_slot(resolved.back().action)) {
      if (problem) {
        problem(fmt::format("actions[{}] ({}): out of execution order (after {})", i, describe(action),
                            describe(resolved.back().action)));
      }
      ordered = false;
    }
    resolved.push_back({action, *storage, i});
  }
  if (!ordered) {
    std::stable_sort(resolved.begin(), resolved.end(), [](const ResolvedAction& a, const ResolvedAction& b) {
      return execution_slot(a.action) < execution_slot(b.action);
    });
  }
  return resolved;
}

}  // namespace hyperoffload
