#include "hyperoffload/sim/simulator.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "hyperoffload/check/internal/validation_observer.h"
#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/model/schedule_walk.h"
#include "hyperoffload/model/step_player.h"

namespace hyperoffload {
namespace {

// Note [One walk, one player]: what happens is the schedule walk's
// (model/schedule_walk.h, with the residency rules the validator reports
// with) and when is the step player's (model/step_player.h, the execution
// model's clocks, which the planners' stall estimate plays too). The
// simulator only records: the spans of the timeline and the memory curve.

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

// The step player's Recorder: spans (with RecordTimeline::kYes) and the memory
// events the timed peak and the curve come from.
class Recording {
 public:
  Recording(const Trace& trace, bool record_spans, Timeline& timeline)
      : trace_(trace), record_spans_(record_spans), timeline_(timeline) {}

  void span(SpanKind kind, Lane lane, OpIndex op, StorageIndex storage, std::int64_t bytes, double start_ms,
            double end_ms) {
    if (!record_spans_) return;
    timeline_.spans.push_back(
        {kind, lane, op, storage < 0 ? StorageId{-1} : trace_.storage(storage).id, bytes, start_ms, end_ms});
  }
  void memory(MemoryStream stream, double time_ms, std::int64_t delta_bytes) {
    if (delta_bytes != 0) events_[static_cast<std::size_t>(stream)].push_back({time_ms, seq_, delta_bytes});
  }
  void next_event() { ++seq_; }

  void reserve(std::size_t compute_events) { events_[0].reserve(compute_events); }

  // Note [Three sorted streams]: events issued on the compute stream (first
  // accesses, faults, undelayed frees) come in time order because issue times
  // never decrease in program order; H2D allocations come in time order
  // because each engine is FIFO. Only frees delayed by a copy need sorting,
  // so the sweep merges three sorted streams instead of sorting everything.
  void sweep(SimulationResult& result, bool record_curve) {
    for (std::vector<MemoryEvent>& stream : events_) {
      if (!std::is_sorted(stream.begin(), stream.end(), event_before)) {
        std::sort(stream.begin(), stream.end(), event_before);
      }
    }
    if (record_curve) timeline_.memory.reserve(events_[0].size() + events_[1].size() + events_[2].size());
    std::size_t next[3] = {0, 0, 0};
    std::int64_t allocated_bytes = 0;
    while (true) {
      const MemoryEvent* best = nullptr;
      std::size_t* advance = nullptr;
      for (std::size_t i = 0; i < 3; ++i) {
        if (next[i] < events_[i].size() && (best == nullptr || event_before(events_[i][next[i]], *best))) {
          best = &events_[i][next[i]];
          advance = &next[i];
        }
      }
      if (best == nullptr) break;
      ++*advance;
      allocated_bytes += best->delta_bytes;
      if (allocated_bytes > result.peak_bytes_timed) {
        result.peak_bytes_timed = allocated_bytes;
        result.peak_time_ms = best->time_ms;
      }
      if (record_curve) timeline_.memory.push_back({best->time_ms, allocated_bytes});
    }
  }

 private:
  const Trace& trace_;
  const bool record_spans_;
  Timeline& timeline_;
  std::uint64_t seq_ = 0;
  std::vector<MemoryEvent> events_[3];  // by MemoryStream
};

}  // namespace

SimulationResult simulate(const Trace& trace, const Schedule& schedule, const SimulatorOptions& options) {
  SimulationResult result;
  const bool record = options.record_timeline == RecordTimeline::kYes;
  const std::int64_t budget_bytes =
      options.budget_bytes ? *options.budget_bytes : trace.memory_limit_bytes().value_or(-1);
  result.copy_engines = options.copy_engines;
  result.budget_bytes = budget_bytes;
  result.device_memory = options.device_memory;
  if (record) result.timeline.budget_bytes = budget_bytes;

  // One walk: the step player times it, the validation observer reports on
  // it exactly as validate_schedule() would (Note [One walk, one player]).
  ValidatorOptions validator_options;
  validator_options.host_budget_bytes = options.host_budget_bytes;
  internal::ValidationObserver validation(trace, validator_options);
  const std::vector<ResolvedAction> actions = validation.resolve(schedule);
  Recording recording(trace, record, result.timeline);
  recording.reserve(trace.access_count() / 2 + actions.size() / 2 + 16);
  if (record) result.timeline.spans.reserve(static_cast<std::size_t>(trace.op_count()) + actions.size());
  using Player = StepPlayer<Recording>;
  Player player(trace, options.copy_engines,
                options.device_memory == DeviceMemory::kBudget && budget_bytes >= 0
                    ? std::optional<std::int64_t>(budget_bytes)
                    : std::nullopt,
                recording);
  using Observers = BothObservers<Player, internal::ValidationObserver>;
  Observers both(player, validation);
  ScheduleWalk<Observers> walk(trace, actions);
  validation.attach(walk.memory());
  walk.run(both);
  result.validation = validation.finish();

  const StepTotals& totals = player.totals();
  result.compute_ms = totals.compute_ms;
  result.stall_ms = totals.stall_ms;
  result.fault_ms = totals.fault_ms;
  result.memory_stall_ms = totals.memory_stall_ms;
  result.recompute_ms = totals.recompute_ms;
  result.recompute_count = totals.recompute_count;
  result.d2h_bytes = totals.d2h_bytes;
  result.h2d_bytes = totals.h2d_bytes;
  result.d2h_count = totals.d2h_count;
  result.h2d_count = totals.h2d_count;
  result.makespan_ms = player.makespan_ms();
  recording.sweep(result, record);
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
