#include "hyperoffload/report/sweep_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <vector>

#include "hyperoffload/report/internal/svg.h"

namespace hyperoffload {
namespace {

using internal::kAlertColor;
using internal::kSeriesColors;
using internal::append_axes;
using internal::append_y_grid;
using internal::nice_step;
using internal::PlotBox;
using internal::svg_escape;

constexpr double kMarginLeft = 78, kMarginRight = 24, kMarginTop = 62, kMarginBottom = 52;
constexpr std::string_view kBoundColor = "#7f7f7f";

// One point of a curve, in data units (budget %, overhead %).
struct Point {
  double budget_percent;
  double overhead_percent;
};

std::string polyline(const std::vector<Point>& points, auto x_of, auto y_of) {
  std::string text;
  for (const Point& p : points) text += fmt::format("{:.1f},{:.1f} ", x_of(p.budget_percent), y_of(p.overhead_percent));
  if (!text.empty()) text.pop_back();
  return text;
}

}  // namespace

std::string sweep_plot_svg(const BudgetSweep& sweep, std::string_view trace_label, const SweepPlotOptions& options) {
  const Comparison& comparison = sweep.comparison;
  const std::size_t planners = comparison.planner_count;
  const std::size_t budgets = comparison.budgets_bytes.size();
  // The curves in data units: per planner its feasible points, and the bound.
  std::vector<std::vector<Point>> curves(planners);
  std::vector<Point> bound;
  double x_min = 100.0, x_max = 0.0, y_max = 0.0;
  for (std::size_t b = 0; b < budgets; ++b) {
    const double percent = comparison.budget_percent(comparison.budgets_bytes[b]);
    x_min = std::min(x_min, percent);
    x_max = std::max(x_max, percent);
    if (const std::optional<double> ms = comparison.overhead_bound_ms(b); ms && comparison.compute_ms > 0.0) {
      bound.push_back({percent, 100.0 * *ms / comparison.compute_ms});
      y_max = std::max(y_max, bound.back().overhead_percent);
    }
    for (std::size_t p = 0; p < planners; ++p) {
      const ComparisonRow& row = sweep.row(b, p);
      if (!row.feasible()) continue;
      curves[p].push_back({percent, row.overhead_percent});
      y_max = std::max(y_max, row.overhead_percent);
    }
  }
  // The x axis from the 5%-multiple at or below the floor to 100%.
  x_min = std::floor(std::min(x_min, x_max) / 5.0) * 5.0;
  x_max = std::max(x_max, x_min + 5.0);
  const double y_step = nice_step(std::max(y_max * 1.05, 1.0), 6);
  const double y_top = std::ceil(std::max(y_max * 1.05, 1.0) / y_step) * y_step;
  const double x_step = nice_step(x_max - x_min, 10);

  const double width = options.width_px, height = options.height_px;
  const double plot_left = kMarginLeft, plot_right = width - kMarginRight;
  const double plot_top = kMarginTop, plot_bottom = height - kMarginBottom;
  const double plot_width = plot_right - plot_left, plot_height = plot_bottom - plot_top;
  auto x_of = [&](double percent) { return plot_left + (percent - x_min) / (x_max - x_min) * plot_width; };
  auto y_of = [&](double overhead) { return plot_bottom - overhead / y_top * plot_height; };

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      options.width_px, options.height_px);
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}: overhead against budget, {}</text>\n",
      plot_left, svg_escape(std::filesystem::path(trace_label).filename().string()),
      comparison.device_memory == DeviceMemory::kBudget ? "device holds only the budget" : "unlimited device memory");
  // Grid, ticks and tick labels.
  const PlotBox box{plot_left, plot_right, plot_top, plot_bottom};
  append_y_grid(svg, box, y_top, y_step);
  for (double t = x_min; t <= x_max + x_step / 2; t += x_step) {
    const double x = x_of(std::min(t, x_max));
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n", x,
                       plot_top, x, plot_bottom);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", x, plot_bottom + 16, t);
  }
  append_axes(svg, box, "budget (% of the unplanned peak)", "overhead (% of compute)", 52);

  // The bound, then each planner's curve and markers, then the violations.
  if (!bound.empty()) {
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\" points=\"{}\"/>\n",
        kBoundColor, polyline(bound, x_of, y_of));
  }
  for (std::size_t p = 0; p < planners; ++p) {
    const std::string_view color = kSeriesColors[p % kSeriesColors.size()];
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color,
                       polyline(curves[p], x_of, y_of));
    for (const Point& point : curves[p]) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", x_of(point.budget_percent),
                         y_of(point.overhead_percent), color);
    }
  }
  std::size_t marked = 0;
  for (std::size_t b = 0; b < budgets; ++b) {
    for (std::size_t p = 0; p < planners; ++p) {
      if (!sweep.violates(b, p)) continue;
      const ComparisonRow& row = sweep.row(b, p);
      // An infeasible point that broke feasibility sits on the x axis.
      const double overhead = row.feasible() ? row.overhead_percent : 0.0;
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"6\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                         x_of(comparison.budget_percent(row.budget_bytes)), y_of(overhead), kAlertColor);
      ++marked;
    }
  }

  // Legend, under the title.
  double x = plot_left;
  const double legend_y = 46;
  auto legend_item = [&](std::string_view color, std::string_view dash, std::string_view label) {
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", x,
        legend_y - 4, x + 22, legend_y - 4, color, dash);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", x + 28, legend_y, svg_escape(label));
    x += 28 + 7.0 * static_cast<double>(label.size()) + 18;
  };
  for (std::size_t p = 0; p < planners; ++p) {
    legend_item(kSeriesColors[p % kSeriesColors.size()], "", comparison.rows[p].planner);
  }
  if (!bound.empty()) legend_item(kBoundColor, " stroke-dasharray=\"6 4\"", "least overhead of any plan");
  if (marked > 0) {
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"6\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                       x + 11, legend_y - 4, kAlertColor);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">not monotone ({})</text>\n", x + 28, legend_y, marked);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace hyperoffload
