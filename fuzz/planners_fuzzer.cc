// Planner invariants on structure-aware input: the bytes become a valid trace
// and a budget (fuzz_support.h, decode_trace), and every registered planner
// (planner_names(), and the MILP planner "optimal" on tiny traces) plans it.
// For each schedule:
//  - planning succeeds (the MILP planner may refuse a program above its limits)
//    and the schedule validates;
//  - when the planner reports an unavoidable floor and the budget is at least
//    that floor, the op-granular peak is within the budget (without a host
//    budget: keeping one may keep storages on the device);
//  - with a host budget (a fuzzed share of the unplanned peak, or none), a
//    schedule without faults holds at most that many host bytes at once;
//  - the simulator agrees with the validator and is self-consistent, with one
//    and two copy engines, with and without a memory cap: makespan >= compute,
//    stall >= 0, bytes and copies moved equal the validator's, every time
//    finite; with the cap and an op-granular peak within the budget, the timed
//    peak is within it too;
//  - the timeline and the --json summary are JSON with finite numbers only;
//  - writing the schedule and reading it back gives the same actions.
// Then the comparison report (`hyperoffload compare`) over all planners: its
// table, JSON and SVG hold finite numbers only.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "hyperoffload/check/validator.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/timeline_json.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/report/comparison.h"
#include "hyperoffload/report/comparison_table.h"
#include "hyperoffload/report/memory_plot.h"
#include "hyperoffload/sim/simulator.h"

using namespace hyperoffload;

namespace {

// Every registered planner, DTR's reference walk (whose re-runs thrash below
// some budget: Note [The walk's work bound], dtr_planner.h) and the MILP
// planner (exponential in the worst case, seconds per plan) on tiny traces
// only.
std::vector<std::string> planners_for(const Trace& trace) {
  std::vector<std::string> names(planner_names().begin(), planner_names().end());
  names.emplace_back(kDtrPlannerName);
  if (trace.op_count() <= 6 && trace.storage_count() <= 4) names.emplace_back(kOptimalPlannerName);
  return names;
}

// A solve cut short still returns its best schedule; long enough for the tiny
// traces to be solved to optimality, short enough for a fuzzing run.
constexpr double kSolveSeconds = 2.0;

void check_finite(double value, std::string_view what) {
  FUZZ_CHECK(std::isfinite(value), "{} is {}", what, value);
}

// A JSON document with finite numbers only: it parses strictly (nlohmann
// rejects the inf and nan that fmt would write), and no value is the null
// nlohmann writes for a non-finite double — except under `nullable` keys.
void check_json_numbers(const std::string& text, std::string_view what,
                        std::initializer_list<std::string_view> nullable = {}) {
  const nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!document.is_discarded(), "{} is not JSON:\n{}", what, text);
  auto walk = [&](auto& self, const nlohmann::json& value, std::string_view key) -> void {
    if (value.is_null()) {
      bool allowed = false;
      for (std::string_view name : nullable) allowed = allowed || name == key;
      FUZZ_CHECK(allowed, "{}: \"{}\" is null (a non-finite number?):\n{}", what, key, text);
    } else if (value.is_object()) {
      for (const auto& [name, item] : value.items()) self(self, item, name);
    } else if (value.is_array()) {
      for (const nlohmann::json& item : value) self(self, item, key);
    } else if (value.is_number_float()) {
      check_finite(value.get<double>(), key);
    }
  };
  walk(walk, document, "(document)");
}

// Text (a table, an SVG) with no "inf" or "nan" standing as a word.
void check_text_numbers(const std::string& text, std::string_view what) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  for (std::string_view word : {"inf", "nan"}) {
    for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
      const bool before = at > 0 && letter(text[at - 1]);
      const bool after = at + word.size() < text.size() && letter(text[at + word.size()]);
      FUZZ_CHECK(before || after, "{} holds a non-finite number at {}:\n{}", what, at, text);
    }
  }
}

