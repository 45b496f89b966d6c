// Test helper: simulate a schedule and keep the result only when the plan is
// feasible — valid, fault-free and within the budget at op granularity, what
// every planner promises and what the lower bounds of plan/common/ hold for.
// `memory_cap_bytes`: a device that holds more than the budget (a plan made
// for a lower budget, timed at a larger one); nullopt: the budget.
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/sim/simulator.h"

namespace hyperoffload::testing {

inline std::optional<SimulationResult> simulate_if_feasible(const Trace& trace, const Schedule& schedule,
                                                            std::int64_t budget, CopyEngines engines,
                                                            DeviceMemory cap,
                                                            std::optional<std::int64_t> memory_cap_bytes = std::nullopt) {
  SimulatorOptions options;
  options.copy_engines = engines;
  options.device_memory = cap;
  options.budget_bytes = memory_cap_bytes.value_or(budget);
  SimulationResult sim = simulate(trace, schedule, options);
  if (!sim.valid() || sim.faults() > 0 || sim.peak_bytes() > budget) return std::nullopt;
  return sim;
}

}  // namespace hyperoffload::testing
