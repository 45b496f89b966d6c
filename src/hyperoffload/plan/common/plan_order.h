// Internal: which of two plans is better at a budget — the one rule the
// hybrid planner's candidates (hybrid/hybrid_plans.h, better()) and the
// segment search's shapes (hybrid/segment_search.h) are ranked by.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

namespace hyperoffload::internal {

// What a ranking needs of a plan: its peak and its estimated step.
struct PlanOutcome {
  std::int64_t peak_bytes = 0;
  double time_ms = 0.0;  // any measure that orders plans as their step times do
};

// Whether a beats b at `budget_bytes`: one that fits beats one that does not;
// of two over the budget, the lower peak wins (it is the closer to fitting);
// then the quicker, then the lower peak. Ties keep b (the one evaluated
// first).
inline bool better_outcome(PlanOutcome a, PlanOutcome b, std::int64_t budget_bytes) {
  const bool a_fits = a.peak_bytes <= budget_bytes;
  const bool b_fits = b.peak_bytes <= budget_bytes;
  if (a_fits != b_fits) return a_fits;
  if (!a_fits && a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
  if (a.time_ms != b.time_ms) return a.time_ms < b.time_ms;
  return a.peak_bytes < b.peak_bytes;
}

}  // namespace hyperoffload::internal
