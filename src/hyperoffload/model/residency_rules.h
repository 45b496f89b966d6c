// The residency rules of a schedule, in one place: which accesses are first
// accesses, faults or data loss, which copies take effect, and what a
// recompute needs and regenerates. The validator (check/validator.h) reports
// with them and the simulator (sim/) times with them, so the two can never
// disagree about what happens, only the simulator adds when.
//
// Versions. Each write makes a new version of its storage; a host copy holds
// the version it copied. Versions count writes in trace order, so the version
// an access sees depends on the trace alone: a recompute of op k must find
// every storage op k read at the version op k read, and regenerates every
// storage op k wrote at the version op k produced (docs/FORMATS.md,
// "Recompute"). AccessVersions records them as an executor walks the ops.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hyperoffload/ir/recompute_unit.h"
#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

// What a schedule executor knows about one storage.
struct ResidencyState {
  std::int32_t version = 0;        // number of writes so far
  std::int32_t host_version = -1;  // version held by the host copy
  bool seen = false;               // its first access happened
  bool resident = false;           // occupies device memory
  bool host_present = false;       // a host copy exists (maybe stale)

  bool host_current() const { return host_present && host_version == version; }
};

enum class AccessOutcome : std::uint8_t {
  kFirstAccess,  // becomes resident now
  kResident,     // nothing to do
  kFault,        // released, current host copy: a synchronous demand page
  kDataLoss,     // released without a current host copy: an error
};

inline AccessOutcome classify_access(const ResidencyState& state) {
  if (!state.seen) return AccessOutcome::kFirstAccess;
  if (state.resident) return AccessOutcome::kResident;
  return state.host_current() ? AccessOutcome::kFault : AccessOutcome::kDataLoss;
}

// Applies an access after classify_access: the storage is resident afterwards
// (after data loss too, so one loss is reported once), and a write makes a new
// version.
inline void apply_access(ResidencyState& state, AccessKind kind) {
  state.seen = true;
  state.resident = true;
  if (kind == AccessKind::kWrite) ++state.version;
}

enum class CopyOutcome : std::uint8_t {
  kNoOp,    // nothing to copy (already current / already resident)
  kCopies,  // the copy happens
  kError,   // the copy is impossible (not resident / no current host copy)
};

inline CopyOutcome classify_d2h(const ResidencyState& state) {
  if (state.host_current()) return CopyOutcome::kNoOp;
  return state.resident ? CopyOutcome::kCopies : CopyOutcome::kError;
}

inline CopyOutcome classify_h2d(const ResidencyState& state) {
  if (state.resident) return CopyOutcome::kNoOp;
  return state.host_current() ? CopyOutcome::kCopies : CopyOutcome::kError;
}

// The effects of the storage actions, for every executor: a copy to host that
// classify_d2h let happen leaves the host holding the current version; one to
// device that classify_h2d let happen (or a fault) makes the storage resident.
// The releases return whether there was a copy to drop (otherwise a no-op).
inline void apply_d2h(ResidencyState& state) {
  state.host_present = true;
  state.host_version = state.version;
}
inline void apply_h2d(ResidencyState& state) { state.resident = true; }
inline bool apply_release_device(ResidencyState& state) {
  if (!state.resident) return false;
  state.resident = false;
  return true;
}
inline bool apply_release_host(ResidencyState& state) {
  if (!state.host_present) return false;
  state.host_present = false;
  return true;
}

// ---- Recompute ------------------------------------------------------------------

// The version of its storage right after each access of the trace (a read:
// the version it read; a write: the version it made), by position in
// Trace::all_accesses(). An executor records each access as it applies it,
// O(accesses) in all; a recompute of op k then reads op k's entries. Disabled
// (no memory, record() a no-op) for schedules without recompute actions.
class AccessVersions {
 public:
  AccessVersions() = default;
  explicit AccessVersions(const Trace& trace) : versions_(trace.access_count(), -1), enabled_(true) {}

  bool enabled() const { return enabled_; }
  // `position`: trace.access_offset(op) + the access's index in accesses(op).
  void record(std::size_t position, std::int32_t version) {
    if (enabled_) versions_[position] = version;
  }
  std::int32_t at(std::size_t position) const { return versions_[position]; }

 private:
  std::vector<std::int32_t> versions_;
  bool enabled_ = false;
};

// One storage a recompute of op k reads (an input) or regenerates (an output),
// with the version its unit's member read or produced (Note [In-place units]
// in ir/trace.h: for an op that is no follower, the unit is op k alone).
struct RecomputeAccess {
  StorageIndex storage = 0;
  std::int32_t version = 0;
  OpIndex op = 0;          // the unit member whose access it is
  std::size_t access = 0;  // index in trace.accesses(op), for messages
};

