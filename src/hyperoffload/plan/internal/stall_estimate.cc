#include "hyperoffload/plan/internal/stall_estimate.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace hyperoffload::internal {

double estimate_stall_ms(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions) {
  const auto storages = static_cast<std::size_t>(trace.storage_count());
  std::vector<double> to_host_done_ms(storages, 0.0);
  // Per op: when the last copy to device that it waits for ends. A copy waits
  // for nothing but is waited for by the next op that accesses its storage.
  std::vector<double> wait_until_ms(static_cast<std::size_t>(trace.op_count()), 0.0);
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
      // The first access at or after the op the copy is issued for.
      const std::span<const StorageAccess> list = accesses.of(*storage);
      const OpIndex from = action.phase == Phase::kPre ? action.op : action.op + 1;
      const auto it = std::lower_bound(list.begin(), list.end(), from,
                                       [](const StorageAccess& a, OpIndex op) { return a.op < op; });
      if (it != list.end()) {
        double& wait = wait_until_ms[static_cast<std::size_t>(it->op)];
        wait = std::max(wait, h2d_free_ms);
      }
    }
  };
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (; next < actions.size() && actions[next].op == op && actions[next].phase == Phase::kPre; ++next) {
      apply(actions[next], previous_end_ms);
    }
    const double start_ms = std::max(previous_end_ms, wait_until_ms[static_cast<std::size_t>(op)]);
    stall_ms += start_ms - previous_end_ms;
    previous_end_ms = start_ms + trace.op_duration_ms(op);
    for (; next < actions.size() && actions[next].op == op; ++next) apply(actions[next], previous_end_ms);
  }
  return stall_ms;
}

}  // namespace hyperoffload::internal
