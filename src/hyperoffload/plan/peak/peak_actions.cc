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
  // At most two actions per eviction and per version, and one release per
  // storage: reserved at once, not grown by doubling (1.2M actions on a 1M-op
  // trace).
  std::vector<PendingAction> pending;
  pending.reserve(2 * (placements.size() + boundary_picks.size() + model.versions.size()) +
                  static_cast<std::size_t>(trace.storage_count()));
  auto evict = [&](const PeakCandidate& c, OpIndex release_op, OpIndex prefetch_op, std::int64_t engine_rank) {
    const StorageId id = trace.storage(c.storage).id;
    pending.push_back({Action{release_op, Phase::kPost, ActionKind::kReleaseDevice, id}, 0});
    pending.push_back({Action{prefetch_op, Phase::kPre, ActionKind::kCopyH2D, id}, engine_rank});
    VersionUse& use = uses[static_cast<std::size_t>(c.version)];
    if (c.end_op > use.last_end) {
      use.last_end = c.end_op;
      use.last_end_writes = c.end_op_writes;
    }
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
    pending.push_back(
        {Action{copy.issue_op >= 0 ? copy.issue_op : model.versions[v].copy_op, Phase::kPost, ActionKind::kCopyD2H, id},
         copy.rank});
    // The host copy is last used by the prefetch before op last_end. When that
    // op writes the storage, the next version's copy may be taken right after
    // it, so the stale copy goes before the op.
    pending.push_back(
        {Action{use.last_end, use.last_end_writes ? Phase::kPre : Phase::kPost, ActionKind::kReleaseHost, id}, 0});
  }
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const OpIndex last_use = model.last_use[static_cast<std::size_t>(s)];
    const StorageInfo& info = trace.storage(s);
    if (last_use < 0 || info.retained()) continue;
    pending.push_back({Action{last_use, Phase::kPost, ActionKind::kReleaseDevice, info.id}, 0});
  }

  // Execution order: a counting sort by (op, phase), then the fixed order
  // within each (op, phase), which holds few actions.
  std::vector<std::uint32_t> slot_start(2 * static_cast<std::size_t>(trace.op_count()) + 1, 0);
  auto slot = [](const Action& a) { return 2 * static_cast<std::size_t>(a.op) + (a.phase == Phase::kPost ? 1 : 0); };
  for (const PendingAction& p : pending) ++slot_start[slot(p.action) + 1];
  std::partial_sum(slot_start.begin(), slot_start.end(), slot_start.begin());
  std::vector<PendingAction> ordered(pending.size());
  {
    std::vector<std::uint32_t> cursor(slot_start.begin(), slot_start.end() - 1);
    for (const PendingAction& p : pending) ordered[cursor[slot(p.action)]++] = p;
  }
  for (std::size_t s = 0; s + 1 < slot_start.size(); ++s) {
    if (slot_start[s + 1] - slot_start[s] < 2) continue;
    std::sort(ordered.begin() + slot_start[s], ordered.begin() + slot_start[s + 1],
              [](const PendingAction& a, const PendingAction& b) {
                return std::make_tuple(kind_rank(a.action.kind), a.order_key, a.action.storage) <
                       std::make_tuple(kind_rank(b.action.kind), b.order_key, b.action.storage);
              });
  }
  pending = std::move(ordered);
  // An action repeated by two sources has the same order key too, so duplicates
  // end up adjacent.
  std::vector<Action> actions;
  actions.reserve(pending.size());
  for (const PendingAction& p : pending) {
    if (actions.empty() || !(actions.back() == p.action)) actions.push_back(p.action);
  }
  return actions;
}

}  // namespace hyperoffload::internal
