// Helpers shared by the CLI commands: loading inputs (errors become
// HyperoffloadError, which main() reports with exit code 2), resolving budgets,
// planning with timing, and small formatting utilities.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/sim/simulator.h"

namespace CLI {
class App;
}

namespace hyperoffload::cli {

Trace load_trace(const std::string& path);
Schedule load_schedule(const std::string& path);

// Resolves a --budget option ("" = use the trace's memory_limit_bytes).
// Percentages are of the unplanned op-granular peak.
std::optional<std::int64_t> resolve_budget_option(const Trace& trace, const std::string& budget_text);

// Resolves a --host-budget option ("" = the trace's host_memory_limit_bytes):
// the same syntax as --budget; a percentage is of the unplanned op-granular
// peak too (the most any plan can offload at once).
std::optional<std::int64_t> resolve_host_budget_option(const Trace& trace, const std::string& host_budget_text);

// Adds --host-budget to a command.
void add_host_budget_option(CLI::App& app, std::string& target);

// --memory-cap: "unlimited" or "budget" (sim/simulator.h, DeviceMemory).
DeviceMemory parse_memory_cap(const std::string& text);

// Adds --memory-cap to a command.
void add_memory_cap_option(CLI::App& app, std::string& target);

// Adds --time-limit SECONDS (the optimal planner's solve) to a command.
void add_time_limit_option(CLI::App& app, double& target);

// Prints the optimal planner's progress to stderr, one line per report:
// "optimal  3.0 s  incumbent 12.345 ms  bound 12.001 ms  gap 2.79%  nodes 140".
void print_solver_progress(const SolverProgress& progress);

// Parses repeated NAME=VALUE options into planner score weights.
std::vector<std::pair<std::string, double>> parse_score_weights(const std::vector<std::string>& items);

}  // namespace hyperoffload::cli
