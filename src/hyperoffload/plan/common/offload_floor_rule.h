// Internal: the offload floor's rule (offload_floor, plan/planner.h), in one
// home for the three walks that compute it: over a built trace
// (offload_floor), over the stream of an augmented trace's accesses
// (augmented_peak, plan/recompute/augmented_trace.h), and over the peak
// model's interior candidates (build_peak_model, plan/peak/peak_model.h).
//
// The rule: a storage of size > 0 whose consecutive accesses at ops
// `previous` < `next` are at least two ops apart can be off the device over
// the gap's interior, ops previous + 1 .. next - 1 (the peak model's interior
// candidates); at each op the floor is what is resident less what such gaps
// cover there, and the trace's floor is its largest, the first op on ties.
// (tests/plan/planner_test.cc compares offload_floor with the peak model's.)
//
// Thread-safety: plain values; no shared state.
#pragma once

#include <cstdint>
#include <span>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

// Adds a gap's interior to a difference array over the ops (one entry past
// the last op): nothing when the accesses are less than two ops apart.
// Preconditions: 0 <= previous < next < reducible_delta.size(); size_bytes > 0.
inline void add_offloadable_gap(std::span<std::int64_t> reducible_delta, OpIndex previous, OpIndex next,
                                std::int64_t size_bytes) {
  if (next - previous < 2) return;
  reducible_delta[static_cast<std::size_t>(previous) + 1] += size_bytes;
  reducible_delta[static_cast<std::size_t>(next)] -= size_bytes;
}

// The largest resident-less-reducible bytes over ops seen in order, the first
// op on ties.
class FloorScan {
 public:
  void add(OpIndex op, std::int64_t resident_bytes, std::int64_t reducible_bytes) {
    const std::int64_t bytes = resident_bytes - reducible_bytes;
    if (floor_.op < 0 || bytes > floor_.bytes) floor_ = UnavoidableFloor{op, bytes};
  }
  // op -1 when no op was added.
  UnavoidableFloor floor() const { return floor_; }

 private:
  UnavoidableFloor floor_{-1, 0};
};

}  // namespace hyperoffload::internal
