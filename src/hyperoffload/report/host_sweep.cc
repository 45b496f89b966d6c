#include "hyperoffload/report/host_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "hyperoffload/ir/byte_format.h"
#include "hyperoffload/plan/budget_policy.h"
#include "hyperoffload/report/internal/svg.h"

namespace hyperoffload {

Result<HostSweep> run_host_sweep(const Trace& trace, std::int64_t budget_bytes, const HostSweepOptions& options) {
  if (!(options.step_percent > 0.0) || !std::isfinite(options.step_percent)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("host sweep step: must be a positive percentage, got {}", options.step_percent));
  }
  HostSweep sweep;
  sweep.budget_bytes = budget_bytes;
  PlannerOptions reference_options;
  reference_options.device_memory = options.comparison.device_memory;
  HO_ASSIGN_OR_RETURN(BudgetedPlan reference,
                      plan_within_budget(trace, budget_bytes, kDefaultPlannerName, reference_options));
  sweep.reference_host_bytes = reference.validation.peak_host_bytes;
  for (double percent = 0.0; percent <= 100.0 + 1e-9; percent += options.step_percent) {
    const auto bytes =
        static_cast<std::int64_t>(std::floor(percent / 100.0 * static_cast<double>(sweep.reference_host_bytes)));
    if (!sweep.host_budgets_bytes.empty() && sweep.host_budgets_bytes.back() == bytes) continue;
    sweep.host_budgets_bytes.push_back(bytes);
  }
  sweep.host_budgets_bytes.push_back(std::nullopt);
  for (const std::optional<std::int64_t>& host : sweep.host_budgets_bytes) {
    ComparisonOptions comparison = options.comparison;
    comparison.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, static_cast<double>(budget_bytes)}};
    comparison.host_budget_bytes = host;
    HO_ASSIGN_OR_RETURN(Comparison compared, run_comparison(trace, comparison));
    sweep.comparisons.push_back(std::move(compared));
  }
  return sweep;
}

namespace {

double host_percent(const HostSweep& sweep, std::size_t i) {
  const std::optional<std::int64_t>& host = sweep.host_budgets_bytes[i];
  if (!host) return 110.0;  // unlimited: drawn past 100%
  return sweep.reference_host_bytes > 0
             ? 100.0 * static_cast<double>(*host) / static_cast<double>(sweep.reference_host_bytes)
             : 0.0;
}

}  // namespace

std::string host_sweep_table(const HostSweep& sweep) {
  std::string out = fmt::format(
      "device budget {}; host budgets as % of {} (the {} plan's peak host bytes with unlimited host memory)\n",
      format_bytes(sweep.budget_bytes), format_bytes(sweep.reference_host_bytes), kDefaultPlannerName);
  if (sweep.comparisons.empty()) return out;
  const Comparison& first = sweep.comparisons.front();
  out += fmt::format("{:>10} {:>12}", "host %", "host budget");
  for (std::size_t p = 0; p < first.planner_count; ++p) {
    out += fmt::format("  {:>24}", first.rows[p].planner + " overhead (host)");
  }
  out += "\n";
  for (std::size_t i = 0; i < sweep.comparisons.size(); ++i) {
    const std::optional<std::int64_t>& host = sweep.host_budgets_bytes[i];
    out += host ? fmt::format("{:>9.0f}% {:>12}", host_percent(sweep, i), format_bytes(*host))
                : fmt::format("{:>10} {:>12}", "-", "unlimited");
    for (const ComparisonRow& row : sweep.comparisons[i].rows) {
      const std::string cell = !row.refused.empty() ? std::string("refused")
                               : row.feasible()     ? fmt::format("{:.2f}% ({})", row.overhead_percent,
                                                                  format_bytes(row.peak_host_bytes))
                                                    : std::string("over budget");
      out += fmt::format("  {:>24}", cell);
    }
    out += "\n";
  }
  return out;
}

std::string host_sweep_plot_svg(const HostSweep& sweep, std::string_view trace_label) {
  using internal::PlotBox;
  constexpr double kWidth = 960, kHeight = 480, kLeft = 78, kRight = 24, kTop = 62, kBottom = 52;
  const std::size_t planners = sweep.comparisons.empty() ? 0 : sweep.comparisons.front().planner_count;
  struct Point {
    double x, y;
  };
  std::vector<std::vector<Point>> curves(planners);
  double y_max = 0.0;
  for (std::size_t i = 0; i < sweep.comparisons.size(); ++i) {
    for (std::size_t p = 0; p < planners; ++p) {
      const ComparisonRow& row = sweep.comparisons[i].rows[p];
      if (!row.refused.empty() || !row.feasible()) continue;
      curves[p].push_back({host_percent(sweep, i), row.overhead_percent});
      y_max = std::max(y_max, row.overhead_percent);
    }
  }
  const double x_min = 0.0, x_max = 110.0;
  const double y_step = internal::nice_step(std::max(y_max * 1.05, 1.0), 6);
  const double y_top = std::ceil(std::max(y_max * 1.05, 1.0) / y_step) * y_step;
  const PlotBox box{kLeft, kWidth - kRight, kTop, kHeight - kBottom};
  auto x_of = [&](double x) { return box.left + (x - x_min) / (x_max - x_min) * box.width(); };
  auto y_of = [&](double y) { return box.bottom - y / y_top * box.height(); };
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}: overhead against host budget at a "
      "device budget of {}</text>\n",
      box.left, internal::svg_escape(std::filesystem::path(trace_label).filename().string()),
      format_bytes(sweep.budget_bytes));
  internal::append_y_grid(svg, box, y_top, y_step);
  for (double t = 0.0; t <= 100.0 + 1e-9; t += 10.0) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e0e0e0\"/>\n",
                       x_of(t), box.top, box.bottom);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", x_of(t),
                       box.bottom + 16, t);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">unlimited</text>\n", x_of(110.0),
                     box.bottom + 16);
  internal::append_axes(svg, box,
                        fmt::format("host budget (% of {}, the hybrid plan's host bytes)",
                                    format_bytes(sweep.reference_host_bytes)),
                        "overhead (% of compute)", 52);
  double legend_x = box.left;
  for (std::size_t p = 0; p < planners; ++p) {
    const std::string_view color = internal::kSeriesColors[p % internal::kSeriesColors.size()];
    std::string points;
    for (const Point& point : curves[p]) points += fmt::format("{:.1f},{:.1f} ", x_of(point.x), y_of(point.y));
    if (!points.empty()) points.pop_back();
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color, points);
    for (const Point& point : curves[p]) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", x_of(point.x),
                         y_of(point.y), color);
    }
    const std::string& label = sweep.comparisons.front().rows[p].planner;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"42\" x2=\"{1:.1f}\" y2=\"42\" stroke=\"{2}\" stroke-width=\"2\"/>\n"
        "<text x=\"{3:.1f}\" y=\"46\">{4}</text>\n",
        legend_x, legend_x + 22, color, legend_x + 28, internal::svg_escape(label));
    legend_x += 28 + 7.0 * static_cast<double>(label.size()) + 18;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace hyperoffload
