#include "hyperoffload/sim/simulator.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/model/step_clock.h"

namespace hyperoffload {
namespace {

// Note [Residency state]: the simulator decides which copies are effective,
// which accesses fault and which are first accesses with the validator's rules
// (model/residency_rules.h), so the two never disagree about what happens, only
// the simulator adds when — with the execution model's clocks and timing rules
// (model/step_clock.h), which the planners' stall estimate shares. The property
// test in tests/sim/ holds the simulator and the validator together.
//
// The size and timing are kept here rather than read from the trace or the
// clock so that an access touches one cache line per storage: on large traces
// the simulator's time is mostly cache misses on storages accessed in random
// order.
struct StorageState {
  std::int64_t size_bytes = 0;
  StorageTiming timing;
  ResidencyState residency;
};

// One change of allocated device bytes. `seq` is the program-order position of
// the action or op that caused it, which breaks ties between equal times.
struct MemoryEvent {
  double time_ms = 0.0;
  std::uint64_t seq = 0;
  std::int64_t delta_bytes = 0;
};

bool event_before(const MemoryEvent& a, const MemoryEvent& b) {
  return a.time_ms < b.time_ms || (a.time_ms == b.time_ms && a.seq < b.seq);
}

class Simulation {
 public:
  Simulation(const Trace& trace, const SimulatorOptions& options)
      : trace_(trace),
        options_(options),
        record_(options.record_timeline == RecordTimeline::kYes),
        budget_bytes_(options.budget_bytes ? *options.budget_bytes : trace.memory_limit_bytes().value_or(-1)),
        clock_(options.copy_engines,
               options.device_memory == DeviceMemory::kBudget && budget_bytes_ >= 0
                   ? std::optional<std::int64_t>(budget_bytes_)
                   : std::nullopt,
               trace.storage_count()),
        states_(static_cast<std::size_t>(trace.storage_count())) {
    for (StorageIndex s = 0; s < trace.storage_count(); ++s) state_of(s).size_bytes = trace.storage(s).size_bytes;
  }

  SimulationResult run(const Schedule& schedule) {
    result_.copy_engines = options_.copy_engines;
    result_.budget_bytes = budget_bytes_;
    result_.device_memory = options_.device_memory;
    if (record_) result_.timeline.budget_bytes = result_.budget_bytes;

    const std::vector<ResolvedAction> actions = resolve_actions(trace_, schedule, {});
    if (std::any_of(actions.begin(), actions.end(),
                    [](const ResolvedAction& a) { return a.action.kind == ActionKind::kRecompute; })) {
      versions_ = AccessVersions(trace_);
    }
    compute_events_.reserve(trace_.access_count() / 2 + actions.size() / 2 + 16);
    if (record_) result_.timeline.spans.reserve(static_cast<std::size_t>(trace_.op_count()) + actions.size());

    // Note [Host and stream clocks]: the host issues op i's pre actions when op
    // i-1 ends and its post actions when op i ends, in program order; an
    // allocation with a memory cap can hold the host up (Note [Memory cap] in
    // model/capped_memory.h), and the actions after it are issued later. The
    // compute stream is free when its last op or recompute ends: a recompute
    // issued in op i-1's post phase can still run while op i's pre actions are
    // issued.
    double host_ms = 0.0;
    std::size_t next = 0;
    for (OpIndex op = 0; op < trace_.op_count(); ++op) {
      host_ms = std::max(host_ms, op_end_ms_);
      prefetch_action_states(actions, next);
      for (; next < actions.size() && actions[next].action.op == op && actions[next].action.phase == Phase::kPre;
           ++next) {
        host_ms = apply(actions[next], host_ms);
      }
      run_op(op, host_ms);
      host_ms = op_end_ms_;
      for (; next < actions.size() && actions[next].action.op == op; ++next) host_ms = apply(actions[next], host_ms);
    }
    result_.makespan_ms = std::max(clock_.stream_free_ms(), clock_.copies_end_ms());
    sweep_memory();
    return std::move(result_);
  }

 private:
  StorageState& state_of(StorageIndex s) { return states_[static_cast<std::size_t>(s)]; }

  void add_event(std::vector<MemoryEvent>& stream, double time_ms, std::int64_t delta_bytes) {
    if (delta_bytes != 0) stream.push_back({time_ms, seq_, delta_bytes});
  }

  void add_span(SpanKind kind, Lane lane, OpIndex op, StorageIndex storage, std::int64_t bytes, double start_ms,
                double end_ms) {
    if (!record_) return;
    result_.timeline.spans.push_back(
        {kind, lane, op, storage < 0 ? StorageId{-1} : trace_.storage(storage).id, bytes, start_ms, end_ms});
  }

