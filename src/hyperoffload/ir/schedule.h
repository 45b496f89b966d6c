// Schedule: the residency actions a planner chose, in execution order.
//
// Each action runs before ("pre") or after ("post") one op. Four move one
// storage: copy_d2h (device→host copy of its current data), release_device
// (free its device memory), copy_h2d (host→device copy back), release_host
// (free its host copy). The fifth, recompute (schedule format v2), re-runs an
// earlier recomputable op `source_op` (ir/trace.h, Recomputable) at that point,
// regenerating the storages it wrote (docs/FORMATS.md has the rules). The vector
// is in execution order: by op, pre before post, and within one (op, phase) in
// the order the actions run.
//
// Thread-safety: a const Schedule may be read from any number of threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload {

enum class Phase : std::uint8_t { kPre, kPost };
enum class ActionKind : std::uint8_t { kCopyD2H, kReleaseDevice, kCopyH2D, kReleaseHost, kRecompute };

const char* to_string(Phase phase);      // "pre" / "post"
const char* to_string(ActionKind kind);  // "copy_d2h", "release_device", ..., "recompute"

struct Action {
  OpIndex op = 0;
  Phase phase = Phase::kPre;
  ActionKind kind = ActionKind::kCopyD2H;
  StorageId storage = 0;  // external id, as in the trace; 0 (unused) for kRecompute
  OpIndex source_op = -1;  // kRecompute: the op re-run; -1 for every other kind

  friend bool operator==(const Action&, const Action&) = default;
};

// "op 3 post copy_d2h storage 7", "op 9 pre recompute op 4" — for messages and
// test output.
std::string describe(const Action& action);

// Whether a recompute of `source_op` may stand at (op, phase): the source must
// run before that point, i.e. source_op < op, or source_op <= op for post.
inline bool recompute_source_precedes(OpIndex source_op, OpIndex op, Phase phase) {
  return source_op >= 0 && (source_op < op || (phase == Phase::kPost && source_op == op));
}

// Position of an action's (op, phase) in execution order: 2*op for pre, 2*op+1
// for post. Precondition: action.op >= 0.
inline std::size_t execution_slot(const Action& action) {
  return 2 * static_cast<std::size_t>(action.op) + (action.phase == Phase::kPost ? 1 : 0);
}

struct Schedule {
  Schedule() = default;
  // Schedule{"peak", actions}: the budget is left unrecorded.
  Schedule(std::string planner_name, std::vector<Action> schedule_actions,
           std::optional<std::int64_t> planned_budget_bytes = std::nullopt)
      : planner(std::move(planner_name)),
        actions(std::move(schedule_actions)),
        budget_bytes(planned_budget_bytes) {}

  std::string planner;  // which planner made it ("greedy", "peak", or a file's value)
  std::vector<Action> actions;
  // The device-memory budget it was planned for, in bytes, when the planning
  // command records it (`plan` does): what `simulate` and `validate` check it
  // against when they are given no --budget, before the trace's own limit.
  std::optional<std::int64_t> budget_bytes;

  // Appends a storage action (every kind but kRecompute); callers append in
  // execution order.
  void add(OpIndex op, Phase phase, ActionKind kind, StorageId storage) {
    actions.push_back(Action{op, phase, kind, storage, -1});
  }
  // Appends a recompute of source_op at (op, phase).
  void add_recompute(OpIndex op, Phase phase, OpIndex source_op) {
    actions.push_back(Action{op, phase, ActionKind::kRecompute, 0, source_op});
  }
  bool has_recompute() const;
};

// Checks that actions are in execution order (op ascending, pre before post).
// The error names the first action out of order: "actions[5]: ...".
Status check_execution_order(std::span<const Action> actions);

// O(1) access to the actions of one (op, phase), for executors that walk a
// schedule op by op. Precondition: the schedule is in execution order and every
// action's op is in [0, op_count).
class ActionsByOp {
 public:
  ActionsByOp(std::span<const Action> actions, OpIndex op_count);

  std::span<const Action> pre(OpIndex op) const { return slice(2 * static_cast<std::size_t>(op)); }
  std::span<const Action> post(OpIndex op) const { return slice(2 * static_cast<std::size_t>(op) + 1); }

 private:
  std::span<const Action> slice(std::size_t slot) const {
    return actions_.subspan(offsets_[slot], offsets_[slot + 1] - offsets_[slot]);
  }
  std::span<const Action> actions_;
  std::vector<std::uint32_t> offsets_;  // 2 * op_count + 1 entries
};

}  // namespace hyperoffload
