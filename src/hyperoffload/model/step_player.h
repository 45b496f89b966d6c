// StepPlayer: a schedule played in time, as an observer of the one schedule
// walk (schedule_walk.h). The walk says what happens; the player says when,
// with the execution model's clocks and timing rules (step_clock.h): the host
// issues an op's pre actions when the previous op ends and its post actions
// when it ends, in program order; an allocation on a capped device holds the
// host up; an op starts once the stream is free, its allocation fits, its
// faults are done and the copies back of the storages it accesses have
// completed; a recompute runs on the stream once its inputs are ready.
//
// The simulator (sim/) and the planners' stall estimate (plan/common/) are
// both this player — the simulator with a Recorder that keeps the spans and
// the memory curve, the estimate with RecordNothing — so their stalls are the
// same by construction, not by test. The rules themselves are in the
// simulator's header (sim/simulator.h) and docs/SIMULATOR.md.
//
// A Recorder has:
//   void span(SpanKind, Lane, OpIndex, StorageIndex (-1: none), std::int64_t bytes, double start_ms, double end_ms);
//   void memory(MemoryStream, double time_ms, std::int64_t delta_bytes);   // in program order per stream
//   void next_event();   // an op or an action begins (orders memory events at equal times)
//
// Thread-safety: not shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/schedule_walk.h"
#include "hyperoffload/model/step_clock.h"

namespace hyperoffload {

// Where a change of allocated device bytes comes from: the host's compute
// stream (first accesses, faults, undelayed frees, capped reservations), a
// copy to device starting on its engine (unlimited device), or a free delayed
// by a copy. Each stream's events come in time order but the delayed frees'.
enum class MemoryStream : std::uint8_t { kCompute, kCopy, kDelayed };

// The Recorder of a player that only times the step.
struct RecordNothing {
  void span(SpanKind, Lane, OpIndex, StorageIndex, std::int64_t, double, double) {}
  void memory(MemoryStream, double, std::int64_t) {}
  void next_event() {}
};

// What a played step adds up to. Times in ms.
struct StepTotals {
  double compute_ms = 0.0;       // sum of op durations
  double stall_ms = 0.0;         // the compute stream's waiting, faults and memory waits included
  double fault_ms = 0.0;         // time the compute stream spent in faults
  double memory_stall_ms = 0.0;  // waiting for memory (capped device)
  double recompute_ms = 0.0;     // compute-stream time re-running ops (not stall)
  std::int64_t recompute_count = 0;
  std::int64_t d2h_bytes = 0;
  std::int64_t h2d_bytes = 0;  // includes faults
  std::int64_t d2h_count = 0;
  std::int64_t h2d_count = 0;  // excludes faults
};

template <class Recorder>
class StepPlayer : public WalkObserver<StepPlayer<Recorder>, StorageTiming> {
 public:
  using Storage = StorageRef<StorageTiming>;

  // memory_cap_bytes: the budget of a device that holds only the budget;
  // nullopt for unlimited memory. `trace` and `recorder` outlive the player.
  StepPlayer(const Trace& trace, CopyEngines engines, std::optional<std::int64_t> memory_cap_bytes,
             Recorder& recorder)
      : trace_(trace), clock_(engines, memory_cap_bytes, trace.storage_count()), recorder_(recorder) {}

  const StepTotals& totals() const { return totals_; }
  // When the last op, recompute or copy ends.
  double makespan_ms() const { return std::max(clock_.stream_free_ms(), clock_.copies_end_ms()); }

  // ---- Walk hooks ----------------------------------------------------------------------
  // Note [Host and stream clocks]: the host issues op i's pre actions when op
  // i-1 ends and its post actions when op i ends, in program order; an
  // allocation with a memory cap can hold the host up (Note [Memory cap] in
  // capped_memory.h), and the actions after it are issued later. The compute
  // stream is free when its last op or recompute ends: a recompute issued in
  // op i-1's post phase can still run while op i's pre actions are issued.
  void begin_op(OpIndex) { host_ms_ = std::max(host_ms_, op_end_ms_); }

