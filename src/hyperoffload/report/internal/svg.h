// Pieces shared by the report's SVG plots (memory_plot.h, sweep_plot.h): the
// series colours, text escaping and axis steps.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace hyperoffload::internal {

// One colour per series, in order (cycled); the budget line and marks of
// problems use kAlertColor.
inline constexpr std::array<std::string_view, 6> kSeriesColors = {"#1f77b4", "#ff7f0e", "#2ca02c",
                                                                  "#9467bd", "#8c564b", "#e377c2"};
inline constexpr std::string_view kAlertColor = "#d62728";

// `text` with &, <, > and " escaped for SVG text and attributes.
std::string svg_escape(std::string_view text);

// A 1-2-5 step giving about `target` intervals over `range` (> 0). Below the
// normal doubles (a step of 1e-323 ms) the power of ten underflows to 0, and a
// step of 0 never ends the tick loops; there the step is range / target itself,
// at least the smallest double.
double nice_step(double range, int target);

// A plot's drawing area, in pixels (y grows downwards).
struct PlotBox {
  double left = 0.0;
  double right = 0.0;
  double top = 0.0;
  double bottom = 0.0;
  double width() const { return right - left; }
  double height() const { return bottom - top; }
};

// Horizontal grid lines with their labels, every `y_step` from 0 to `y_max`
// (the box's top).
void append_y_grid(std::string& svg, const PlotBox& box, double y_max, double y_step);

// The two axes and their titles: `x_title` below the box, `y_title` rotated,
// `y_title_gap_px` left of it.
void append_axes(std::string& svg, const PlotBox& box, std::string_view x_title, std::string_view y_title,
                 double y_title_gap_px);

}  // namespace hyperoffload::internal
