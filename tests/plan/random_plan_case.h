// Test helper: random traces and budgets for planner property tests
// (tests/plan/*_property_test.cc). A case draws a trace shape and where its
// budget lies relative to the trace's unavoidable floor and unplanned peak,
// so that a known share of cases needs offloading within the budget.
#pragma once

#include <cstdint>
#include <random>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/peak_planner.h"

namespace hyperoffload::testing {

// Where a case's budget lies. Most budgets fall between the floor and the
// unplanned peak, where the planner must offload and stay within the budget;
// the rest check the two edges (below the floor: the planner stops at it; at
// or above the peak: nothing needs to move).
enum class BudgetRange : std::uint8_t { kBelowFloor, kFloorToPeak, kAbovePeak };

struct Case {
  RandomTraceOptions trace;
  BudgetRange range;
  double position;  // in [0, 1): where in its range the budget lies
};

inline Case random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 17);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Case c;
  c.trace.seed = seed;
  c.trace.op_count = static_cast<std::int32_t>(uniform(1, 160));
  c.trace.storage_count = static_cast<std::int32_t>(uniform(0, 120));
  c.trace.min_size_bytes = 1;
  c.trace.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 20));
  c.trace.zero_size_fraction = uniform(0.0, 0.2);
  c.trace.retained_fraction = uniform(0.0, 0.3);
  c.trace.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 10));
  c.trace.write_fraction = uniform(0.0, 0.5);
  c.trace.in_place_fraction = uniform(0.0, 0.3);
  c.trace.max_duration_ms = seed % 5 == 0 ? 0.0 : uniform(0.0, 2.0);
  c.trace.bandwidth_gib_per_s = uniform(0.001, 32.0);
  c.trace.limit_fraction = std::nullopt;
  const double range = uniform(0.0, 1.0);
  c.range = range < 0.8 ? BudgetRange::kFloorToPeak : range < 0.9 ? BudgetRange::kBelowFloor : BudgetRange::kAbovePeak;
  c.position = uniform(0.0, 1.0);
  return c;
}

// The case's budget on its trace: in [floor, unplanned peak) for kFloorToPeak
// (empty when nothing can be evicted, floor = peak; the budget is then the
// peak), in [0, floor) below it, in [peak, 1.1 peak) above. The floor comes
// from a plan at the unplanned peak (no selection, so it costs only the model).
inline std::int64_t budget_for(const Case& c, const Trace& trace) {
  const std::int64_t peak = unplanned_peak(trace).bytes;
  Result<PlanResult> probe = PeakPlanner().plan(trace, peak);
  const std::int64_t floor = probe && probe->floor ? probe->floor->bytes : peak;
  auto within = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(c.position * static_cast<double>(hi - lo));
  };
  switch (c.range) {
    case BudgetRange::kBelowFloor: return within(0, floor);
    case BudgetRange::kFloorToPeak: return within(floor, peak);
    case BudgetRange::kAbovePeak: return within(peak, peak + peak / 10);
  }
  return peak;
}

}  // namespace hyperoffload::testing
