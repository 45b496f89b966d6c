// Validator and simulator on arbitrary schedules against valid traces: actions
// of every kind at any op (also out of range), on declared and undeclared
// storages, recomputes of any source op, in or out of execution order. Both
// must report problems, never crash, and never disagree: the simulator's
// verdict, peak, faults and bytes moved are the validator's, its times are
// finite and consistent (makespan >= compute, stall >= its parts), and its
// timeline is JSON. A schedule the reader could have produced (in execution
// order) survives writing and reading back.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "hyperoffload/check/validator.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/timeline_json.h"
#include "hyperoffload/sim/simulator.h"

using namespace hyperoffload;

namespace {

OpIndex pick_op(FuzzedDataProvider& in, const Trace& trace) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return std::numeric_limits<OpIndex>::min();
    case 1: return std::numeric_limits<OpIndex>::max();
    case 2: return in.ConsumeIntegralInRange<OpIndex>(-3, -1);
    default: return in.ConsumeIntegralInRange<OpIndex>(0, trace.op_count());  // op_count itself is out of range
  }
}

Schedule decode_schedule(FuzzedDataProvider& in, const Trace& trace) {
  Schedule schedule;
  schedule.planner = "fuzz";
  const int count = in.ConsumeIntegralInRange<int>(0, 48);
  for (int i = 0; i < count && in.remaining_bytes() > 0; ++i) {
    Action action;
    action.op = pick_op(in, trace);
    action.phase = in.ConsumeBool() ? Phase::kPost : Phase::kPre;
    action.kind = static_cast<ActionKind>(in.ConsumeIntegralInRange<int>(0, 4));
    if (action.kind == ActionKind::kRecompute) {
      action.storage = 0;
      // Mostly just before the action's op (as a planner would put it), in 64 bits so INT32_MIN - 3 cannot wrap.
      const std::int64_t near = std::int64_t{action.op} - in.ConsumeIntegralInRange<int>(0, 3);
      action.source_op = in.ConsumeBool()
                             ? static_cast<OpIndex>(std::max<std::int64_t>(near, std::numeric_limits<OpIndex>::min()))
                             : pick_op(in, trace);
    } else if (trace.storage_count() > 0 && in.ConsumeIntegralInRange<int>(0, 7) != 0) {
      action.storage = trace.storage(in.ConsumeIntegralInRange<StorageIndex>(0, trace.storage_count() - 1)).id;
    } else {
      action.storage = in.ConsumeIntegral<StorageId>();
    }
    schedule.actions.push_back(action);
  }
  // Mostly in execution order, as files must be; sometimes as drawn.
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) {
    std::stable_sort(schedule.actions.begin(), schedule.actions.end(), [](const Action& a, const Action& b) {
      return std::pair(a.op, a.phase) < std::pair(b.op, b.phase);
    });
  }
  return schedule;
}

bool same_report(const ValidationReport& a, const ValidationReport& b) {
  if (a.problems != b.problems || a.problem_count != b.problem_count || a.faults.size() != b.faults.size()) return false;
  for (std::size_t i = 0; i < a.faults.size(); ++i) {
    if (a.faults[i].op != b.faults[i].op || a.faults[i].storage != b.faults[i].storage) return false;
  }
  return a.peak_bytes == b.peak_bytes && a.peak_op == b.peak_op && a.d2h_bytes == b.d2h_bytes &&
         a.h2d_bytes == b.h2d_bytes && a.d2h_count == b.d2h_count && a.h2d_count == b.h2d_count &&
         a.peak_host_bytes == b.peak_host_bytes && a.resident_at_end_bytes == b.resident_at_end_bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::optional<Trace> trace = fuzz::decode_trace(in, {});
  if (!trace) return 0;
  const Schedule schedule = decode_schedule(in, *trace);
  const ValidationReport report = validate_schedule(*trace, schedule);
  FUZZ_CHECK(report.valid() == (report.problem_count == 0) && report.problems.size() <= report.problem_count,
             "problem count {} with {} described", report.problem_count, report.problems.size());
  FUZZ_CHECK(report.peak_bytes >= 0 && report.d2h_bytes >= 0 && report.h2d_bytes >= 0 && report.peak_host_bytes >= 0,
             "negative byte count in the report");

  SimulatorOptions options;
  options.copy_engines = in.ConsumeBool() ? CopyEngines::kOne : CopyEngines::kTwo;
  options.device_memory = in.ConsumeBool() ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
  options.budget_bytes = fuzz::decode_budget(in, *trace);
  options.record_timeline = in.ConsumeBool() ? RecordTimeline::kYes : RecordTimeline::kNo;
  const SimulationResult sim = simulate(*trace, schedule, options);
  FUZZ_CHECK(same_report(sim.validation, report), "the simulator's verdict differs from the validator's");
  FUZZ_CHECK(sim.d2h_bytes == report.d2h_bytes && sim.h2d_bytes == report.h2d_bytes &&
                 sim.d2h_count == report.d2h_count && sim.h2d_count == report.h2d_count,
             "bytes moved: simulated d2h {} ({}) h2d {} ({}), validated d2h {} ({}) h2d {} ({})", sim.d2h_bytes,
             sim.d2h_count, sim.h2d_bytes, sim.h2d_count, report.d2h_bytes, report.d2h_count, report.h2d_bytes,
             report.h2d_count);
  for (auto [value, what] : {std::pair{sim.compute_ms, "compute_ms"}, std::pair{sim.makespan_ms, "makespan_ms"},
                             std::pair{sim.stall_ms, "stall_ms"}, std::pair{sim.fault_ms, "fault_ms"},
                             std::pair{sim.memory_stall_ms, "memory_stall_ms"},
                             std::pair{sim.recompute_ms, "recompute_ms"},
                             std::pair{sim.stall_percent(), "stall_percent"},
                             std::pair{sim.peak_time_ms, "peak_time_ms"},
                             std::pair{sim.overhead_percent(), "overhead_percent"}}) {
    FUZZ_CHECK(std::isfinite(value) && value >= 0.0, "{} is {} (compute {} ms, stall {} ms)", what, value,
               sim.compute_ms, sim.stall_ms);
  }
  FUZZ_CHECK(sim.makespan_ms >= sim.compute_ms, "makespan {} < compute {}", sim.makespan_ms, sim.compute_ms);
  FUZZ_CHECK(sim.peak_bytes_timed >= 0, "timed peak {}", sim.peak_bytes_timed);
  if (options.record_timeline == RecordTimeline::kYes) {
    // nlohmann rejects the inf and nan that a non-finite time would print.
    const std::string timeline = timeline_to_chrome_json(*trace, sim.timeline);
    FUZZ_CHECK(!nlohmann::json::parse(timeline, nullptr, /*allow_exceptions=*/false).is_discarded(),
               "the timeline is not JSON:\n{}", timeline);
  }

  bool readable = check_execution_order(schedule.actions).has_value();
  for (const Action& action : schedule.actions) {
    readable = readable && (action.kind != ActionKind::kRecompute ||
                            recompute_source_precedes(action.source_op, action.op, action.phase));
  }
  if (readable) {
    Result<Schedule> again = parse_schedule_json(schedule_to_json(schedule), "<written>");
    FUZZ_CHECK(again.has_value(), "a written schedule does not read back: {}", again ? "" : again.error().message);
    FUZZ_CHECK(again->actions == schedule.actions, "the schedule changed in the round trip");
  }
  return 0;
}
