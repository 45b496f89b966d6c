// Note [Monotone in the budget] (report/budget_sweep.h) on real traces: every
// shipped example trace and GPT presets, swept from the floor to the unplanned
// peak on a device that holds only the budget. The peak, hybrid and recompute
// planners must break nothing: more budget never gives a higher overhead, a
// lower timed peak or an infeasible plan, and the timed peak stays within the
// budget. Greedy, the faithful reference of another system, is reported
// (stdout), not held to it.
//
// The planners are monotone by construction on their ladder, the floor and
// every 5% of the unplanned peak (Note [Plans for lower budgets],
// plan/common/lower_budgets.h), so any sweep whose budgets are rungs of it
// (5% or 10% steps) must find nothing. The tolerance on overheads is the
// sweep's default, 1e-9 of the step (report/budget_sweep.h says why).
//
// Fast cases (the default run, about a minute on two cores): the small
// example traces with 5% steps, the G10 traces and gpt3-1.3b with 10% steps,
// gpt2-small with 5%. HYPEROFFLOAD_LONG_SWEEP=1 adds every GPT preset and the
// G10 traces with 5% steps (several minutes):
//   HYPEROFFLOAD_LONG_SWEEP=1 build/bin/report_tests --gtest_filter='*LongSweep*'
// Also: a schedule is no slower on the capped device with more memory, which
// the construction relies on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/plan/hybrid_planner.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/report/budget_sweep.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {
namespace {

namespace fs = std::filesystem;

struct SweepCase {
  std::string name;  // a path under examples/traces/ or "preset:NAME"
  double step_percent;
};

std::ostream& operator<<(std::ostream& out, const SweepCase& c) { return out << c.name << " at " << c.step_percent << "%"; }

Trace load(const SweepCase& c) {
  if (c.name.starts_with("preset:")) {
    const Result<TransformerOptions> options = transformer_preset(c.name.substr(7));
    if (!options) throw std::runtime_error(options.error().message);
    Result<Trace> trace = generate_transformer_trace(*options);
    if (!trace) throw std::runtime_error(trace.error().message);
    return std::move(*trace);
  }
  Result<Trace> trace = read_trace_file(fs::path(HYPEROFFLOAD_SOURCE_DIR) / "examples" / "traces" / c.name);
  if (!trace) throw std::runtime_error(trace.error().message);
  return std::move(*trace);
}

void expect_monotone(const SweepCase& c) {
  const Trace trace = load(c);
  BudgetSweepOptions options;
  options.step_percent = c.step_percent;
  options.device_memory = DeviceMemory::kBudget;
  const Result<BudgetSweep> sweep = run_budget_sweep(trace, options);
  ASSERT_TRUE(sweep.has_value()) << sweep.error().message;
  ASSERT_GE(sweep->comparison.budgets_bytes.size(), 2U);
  for (const ComparisonRow& row : sweep->comparison.rows) {
    EXPECT_TRUE(row.valid) << row.planner << " at " << row.budget_bytes << ": " << row.first_problem;
  }
  // The peak and hybrid planners are feasible from their floor on; the floor
  // of the sweep is the lowest of any planner's.
  for (std::size_t b = 1; b < sweep->comparison.budgets_bytes.size(); ++b) {
    EXPECT_TRUE(sweep->row(b, 2).feasible()) << "hybrid at " << sweep->comparison.budgets_bytes[b];
  }
  for (const SweepViolation& v : sweep->violations) {
    const std::string what = fmt::format("{} at {} bytes: {}: {} against {} at {} bytes", v.planner_name,
                                         sweep->comparison.budgets_bytes[v.budget], to_string(v.property), v.value,
                                         v.reference_value, sweep->comparison.budgets_bytes[v.reference_budget]);
    if (v.planner_name == "greedy") {
      std::cout << c << ": " << what << "\n";  // reported, not changed
    } else {
      ADD_FAILURE() << c << ": " << what;
    }
  }
}

class BudgetSweepProperty : public ::testing::TestWithParam<SweepCase> {};

TEST_P(BudgetSweepProperty, PeakHybridAndRecomputeAreMonotoneInTheBudget) { expect_monotone(GetParam()); }

std::vector<SweepCase> fast_cases() {
  std::vector<SweepCase> cases;
  for (const char* name : {"gpt_decoder.json", "hf_bert.json", "hf_gpt2.json", "hf_llama.json", "hf_vit.json",
                           "resnet18.json", "vit.json"}) {
    cases.push_back({name, 5.0});
  }
  for (const char* name : {"BERT_Base_128", "BERT_Base_256", "Inceptionv3_1536", "Inceptionv3_512", "ResNet152_1280",
                           "ResNet152_256", "SENet154_1024", "SENet154_256", "VIT_1280", "VIT_256"}) {
    cases.push_back({fmt::format("g10/g10_{}.json", name), 10.0});
  }
  cases.push_back({"preset:gpt2-small", 5.0});
  cases.push_back({"preset:gpt3-1.3b", 10.0});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<SweepCase>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(ExampleTracesAndPresets, BudgetSweepProperty, ::testing::ValuesIn(fast_cases()), case_name);

// The long version: every GPT preset and the G10 traces with 5% steps.
class LongSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(LongSweep, PeakHybridAndRecomputeAreMonotoneInTheBudget) {
  if (std::getenv("HYPEROFFLOAD_LONG_SWEEP") == nullptr) GTEST_SKIP() << "set HYPEROFFLOAD_LONG_SWEEP=1 to run";
  expect_monotone(GetParam());
}

std::vector<SweepCase> long_cases() {
  std::vector<SweepCase> cases;
  for (const std::string_view preset : transformer_preset_names()) cases.push_back({fmt::format("preset:{}", preset), 5.0});
  for (const char* name : {"BERT_Base_128", "BERT_Base_256", "Inceptionv3_1536", "Inceptionv3_512", "ResNet152_1280",
                           "ResNet152_256", "SENet154_1024", "SENet154_256", "VIT_1280", "VIT_256"}) {
    cases.push_back({fmt::format("g10/g10_{}.json", name), 5.0});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryPresetAndG10Trace, LongSweep, ::testing::ValuesIn(long_cases()), case_name);

// What Note [Plans for lower budgets] relies on: a schedule within a budget is
// no slower on a device that holds a larger one (and its timed peak stays
// within that). 300 random traces, each planned by the peak planner alone
// (no lower budgets) at a budget between its floor and its peak, then
// simulated with caps at that budget and at 1.05, 1.5 and 2 times it.
TEST(CappedDevice, AScheduleIsNoSlowerWithMoreMemory) {
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    RandomTraceOptions trace_options;
    trace_options.seed = seed;
    trace_options.op_count = 20 + static_cast<std::int32_t>(seed % 60);
    trace_options.storage_count = 10 + static_cast<std::int32_t>(seed % 40);
    trace_options.max_size_bytes = 1 << 20;
    trace_options.bandwidth_gib_per_s = 0.01 + static_cast<double>(seed % 7);
    trace_options.limit_fraction = std::nullopt;
    const Trace trace = generate_random_trace(trace_options);
    const std::int64_t peak = unplanned_peak(trace).bytes;
    const std::int64_t floor = offload_floor(trace).bytes;
    if (floor >= peak) continue;
    const std::int64_t budget = floor + static_cast<std::int64_t>(static_cast<double>(peak - floor) * 0.3);
    PeakPlannerOptions planner_options;
    planner_options.device_memory = DeviceMemory::kBudget;
    planner_options.lower_budgets = LowerBudgetPlans::kNone;
    const Result<PlanResult> plan = PeakPlanner(planner_options).plan(trace, budget);
    ASSERT_TRUE(plan.has_value()) << plan.error().message;
    SimulatorOptions sim_options;
    sim_options.device_memory = DeviceMemory::kBudget;
    sim_options.budget_bytes = budget;
    const SimulationResult at_budget = simulate(trace, plan->schedule, sim_options);
    ASSERT_TRUE(at_budget.valid()) << "seed " << seed;
    if (at_budget.peak_bytes() > budget) continue;
    for (const double factor : {1.05, 1.5, 2.0}) {
      sim_options.budget_bytes = static_cast<std::int64_t>(static_cast<double>(budget) * factor);
      const SimulationResult larger = simulate(trace, plan->schedule, sim_options);
      EXPECT_LE(larger.makespan_ms, at_budget.makespan_ms * (1.0 + 1e-12)) << "seed " << seed << " x" << factor;
      EXPECT_LE(larger.stall_ms, at_budget.stall_ms + 1e-9 * at_budget.makespan_ms) << "seed " << seed << " x" << factor;
      EXPECT_LE(larger.peak_bytes_timed, *sim_options.budget_bytes) << "seed " << seed;
    }
    ++checked;
  }
  EXPECT_GE(checked, 200);
}

}  // namespace
}  // namespace hyperoffload