  // Note [Prefetching storage states]: ops touch storages in effectively random
  // order, so on a large trace most accesses miss the cache on their
  // StorageState. The accesses are one flat array, so the states a few ops ahead
  // are known; touching them early overlaps those misses with this op's work.
  // The same holds for the actions, which run() prefetches a few ops ahead.
  static constexpr std::size_t kPrefetchDistance = 64;  // accesses or actions: a dozen ops ahead
  void prefetch_state(StorageIndex s) { __builtin_prefetch(&states_[static_cast<std::size_t>(s)], 1); }
  void prefetch_states(std::size_t from) {
    const std::span<const Access> all = trace_.all_accesses();
    const std::size_t end = std::min(all.size(), from + kPrefetchDistance);
    for (std::size_t i = std::max(from, accesses_prefetched_); i < end; ++i) prefetch_state(all[i].storage);
    accesses_prefetched_ = std::max(accesses_prefetched_, end);
  }
  void prefetch_action_states(std::span<const ResolvedAction> actions, std::size_t from) {
    const std::size_t end = std::min(actions.size(), from + kPrefetchDistance);
    for (std::size_t i = std::max(from, actions_prefetched_); i < end; ++i) {
      if (actions[i].storage >= 0) prefetch_state(actions[i].storage);
    }
    actions_prefetched_ = std::max(actions_prefetched_, end);
  }

  // The compute stream's wait before an op or recompute whose actions the host
  // has issued by `host_ms`: from when the stream is free to the host (waiting
  // for memory). Returns when the stream can go on.
  double wait_for_host(OpIndex op, double host_ms) {
    const double free_ms = clock_.stream_free_ms();
    if (host_ms <= free_ms) return free_ms;
    add_span(SpanKind::kStall, Lane::kCompute, op, -1, 0, free_ms, host_ms);
    result_.memory_stall_ms += host_ms - free_ms;
    return host_ms;
  }

  // Runs one op whose pre actions the host has issued by `host_ms`; it starts
  // once the compute stream is free. Sets op_end_ms_ and moves the stream.
  void run_op(OpIndex op, double host_ms) {
    ++seq_;
    const double ready_ms = clock_.stream_free_ms();
    double cursor_ms = wait_for_host(op, host_ms);
    std::int64_t first_access_bytes = 0;
    std::int64_t fault_bytes = 0;
    faults_.clear();
    prefetch_states(trace_.access_offset(op) + trace_.accesses(op).size());
    std::size_t position = trace_.access_offset(op);
    for (const Access& access : trace_.accesses(op)) {
      StorageState& state = state_of(access.storage);
      switch (classify_access(state.residency)) {
        case AccessOutcome::kResident: break;
        case AccessOutcome::kFirstAccess:
        case AccessOutcome::kDataLoss:
          // Data loss (the validator reports it) takes the storage as a first
          // access does, with nothing to copy.
          first_access_bytes += state.size_bytes;
          break;
        case AccessOutcome::kFault:
          faults_.push_back(access.storage);
          fault_bytes += state.size_bytes;
          break;
      }
      apply_access(state.residency, access.kind);
      versions_.record(position++, state.residency.version);
    }
    if (clock_.capped()) {
      // Everything this op allocates must fit before its faults and its start.
      const double fits_ms = clock_.allocate(cursor_ms, first_access_bytes + fault_bytes);
      if (fits_ms > cursor_ms) add_span(SpanKind::kStall, Lane::kCompute, op, -1, 0, cursor_ms, fits_ms);
      result_.memory_stall_ms += fits_ms - cursor_ms;
      cursor_ms = fits_ms;
    }
    for (const StorageIndex s : faults_) {
      // A synchronous demand page on the compute stream, after its D2H.
      const StorageState& state = state_of(s);
      const double start_ms = state.timing.to_device_start_ms(cursor_ms);
      const double end_ms = start_ms + trace_.h2d_ms(state.size_bytes);
      if (start_ms > cursor_ms) add_span(SpanKind::kStall, Lane::kCompute, op, -1, 0, cursor_ms, start_ms);
      add_span(SpanKind::kFault, Lane::kCompute, op, s, state.size_bytes, start_ms, end_ms);
      add_event(compute_events_, start_ms, state.size_bytes);
      result_.fault_ms += end_ms - start_ms;
      result_.h2d_bytes += state.size_bytes;
      cursor_ms = end_ms;
    }
    double start_ms = cursor_ms;
    for (const Access& access : trace_.accesses(op)) start_ms = std::max(start_ms, state_of(access.storage).timing.ready_ms());
    if (start_ms > cursor_ms) add_span(SpanKind::kStall, Lane::kCompute, op, -1, 0, cursor_ms, start_ms);
    add_event(compute_events_, start_ms, first_access_bytes);

    const double duration_ms = trace_.op_duration_ms(op);
    const double end_ms = start_ms + duration_ms;
    add_span(SpanKind::kOp, Lane::kCompute, op, -1, 0, start_ms, end_ms);
    result_.compute_ms += duration_ms;
    result_.stall_ms += start_ms - ready_ms;
    op_end_ms_ = end_ms;
    clock_.compute_ends(end_ms);
  }

