#include "hyperoffload/plan/hybrid/hybrid_models.h"

#include <algorithm>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/plan/hybrid/offload_step_bound.h"

namespace hyperoffload::internal {

HybridModels::HybridModels(const Trace& of_trace, DeviceMemory memory, std::int64_t budget)
    : trace(of_trace), device_memory(memory), budget_bytes(budget), accesses(of_trace) {
  recompute_build_ = std::async(std::launch::async, [this] { return build_recompute_model(trace, accesses); });
  peak = build_peak_model(trace, accesses);
  const auto& resident = peak.resident_bytes;
  peak_op = static_cast<OpIndex>(std::max_element(resident.begin(), resident.end()) - resident.begin());
  for (OpIndex op = 0; op < peak_op; ++op) compute_before_peak_ms += trace.op_duration_ms(op);
  const double movable =
      compute_before_peak_ms / 1e3 * trace.d2h_bandwidth_gib_per_s() * static_cast<double>(kBytesPerGiB);
  const std::int64_t excess = resident[static_cast<std::size_t>(peak_op)] - budget_bytes;
  offloadable_at_peak =
      static_cast<std::int64_t>(std::min(movable, static_cast<double>(std::max<std::int64_t>(0, excess))));
  offload_only_bound_ms = offload_only_step_bound_ms(trace, accesses, resident, budget_bytes, device_memory);
}

}  // namespace hyperoffload::internal
