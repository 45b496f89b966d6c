// Internal: the peak planner's selection (docs/PEAK_PLANNER.md, "Selection"):
// while the profile's peak exceeds the budget, the interior candidate that
// scores best at the peak op is subtracted from the profile (the score and
// its terms are described in plan/peak_planner.h).
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

// Runs selection to completion on `profile` (each pick is subtracted from it);
// returns the selected interior candidates (indices into model.interior) in
// the order they were picked. Stops when the peak is within `limit_bytes` or
// nothing covers the peak op (the floor), or early, with what it picked so
// far, once `stop` is requested (checked every few hundred picks).
// Reads the options' weights, ties, copy-back windows and host-copy deadline.
std::vector<std::int32_t> select_peak_candidates(const Trace& trace, const PeakModel& model,
                                                 const PeakPlannerOptions& options, std::int64_t limit_bytes,
                                                 ProfileTree& profile, std::stop_token stop = {});

}  // namespace hyperoffload::internal