void check_simulation(const Trace& trace, const Schedule& schedule, const ValidationReport& report,
                      std::optional<std::int64_t> budget, CopyEngines engines, DeviceMemory memory) {
  SimulatorOptions options;
  options.copy_engines = engines;
  options.device_memory = memory;
  options.budget_bytes = budget;
  options.record_timeline = RecordTimeline::kYes;
  const SimulationResult sim = simulate(trace, schedule, options);
  FUZZ_CHECK(sim.valid() == report.valid() && sim.peak_bytes() == report.peak_bytes &&
                 sim.faults() == report.faults.size(),
             "simulator and validator disagree");
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
    check_finite(value, what);
    FUZZ_CHECK(value >= 0.0, "{} = {} < 0", what, value);
  }
  FUZZ_CHECK(sim.makespan_ms >= sim.compute_ms, "makespan {} < compute {}", sim.makespan_ms, sim.compute_ms);
  FUZZ_CHECK(sim.stall_ms >= sim.fault_ms * (1 - 1e-9) && sim.stall_ms >= sim.memory_stall_ms * (1 - 1e-9),
             "stall {} below its parts: faults {}, memory {}", sim.stall_ms, sim.fault_ms, sim.memory_stall_ms);
  FUZZ_CHECK(sim.peak_bytes_timed >= 0, "timed peak {}", sim.peak_bytes_timed);
  if (memory == DeviceMemory::kBudget && budget && report.peak_bytes <= *budget) {
    FUZZ_CHECK(sim.peak_bytes_timed <= *budget, "capped timed peak {} above the budget {} (op-granular peak {})",
               sim.peak_bytes_timed, *budget, report.peak_bytes);
  }
  for (const TimelineSpan& span : sim.timeline.spans) {
    check_finite(span.start_ms, "a span's start");
    check_finite(span.end_ms, "a span's end");
    FUZZ_CHECK(span.end_ms >= span.start_ms, "span ends at {} before it starts at {}", span.end_ms, span.start_ms);
  }
  for (const MemorySample& sample : sim.timeline.memory) check_finite(sample.time_ms, "a memory sample's time");
  check_json_numbers(simulation_to_json(sim), "simulate --json");
  const std::string timeline = timeline_to_chrome_json(trace, sim.timeline);
  check_json_numbers(timeline, "the timeline");
}

