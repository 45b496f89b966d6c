// Internal: the peak planner's selection (docs/PEAK_PLANNER.md, "Selection"):
// while the profile's peak exceeds the budget, the interior candidate that
// scores best at the peak op is subtracted from the profile (the score and
// its terms are described in plan/peak_planner.h).
//
// Bound, with n ops, C interior candidates and V versions: O(n + C + V) to
// build (the covering index, the score bounds, the copy-back windows); then
// per pick O(log² n) for the query at a new peak op (O(log n) at the same
// one) and O(log n) for its subtraction, at most C picks (a pick leaves the
// index); O(log n) per position a subtraction takes below the limit, each at
// most once (the profile only falls): O(n log n) in all; O(log n) per move to
// the large group, at most C in all; and O(log n) per lazy re-evaluation, at
// most kMaxRefreshesPerPick (64) per pick (Note [A cap on re-evaluations],
// peak_selection.cc; about six per pick on the traces measured, where the cap
// never binds). So O(C log² n + n log n) in all.
// CopyBackWindows::kAfterAFirstPass runs all of it twice (the first pass on a
// copy of the profile) plus O(C log n) for its windows.
// Memory O(n + C + V).
//
// Thread-safety: a pure function of its inputs (it lowers `profile`).
#pragma once

#include <cstdint>
#include <stop_token>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/common/profile_tree.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak_planner.h"

namespace hyperoffload::internal {

struct PeakSelection {
  std::vector<std::int32_t> picks;  // indices into model.interior, in the order picked
  // Picks that stopped lazy re-evaluation at its cap and took the best
  // candidate re-evaluated so far (Note [A cap on re-evaluations]); the
  // planner's note says how many.
  std::int64_t cut_picks = 0;
};

// Runs selection to completion on `profile` (each pick is subtracted from it);
// returns the selected interior candidates in the order they were picked.
// Stops when the peak is within `limit_bytes` or nothing covers the peak op
// (the floor), or early, with what it picked so far, once `stop` is requested
// (checked every few hundred picks). Reads the options' weights, ties,
// copy-back windows and host-copy deadline.
PeakSelection select_peak_candidates(const Trace& trace, const PeakModel& model, const PeakPlannerOptions& options,
                                     std::int64_t limit_bytes, ProfileTree& profile, std::stop_token stop = {});

}  // namespace hyperoffload::internal