struct RecomputeAccesses {
  std::vector<RecomputeAccess> inputs;   // distinct storages the unit reads (ir/recompute_unit.h)
  std::vector<RecomputeAccess> outputs;  // distinct storages it writes (each at its last write)
  std::vector<OpIndex> members;          // the unit, head first (scratch)
};

// Fills `out` (reused to avoid allocation) with the inputs and outputs of a
// re-run of op `source`'s unit. Precondition: the unit's members have run and
// their accesses were recorded in `versions`.
void recompute_accesses(const Trace& trace, const AccessVersions& versions, OpIndex source, RecomputeAccesses& out);

enum class RecomputeInput : std::uint8_t {
  kReady,    // resident at the version op k read
  kMissing,  // not resident: an error (a recompute does not demand-page)
  kStale,    // resident, but written since op k read it: an error
};

inline RecomputeInput classify_recompute_input(const ResidencyState& state, std::int32_t version_read) {
  if (!state.resident) return RecomputeInput::kMissing;
  return state.version == version_read ? RecomputeInput::kReady : RecomputeInput::kStale;
}

enum class RecomputeOutput : std::uint8_t {
  kRegenerates,  // released: allocated now, holding the version op k produced
  kResident,     // already resident at that version: nothing to do
  kStale,        // written since op k (a later version): an error, left alone
};

// Versions only grow and op k has run, so a version other than op k's is later.
inline RecomputeOutput classify_recompute_output(const ResidencyState& state, std::int32_t version_made) {
  if (state.version != version_made) return RecomputeOutput::kStale;
  return state.resident ? RecomputeOutput::kResident : RecomputeOutput::kRegenerates;
}

// Applies kRegenerates: resident again, at the version it already counts.
inline void apply_recompute_output(ResidencyState& state) { state.resident = true; }

// A recompute's effect on residency for an executor that does not report
// problems (the simulator, the planners' estimate): every output that
// classifies as kRegenerates becomes resident; returns their bytes, which the
// recompute allocates. `state_of(s)` gives storage s's ResidencyState&,
// `size_of(s)` its size in bytes.
template <class StateOf, class SizeOf>
std::int64_t regenerate_outputs(const RecomputeAccesses& accesses, StateOf&& state_of, SizeOf&& size_of) {
  std::int64_t bytes = 0;
  for (const RecomputeAccess& output : accesses.outputs) {
    ResidencyState& state = state_of(output.storage);
    if (classify_recompute_output(state, output.version) != RecomputeOutput::kRegenerates) continue;
    apply_recompute_output(state);
    bytes += size_of(output.storage);
  }
  return bytes;
}

// ---- Resolving a schedule ---------------------------------------------------------

// An action with its storage resolved to a dense index (-1 for a recompute);
// `index` is its position in the schedule (for messages). It points into the
// actions it was resolved from, which must outlive it: 16 bytes instead of a
// copy's 40, because every walk resolves the whole schedule afresh (2.9M
// actions on the 1M-op chain's peak plan: 117 MB of fresh pages became 47).
struct ResolvedAction {
  const Action* source = nullptr;
  StorageIndex storage = 0;
  std::uint32_t index = 0;
  const Action& action() const { return *source; }
};

// The actions a schedule executor runs, in the order it runs them. Dropped,
// each with a sentence passed to `problem` (which may be empty): actions on ops
// out of range, storage actions on unknown storages, and recomputes whose
// source_op is missing (-1), does not run before the action (source_op < op,
// or <= op for post) or is not recomputable. The rest are stably put in
// execution order; the first ordering violation is also passed to `problem`.
// The result points into `actions`, which must outlive it. A schedule of
// 2^32 actions or more (96 GiB of them) is one problem and resolves to none.
std::vector<ResolvedAction> resolve_actions(const Trace& trace, std::span<const Action> actions,
                                            const std::function<void(std::string)>& problem);
inline std::vector<ResolvedAction> resolve_actions(const Trace& trace, const Schedule& schedule,
                                                   const std::function<void(std::string)>& problem) {
  return resolve_actions(trace, std::span<const Action>(schedule.actions), problem);
}
// The resolved actions point into the schedule: not from a temporary one.
std::vector<ResolvedAction> resolve_actions(const Trace& trace, Schedule&& schedule,
                                            const std::function<void(std::string)>& problem) = delete;

}  // namespace hyperoffload