  void access(OpIndex, const Access&, StorageIndex s, Storage state, AccessOutcome outcome) {
    switch (outcome) {
      case AccessOutcome::kResident: break;
      case AccessOutcome::kFirstAccess:
      case AccessOutcome::kDataLoss:
        // Data loss (the validator reports it) takes the storage as a first
        // access does, with nothing to copy.
        first_access_bytes_ += state.size_bytes;
        break;
      case AccessOutcome::kFault:
        faults_.push_back({s, &state.data, state.size_bytes});
        fault_bytes_ += state.size_bytes;
        break;
    }
    inputs_ready_ms_ = std::max(inputs_ready_ms_, state.data.ready_ms());
  }

  // Runs the op whose pre actions the host has issued by host_ms_, once the
  // compute stream is free.
  void run_op(OpIndex op) {
    recorder_.next_event();
    const double ready_ms = clock_.stream_free_ms();
    double cursor_ms = wait_for_host(op, host_ms_);
    if (clock_.capped()) {
      // Everything this op allocates must fit before its faults and its start.
      const double fits_ms = clock_.allocate(cursor_ms, first_access_bytes_ + fault_bytes_);
      if (fits_ms > cursor_ms) recorder_.span(SpanKind::kStall, Lane::kCompute, op, -1, 0, cursor_ms, fits_ms);
      totals_.memory_stall_ms += fits_ms - cursor_ms;
      cursor_ms = fits_ms;
    }
    for (const Fault& fault : faults_) {
      // A synchronous demand page on the compute stream, after its D2H.
      const double start_ms = fault.timing->to_device_start_ms(cursor_ms);
      const double end_ms = start_ms + trace_.h2d_ms(fault.size_bytes);
      if (start_ms > cursor_ms) recorder_.span(SpanKind::kStall, Lane::kCompute, op, -1, 0, cursor_ms, start_ms);
      recorder_.span(SpanKind::kFault, Lane::kCompute, op, fault.storage, fault.size_bytes, start_ms, end_ms);
      recorder_.memory(MemoryStream::kCompute, start_ms, fault.size_bytes);
      totals_.fault_ms += end_ms - start_ms;
      totals_.h2d_bytes += fault.size_bytes;
      cursor_ms = end_ms;
    }
    const double start_ms = std::max(cursor_ms, inputs_ready_ms_);
    if (start_ms > cursor_ms) recorder_.span(SpanKind::kStall, Lane::kCompute, op, -1, 0, cursor_ms, start_ms);
    recorder_.memory(MemoryStream::kCompute, start_ms, first_access_bytes_);

    const double duration_ms = trace_.op_duration_ms(op);
    const double end_ms = start_ms + duration_ms;
    recorder_.span(SpanKind::kOp, Lane::kCompute, op, -1, 0, start_ms, end_ms);
    totals_.compute_ms += duration_ms;
    totals_.stall_ms += start_ms - ready_ms;
    op_end_ms_ = end_ms;
    clock_.compute_ends(end_ms);
    host_ms_ = op_end_ms_;
    first_access_bytes_ = 0;
    fault_bytes_ = 0;
    faults_.clear();
    inputs_ready_ms_ = 0.0;
  }

  void copy_to_host(const ResolvedAction& resolved, Storage state, CopyOutcome outcome) {
    recorder_.next_event();
    if (outcome != CopyOutcome::kCopies) return;  // a no-op, or an error with no copy
    const std::int64_t size = state.size_bytes;
    const CopyWindow copy = clock_.copy_to_host(resolved.storage, state.data, host_ms_, trace_.d2h_ms(size));
    totals_.d2h_bytes += size;
    ++totals_.d2h_count;
    recorder_.span(SpanKind::kCopyD2H, clock_.lane(CopyDirection::kToHost), resolved.action().op, resolved.storage,
                   size, copy.start_ms, copy.end_ms);
  }

  void copy_to_device(const ResolvedAction& resolved, Storage state, CopyOutcome outcome) {
    recorder_.next_event();
    if (outcome != CopyOutcome::kCopies) return;  // a no-op, or an error with no copy
    const std::int64_t size = state.size_bytes;
    const StepClock::ToDevice copy = clock_.copy_to_device(state.data, host_ms_, size, trace_.h2d_ms(size));
    // Memory is taken when the copy starts, or with a cap when it is reserved.
    if (clock_.capped()) {
      recorder_.memory(MemoryStream::kCompute, copy.host_ms, size);
    } else {
      recorder_.memory(MemoryStream::kCopy, copy.copy.start_ms, size);
    }
    totals_.h2d_bytes += size;
    ++totals_.h2d_count;
    recorder_.span(SpanKind::kCopyH2D, clock_.lane(CopyDirection::kToDevice), resolved.action().op, resolved.storage,
                   size, copy.copy.start_ms, copy.copy.end_ms);
    host_ms_ = copy.host_ms;
  }

