// StepLog: the hook calls of a replayed step so far, kept while the replay has
// taken no irreversible action (ReplayExecutor::reversible), so the session can
// hand the step to another executor — a replay of another cached plan whose
// trace matches them, or a warmup — by re-feeding them (exec/session.h, Note
// [Plan per step program]).
// Whether a log matches a cached plan is TraceMatcher's rule
// (exec/trace_matcher.h, matches_prefix).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/replay_executor.h"

namespace hyperoffload {

struct StepEvent {
  enum class Kind : std::uint8_t { kOpBegin, kAllocate, kRecomputable, kOpEnd, kFreed };
  Kind kind = Kind::kOpBegin;
  std::string name;                 // kOpBegin
  std::vector<StorageId> ids;       // kOpBegin: inputs; kOpEnd: mutated
  std::vector<StorageId> written;   // kOpBegin
  std::vector<OpOutput> outputs;    // kOpEnd (no release callbacks: never adopted again)
  StorageId id = 0;                 // kAllocate, kFreed
  std::int64_t size_bytes = 0;      // kAllocate
  Recomputable how = Recomputable::kNo;  // kRecomputable
};

class StepLog {
 public:
  void clear() { events_.clear(); }
  bool empty() const { return events_.empty(); }
  const std::vector<StepEvent>& events() const { return events_; }

  void op_begin(std::string_view name, std::span<const StorageId> inputs, std::span<const StorageId> written);
  void allocate(StorageId id, std::int64_t size_bytes);
  void recomputable(Recomputable how);
  void op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated);
  void freed(StorageId id);
  void truncate(std::size_t count) { events_.resize(std::min(count, events_.size())); }

  // Ops begun so far (the last may still be running).
  OpIndex ops_begun() const;

  // Re-feeds the first `count` events into `hooks` (an executor continuing the
  // step). Stops at the first error.
  Status replay_into(StepHooks& hooks, std::size_t count) const;

 private:
  std::vector<StepEvent> events_;
};

}  // namespace hyperoffload
