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
// Divergence. A step that does not match the trace fails with kDiverged naming
// the op index and both op names: an op name differs, the step runs more ops
// than traced or ends early, an op's inputs, output count, output sizes or
// mutated inputs differ. Dynamic regions belong in skip_offload (one opaque op).
//
// With RecordTimeline::kYes it records a Timeline in the simulator's schema
// (ir/timeline.h): op spans on the compute lane, stalls and faults there too,
// copies on the copy lanes (D2H on kCopy0; H2D on kCopy1 with two copy
// engines), resident-bytes samples at every change. Times are milliseconds
// since the step began: event times for spans, host time for memory samples.
//
// Thread-safety: one thread drives it (see StepHooks).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/internal/op_allocations.h"
#include "hyperoffload/exec/replay_guide.h"
#include "hyperoffload/exec/step_stats.h"
#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/runtime/residency_manager.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {

// A trace, its guide and a schedule for it, checked and indexed once; shared by
// every replayed step. Immutable.
class ReplayPlan {
 public:
  // Fails when the schedule is out of execution order, names an op out of range
  // or a storage the trace does not declare, or the trace is not replayable.
  static Result<std::shared_ptr<const ReplayPlan>> create(Trace trace, Schedule schedule);

  const Trace& trace() const { return trace_; }
  const ReplayGuide& guide() const { return guide_; }
  const Schedule& schedule() const { return schedule_; }
  std::span<const Action> pre(OpIndex op) const { return by_op_->pre(op); }
  std::span<const Action> post(OpIndex op) const { return by_op_->post(op); }
  // Dense storage index of an action (its position in schedule().actions).
  StorageIndex storage_of(const Action& action) const {
    return action_storage_[static_cast<std::size_t>(&action - schedule_.actions.data())];
  }

 private:
  ReplayPlan(Trace trace, ReplayGuide guide, Schedule schedule);
  Trace trace_;
  ReplayGuide guide_;
  Schedule schedule_;
  std::unique_ptr<ActionsByOp> by_op_;  // views schedule_.actions
  std::vector<StorageIndex> action_storage_;
};

struct ReplayOptions {
  RecordTimeline record_timeline = RecordTimeline::kNo;
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
  Status mark_recomputable() override;
  Status on_storage_freed(StorageId id) override;
  Result<void*> device_ptr(StorageId id, DeviceAccess access = DeviceAccess::kReadWrite) override;

  // Ends the step: brings the storages the caller still holds back to the
  // device, then fails with kDiverged when the step ran fewer ops than traced.
  Result<ReplayResult> finish();

 private:
  ReplayExecutor(ResidencyManager& residency, std::shared_ptr<const ReplayPlan> plan, ReplayOptions options);

  static constexpr StorageId kUnbound = -1;
  static constexpr StorageId kFreed = -2;

  std::string op_label() const;
  Error diverged(std::string what) const;
  Result<StorageIndex> traced_index(StorageId caller_id, std::string_view role) const;
  Status run_actions(std::span<const Action> actions);
  Status collect_spans(OpIndex op);
  void sample_memory();
  bool recording() const { return options_.record_timeline == RecordTimeline::kYes; }

  ResidencyManager& residency_;
  std::shared_ptr<const ReplayPlan> plan_;
  ReplayOptions options_;
  ResidencyStats start_stats_;
  std::chrono::steady_clock::time_point start_time_;

  std::vector<StorageId> caller_of_;                       // by traced index: caller id, kUnbound or kFreed
  std::unordered_map<StorageId, StorageIndex> traced_of_;  // caller id → traced index (live storages)

  OpIndex op_ = 0;
  bool in_op_ = false;
  internal::OpAllocations current_allocated_;  // outputs allocated for the current op
  std::vector<StorageIndex> scratch_;

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