void check_comparison(const Trace& trace, std::optional<std::int64_t> budget, CopyEngines engines,
                      DeviceMemory memory) {
  ComparisonOptions options;
  options.planners = planners_for(trace);
  options.time_limit_s = kSolveSeconds;
  options.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, static_cast<double>(budget.value_or(0))}};
  options.copy_engines = engines;
  options.device_memory = memory;
  options.record_timeline = RecordTimeline::kYes;
  Result<Comparison> comparison = run_comparison(trace, options);
  FUZZ_CHECK(comparison.has_value(), "compare failed: {}", comparison ? "" : comparison.error().message);
  for (const ComparisonRow& row : comparison->rows) {
    FUZZ_CHECK(row.refused.empty() || row.planner == kOptimalPlannerName, "{} refused: {}", row.planner, row.refused);
    check_finite(row.stall_ms, "a row's stall");
    check_finite(row.overhead_percent, "a row's overhead");
    check_finite(row.makespan_ms, "a row's makespan");
    check_finite(row.end_ms, "a row's end");
  }
  for (std::size_t r = 0; r < comparison->rows.size(); ++r) {
    const ComparisonRow& row = comparison->rows[r];
    // Nothing feasible adds less than the bound on stall plus recompute
    // (plan/common/overhead_bound.h), and a feasible plan means there is one.
    const std::optional<double> least_ms = comparison->overhead_bound_ms(r / comparison->planner_count);
    FUZZ_CHECK(!row.feasible() || least_ms.has_value(), "{} is feasible, but the overhead bound says no plan fits",
               row.planner);
    if (least_ms) {
      check_finite(*least_ms, "an overhead bound");
      const double added_ms = row.stall_ms + row.recompute_ms;
      FUZZ_CHECK(!row.feasible() || added_ms >= *least_ms - 1e-9 * (1 + *least_ms),
                 "{} adds {} ms of stall plus recompute, below the bound {}", row.planner, added_ms, *least_ms);
    }
    // A feasible plan that copies nothing re-runs at least the recompute-only
    // bound (+infinity: no such plan fits, so there is none).
    const std::optional<double> recompute_only_ms = comparison->recompute_only_bound_ms(r / comparison->planner_count);
    if (row.feasible() && row.d2h_bytes == 0 && row.h2d_bytes == 0) {
      FUZZ_CHECK(recompute_only_ms.has_value(), "{} is feasible, but the recompute-only bound says no plan fits",
                 row.planner);
      FUZZ_CHECK(row.recompute_ms >= *recompute_only_ms - 1e-9 * (1 + *recompute_only_ms),
                 "{} copies nothing and re-runs {} ms, below the recompute-only bound {}", row.planner,
                 row.recompute_ms, *recompute_only_ms);
    }
    const std::optional<double> bound = comparison->stall_bound_ms(r / comparison->planner_count);
    if (!bound) continue;
    check_finite(*bound, "a stall bound");
    // The bound holds for every feasible plan that only copies
    // (plan/common/stall_bound.h); a recompute can beat it.
    FUZZ_CHECK(!row.feasible() || trace.has_recomputable_ops() || row.stall_ms >= *bound - 1e-9 * (1 + *bound), "{} stalls {} ms, below the bound {}",
               row.planner, row.stall_ms, *bound);
  }
  check_json_numbers(comparison_to_json(*comparison, "fuzz"), "compare --json",
                     {"stall_lower_bound_ms", "stall_above_bound_ms", "overhead_above_bound_ms",
                      "overhead_lower_bound_ms", "recompute_only_lower_bound_ms"});
  check_text_numbers(format_comparison_table(*comparison, "fuzz"), "the comparison table");
  check_text_numbers(comparison_plot_svg(*comparison, "fuzz"), "the memory plot");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::optional<Trace> trace = fuzz::decode_trace(in, {});
  if (!trace) return 0;
  const std::optional<std::int64_t> budget = fuzz::decode_budget(in, *trace);
  const CopyEngines engines = in.ConsumeBool() ? CopyEngines::kOne : CopyEngines::kTwo;
  // HYPEROFFLOAD_FUZZ_VERBOSE=1 prints the case, to rerun a finding with the CLI.
  if (std::getenv("HYPEROFFLOAD_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "%s\nbudget %s, %d copy engines\n", trace_to_json(*trace).c_str(),
                 budget ? std::to_string(*budget).c_str() : "none", static_cast<int>(engines));
  }
  std::optional<std::int64_t> host_budget;
  if (in.ConsumeBool()) {
    host_budget = unplanned_peak(*trace).bytes / 100 * in.ConsumeIntegralInRange<std::int64_t>(0, 100);
  }
  for (const std::string& name : planners_for(*trace)) {
    PlannerOptions planner_options;
    planner_options.device_memory = in.ConsumeBool() ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
    planner_options.time_limit_s = kSolveSeconds;
    planner_options.host_budget_bytes = host_budget;
    Result<std::unique_ptr<Planner>> planner = make_planner(name, planner_options);
    FUZZ_CHECK(planner.has_value(), "make_planner(\"{}\"): {}", name, planner ? "" : planner.error().message);
    Result<PlanResult> plan = (*planner)->plan(*trace, budget);
    // The MILP planner refuses a program above its variable limit
    // (kInvalidArgument, report/comparison.h); every planner plans every
    // budget, below its floor too (the best effort).
    if (!plan && name == kOptimalPlannerName && plan.error().code == ErrorCode::kInvalidArgument) continue;
    FUZZ_CHECK(plan.has_value(), "{} failed: {}", name, plan ? "" : plan.error().message);
    const Schedule& schedule = plan->schedule;
    const ValidationReport report = validate_schedule(*trace, schedule);
    FUZZ_CHECK(report.valid(), "{}'s schedule is invalid: {}", name, report.problems.front());
    if (budget && plan->floor && *budget >= plan->floor->bytes && !host_budget) {
      FUZZ_CHECK(report.peak_bytes <= *budget, "{}: peak {} above the budget {} (floor {})", name, report.peak_bytes,
                 *budget, plan->floor->bytes);
    }
    if (host_budget && report.faults.empty()) {
      FUZZ_CHECK(report.peak_host_bytes <= *host_budget, "{}: {} host bytes above the host budget {}", name,
                 report.peak_host_bytes, *host_budget);
    }
    for (DeviceMemory memory : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
      check_simulation(*trace, schedule, report, budget, engines, memory);
    }
    Result<Schedule> again = parse_schedule_json(schedule_to_json(schedule), "<written>");
    FUZZ_CHECK(again.has_value(), "{}'s schedule does not read back: {}", name, again ? "" : again.error().message);
    FUZZ_CHECK(again->actions == schedule.actions && again->planner == schedule.planner,
               "{}'s schedule changed in the round trip", name);
  }
  if (budget && trace->op_count() > 0) {
    check_comparison(*trace, budget, engines, in.ConsumeBool() ? DeviceMemory::kBudget : DeviceMemory::kUnlimited);
  }
  return 0;
}