  // Note [Recompute timing]: a recompute of op k is issued by the host like any
  // action of its phase. Its regenerated outputs are allocated when it is
  // issued (with a cap the host waits for room, as for a prefetch). It runs on
  // the compute stream for op k's duration once the stream is free and every
  // in-flight H2D of its inputs has completed; the wait is stall, its run time
  // is recompute time. The actions after it are issued at once, but a release
  // of one of its inputs or outputs frees memory, and a copy to host of one of
  // its outputs starts, no earlier than its end (model/storage_timing.h,
  // RecomputeHolds). StepClock::recompute applies these rules; what it
  // regenerates is the residency rules' (regenerate_outputs).
  double recompute(const ResolvedAction& resolved, double issue_ms) {
    const Action& action = resolved.action;
    const OpIndex source = action.source_op;
    recompute_accesses(trace_, versions_, source, recompute_);
    const std::int64_t regenerated_bytes = regenerate_outputs(
        recompute_, [this](StorageIndex s) -> ResidencyState& { return state_of(s).residency; },
        [this](StorageIndex s) { return state_of(s).size_bytes; });
    double inputs_ready_ms = 0.0;
    for (const RecomputeAccess& input : recompute_.inputs) {
      inputs_ready_ms = std::max(inputs_ready_ms, state_of(input.storage).timing.ready_ms());
    }
    const double ready_ms = clock_.stream_free_ms();
    const StepClock::Recompute run =
        clock_.recompute(recompute_, issue_ms, regenerated_bytes, inputs_ready_ms, trace_.op_duration_ms(source));
    add_event(compute_events_, run.host_ms, regenerated_bytes);
    // The stream's wait, split as for an op: for the host (memory), then for
    // the inputs' copies.
    const double host_wait_end_ms = std::max(ready_ms, run.host_ms);
    if (run.host_ms > ready_ms) {
      add_span(SpanKind::kStall, Lane::kCompute, action.op, -1, 0, ready_ms, run.host_ms);
      result_.memory_stall_ms += run.host_ms - ready_ms;
    }
    if (run.start_ms > host_wait_end_ms) {
      add_span(SpanKind::kStall, Lane::kCompute, action.op, -1, 0, host_wait_end_ms, run.start_ms);
    }
    add_span(SpanKind::kRecompute, Lane::kCompute, source, -1, regenerated_bytes, run.start_ms, run.end_ms);
    result_.stall_ms += run.start_ms - ready_ms;
    result_.recompute_ms += run.end_ms - run.start_ms;
    ++result_.recompute_count;
    return run.host_ms;
  }

  // Applies one action issued at `issue_ms`, with the validator's rules for
  // what is effective (Note [Residency state]).
  // Returns when the host is done issuing it (later than `issue_ms` only when
  // a capped prefetch or recompute waited for memory).
  double apply(const ResolvedAction& resolved, double issue_ms) {
    ++seq_;
    const Action& action = resolved.action;
    if (action.kind == ActionKind::kRecompute) return recompute(resolved, issue_ms);
    const StorageIndex s = resolved.storage;
    StorageState& state = state_of(s);
    ResidencyState& residency = state.residency;
    const std::int64_t size = state.size_bytes;
    switch (action.kind) {
      case ActionKind::kCopyD2H: {
        if (classify_d2h(residency) != CopyOutcome::kCopies) return issue_ms;  // a no-op, or an error with no copy
        const CopyWindow copy = clock_.copy_to_host(s, state.timing, issue_ms, trace_.d2h_ms(size));
        apply_d2h(residency);
        result_.d2h_bytes += size;
        ++result_.d2h_count;
        add_span(SpanKind::kCopyD2H, clock_.lane(CopyDirection::kToHost), action.op, s, size, copy.start_ms,
                 copy.end_ms);
        return issue_ms;
      }
      case ActionKind::kCopyH2D: {
        if (classify_h2d(residency) != CopyOutcome::kCopies) return issue_ms;  // a no-op, or an error with no copy
        const StepClock::ToDevice copy = clock_.copy_to_device(state.timing, issue_ms, size, trace_.h2d_ms(size));
        apply_h2d(residency);
        // Memory is taken when the copy starts, or with a cap when it is reserved.
        if (clock_.capped()) {
          add_event(compute_events_, copy.host_ms, size);
        } else {
          add_event(copy_events_, copy.copy.start_ms, size);
        }
        result_.h2d_bytes += size;
        ++result_.h2d_count;
        add_span(SpanKind::kCopyH2D, clock_.lane(CopyDirection::kToDevice), action.op, s, size, copy.copy.start_ms,
                 copy.copy.end_ms);
        return copy.host_ms;
      }
      case ActionKind::kReleaseDevice: {
        if (!apply_release_device(residency)) return issue_ms;
        const double free_ms = clock_.release(s, state.timing, issue_ms, size);
        add_event(free_ms > issue_ms ? delayed_events_ : compute_events_, free_ms, -size);
        return issue_ms;
      }
      case ActionKind::kReleaseHost:
        apply_release_host(residency);
        return issue_ms;
      case ActionKind::kRecompute: return issue_ms;  // handled above
    }
    return issue_ms;
  }