  void release_device(const ResolvedAction& resolved, Storage state, bool released) {
    recorder_.next_event();
    if (!released) return;
    const double free_ms = clock_.release(resolved.storage, state.data, host_ms_, state.size_bytes);
    recorder_.memory(free_ms > host_ms_ ? MemoryStream::kDelayed : MemoryStream::kCompute, free_ms,
                     -state.size_bytes);
  }

  void release_host(const ResolvedAction&, Storage, bool) { recorder_.next_event(); }

  void recompute_input(const ResolvedAction&, const RecomputeAccess&, Storage state, RecomputeInput) {
    inputs_ready_ms_ = std::max(inputs_ready_ms_, state.data.ready_ms());
  }

  // Note [Recompute timing]: a recompute of op k is issued by the host like
  // any action of its phase. Its regenerated outputs are allocated when it is
  // issued (with a cap the host waits for room, as for a prefetch). It runs
  // on the compute stream for its unit's duration (op k's, for an op that is
  // no follower: ir/recompute_unit.h) once the stream is free and
  // every in-flight H2D of its inputs has completed; the wait is stall, its
  // run time is recompute time. The actions after it are issued at once, but
  // a release of one of its inputs or outputs frees memory, and a copy to
  // host of one of its outputs starts, no earlier than its end
  // (storage_timing.h, RecomputeHolds).
  void recompute(const ResolvedAction& resolved, const RecomputeAccesses& accesses, std::int64_t regenerated_bytes) {
    recorder_.next_event();
    const Action& action = resolved.action();
    const OpIndex source = action.source_op;
    const double ready_ms = clock_.stream_free_ms();
    const StepClock::Recompute run =
        clock_.recompute(accesses, host_ms_, regenerated_bytes, inputs_ready_ms_, unit_duration_ms(trace_, source));
    inputs_ready_ms_ = 0.0;
    recorder_.memory(MemoryStream::kCompute, run.host_ms, regenerated_bytes);
    // The stream's wait, split as for an op: for the host (memory), then for
    // the inputs' copies.
    const double host_wait_end_ms = std::max(ready_ms, run.host_ms);
    if (run.host_ms > ready_ms) {
      recorder_.span(SpanKind::kStall, Lane::kCompute, action.op, -1, 0, ready_ms, run.host_ms);
      totals_.memory_stall_ms += run.host_ms - ready_ms;
    }
    if (run.start_ms > host_wait_end_ms) {
      recorder_.span(SpanKind::kStall, Lane::kCompute, action.op, -1, 0, host_wait_end_ms, run.start_ms);
    }
    recorder_.span(SpanKind::kRecompute, Lane::kCompute, source, -1, regenerated_bytes, run.start_ms, run.end_ms);
    totals_.stall_ms += run.start_ms - ready_ms;
    totals_.recompute_ms += run.end_ms - run.start_ms;
    ++totals_.recompute_count;
    host_ms_ = run.host_ms;
  }

 private:
  // The compute stream's wait before an op whose actions the host has issued
  // by `host_ms`: from when the stream is free to the host (waiting for
  // memory). Returns when the stream can go on.
  double wait_for_host(OpIndex op, double host_ms) {
    const double free_ms = clock_.stream_free_ms();
    if (host_ms <= free_ms) return free_ms;
    recorder_.span(SpanKind::kStall, Lane::kCompute, op, -1, 0, free_ms, host_ms);
    totals_.memory_stall_ms += host_ms - free_ms;
    return host_ms;
  }

  const Trace& trace_;
  StepClock clock_;
  Recorder& recorder_;
  StepTotals totals_;
  double host_ms_ = 0.0;    // when the host has issued everything so far
  double op_end_ms_ = 0.0;  // when the last op ended
  // Of the current op (or recompute): what it allocates, faults and waits for.
  std::int64_t first_access_bytes_ = 0;
  std::int64_t fault_bytes_ = 0;
  struct Fault {
    StorageIndex storage;
    const StorageTiming* timing;  // into the walk's storages, which do not move
    std::int64_t size_bytes;
  };
  std::vector<Fault> faults_;
  double inputs_ready_ms_ = 0.0;
};

}  // namespace hyperoffload
