// Test helper: simulate a schedule and keep the result only when the plan is
// feasible — valid, fault-free and within the budget at op granularity, what
// every planner promises and what the lower bounds of report/ hold for.
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/sim/simulator.h"

namespace hyperoffload::testing {

inline std::optional<SimulationResult> simulate_if_feasible(const Trace& trace, const Schedule& schedule,
                                                            std::int64_t budget, CopyEngines engines,
                                                            DeviceMemory cap) {
  SimulatorOptions options;
  options.copy_engines = engines;
  options.device_memory = cap;
  options.budget_bytes = budget;
  SimulationResult sim = simulate(trace, schedule, options);
  if (!sim.valid() || sim.faults() > 0 || sim.peak_bytes() > budget) return std::nullopt;
  return sim;
}

}  // namespace hyperoffload::testing
