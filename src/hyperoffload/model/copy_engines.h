// Copy-engine timing: FIFO queues that run copies in the order they are
// issued, each copy taking size / bandwidth (the trace's GiB/s). With
// CopyEngines::kTwo the copies to host and to device have a queue each and run
// concurrently; with kOne both directions share one queue in program order.
// The simulator and the planners' stall estimate time copies with it.
//
//   CopyEngineClock engines(CopyEngines::kTwo);
//   CopyWindow d2h = engines.run(CopyDirection::kToHost, /*ready_ms=*/1.0, /*duration_ms=*/4.0);  // 1-5
//   CopyWindow h2d = engines.run(CopyDirection::kToDevice, 2.0, 1.0);                            // 2-3
//
// Thread-safety: a plain value; not shared.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/model/device.h"

namespace hyperoffload {

enum class CopyDirection : std::uint8_t { kToHost, kToDevice };

struct CopyWindow {
  double start_ms = 0.0;
  double end_ms = 0.0;
};

class CopyEngineClock {
 public:
  explicit CopyEngineClock(CopyEngines engines = CopyEngines::kTwo) : engines_(engines) {}

  // Runs a copy of `duration_ms` (>= 0) that may start at `ready_ms`: it starts
  // once its queue has finished every copy issued before it.
  CopyWindow run(CopyDirection direction, double ready_ms, double duration_ms) {
    double& free_ms = free_ms_[queue(direction)];
    const double start_ms = ready_ms > free_ms ? ready_ms : free_ms;
    free_ms = start_ms + duration_ms;
    if (free_ms > last_end_ms_) last_end_ms_ = free_ms;
    return {start_ms, free_ms};
  }

  // When the queue of `direction` has run every copy issued so far.
  double free_ms(CopyDirection direction) const { return free_ms_[queue(direction)]; }
  // When every copy issued so far has ended (0 before any).
  double last_end_ms() const { return last_end_ms_; }

  // The timeline lane of a direction's queue: kCopy0 for copies to host (and
  // for both directions with one engine), kCopy1 for copies to device.
  Lane lane(CopyDirection direction) const {
    return queue(direction) == 0 ? Lane::kCopy0 : Lane::kCopy1;
  }
  CopyEngines engines() const { return engines_; }

 private:
  std::size_t queue(CopyDirection direction) const {
    return engines_ == CopyEngines::kOne || direction == CopyDirection::kToHost ? 0 : 1;
  }

  CopyEngines engines_;
  double free_ms_[2] = {0.0, 0.0};
  double last_end_ms_ = 0.0;
};

}  // namespace hyperoffload
