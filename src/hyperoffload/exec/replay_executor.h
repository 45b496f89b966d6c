// ReplayExecutor: runs a step from the plan made after the warmup.
//
// For each op it checks the op against the replay guide, runs the schedule's
// pre actions, readies the inputs (residency_manager.h: waits for prefetches,
// demand-pages what was not prefetched), lets the op run, binds its outputs to
// the traced storages they stand for, then runs the post actions — so a post
// action can offload an output of its own op.
//
// Storage ids. The caller picks fresh ids every step; the schedule speaks of the
// traced step's ids. The i-th output of op k is bound to the guide's i-th
// output of op k, and from then on the caller's id and the traced id name the
// same storage. Actions on a storage the caller has already freed are skipped
// (nobody can read it again); releases of a storage not produced yet are
// no-ops and copies of one are errors, as in the validator.
//
// Recompute. A `recompute` action re-runs a traced op through the framework's
// RecomputeFn (exec/recompute.h), which the plan then needs: start() fails
// without one. A storage the caller frees while a later recompute still reads
// it is kept by the runtime (under an internal id, its memory following the
// plan's actions) until that recompute has run, then forgotten. Recompute time
// is measured with events around each call (StepStats::recompute_ms).
//
// Divergence. A step that does not match the trace fails with kDiverged naming
// the op index and both op names: an op name differs, the step runs more ops
// than traced or ends early, an op's inputs, output count, output sizes or
// mutated inputs differ. Dynamic regions belong in skip_offload (one opaque op).
//
// Held bytes. The step keeps the trace's memory limit (the warmup's budget) in
// time, as the capped simulation of the plan does (runtime/residency_manager.h,
// Note [Held bytes]): a prefetch's buffer is allocated when its copy_h2d runs,
// a fault's when the op readies its inputs, a recompute's regenerated outputs
// are reserved before the framework re-runs the op, and an op's outputs —
// sizes known from the trace — are reserved before it runs (the framework
// allocates them inside the op); each waits, when the budget is full, for the
// copies whose buffers are still held (oldest first). StepStats::peak_held_bytes
// and memory_wait_ms say what it held and how long it waited.
//
// With RecordTimeline::kYes it records a Timeline in the simulator's schema
// (ir/timeline.h): op spans on the compute lane, stalls and faults there too,
// copies on the copy lanes (D2H on kCopy0; H2D on kCopy1 with two copy
// engines), held-bytes samples at every change (the capped simulation's
// allocated bytes). Times are milliseconds since the step began: event times
// for spans, host time for memory samples.
//
// Thread-safety: one thread drives it (see StepHooks).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/internal/op_allocations.h"
#include "hyperoffload/exec/recompute.h"
#include "hyperoffload/exec/replay_guide.h"
#include "hyperoffload/exec/step_stats.h"
#include "hyperoffload/exec/trace_matcher.h"
#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload {

// A trace, its guide and a schedule for it, checked and indexed once; shared by
// every replayed step. Immutable.
class ReplayPlan {
 public:
  // Fails when the schedule is out of execution order, names an op out of range
  // or a storage the trace does not declare, or the trace is not replayable;
  // a schedule with recompute actions must also be valid for the trace
  // (check/validator.h), since the runtime cannot regenerate what a stale
  // recompute would.
  static Result<std::shared_ptr<const ReplayPlan>> create(Trace trace, Schedule schedule);

  const Trace& trace() const { return trace_; }
  const ReplayGuide& guide() const { return guide_; }
  const Schedule& schedule() const { return schedule_; }
  std::span<const Action> pre(OpIndex op) const { return by_op_->pre(op); }
  std::span<const Action> post(OpIndex op) const { return by_op_->post(op); }
  // Dense storage index of an action (its position in schedule().actions).
  StorageIndex storage_of(const Action& action) const { return action_storage_[position_of(action)]; }
  std::size_t position_of(const Action& action) const {
    return static_cast<std::size_t>(&action - schedule_.actions.data());
  }

