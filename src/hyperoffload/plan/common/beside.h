// Internal: when a planner runs a pass that depends only on its inputs on a
// thread of its own, beside the work that follows, instead of in line.
//
// A few passes of the peak planner read only the model and take tens to
// hundreds of ms on a 1M-op trace (the selection's covering index, the
// boundary candidates' order, the copy ops' ready times): each goes on a
// thread of its own while the planning thread does other work that needs
// neither. On a small trace starting a thread (tens of µs) costs more than
// the pass, and the hybrid planner makes dozens of peak runs a plan, so there
// the pass runs in line, when its result is first asked for (below 65,536
// candidates by default). The result is the same either way.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <future>

namespace hyperoffload::internal {

// std::launch::async for a pass over `items` items when there are at least
// `min_items` (PeakPlannerOptions::beside_min_candidates), else
// std::launch::deferred (it runs at get(), on the thread that asks).
inline std::launch beside_when_large(std::size_t items, std::size_t min_items) {
  return items >= min_items ? std::launch::async : std::launch::deferred;
}

}  // namespace hyperoffload::internal
