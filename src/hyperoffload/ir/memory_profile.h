// Memory profiles of a trace without any schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

struct PeakBytes {
  std::int64_t bytes = 0;
  OpIndex op = -1;  // first op where the peak is reached; -1 for an empty trace
};

// Bytes resident while each op runs when nothing is offloaded: a storage is
// resident from its first access; a non-retained one is freed after its last
// access, a retained one stays to the end of the step. O(ops + storages).
std::vector<std::int64_t> unplanned_resident_bytes(const Trace& trace, const StorageAccesses& accesses);

// Maximum of unplanned_resident_bytes: the "unplanned op-granular peak" that
// percentage budgets ("--budget 40%") refer to.
PeakBytes unplanned_peak(const Trace& trace, const StorageAccesses& accesses);
PeakBytes unplanned_peak(const Trace& trace);

// Maximum of a per-op profile (first op reaching it).
PeakBytes peak_of(const std::vector<std::int64_t>& per_op_bytes);

}  // namespace hyperoffload
