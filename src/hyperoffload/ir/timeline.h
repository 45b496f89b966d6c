// Timeline: what happened when during one step — op executions, copies and the
// device-memory curve. The event simulator (sim/) and the runtime executors
// (exec/) both produce this one schema, so a simulated step and a measured step
// can be compared and drawn by the same tools (io/timeline_json.h writes the
// Chrome trace-event format that Perfetto opens).
#pragma once

#include <cstdint>
#include <vector>

#include "hyperoffload/ir/ids.h"

namespace hyperoffload {

enum class SpanKind : std::uint8_t {
  kOp,       // an op running on the compute stream
  kStall,    // the compute stream waiting for a copy
  kFault,    // a synchronous demand page (H2D) on the compute stream
  kCopyD2H,  // a device→host copy on a copy engine
  kCopyH2D,  // a host→device copy on a copy engine
};

// Which lane a span is drawn on. With one copy engine both directions use kCopy0.
enum class Lane : std::uint8_t { kCompute, kCopy0, kCopy1 };

struct TimelineSpan {
  SpanKind kind = SpanKind::kOp;
  Lane lane = Lane::kCompute;
  OpIndex op = -1;          // the op run, waited for, or whose action issued the copy
  StorageId storage = -1;   // the storage copied or faulted; -1 for ops and stalls
  std::int64_t bytes = 0;   // bytes copied; 0 for ops
  double start_ms = 0.0;
  double end_ms = 0.0;
};

// Device bytes allocated from `time_ms` until the next sample.
struct MemorySample {
  double time_ms = 0.0;
  std::int64_t device_bytes = 0;
};

struct Timeline {
  std::vector<TimelineSpan> spans;     // ordered by start time within each lane
  std::vector<MemorySample> memory;    // ordered by time; one sample per change
  std::int64_t budget_bytes = -1;      // drawn as a line when >= 0
};

}  // namespace hyperoffload
