#include "hyperoffload/report/memory_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>

#include "hyperoffload/plan/budget.h"
#include "hyperoffload/report/internal/svg.h"

namespace hyperoffload {
namespace {

using internal::append_axes;
using internal::append_y_grid;
using internal::nice_step;
using internal::PlotBox;
using internal::svg_escape;
constexpr auto& kColors = internal::kSeriesColors;
constexpr std::string_view kBudgetColor = internal::kAlertColor;
constexpr double kMarginLeft = 78, kMarginRight = 24, kMarginTop = 58, kMarginBottom = 52;

struct ByteUnit {
  std::string_view name;
  double bytes;
};

ByteUnit unit_for(double max_bytes) {
  if (max_bytes >= 1073741824.0) return {"GiB", 1073741824.0};
  if (max_bytes >= 1048576.0) return {"MiB", 1048576.0};
  if (max_bytes >= 1024.0) return {"KiB", 1024.0};
  return {"B", 1.0};
}

// Per pixel column, the highest value the step curve takes inside it (NaN where
// the curve has not started).
std::vector<double> column_maxima(const PlotSeries& series, double end_ms, std::size_t columns) {
  std::vector<double> maxima(columns, std::nan(""));
  // A time's column as a fraction of end_ms: with a subnormal end_ms a column's
  // width in ms underflows to 0, and dividing by it gave NaN column indices.
  auto column_of = [&](double time_ms) { return time_ms / end_ms * static_cast<double>(columns); };
  auto clamp_column = [&](double column) {
    return static_cast<std::size_t>(std::clamp(column, 0.0, static_cast<double>(columns - 1)));
  };
  for (std::size_t i = 0; i < series.memory.size(); ++i) {
    // Sample i holds over [from, to); an instantaneous one still shows.
    const double from = series.memory[i].time_ms;
    const double to = i + 1 < series.memory.size() ? series.memory[i + 1].time_ms : std::max(from, series.end_ms);
    const auto value = static_cast<double>(series.memory[i].device_bytes);
    const std::size_t first = clamp_column(std::floor(column_of(from)));
    const std::size_t last = to > from ? clamp_column(std::ceil(column_of(to)) - 1.0) : first;
    for (std::size_t c = first; c <= std::max(first, last); ++c) {
      if (std::isnan(maxima[c]) || value > maxima[c]) maxima[c] = value;
    }
  }
  return maxima;
}

void append_panel(std::string& svg, const PlotPanel& panel, double top, const MemoryPlotOptions& options) {
  const double width = options.width_px;
  const double plot_left = kMarginLeft, plot_right = width - kMarginRight;
  const double plot_top = top + kMarginTop, plot_bottom = top + options.panel_height_px - kMarginBottom;
  const double plot_width = plot_right - plot_left, plot_height = plot_bottom - plot_top;

  double end_ms = 0.0, max_bytes = static_cast<double>(std::max<std::int64_t>(panel.budget_bytes, 0));
  for (const PlotSeries& series : panel.series) {
    end_ms = std::max(end_ms, series.end_ms);
    for (const MemorySample& sample : series.memory) {
      end_ms = std::max(end_ms, sample.time_ms);
      max_bytes = std::max(max_bytes, static_cast<double>(sample.device_bytes));
    }
  }
  if (end_ms <= 0.0) end_ms = 1.0;
  const ByteUnit unit = unit_for(max_bytes);
  const double y_step = nice_step(std::max(max_bytes * 1.05, 1.0) / unit.bytes, 5);
  const double y_max = std::ceil(std::max(max_bytes * 1.05, 1.0) / unit.bytes / y_step) * y_step;
  const double x_step = nice_step(end_ms, 8);
  auto x_of = [&](double time_ms) { return plot_left + time_ms / end_ms * plot_width; };
  auto y_of = [&](double bytes) { return plot_bottom - bytes / unit.bytes / y_max * plot_height; };

  svg += fmt::format(
      "<g class=\"panel\">\n<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
      plot_left, top + 22, svg_escape(panel.title));
  // Grid, ticks and tick labels.
  const PlotBox box{plot_left, plot_right, plot_top, plot_bottom};
  append_y_grid(svg, box, y_max, y_step);
  for (double t = 0.0; t <= end_ms + x_step / 2; t += x_step) {
    const double x = x_of(std::min(t, end_ms));
    if (t > end_ms) break;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n", x,
                       plot_top, x, plot_bottom);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", x, plot_bottom + 16, t);
  }
  // Axes and their titles, with units.
  append_axes(svg, box, "time (ms)", fmt::format("device memory ({})", unit.name), 56);

