// Internal: collects actions in any op order and returns them in execution
// order (by op, pre before post), keeping the order in which actions of the same
// (op, phase) were added. A counting sort: O(actions + ops).
#pragma once

#include <vector>

#include "hyperoffload/ir/schedule.h"

namespace hyperoffload::internal {

class ScheduleAssembler {
 public:
  explicit ScheduleAssembler(OpIndex op_count) : slot_counts_(2 * static_cast<std::size_t>(op_count) + 1, 0) {}

  // Precondition: 0 <= op < op_count.
  void add(OpIndex op, Phase phase, ActionKind kind, StorageId storage) {
    added_.push_back(Action{op, phase, kind, storage});
    ++slot_counts_[execution_slot(added_.back()) + 1];
  }

  std::vector<Action> finish() && {
    for (std::size_t s = 1; s < slot_counts_.size(); ++s) slot_counts_[s] += slot_counts_[s - 1];
    std::vector<Action> ordered(added_.size());
    for (const Action& action : added_) ordered[slot_counts_[execution_slot(action)]++] = action;
    return ordered;
  }

 private:
  std::vector<Action> added_;
  std::vector<std::size_t> slot_counts_;
};

}  // namespace hyperoffload::internal
