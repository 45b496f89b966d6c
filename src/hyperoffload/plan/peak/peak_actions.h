// Internal: the peak planner's schedule assembly — placements, boundary
// evictions and copies to host turned into actions in execution order, with
// the fixed order within one (op, phase) and duplicates removed.
//
// Bound, with n ops, V versions, S storages and A = 2 × (placements +
// boundary picks + V) + S actions at most before de-duplication: O(n + A) for
// the counting sort by (op, phase), plus O(a log a) for each (op, phase) that
// holds a of them, so O(n + A log A) at worst (many actions at one point).
// Memory O(n + A + V).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/peak/host_copies.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak/peak_placement.h"

namespace hyperoffload::internal {

// Turns placements into actions: one copy_d2h per used version, the eviction
// pairs, one release_host per used version after its last prefetch, and the
// end-of-life releases; then the fixed order and de-duplication.
std::vector<Action> emit_actions(const Trace& trace, const PeakModel& model, std::span<const Placement> placements,
                                 std::span<const std::int32_t> boundary_picks, std::span<const HostCopy> host_copies);

}  // namespace hyperoffload::internal
