// Internal: where the peak planner puts each selected eviction
// (docs/PEAK_PLANNER.md, "Placement" and "Boundaries"): its copy back as early
// and its release as late as the budget allows, copies back in the order the
// H2D engine should run them; then the boundary candidates that bring edge
// memory between ops within the budget.
//
// Bound, with n ops, C interior candidates, P of them selected, B boundary
// candidates and d the most accesses of one op: prefetch_room O(P log n) (a
// threshold search each); engine_order O(P log P) (sequence_jobs); place()
// that plus O(C) for its per-candidate tables and O(log n + log P) per
// selected candidate (two threshold searches, two adds, the issued-op set, the
// release order).
// boundaries_by_edge O(B log B); select_boundaries O(n + P + B log d): a
// boundary has at most d candidates (one per storage its op accesses), each
// taken by a binary search, and each pick but a boundary's last is its
// largest, erased off the end. Memory O(n + C + B).
//
// Thread-safety: pure functions (place() updates the profile it is given).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"
#include "hyperoffload/plan/common/range_max_tree.h"
#include "hyperoffload/plan/peak/engine_jobs.h"
#include "hyperoffload/plan/peak/peak_model.h"

namespace hyperoffload::internal {

// Where a selected interior candidate's transfers go: release_device after op
// `release_op`, copy_h2d before op `prefetch_op`; the storage is off the device
// during ops release_op+1 .. prefetch_op-1.
struct Placement {
  std::int32_t candidate;
  OpIndex release_op;
  OpIndex prefetch_op;
  std::int32_t engine_rank;  // position of its copy_h2d in the engine order
};

// What the placement steps of one peak-planner run (peak_run.h) share: the
// trace and its model, when each op starts in a run without stalls
// (op_start_ms), the bytes the placement keeps the profile within, and the
// device the schedule is tuned for. Refers to the caller's data, which must
// outlive it.
struct PeakPass {
  const Trace& trace;
  const PeakModel& model;
  std::span<const double> start_ms;
  std::int64_t limit_bytes;
  DeviceMemory device;
};

// Per selected candidate (in the order of `selected`), the first op of its
// interior from which `profile` — the profile after selection — has room for
// it again to its end: where its copy back could start. The same for every
// placement of a run, so made once.
std::vector<OpIndex> prefetch_room(const PeakPass& pass, std::span<const std::int32_t> selected,
                                   const RangeMaxTree& profile);

// The order in which the H2D engine should run the prefetches: a sequence over
// estimated times, where a prefetch can start once its version's copy to host
// is done (`ready_ms`, per version) and the budget has room for it (from op
// `room_from`, prefetch_room's), and is needed when its end op starts.
std::vector<std::int32_t> engine_order(const PeakPass& pass, std::span<const std::int32_t> selected,
                                       std::span<const OpIndex> room_from, std::span<const double> ready_ms,
                                       EngineRule rule);

// Placement (docs/PEAK_PLANNER.md, "Placement"): selection subtracted each
// candidate over its whole interior; now give back the ops where the memory
// stays within the limit — a suffix (the prefetch moves as early as possible)
// and a prefix (the release moves as late as possible). A candidate that fits
// back entirely was made redundant by later selections and is dropped.
//
// Prefetches are placed first, in engine_order, each no earlier than the one
// before: the engine is FIFO, so a copy issued out of that order would hold up
// the copies queued behind it. Releases follow, latest first for the storage
// whose copy to host can wait the longest (below). Placements come out in that
// order.
//
// `profile` starts as the profile after selection; `room_from` is
// prefetch_room on it.
std::vector<Placement> place(const PeakPass& pass, std::span<const std::int32_t> selected,
                             std::span<const OpIndex> room_from, std::span<const double> ready_ms,
                             RangeMaxTree& profile, EngineRule rule);

// Boundary candidates grouped by boundary, smallest first: the order in which
// select_boundaries considers them. Independent of the placements, so built once.
std::vector<std::int32_t> boundaries_by_edge(const PeakModel& model);

// Boundary candidates (docs/PEAK_PLANNER.md, "Boundaries"): for each boundary
// whose edge memory is still over the limit after placement, and whose boundary
// candidates together can bring it within the limit, take them by the edge
// reduction max(0, before - max(after, limit)) — the smallest candidate that
// clears the excess, else the largest — until it fits. `by_edge` is
// boundaries_by_edge(model).
std::vector<std::int32_t> select_boundaries(const PeakModel& model, std::span<const Placement> placements,
                                            std::int64_t limit, std::span<const std::int32_t> by_edge);

}  // namespace hyperoffload::internal
