#include "hyperoffload/plan/hybrid/offload_step_bound.h"

#include <algorithm>
#include <vector>

namespace hyperoffload::internal {

double offload_only_step_bound_ms(const Trace& trace, const StorageAccesses& accesses,
                                  std::span<const std::int64_t> resident_bytes, std::int64_t budget_bytes,
                                  DeviceMemory device) {
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<bool> allocates(ops, false);
  if (device == DeviceMemory::kBudget) {
    for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
      if (trace.storage(s).size_bytes > 0 && accesses.accessed(s)) {
        allocates[static_cast<std::size_t>(accesses.first_op(s))] = true;
      }
    }
  }
  const double total_ms = trace.total_compute_ms();
  double bound_ms = total_ms;
  double before_ms = 0.0;  // C(q)
  for (std::size_t q = 0; q < ops; ++q) {
    const double duration_ms = trace.op_duration_ms(static_cast<OpIndex>(q));
    const std::int64_t excess = resident_bytes[q] - budget_bytes;
    if (excess > 0) {
      bound_ms = std::max(bound_ms, before_ms + duration_ms + trace.h2d_ms(excess));
      if (allocates[q]) bound_ms = std::max(bound_ms, trace.d2h_ms(excess) + (total_ms - before_ms));
    }
    before_ms += duration_ms;
  }
  return bound_ms;
}

}  // namespace hyperoffload::internal
