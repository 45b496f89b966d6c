// SVG plot of a budget sweep (report/budget_sweep.h): overhead (stall plus
// recompute, % of compute) against the budget (% of the unplanned peak), one
// curve with a marker per feasible point for each planner, the least overhead
// any plan can have (plan/common/overhead_bound.h) as a dashed grey curve, and a
// red ring around every point that breaks Note [Monotone in the budget].
// Infeasible points are left out, so a planner's curve starts at its floor.
//
//   const BudgetSweep sweep = *run_budget_sweep(trace, {});
//   write_file_atomically("sweep.svg", sweep_plot_svg(sweep, "bert.json"));
#pragma once

#include <string>
#include <string_view>

#include "hyperoffload/report/budget_sweep.h"

namespace hyperoffload {

struct SweepPlotOptions {
  int width_px = 960;   // whole image
  int height_px = 480;  // whole image, axes, title and legend included
};

// A standalone SVG document (UTF-8, ends with a newline).
std::string sweep_plot_svg(const BudgetSweep& sweep, std::string_view trace_label,
                           const SweepPlotOptions& options = {});

}  // namespace hyperoffload
