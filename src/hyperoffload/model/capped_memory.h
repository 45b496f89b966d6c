// The capped allocator: device memory that holds only a budget
// (DeviceMemory::kBudget), in time. Note [Memory cap]: allocations are made by
// the host in program order — an op's first accesses and faults when it
// starts, a prefetch's buffer when its copy_h2d is issued, a recompute's
// outputs when it is issued — so their times never decrease. An allocation
// fits once the bytes allocated so far, minus the releases that have completed
// by then, leave room for it; until then the host waits. Releases complete at
// known times (once their storage's copies and recomputes are done,
// storage_timing.h), kept in a min-heap and retired as the clock passes them.
// With nothing left to wait for, an allocation over the cap goes ahead (a plan
// below its floor), so the clock never stalls forever.
//
// The simulator (sim/) and the planners' stall estimate (plan/common/) both
// allocate with it, so a plan is tuned for exactly the device it is simulated on.
//
//   CappedMemory memory(/*cap_bytes=*/100);
//   memory.allocate(0.0, 80);          // 0: fits
//   memory.release(/*free_ms=*/5.0, 80);
//   memory.allocate(1.0, 50);          // 5: waits for the release
//
// Cost: O(log r) per call for r pending releases. Thread-safety: not shared.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace hyperoffload {

class CappedMemory {
 public:
  explicit CappedMemory(std::int64_t cap_bytes) : cap_bytes_(cap_bytes) {}

  // When `bytes` fit, at or after `at_ms` (precondition: at_ms no earlier than
  // any earlier call's); allocates them then.
  double allocate(double at_ms, std::int64_t bytes);
  // `bytes` allocated earlier are freed at `free_ms` (any time).
  void release(double free_ms, std::int64_t bytes) { pending_.push({free_ms, bytes}); }

  std::int64_t cap_bytes() const { return cap_bytes_; }

 private:
  struct PendingFree {
    double time_ms;
    std::int64_t bytes;
    bool operator>(const PendingFree& other) const { return time_ms > other.time_ms; }
  };
  void retire_until(double time_ms);

  std::int64_t cap_bytes_;
  std::int64_t allocated_bytes_ = 0;  // by the host so far
  std::int64_t retired_bytes_ = 0;    // released and freed by the clock so far
  std::priority_queue<PendingFree, std::vector<PendingFree>, std::greater<>> pending_;
};

}  // namespace hyperoffload
