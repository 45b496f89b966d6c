// Internal: the peak planner's copies to host (docs/PEAK_PLANNER.md, "Copies
// to host"): one per version a placed eviction uses, in the order the D2H
// engine should run them, each issued no later than its version's first
// release, and when each is estimated to complete.
//
// Bound, with V versions (at most the accesses), P placements and c copies
// issued (c ≤ V): issue_host_copies O(V); first_releases O(V + P + boundary
// picks); host_copy_ready_ms O(V + c log c) (the copies sorted by issue
// point, then one O(1) engine step each); copy_op_ready_ms O(V + P + c log c);
// order_host_copies O(V + P log P) (its use order, sequence_jobs over at most
// min(P, V) jobs, then the two above). Memory O(V + P).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak/peak_placement.h"
#include "hyperoffload/plan/peak_planner.h"

namespace hyperoffload::internal {

// Where a used version's copy_d2h goes: after op `issue_op`; `rank` orders the
// copies to host issued after the same op. issue_op -1: right after its copy
// op, ahead of the others — a version the copy order does not list, used only
// by boundary candidates (whose copies back are needed by the very next op) or
// by candidates the first placement dropped.
struct HostCopy {
  OpIndex issue_op = -1;
  std::int64_t rank = -1;
};

inline constexpr OpIndex kNoRelease = std::numeric_limits<OpIndex>::max();

// Issues the copies to host of `versions` in that order, each after its copy
// op and no earlier than the one before (the engine is FIFO), but no later
// than latest[v] — the version's first release, which needs the host copy —
// where it then overtakes the copies ordered before it. A version with no
// release (kNoRelease) is not copied.
std::vector<HostCopy> issue_host_copies(const PeakModel& model, std::span<const std::int32_t> versions,
                                        std::span<const OpIndex> latest);

// When each version's copy to host completes on the FIFO engine, over
// estimated times, for copies issued as in `copies` (0 when not copied).
std::vector<double> host_copy_ready_ms(const Trace& trace, const PeakModel& model, std::span<const HostCopy> copies,
                                       std::span<const double> start_ms);

// The first placement's estimate: every copy to host issued right after its
// version's copy op, in op order (ties by version).
std::vector<double> copy_op_ready_ms(const Trace& trace, const PeakModel& model, std::span<const std::int32_t> selected,
                                     std::span<const double> start_ms);

// Copies to host (docs/PEAK_PLANNER.md, "Copies to host"): one per version
// that a placed candidate evicts, run on the FIFO D2H engine in the order
// their data is needed rather than in the order it was written, sequenced
// work-conserving from when each version's copy op ends. When a version is
// needed depends on the device:
//  - unlimited memory: by the latest start of each of its copies back that
//    keeps the H2D engine on time for every later use (nothing waits for the
//    release);
//  - a device that holds only the budget: by each copy back's own latest start
//    (its use minus its copy time; copies back wait for room there, not for the
//    engine) and by the op after each release, which frees memory only once the
//    copy to host has completed.
// ready_ms follows from issuing the copies by the releases of `placements`.
// The engine never idles while a copy could run; `sequencing` says which of
// those waiting runs first.
struct HostCopyOrder {
  std::vector<std::int32_t> versions;  // in engine order
  std::vector<double> ready_ms;        // per model version: estimated completion (0 when not copied)
};

// The latest op after which each version's copy to host can be issued: its
// first release or boundary eviction (kNoRelease when it has neither).
std::vector<OpIndex> first_releases(const PeakModel& model, std::span<const Placement> placements,
                                    std::span<const std::int32_t> boundary_picks);

// Reads the pass's trace, model, start times and device (not its limit).
HostCopyOrder order_host_copies(const PeakPass& pass, std::span<const Placement> placements,
                                HostCopySequencing sequencing);

}  // namespace hyperoffload::internal
