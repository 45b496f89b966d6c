#include "hyperoffload/model/step_clock.h"

#include <algorithm>

namespace hyperoffload {

StepClock::StepClock(CopyEngines engines, std::optional<std::int64_t> memory_cap_bytes, StorageIndex storage_count)
    : engines_(engines), storage_count_(static_cast<std::size_t>(storage_count)) {
  if (memory_cap_bytes) memory_.emplace(*memory_cap_bytes);
}

CopyWindow StepClock::copy_to_host(StorageIndex s, StorageTiming& timing, double issue_ms, double duration_ms) {
  const CopyWindow copy = engines_.run(CopyDirection::kToHost, holds_.to_host_start_ms(s, issue_ms), duration_ms);
  timing.d2h_end_ms = copy.end_ms;
  return copy;
}

StepClock::ToDevice StepClock::copy_to_device(StorageTiming& timing, double issue_ms, std::int64_t bytes,
                                              double duration_ms) {
  const double host_ms = allocate(issue_ms, bytes);
  const CopyWindow copy = engines_.run(CopyDirection::kToDevice, timing.to_device_start_ms(host_ms), duration_ms);
  timing.h2d_end_ms = copy.end_ms;
  return {host_ms, copy};
}

double StepClock::release(StorageIndex s, const StorageTiming& timing, double issue_ms, std::int64_t bytes) {
  const double free_ms = holds_.free_ms(s, timing, issue_ms);
  if (memory_) memory_->release(free_ms, bytes);
  return free_ms;
}

StepClock::Recompute StepClock::recompute(const RecomputeAccesses& accesses, double issue_ms,
                                          std::int64_t regenerated_bytes, double inputs_ready_ms,
                                          double duration_ms) {
  const double host_ms = allocate(issue_ms, regenerated_bytes);
  const double start_ms = std::max({host_ms, stream_free_ms_, inputs_ready_ms});
  const double end_ms = start_ms + duration_ms;
  for (const RecomputeAccess& input : accesses.inputs) holds_.hold(input.storage, storage_count_, end_ms, false);
  for (const RecomputeAccess& output : accesses.outputs) holds_.hold(output.storage, storage_count_, end_ms, true);
  stream_free_ms_ = end_ms;
  return {host_ms, start_ms, end_ms};
}

}  // namespace hyperoffload
