// The residency rules of a schedule, in one place: which accesses are first
// accesses, faults or data loss, and which copies take effect. The validator
// (validator.h) reports with them and the simulator (sim/) times with them, so
// the two can never disagree about what happens, only the simulator adds when.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

// An action with its storage resolved to a dense index; `index` is its position
// in the schedule (for messages).
struct ResolvedAction {
  Action action;
  StorageIndex storage = 0;
  std::size_t index = 0;
};

// The actions a schedule executor runs, in the order it runs them: actions on
// unknown storages or ops out of range are dropped, the rest stably put in
// execution order. Each dropped action and the first ordering violation are
// passed to `problem` (which may be empty) as a sentence.
std::vector<ResolvedAction> resolve_actions(const Trace& trace, const Schedule& schedule,
                                            const std::function<void(std::string)>& problem);

}  // namespace hyperoffload
