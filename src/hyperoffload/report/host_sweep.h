// The host-budget sweep (issue 28): overhead against host budget at one device
// budget — the trade-off a user tunes with max_offload_activation_bytes. Every
// planner is compared (report/comparison.h) at host budgets from 0 to the host
// bytes the unconstrained reference plan holds (the hybrid planner's plan
// without a host budget, `reference_host_bytes`), every `step_percent` of it,
// and with unlimited host memory last.
//
//   Result<HostSweep> sweep = run_host_sweep(trace, budget_bytes, {});
//   write_file_atomically("host.svg", host_sweep_plot_svg(*sweep, "gpt.json"));
//
// Thread-safety: pure functions of their inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/report/comparison.h"

namespace hyperoffload {

struct HostSweepOptions {
  // The planners, copy engines and device memory (budgets and host budget
  // are the sweep's own).
  ComparisonOptions comparison;
  double step_percent = 10.0;  // of reference_host_bytes, > 0
};

struct HostSweep {
  std::int64_t budget_bytes = 0;
  std::int64_t reference_host_bytes = 0;  // the hybrid plan's peak host bytes with no host budget
  // Ascending; the last is nullopt: unlimited host memory.
  std::vector<std::optional<std::int64_t>> host_budgets_bytes;
  std::vector<Comparison> comparisons;  // one per host budget, one budget each
};

Result<HostSweep> run_host_sweep(const Trace& trace, std::int64_t budget_bytes, const HostSweepOptions& options);

// A text table: one row per host budget, each planner's overhead (% of
// compute; "-" where it misses a budget) and peak host bytes.
std::string host_sweep_table(const HostSweep& sweep);

// SVG: overhead (% of compute) against host budget (% of the reference plan's
// host bytes), one curve per planner over its feasible points; unlimited host
// memory is drawn at the right edge, labelled.
std::string host_sweep_plot_svg(const HostSweep& sweep, std::string_view trace_label);

}  // namespace hyperoffload
