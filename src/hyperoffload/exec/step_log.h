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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/exec/hooks.h"

namespace hyperoffload {

// One hook call. Its names and ids live in the log's flat buffers (so a step
// logs without an allocation per call once the buffers have grown, as they
// have after the first step): read them through the log (StepLog::name, ids,
// written, outputs).
struct StepEvent {
  enum class Kind : std::uint8_t { kOpBegin, kAllocate, kRecomputable, kOpEnd, kFreed };
  Kind kind = Kind::kOpBegin;
  Recomputable how = Recomputable::kNo;  // kRecomputable
  std::uint32_t name_at = 0;             // kOpBegin: the name in the log's name buffer
  std::uint32_t name_size = 0;
  std::uint32_t ids_at = 0;      // kOpBegin: inputs; kOpEnd: mutated (in the log's id buffer)
  std::uint32_t ids_size = 0;
  std::uint32_t written_at = 0;  // kOpBegin: written (id buffer); kOpEnd: outputs (output buffer)
  std::uint32_t written_size = 0;
  StorageId id = 0;               // kAllocate, kFreed
  std::int64_t size_bytes = 0;    // kAllocate
};

class StepLog {
 public:
  void clear();
  bool empty() const { return events_.empty(); }
  const std::vector<StepEvent>& events() const { return events_; }

  std::string_view name(const StepEvent& event) const;
  std::span<const StorageId> ids(const StepEvent& event) const;
  std::span<const StorageId> written(const StepEvent& event) const;
  std::span<const OpOutput> outputs(const StepEvent& event) const;

  void op_begin(std::string_view name, std::span<const StorageId> inputs, std::span<const StorageId> written);
  void allocate(StorageId id, std::int64_t size_bytes);
  void recomputable(Recomputable how);
  // Outputs are logged without their release callbacks (never adopted again).
  void op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated);
  void freed(StorageId id);
  // Keeps the first `count` events (and what they use of the buffers).
  void truncate(std::size_t count);

  // Ops begun so far (the last may still be running).
  OpIndex ops_begun() const;

  // Re-feeds the first `count` events into `hooks` (an executor continuing the
  // step). Stops at the first error.
  Status replay_into(StepHooks& hooks, std::size_t count) const;

 private:
  std::uint32_t append_ids(std::span<const StorageId> ids);

  std::vector<StepEvent> events_;
  std::string names_;
  std::vector<StorageId> ids_;
  std::vector<OpOutput> outputs_;
};

}  // namespace hyperoffload