  // Note [Three sorted streams]: events issued on the compute stream (first
  // accesses, faults, undelayed frees) come in time order because issue times
  // never decrease in program order; H2D allocations come in time order because
  // each engine is FIFO. Only frees delayed by a copy need sorting, so the
  // sweep merges three sorted streams instead of sorting everything.
  void sweep_memory() {
    for (std::vector<MemoryEvent>* stream : {&compute_events_, &copy_events_, &delayed_events_}) {
      if (!std::is_sorted(stream->begin(), stream->end(), event_before)) {
        std::sort(stream->begin(), stream->end(), event_before);
      }
    }
    if (record_) {
      result_.timeline.memory.reserve(compute_events_.size() + copy_events_.size() + delayed_events_.size());
    }
    std::size_t a = 0, b = 0, c = 0;
    std::int64_t allocated_bytes = 0;
    while (true) {
      const MemoryEvent* best = nullptr;
      std::size_t* advance = nullptr;
      auto consider = [&](const std::vector<MemoryEvent>& stream, std::size_t& index) {
        if (index < stream.size() && (best == nullptr || event_before(stream[index], *best))) {
          best = &stream[index];
          advance = &index;
        }
      };
      consider(compute_events_, a);
      consider(copy_events_, b);
      consider(delayed_events_, c);
      if (best == nullptr) break;
      ++*advance;
      allocated_bytes += best->delta_bytes;
      if (allocated_bytes > result_.peak_bytes_timed) {
        result_.peak_bytes_timed = allocated_bytes;
        result_.peak_time_ms = best->time_ms;
      }
      if (record_) result_.timeline.memory.push_back({best->time_ms, allocated_bytes});
    }
  }

  const Trace& trace_;
  const SimulatorOptions& options_;
  const bool record_;
  const std::int64_t budget_bytes_;  // the options' or the trace's budget; -1 when unknown
  StepClock clock_;
  std::vector<StorageState> states_;
  SimulationResult result_;
  std::uint64_t seq_ = 0;
  double op_end_ms_ = 0.0;  // when the last op ended (Note [Host and stream clocks])
  std::size_t accesses_prefetched_ = 0;  // Note [Prefetching storage states]
  std::size_t actions_prefetched_ = 0;
  std::vector<MemoryEvent> compute_events_;
  std::vector<MemoryEvent> copy_events_;
  std::vector<MemoryEvent> delayed_events_;
  std::vector<StorageIndex> faults_;  // of the current op
  AccessVersions versions_;      // enabled when the schedule recomputes
  RecomputeAccesses recompute_;  // scratch
};

}  // namespace

SimulationResult simulate(const Trace& trace, const Schedule& schedule, const SimulatorOptions& options) {
  SimulationResult result = Simulation(trace, options).run(schedule);
  result.validation = validate_schedule(trace, schedule);
  return result;
}

std::string simulation_to_json(const SimulationResult& result) {
  nlohmann::json out;
  out["valid"] = result.valid();
  out["faults"] = result.faults();
  out["peak_bytes"] = result.peak_bytes();
  out["peak_op"] = result.validation.peak_op;
  out["peak_bytes_timed"] = result.peak_bytes_timed;
  out["peak_time_ms"] = result.peak_time_ms;
  out["compute_ms"] = result.compute_ms;
  out["makespan_ms"] = result.makespan_ms;
  out["stall_ms"] = result.stall_ms;
  out["fault_ms"] = result.fault_ms;
  out["recompute_ms"] = result.recompute_ms;
  out["recompute_count"] = result.recompute_count;
  out["overhead_percent"] = result.overhead_percent();
  out["d2h_bytes"] = result.d2h_bytes;
  out["h2d_bytes"] = result.h2d_bytes;
  out["d2h_count"] = result.d2h_count;
  out["h2d_count"] = result.h2d_count;
  out["copy_engines"] = static_cast<int>(result.copy_engines);
  out["memory_cap"] = to_string(result.device_memory);
  out["memory_stall_ms"] = result.memory_stall_ms;
  if (result.budget_bytes >= 0) out["budget_bytes"] = result.budget_bytes;
  out["problem_count"] = result.validation.problem_count;
  out["problems"] = result.validation.problems;
  return out.dump(1);
}

}  // namespace hyperoffload
