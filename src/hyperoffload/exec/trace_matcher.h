// TraceMatcher: the one rule for "does this step match the traced step", op by
// op, used by the replay executor as a step runs and by the plan cache to test
// a step seen so far against a cached plan (matches_prefix) without running
// anything.
//
// The rule: op i of the step has traced op i's name, reads the storages traced
// op i read (each identified by the traced storage it was bound to when an
// earlier op of the step produced it), allocates no more outputs than traced
// op i produced, produces as many outputs of the same sizes, and writes the
// same inputs in place. A storage freed by the step is no longer bound, so a
// later read of it does not match.
//
// The matcher owns the binding from the caller's storage ids to traced storage
// indices; the caller owns the position (which op is running) and passes it,
// so a matcher has no notion of a half-run step of its own.
//
// Thread-safety: none; one matcher per step.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/replay_guide.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

// How a step differs from the traced one: other ops, or the same ops on tensors
// of other sizes (the cure differs: skip_offload against bucketing), or a
// storage the step does not hold (the caller's error rather than another
// program).
enum class Differs : std::uint8_t { kOps, kShapes, kUntracked };

struct Mismatch {
  Differs differs = Differs::kOps;
  std::string what;  // names the op and, where one is at fault, the storage
};

class TraceMatcher {
 public:
  // `trace` and `guide` must outlive the matcher.
  TraceMatcher(const Trace& trace, const ReplayGuide& guide);

  // Op `op` begins with `name`, reading `inputs`.
  std::optional<Mismatch> check_begin(OpIndex op, std::string_view name, std::span<const StorageId> inputs) const;
  // Op `op` allocates its output number `allocated` (0-based).
  std::optional<Mismatch> check_allocation(OpIndex op, std::size_t allocated) const;
  // Op `op` produced `outputs` (count and sizes).
  std::optional<Mismatch> check_outputs(OpIndex op, std::span<const OpOutput> outputs) const;
  // Op `op` wrote `mutated` in place.
  std::optional<Mismatch> check_mutated(OpIndex op, std::span<const StorageId> mutated) const;
  // The step has run `ops` ops and ended.
  std::optional<Mismatch> check_end(OpIndex ops) const;

  // Binds op `op`'s outputs (checked by check_outputs) to its traced outputs.
  void bind_outputs(OpIndex op, std::span<const OpOutput> outputs);
  // The step freed `id`; returns the traced storage it was bound to, if any.
  std::optional<StorageIndex> unbind(StorageId id);
  // The traced storage `id` is bound to, if any.
  std::optional<StorageIndex> traced(StorageId id) const;
  bool bound(StorageId id) const { return traced_of_.contains(id); }

 private:
  std::string op_label(OpIndex op) const;

  const Trace* trace_;
  const ReplayGuide* guide_;
  std::unordered_map<StorageId, StorageIndex> traced_of_;  // caller id → traced index (live storages)
};

class ReplayPlan;
class StepLog;

// Whether the logged step so far is a prefix of `plan`'s traced step under the
// rule above; with `complete`, also that the traced step has no more ops.
bool matches_prefix(const ReplayPlan& plan, const StepLog& log, bool complete = false);

// Whether two plans were traced from the same step program: same ops, names,
// storage sizes and accesses.
bool same_program(const ReplayPlan& a, const ReplayPlan& b);

}  // namespace hyperoffload