  // Recompute bookkeeping, by schedule position (-1: none).
  std::int64_t recompute_count() const { return recompute_count_; }
  // Whether a recompute action re-runs `op` (the framework must be able to).
  bool recomputed(OpIndex op) const { return last_recompute_of_[static_cast<std::size_t>(op)] >= 0; }
  // Position of the last recompute re-running `op`.
  std::int64_t last_recompute_of(OpIndex op) const { return last_recompute_of_[static_cast<std::size_t>(op)]; }
  // Position of the last recompute reading storage `s` (an input of its op).
  std::int64_t last_recompute_read(StorageIndex s) const {
    return last_recompute_read_[static_cast<std::size_t>(s)];
  }
  // The unit a recompute of `op` re-runs, head first (Note [In-place units]
  // in ir/trace.h): {op} for an op that is no follower. Precondition: a
  // recompute action names `op` as its source.
  std::span<const OpIndex> unit(OpIndex op) const { return units_.at(op).members; }
  // The tracked inputs of that unit: the members' guide inputs, op by op,
  // less a follower's reads of what the head makes. Same precondition.
  std::span<const StorageIndex> unit_inputs(OpIndex op) const { return units_.at(op).inputs; }
  // The same for any op, into `members` and `inputs` (reused).
  void unit_of(OpIndex op, std::vector<OpIndex>& members, std::vector<StorageIndex>& inputs) const;
  // The ops after its producer that write storage `s`, in trace order (empty
  // for a storage no in-place follower rewrites: then no unit regenerates a
  // later version of it).
  std::span<const OpIndex> rewriters(StorageIndex s) const {
    const auto it = rewriters_.find(s);
    return it == rewriters_.end() ? std::span<const OpIndex>{} : std::span<const OpIndex>(it->second);
  }
  // Bytes of the storages `op` produces (its outputs in the guide).
  std::int64_t output_bytes(OpIndex op) const { return output_bytes_[static_cast<std::size_t>(op)]; }
  // The op that produced storage `s` (its first writer).
  OpIndex producer(StorageIndex s) const { return producer_[static_cast<std::size_t>(s)]; }
  // Whether `op` is recomputable and reads no storage of the step (a cast of
  // a weight or of the attention mask, an embedding, a factory op): the
  // framework keeps a call of it for the whole step, so what it made can be
  // regenerated at any point of a step that leaves its plan (Note [Leaving a
  // plan] in exec/session.h), though the plan only released it after its
  // last traced use.
  bool sourced_outside(OpIndex op) const {
    return trace_.op_recomputable(op) && guide_.inputs(op).empty() && !guide_.outputs(op).empty();
  }

 private:
  ReplayPlan(Trace trace, ReplayGuide guide, Schedule schedule);
  Trace trace_;
  ReplayGuide guide_;
  Schedule schedule_;
  std::unique_ptr<ActionsByOp> by_op_;  // views schedule_.actions
  std::vector<StorageIndex> action_storage_;
  std::int64_t recompute_count_ = 0;
  std::vector<std::int64_t> last_recompute_of_;    // by op
  std::vector<std::int64_t> last_recompute_read_;  // by storage
  std::vector<std::int64_t> output_bytes_;         // by op
  std::vector<OpIndex> producer_;                  // by storage
  // Per recompute source: its unit and the unit's inputs.
  struct Unit {
    std::vector<OpIndex> members;
    std::vector<StorageIndex> inputs;
  };
  std::unordered_map<OpIndex, Unit> units_;
  std::unordered_map<StorageIndex, std::vector<OpIndex>> rewriters_;  // storages some follower rewrites
};

struct ReplayOptions {
  RecordTimeline record_timeline = RecordTimeline::kNo;
  // Re-runs ops for the plan's recompute actions; required when it has any.
  RecomputeFn recompute;
  // Continues a step another executor of the same step began (Session's plan
  // switch): the residency may already track the step's storages. An output
  // it already tracks is taken as it is (not bound or adopted again), a free
  // of a storage it no longer tracks is only recorded, the peak is not reset
  // and the step's stats count from the origin.
  std::optional<StepOrigin> continues;
};

