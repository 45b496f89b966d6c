#include "hyperoffload/ir/schedule.h"

#include <fmt/format.h>

namespace hyperoffload {

const char* to_string(Phase phase) { return phase == Phase::kPre ? "pre" : "post"; }

const char* to_string(ActionKind kind) {
  switch (kind) {
    case ActionKind::kCopyD2H: return "copy_d2h";
    case ActionKind::kReleaseDevice: return "release_device";
    case ActionKind::kCopyH2D: return "copy_h2d";
    case ActionKind::kReleaseHost: return "release_host";
    case ActionKind::kRecompute: return "recompute";
  }
  return "unknown";
}

std::string describe(const Action& action) {
  if (action.kind == ActionKind::kRecompute) {
    return fmt::format("op {} {} recompute op {}", action.op, to_string(action.phase), action.source_op);
  }
  return fmt::format("op {} {} {} storage {}", action.op, to_string(action.phase),
                     to_string(action.kind), action.storage);
}

bool Schedule::has_recompute() const {
  for (const Action& action : actions) {
    if (action.kind == ActionKind::kRecompute) return true;
  }
  return false;
}

Status check_execution_order(std::span<const Action> actions) {
  for (std::size_t i = 1; i < actions.size(); ++i) {
    if (actions[i].op < 0) continue;  // reported by the validator as out of range
    if (actions[i - 1].op >= 0 && execution_slot(actions[i]) < execution_slot(actions[i - 1])) {
      return make_error(ErrorCode::kInvalidInput,
                        fmt::format("actions[{}]: out of execution order ({} after {}); actions must be "
                                    "sorted by op, pre before post",
                                    i, describe(actions[i]), describe(actions[i - 1])));
    }
  }
  return ok_status();
}

ActionsByOp::ActionsByOp(std::span<const Action> actions, OpIndex op_count)
    : actions_(actions), offsets_(2 * static_cast<std::size_t>(op_count) + 1, 0) {
  // Counting pass, then prefix sums: offsets_[s] = first action of slot s.
  for (const Action& action : actions) ++offsets_[execution_slot(action) + 1];
  for (std::size_t s = 1; s < offsets_.size(); ++s) offsets_[s] += offsets_[s - 1];
}

}  // namespace hyperoffload
