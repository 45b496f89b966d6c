#include "hyperoffload/plan/internal/stall_estimate.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace hyperoffload::internal {

double estimate_stall_ms(const Trace& trace, std::span<const Action> actions) {
  const auto storages = static_cast<std::size_t>(trace.storage_count());
  std::vector<double> to_host_done_ms(storages, 0.0);
  std::vector<double> to_device_done_ms(storages, 0.0);
  double d2h_free_ms = 0.0, h2d_free_ms = 0.0;
  double previous_end_ms = 0.0, stall_ms = 0.0;
  std::size_t next = 0;
  auto apply = [&](const Action& action, double issue_ms) {
    const std::optional<StorageIndex> storage = trace.find_storage(action.storage);
    if (!storage) return;
    const auto s = static_cast<std::size_t>(*storage);
    const std::int64_t bytes = trace.storage(*storage).size_bytes;
    if (action.kind == ActionKind::kCopyD2H) {
      d2h_free_ms = std::max(d2h_free_ms, issue_ms) + trace.d2h_ms(bytes);
      to_host_done_ms[s] = d2h_free_ms;
    } else if (action.kind == ActionKind::kCopyH2D) {
      h2d_free_ms = std::max({h2d_free_ms, issue_ms, to_host_done_ms[s]}) + trace.h2d_ms(bytes);
      to_device_done_ms[s] = h2d_free_ms;
    }
  };
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (; next < actions.size() && actions[next].op == op && actions[next].phase == Phase::kPre; ++next) {
      apply(actions[next], previous_end_ms);
    }
    double start_ms = previous_end_ms;
    for (const Access& access : trace.accesses(op)) {
      start_ms = std::max(start_ms, to_device_done_ms[static_cast<std::size_t>(access.storage)]);
    }
    stall_ms += start_ms - previous_end_ms;
    previous_end_ms = start_ms + trace.op_duration_ms(op);
    for (; next < actions.size() && actions[next].op == op; ++next) apply(actions[next], previous_end_ms);
  }
  return stall_ms;
}

}  // namespace hyperoffload::internal
