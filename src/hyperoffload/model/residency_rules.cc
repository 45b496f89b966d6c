#include "hyperoffload/model/residency_rules.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace hyperoffload {

void recompute_accesses(const Trace& trace, const AccessVersions& versions, OpIndex source, RecomputeAccesses& out) {
  out.inputs.clear();
  out.outputs.clear();
  unit_members(trace, source, out.members);
  // A unit has few accesses: distinct storages by a linear scan.
  auto find = [](std::vector<RecomputeAccess>& list, StorageIndex s) {
    return std::find_if(list.begin(), list.end(), [s](const RecomputeAccess& a) { return a.storage == s; });
  };
  for_each_unit_access(trace, out.members, [&](OpIndex member, std::size_t a, const Access& access) {
    const RecomputeAccess entry{access.storage, versions.at(trace.access_offset(member) + a), member, a};
    std::vector<RecomputeAccess>& list = access.kind == AccessKind::kWrite ? out.outputs : out.inputs;
    if (auto it = find(list, entry.storage); it != list.end()) {
      if (access.kind == AccessKind::kWrite) *it = entry;  // a later write made a later version
    } else {
      list.push_back(entry);
    }
  });
}

namespace {

// Why a recompute action cannot run at all, or an empty string.
std::string recompute_source_problem(const Trace& trace, const Action& action) {
  if (action.source_op < 0) return "missing source_op (a recompute names the op it re-runs)";
  if (!recompute_source_precedes(action.source_op, action.op, action.phase)) {
    return fmt::format("source_op {} does not run before op {} {} (source_op < op, or <= op for post)",
                       action.source_op, action.op, to_string(action.phase));
  }
  if (!trace.op_recomputable(action.source_op)) {
    return fmt::format("op {} ({}) is not recomputable; only ops the trace marks ops[{}].recomputable can be re-run",
                       action.source_op, trace.op_name(action.source_op), action.source_op);
  }
  return {};
}

}  // namespace

std::vector<ResolvedAction> resolve_actions(const Trace& trace, std::span<const Action> actions,
                                            const std::function<void(std::string)>& problem) {
  std::vector<ResolvedAction> resolved;
  if (actions.size() > std::numeric_limits<std::uint32_t>::max()) {
    if (problem) problem(fmt::format("{} actions: a schedule holds at most 4,294,967,295", actions.size()));
    return resolved;
  }
  resolved.reserve(actions.size());
  bool ordered = true;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& action = actions[i];
    if (action.op < 0 || action.op >= trace.op_count()) {
      if (problem) {
        problem(fmt::format("actions[{}] ({}): op {} is out of range (the trace has {} ops)", i, describe(action),
                            action.op, trace.op_count()));
      }
      continue;
    }
    StorageIndex storage = -1;
    if (action.kind == ActionKind::kRecompute) {
      if (std::string why = recompute_source_problem(trace, action); !why.empty()) {
        if (problem) problem(fmt::format("actions[{}] ({}): {}", i, describe(action), why));
        continue;
      }
    } else {
      const std::optional<StorageIndex> found = trace.find_storage(action.storage);
      if (!found) {
        if (problem) problem(fmt::format("actions[{}] ({}): unknown storage {}", i, describe(action), action.storage));
        continue;
      }
      storage = *found;
    }
    if (ordered && !resolved.empty() && execution_slot(action) < execution_slot(resolved.back().action())) {
      if (problem) {
        problem(fmt::format("actions[{}] ({}): out of execution order (after {})", i, describe(action),
                            describe(resolved.back().action())));
      }
      ordered = false;
    }
    resolved.push_back({&action, storage, static_cast<std::uint32_t>(i)});
  }
  if (!ordered) {
    std::stable_sort(resolved.begin(), resolved.end(), [](const ResolvedAction& a, const ResolvedAction& b) {
      return execution_slot(a.action()) < execution_slot(b.action());
    });
  }
  return resolved;
}

}  // namespace hyperoffload
