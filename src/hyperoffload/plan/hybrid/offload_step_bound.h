// Internal: a quick lower bound on the step time of any offload-only plan —
// the hybrid planner stops making its offload-only plan once another plan it
// made is quicker than this (docs/HYBRID_PLANNER.md, "Choosing the plan").
//
// Scope: as plan/common/stall_bound.h's, every valid, fault-free offload-only
// schedule whose op-granular peak is within the budget and that keeps
// retained storages resident after their last access (the peak planner's
// plans), timed as the simulator times it on two copy engines. The argument
// is that bound's with both engines free and fluid from the start of the step
// instead of from each copy's data (docs/PEAK_PLANNER.md, "How far from
// optimal"), which makes it O(ops + storages) but weaker. With R(q) the
// resident bytes at op q without a plan, E(q) = max(0, R(q) - budget) the
// bytes that must be off the device during op q, and C(q) when op q starts
// without stalls:
//  - the bytes off during op q are each read again after it, so they come
//    back after op q ends, one H2D engine moving them: the step lasts at
//    least C(q + 1) + h2d_ms(E(q));
//  - on a device that holds only the budget, an op that allocates a storage
//    starts only once E(q) bytes of releases have completed, each after its
//    copy to host: the step lasts at least d2h_ms(E(q)) plus the compute from
//    op q on;
//  - and at least its compute.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <span>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"

namespace hyperoffload::internal {

// In ms. `resident_bytes` is the per-op profile without a plan (the peak
// model's); `accesses` is of `trace`.
double offload_only_step_bound_ms(const Trace& trace, const StorageAccesses& accesses,
                                  std::span<const std::int64_t> resident_bytes, std::int64_t budget_bytes,
                                  DeviceMemory device);

}  // namespace hyperoffload::internal
