// The timing rules of one storage's copies and recomputes, for every executor
// that plays a schedule in time (the simulator, the planners' stall estimate).
// They say when a copy may start, when an op may use the storage and when a
// release really frees its memory; the copy engines (copy_engines.h) and the
// capped allocator (capped_memory.h) supply the rest.
//
//  - A copy to device starts once its buffer is allocated and the storage's
//    last copy to host (which filled the host copy) has completed; a fault (a
//    synchronous demand page on the compute stream) waits for it likewise.
//  - An op or a recompute that reads or writes the storage starts once its
//    last copy to device has completed.
//  - A release frees memory once its last copies to host and to device have
//    completed, and once every recompute that read or wrote it has ended.
//  - A copy to host of a storage a recompute regenerated starts once that
//    recompute has ended (the data exists only then).
// Note [Recompute timing] in sim/simulator.cc has the rest of a recompute.
//
// Thread-safety: plain values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "hyperoffload/ir/ids.h"

namespace hyperoffload {

struct StorageTiming {
  double d2h_end_ms = 0.0;  // completion of its last effective copy to host
  double h2d_end_ms = 0.0;  // completion of its last copy to device (not faults)

  // When a copy to device (or a fault) may start, its buffer allocated at `at_ms`.
  double to_device_start_ms(double at_ms) const { return std::max(at_ms, d2h_end_ms); }
  // When an op or recompute may start using it, as far as this storage goes.
  double ready_ms() const { return h2d_end_ms; }
  // When a release issued at `issue_ms` frees its memory (without recomputes).
  double free_ms(double issue_ms) const { return std::max({issue_ms, d2h_end_ms, h2d_end_ms}); }
};

// What recomputes hold, per storage: empty (and free of cost) until the first
// recompute, so schedules without recompute pay nothing.
class RecomputeHolds {
 public:
  // A recompute ending at `end_ms` read (written = false) or wrote the storage.
  void hold(StorageIndex storage, std::size_t storage_count, double end_ms, bool written) {
    if (holds_.empty()) holds_.resize(storage_count);
    Hold& h = holds_[static_cast<std::size_t>(storage)];
    h.used_until_ms = std::max(h.used_until_ms, end_ms);
    if (written) h.written_ms = std::max(h.written_ms, end_ms);
  }
  // When a release issued at `issue_ms` frees the storage's memory.
  double free_ms(StorageIndex storage, const StorageTiming& timing, double issue_ms) const {
    const double copies_ms = timing.free_ms(issue_ms);
    return holds_.empty() ? copies_ms : std::max(copies_ms, holds_[static_cast<std::size_t>(storage)].used_until_ms);
  }
  // When a copy to host issued at `issue_ms` may start.
  double to_host_start_ms(StorageIndex storage, double issue_ms) const {
    return holds_.empty() ? issue_ms : std::max(issue_ms, holds_[static_cast<std::size_t>(storage)].written_ms);
  }

 private:
  struct Hold {
    double used_until_ms = 0.0;  // end of the last recompute reading or writing it
    double written_ms = 0.0;     // end of the last recompute writing it
  };
  std::vector<Hold> holds_;
};

}  // namespace hyperoffload
