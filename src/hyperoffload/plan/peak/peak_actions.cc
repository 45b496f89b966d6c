#include "hyperoffload/plan/peak/peak_actions.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace hyperoffload::internal {
namespace {

struct PendingAction {
  Action action;
  // Orders copies within one (op, phase) by engine order: prefetches (those of
  // boundary candidates, needed by the very next op, first) and copies to host
  // (those of versions only boundary candidates use first).
  std::int64_t order_key;
};

int kind_rank(ActionKind kind) {
  switch (kind) {
    case ActionKind::kCopyD2H:
      return 0;
    case ActionKind::kCopyH2D:
      return 1;
    case ActionKind::kReleaseDevice:
      return 2;
    case ActionKind::kReleaseHost:
      return 3;
    case ActionKind::kRecompute:  // the peak planner does not recompute
      return 4;
  }
  return 5;
}

}  // namespace

std::vector<Action> emit_actions(const Trace& trace, const PeakModel& model, std::span<const Placement> placements,
                                 std::span<const std::int32_t> boundary_picks, std::span<const HostCopy> host_copies) {
  struct VersionUse {
    OpIndex last_end = -1;
    bool last_end_writes = false;
  };
  std::vector<VersionUse> uses(model.versions.size());
  auto note_use = [&](const PeakCandidate& c) {
    VersionUse& use = uses[static_cast<std::size_t>(c.version)];
    if (c.end_op > use.last_end) {
      use.last_end = c.end_op;
      use.last_end_writes = c.end_op_writes;
    }
  };
  for (const Placement& p : placements) note_use(model.interior[static_cast<std::size_t>(p.candidate)]);
  for (const std::int32_t k : boundary_picks) note_use(model.boundary[static_cast<std::size_t>(k)]);

  // Every action, in one fixed order, to `emit`: walked twice, once to count
  // the actions of each (op, phase) and once to put each in its place (a
  // counting sort), so the actions are never held in a list of their own
  // first (2.9M of them on the 1M-op chain).
  auto for_each_action = [&](auto&& emit) {
    auto evict = [&](const PeakCandidate& c, OpIndex release_op, OpIndex prefetch_op, std::int64_t engine_rank) {
      const StorageId id = trace.storage(c.storage).id;
      emit(PendingAction{Action{release_op, Phase::kPost, ActionKind::kReleaseDevice, id}, 0});
      emit(PendingAction{Action{prefetch_op, Phase::kPre, ActionKind::kCopyH2D, id}, engine_rank});
    };
    for (const Placement& p : placements) {
      evict(model.interior[static_cast<std::size_t>(p.candidate)], p.release_op, p.prefetch_op, p.engine_rank);
    }
    for (const std::int32_t k : boundary_picks) {
      const PeakCandidate& c = model.boundary[static_cast<std::size_t>(k)];
      evict(c, c.start_op, c.end_op, -1);
    }
    for (std::size_t v = 0; v < uses.size(); ++v) {
      const VersionUse& use = uses[v];
      if (use.last_end < 0) continue;
      const StorageId id = trace.storage(model.versions[v].storage).id;
      const HostCopy& copy = host_copies[v];
      emit(PendingAction{
          Action{copy.issue_op >= 0 ? copy.issue_op : model.versions[v].copy_op, Phase::kPost, ActionKind::kCopyD2H, id},
          copy.rank});
      // The host copy is last used by the prefetch before op last_end. When
      // that op writes the storage, the next version's copy may be taken right
      // after it, so the stale copy goes before the op.
      emit(PendingAction{
          Action{use.last_end, use.last_end_writes ? Phase::kPre : Phase::kPost, ActionKind::kReleaseHost, id}, 0});
    }
    for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
      const OpIndex last_use = model.last_use[static_cast<std::size_t>(s)];
      const StorageInfo& info = trace.storage(s);
      if (last_use < 0 || info.retained()) continue;
      emit(PendingAction{Action{last_use, Phase::kPost, ActionKind::kReleaseDevice, info.id}, 0});
    }
  };

  // Execution order: a counting sort by (op, phase), then the fixed order
  // within each (op, phase), which holds few actions.
  std::vector<std::uint32_t> slot_start(2 * static_cast<std::size_t>(trace.op_count()) + 1, 0);
  for_each_action([&](const PendingAction& p) { ++slot_start[execution_slot(p.action) + 1]; });
  std::partial_sum(slot_start.begin(), slot_start.end(), slot_start.begin());
  // The actions and their order keys side by side, so that the actions, once
  // in order, are the result: no second copy of them.
  std::vector<Action> actions(slot_start.back());
  std::vector<std::int64_t> order_keys(slot_start.back());
  {
    std::vector<std::uint32_t> cursor(slot_start.begin(), slot_start.end() - 1);
    for_each_action([&](const PendingAction& p) {
      const std::uint32_t at = cursor[execution_slot(p.action)]++;
      actions[at] = p.action;
      order_keys[at] = p.order_key;
    });
  }
  std::vector<PendingAction> group;
  for (std::size_t s = 0; s + 1 < slot_start.size(); ++s) {
    const std::uint32_t first = slot_start[s], end = slot_start[s + 1];
    if (end - first < 2) continue;
    group.clear();
    for (std::uint32_t i = first; i < end; ++i) group.push_back({actions[i], order_keys[i]});
    std::sort(group.begin(), group.end(), [](const PendingAction& a, const PendingAction& b) {
      return std::make_tuple(kind_rank(a.action.kind), a.order_key, a.action.storage) <
             std::make_tuple(kind_rank(b.action.kind), b.order_key, b.action.storage);
    });
    for (std::uint32_t i = first; i < end; ++i) actions[i] = group[i - first].action;
  }
  // An action repeated by two sources has the same order key too, so duplicates
  // end up adjacent.
  actions.erase(std::unique(actions.begin(), actions.end()), actions.end());
  return actions;
}

}  // namespace hyperoffload::internal
