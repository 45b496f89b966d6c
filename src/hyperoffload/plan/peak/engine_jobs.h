// Internal: sequencing copies on one FIFO copy engine over estimated times —
// which copy the engine should run next when several wait, by when each is
// needed (its deadline) and when it can start (its data there, room on the
// device). The peak planner orders its prefetches (peak_placement.h) and its
// copies to host (host_copies.h) with it. Times are the planner's estimated
// clock: op_start_ms() of a run without stalls.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/ids.h"

namespace hyperoffload::internal {

// One copy for a FIFO copy engine to run, over estimated times.
struct EngineJob {
  double available_ms;  // it can start: its data is there (and, for a prefetch, room on the device)
  double deadline_ms;   // when it is needed: the sequencing key
  std::int64_t tie;     // breaks deadline ties; unique per job (see tie_key)
  double duration_ms;
};

// A unique tie key from an op and an index: by op, then index.
inline std::int64_t tie_key(OpIndex op, std::int32_t index) {
  return (static_cast<std::int64_t>(op) << 32) | static_cast<std::int64_t>(static_cast<std::uint32_t>(index));
}

// How a sequence treats the soonest-needed job when it cannot start yet.
enum class EngineRule : std::uint8_t {
  // Wait for it: the order is the deadline order.
  kSoonestNeeded,
  // Run a job needed later in the idle time, if it can start now and finish
  // before the soonest-needed one can start.
  kFillIdleEngine,
  // Run the soonest-needed job that can start now, if any (the engine never
  // idles while a copy could run).
  kWorkConserving,
  // Never idle either, but run the job that can start now with the smallest
  // modified due date max(deadline, now + duration): the soonest needed of
  // those that can still finish in time, the shortest of those that cannot.
  // Where several copies are late, the soonest-needed rule bounds the latest
  // one's lateness but runs a long late copy ahead of short ones that could
  // still free memory in time; this lowers the total lateness instead.
  kLeastLateness,
};

// Sequences `jobs` on one engine (non-preemptive, soonest deadline first, with
// `rule` for jobs that cannot start yet; kLeastLateness by modified due date). Returns job indices in run order;
// `finish_ms`, when given, receives each job's estimated completion
// (max(engine free, available) + duration, in run order).
// O(jobs log jobs).
std::vector<std::size_t> sequence_jobs(std::span<const EngineJob> jobs, EngineRule rule,
                                       std::vector<double>* finish_ms = nullptr);

}  // namespace hyperoffload::internal
