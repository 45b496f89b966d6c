#include "hyperoffload/cli/common.h"

#include <charconv>
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/budget.h"

namespace hyperoffload::cli {

Trace load_trace(const std::string& path) { return value_or_throw(read_trace_file(path)); }

Schedule load_schedule(const std::string& path) { return value_or_throw(read_schedule_file(path)); }

std::optional<std::int64_t> resolve_budget_option(const Trace& trace, const std::string& budget_text) {
  if (budget_text.empty()) return trace.memory_limit_bytes();
  const BudgetSpec spec = value_or_throw(parse_budget(budget_text));
  if (spec.unit == BudgetSpec::Unit::kBytes) return resolve_budget_bytes(spec, 0);
  return resolve_budget_bytes(spec, unplanned_peak(trace).bytes);
}

std::optional<std::int64_t> resolve_host_budget_option(const Trace& trace, const std::string& host_budget_text) {
  if (host_budget_text.empty()) return trace.host_memory_limit_bytes();
  Result<BudgetSpec> spec = parse_budget(host_budget_text);
  if (!spec) {
    throw HyperoffloadError({spec.error().code, fmt::format("--host-budget: {}", spec.error().message)});
  }
  if (spec->unit == BudgetSpec::Unit::kBytes) return resolve_budget_bytes(*spec, 0);
  return resolve_budget_bytes(*spec, unplanned_peak(trace).bytes);
}

void add_host_budget_option(CLI::App& app, std::string& target) {
  app.add_option("--host-budget", target,
                 "Host-memory budget for the host copies a schedule holds at once: bytes, a size (2GiB, 512MB) "
                 "or a percentage of the unplanned op-granular peak (10%); overrides the trace's "
                 "host_memory_limit_bytes; default unlimited");
}

DeviceMemory parse_memory_cap(const std::string& text) {
  if (text == "unlimited") return DeviceMemory::kUnlimited;
  if (text == "budget") return DeviceMemory::kBudget;
  throw HyperoffloadError({ErrorCode::kInvalidArgument,
                           fmt::format("--memory-cap {}: expected unlimited or budget", text)});
}

void add_memory_cap_option(CLI::App& app, std::string& target) {
  app.add_option("--memory-cap", target,
                 "The device to plan for or simulate: unlimited (memory is freed whenever copies allow; the "
                 "timed peak may exceed the budget) or budget (the device holds only the budget: ops and "
                 "prefetches wait for memory, as on a real device)")
      ->capture_default_str();
}

void add_time_limit_option(CLI::App& app, double& target) {
  app.add_option("--time-limit", target,
                 "Seconds the optimal planner's solver may run (wall clock); it then returns the best schedule "
                 "found, with the solver's lower bound and gap")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void print_solver_progress(const SolverProgress& progress) {
  std::string line = fmt::format("optimal  {:6.1f} s", progress.elapsed_s);
  if (progress.incumbent_ms) {
    line += fmt::format("  incumbent {:.6g} ms", *progress.incumbent_ms);
  } else {
    line += "  incumbent -";
  }
  line += fmt::format("  bound {:.6g} ms", progress.bound_ms);
  if (progress.gap) line += fmt::format("  gap {:.2f}%", 100.0 * *progress.gap);
  line += fmt::format("  nodes {}\n", progress.nodes);
  std::fputs(line.c_str(), stderr);
}

std::vector<std::pair<std::string, double>> parse_score_weights(const std::vector<std::string>& items) {
  std::vector<std::pair<std::string, double>> weights;
  for (const std::string& item : items) {
    const std::size_t equals = item.find('=');
    double value = 0.0;
    bool ok = equals != std::string::npos && equals > 0;
    if (ok) {
      const char* begin = item.data() + equals + 1;
      const char* end = item.data() + item.size();
      auto [parsed_end, ec] = std::from_chars(begin, end, value);
      ok = ec == std::errc() && parsed_end == end;
    }
    if (!ok) {
      throw HyperoffloadError(
          {ErrorCode::kInvalidArgument, fmt::format("--score-weight {}: expected NAME=VALUE, e.g. hiding=2.0", item)});
    }
    weights.emplace_back(item.substr(0, equals), value);
  }
  return weights;
}

}  // namespace hyperoffload::cli