struct ReplayResult {
  StepStats stats;
  Timeline timeline;  // only with RecordTimeline::kYes
};

class ReplayExecutor final : public StepHooks {
 public:
  // Starts the step. Precondition: `residency` tracks no storage; it and the
  // plan outlive the executor.
  static Result<std::unique_ptr<ReplayExecutor>> start(ResidencyManager& residency,
                                                       std::shared_ptr<const ReplayPlan> plan,
                                                       ReplayOptions options = {});
  ~ReplayExecutor() override;
  ReplayExecutor(const ReplayExecutor&) = delete;
  ReplayExecutor& operator=(const ReplayExecutor&) = delete;

  Status on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                     std::span<const StorageId> written) override;
  Result<void*> allocate_output(StorageId id, std::int64_t size_bytes) override;
  Status on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) override;
  Status mark_recomputable(Recomputable how = Recomputable::kYes) override;
  Status on_storage_freed(StorageId id) override;
  Result<void*> device_ptr(StorageId id, DeviceAccess access = DeviceAccess::kReadWrite) override;

  // Ends the step: brings the storages the caller still holds back to the
  // device, then fails with kDiverged when the step ran fewer ops than traced.
  Result<ReplayResult> finish();

  // Whether the plan re-runs the current op (between on_op_begin and
  // on_op_end) later in this step: a framework that must record what it needs
  // to re-run an op (PyTorch records the call) does it now.
  bool recomputes_current_op() const { return in_op_ && plan_->recomputed(op_); }
  // Whether the framework should keep a call of the current op: the plan
  // re-runs it, or it is sourced outside the step (ReplayPlan::sourced_outside).
  bool wants_current_call() const {
    return in_op_ && (plan_->recomputed(op_) || plan_->sourced_outside(op_));
  }
  // Between the current op's on_op_begin and its on_op_end.
  bool in_op() const { return in_op_; }
  // Index in the traced step of the current op (or of the next one between ops).
  OpIndex current_op() const { return op_; }
  // Nothing irreversible ran yet: no schedule action (so nothing was offloaded,
  // released or recomputed) and no freed storage was kept for a recompute. The
  // residency then holds exactly the step's storages, all resident, and the
  // session may hand the step to another executor (exec/session.h).
  bool reversible() const { return !committed_; }
  // While catching up (the session re-feeds the hooks of a step whose outputs
  // are already bound): no room is reserved for an op's outputs.
  void set_catching_up(bool catching_up) { catching_up_ = catching_up; }
  StepOrigin origin() const { return StepOrigin{start_stats_, start_time_}; }

  // ---- After the step left this plan (Note [Leaving a plan] in exec/session.h) ----
  // Gives the residency's step settings (held budget, copy recording) up to
  // the executor that continues the step; the destructor then leaves them be.
  void hand_over();
  // The storages the caller still holds whose data the plan dropped (tracked,
  // not resident, no current host copy), in traced order.
  std::vector<StorageId> dropped_storages() const;
  using MakeRoom = std::function<Status(std::int64_t bytes, std::span<const StorageId> keep)>;
  struct Refusal {
    StorageId id;     // a dropped storage left dropped
    std::string why;  // names the storage, the op and the reason
  };
  // Brings every dropped storage back by re-running, through the RecomputeFn,
  // the traced op that produced it, after bringing that op's inputs back the
  // same way or paging them in from their host copies (recursively; inputs
  // come before the ops that read them; each op re-run at most once per
  // storage it brings back). Calls `make_room(bytes, keep)` before each
  // page-in and re-run with the bytes it brings back (a re-run's outputs and
  // the inputs it pages in) and the inputs already resident that must stay
  // so (the budget then holds through the re-run), and appends each storage it made
  // resident to `made_resident` (the caller takes them before the next
  // make_room). A storage with something on the way that cannot be
  // regenerated exactly is refused before anything is re-run for it: written
  // in place since its op made it, an input of its op freed by the step, or no
  // call of its op held by the framework (the plan never re-runs it, or its
  // last re-run has passed). Then forgets the storages kept for recomputes
  // (the plan runs none any more). Fails on runtime errors only.
  Result<std::vector<Refusal>> regenerate_dropped(std::vector<StorageId>& made_resident,
                                                  const MakeRoom& make_room);

 private:
  ReplayExecutor(ResidencyManager& residency, std::shared_ptr<const ReplayPlan> plan, ReplayOptions options);

  static constexpr StorageId kUnbound = -1;
  static constexpr StorageId kFreed = -2;
  // A storage the caller freed that a later recompute reads is kept under
  // held_id(traced index), below every caller id and both markers above.
  static StorageId held_id(StorageIndex traced) { return -3 - static_cast<StorageId>(traced); }
  static bool held(StorageId id) { return id <= -3; }

  std::string op_label() const;
  // kDiverged with advice that fits what differed; kInvalidArgument for a
  // storage the step does not hold.
  Error diverged(Mismatch mismatch) const;
  Result<StorageIndex> traced_index(StorageId caller_id, std::string_view role) const;
  Status run_actions(std::span<const Action> actions);
  Status run_recompute(const Action& action);
  // Re-runs traced op `source`'s unit through the RecomputeFn, for the
  // plan's recompute action at schedule position `position`, or for position
  // -1 a regeneration (Note [Leaving a plan]). Regenerates each output of the unit's
  // head that is tracked, released and unwritten since but by the unit;
  // appends those to `regenerated` when given. Its tracked inputs must be
  // resident.
  Status rerun(OpIndex source, std::int64_t position, const std::function<std::string()>& context,
               std::vector<StorageId>* regenerated);
  // The op whose re-run regenerates traced storage `t` at the version it
  // holds now (dropped): its producer when nothing wrote it since, the
  // follower that made that version when its unit wrote every version since
  // (Note [In-place units] in ir/trace.h), else -1.
  OpIndex regeneration_source(StorageIndex t) const;
  // Empty, or why traced storage `t` (dropped) cannot be regenerated now.
  std::string why_not_regenerable(StorageIndex t) const;
  std::string storage_label(StorageIndex t) const;
  Status collect_spans(OpIndex op);
  void sample_memory();
  bool recording() const { return options_.record_timeline == RecordTimeline::kYes; }

  ResidencyManager& residency_;
  std::shared_ptr<const ReplayPlan> plan_;
  ReplayOptions options_;
  ResidencyStats start_stats_;
  std::chrono::steady_clock::time_point start_time_;

  std::vector<StorageId> caller_of_;                       // by traced index: caller id, kUnbound or kFreed
  TraceMatcher matcher_;  // binds caller ids to traced indices (live storages)

  OpIndex op_ = 0;
  bool in_op_ = false;
  bool committed_ = false;    // see reversible()
  bool catching_up_ = false;  // see set_catching_up()
  bool owns_settings_ = true;  // the residency's step settings are this executor's (hand_over)
  std::int64_t actions_run_ = 0;  // schedule positions before this one have run
  internal::OpAllocations current_allocated_;  // outputs allocated for the current op
  std::vector<StorageIndex> scratch_;

  // Recomputes run so far (compute-stream fences around each call).
  struct RecomputeSpan {
    OpIndex op;      // the op whose action it was
    OpIndex source;  // the op re-run
    std::int64_t bytes;
    Fence start;
    Fence end;
  };
  std::vector<RecomputeSpan> recompute_spans_;
  RecomputeCall call_;

  // Timeline recording.
  Fence step_start_;
  struct OpSpan {
    OpIndex op;
    Fence start;
    Fence end;
  };
  std::vector<OpSpan> op_spans_;
  std::vector<std::pair<OpIndex, TimedSpan>> copy_spans_;
  Timeline timeline_;
  std::int64_t last_sampled_bytes_ = -1;
};

}  // namespace hyperoffload
