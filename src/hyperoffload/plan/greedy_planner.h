// GreedyPlanner ("greedy"): the reference system's greedy residency planner,
// decision for decision, in O((ops + accesses + candidates) log ops) time and
// O(ops + accesses) memory (Note [Planning bounds], planner.h).
//
// Memory model (the reference's): a storage is resident during every op from its
// first to its last access; retained storages count only up to their last
// access. A candidate is a gap between consecutive accesses of a storage with at
// least one op strictly between them (its interior). Candidates are ranked by gap
// length (longest first), size (largest first), gap start (earliest first), then
// by first appearance of the storage and the gap's position. Walking the ranking,
// the planner stops once no op exceeds the budget, skips a candidate whose
// interior has no op over the budget, and otherwise selects it and subtracts its
// size over its interior.
//
// Actions per selected candidate, in selection order: copy_d2h after the latest
// write at or before the gap start (else the first access), release_device after
// the gap start, copy_h2d before the gap end. Then, per storage in order of first
// appearance and unless retained: release_device after its last access, and
// release_host there too if any of its gaps was selected.
//
// The greedy plan guarantees the budget only under its own model (retained
// storages are undercounted, prefetches are issued at the last moment); the
// "peak" planner addresses both.
#pragma once

#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

class GreedyPlanner final : public Planner {
 public:
  std::string_view name() const override { return "greedy"; }
  Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const override;
};

}  // namespace hyperoffload
