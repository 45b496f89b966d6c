#include "hyperoffload/ir/memory_profile.h"

namespace hyperoffload {

std::vector<std::int64_t> unplanned_resident_bytes(const Trace& trace, const StorageAccesses& accesses) {
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<std::int64_t> delta(ops + 1, 0);
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (!accesses.accessed(s)) continue;
    const StorageInfo& info = trace.storage(s);
    const auto first = static_cast<std::size_t>(accesses.first_op(s));
    const std::size_t end = info.retained() ? ops : static_cast<std::size_t>(accesses.last_op(s)) + 1;
    delta[first] += info.size_bytes;
    delta[end] -= info.size_bytes;
  }
  std::vector<std::int64_t> resident(ops, 0);
  std::int64_t running = 0;
  for (std::size_t op = 0; op < ops; ++op) {
    running += delta[op];
    resident[op] = running;
  }
  return resident;
}

PeakBytes peak_of(const std::vector<std::int64_t>& per_op_bytes) {
  PeakBytes peak;
  for (std::size_t op = 0; op < per_op_bytes.size(); ++op) {
    if (peak.op < 0 || per_op_bytes[op] > peak.bytes) {
      peak.bytes = per_op_bytes[op];
      peak.op = static_cast<OpIndex>(op);
    }
  }
  return peak;
}

PeakBytes unplanned_peak(const Trace& trace, const StorageAccesses& accesses) {
  return peak_of(unplanned_resident_bytes(trace, accesses));
}

PeakBytes unplanned_peak(const Trace& trace) { return unplanned_peak(trace, StorageAccesses(trace)); }

}  // namespace hyperoffload