  // Curves.
  const auto columns = static_cast<std::size_t>(std::max(1.0, plot_width));
  for (std::size_t s = 0; s < panel.series.size(); ++s) {
    const std::vector<double> maxima = column_maxima(panel.series[s], end_ms, columns);
    std::string points;
    for (std::size_t c = 0; c < columns; ++c) {
      if (std::isnan(maxima[c])) continue;
      const double y = y_of(maxima[c]);
      points += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", plot_left + static_cast<double>(c), y,
                            plot_left + static_cast<double>(c + 1), y);
    }
    if (!points.empty()) points.pop_back();
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                       kColors[s % kColors.size()], points);
  }
  // Budget line.
  if (panel.budget_bytes >= 0) {
    const double y = y_of(static_cast<double>(panel.budget_bytes));
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"6 4\"/>\n",
        plot_left, y, plot_right, y, kBudgetColor);
  }
  // Legend, in the top margin under the title.
  double x = plot_left;
  const double legend_y = top + 42;
  auto legend_item = [&](std::string_view color, std::string_view dash, std::string_view label) {
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", x,
        legend_y - 4, x + 22, legend_y - 4, color, dash);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", x + 28, legend_y, svg_escape(label));
    x += 28 + 7.0 * static_cast<double>(label.size()) + 18;
  };
  for (std::size_t s = 0; s < panel.series.size(); ++s) {
    legend_item(kColors[s % kColors.size()], "", panel.series[s].label);
  }
  if (panel.budget_bytes >= 0) {
    legend_item(kBudgetColor, " stroke-dasharray=\"6 4\"", "budget " + format_bytes(panel.budget_bytes));
  }
  svg += "</g>\n";
}

}  // namespace

std::string memory_plot_svg(std::span<const PlotPanel> panels, const MemoryPlotOptions& options) {
  const int height = options.panel_height_px * static_cast<int>(std::max<std::size_t>(panels.size(), 1));
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      options.width_px, height);
  for (std::size_t p = 0; p < panels.size(); ++p) {
    append_panel(svg, panels[p], static_cast<double>(p) * options.panel_height_px, options);
  }
  svg += "</svg>\n";
  return svg;
}

std::string comparison_plot_svg(const Comparison& comparison, std::string_view trace_label,
                                const MemoryPlotOptions& options) {
  std::vector<PlotPanel> panels;
  const std::size_t planners = comparison.planner_count;
  for (std::size_t b = 0; b < comparison.budgets_bytes.size(); ++b) {
    PlotPanel panel;
    const std::int64_t budget = comparison.budgets_bytes[b];
    panel.title = fmt::format("{}: budget {} ({:.1f}% of the unplanned peak)",
                              std::filesystem::path(trace_label).filename().string(), format_bytes(budget),
                              comparison.budget_percent(budget));
    panel.budget_bytes = budget;
    for (std::size_t p = 0; p < planners; ++p) {
      const ComparisonRow& row = comparison.rows[b * planners + p];
      panel.series.push_back(PlotSeries{
          fmt::format("{} (timed peak {})", row.planner, format_bytes(row.timed_peak_bytes)), row.memory, row.end_ms});
    }
    panels.push_back(std::move(panel));
  }
  return memory_plot_svg(panels, options);
}

}  // namespace hyperoffload
