// SVG plots of device memory over time: one panel per budget, one curve per
// planner, the budget as a dashed line, axes with ticks and units, a legend.
//
// Curves are drawn from Timeline memory samples (a step function: each sample
// holds until the next). Long timelines are reduced to one point per pixel
// column keeping the column's maximum, so a 1M-op step still gives a small file
// and no peak is lost.
//
//   const std::string svg = comparison_plot_svg(comparison, "bert.json");
//   write_file_atomically("memory.svg", svg);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/report/comparison.h"

namespace hyperoffload {

struct PlotSeries {
  std::string label;                     // legend text
  std::span<const MemorySample> memory;  // ordered by time
  double end_ms = 0.0;                   // the curve holds its last value until here
};

struct PlotPanel {
  std::string title;
  std::int64_t budget_bytes = -1;  // no line when negative
  std::vector<PlotSeries> series;
};

struct MemoryPlotOptions {
  int width_px = 960;         // whole image
  int panel_height_px = 340;  // each panel, axes and labels included
};

// A standalone SVG document (UTF-8, ends with a newline).
std::string memory_plot_svg(std::span<const PlotPanel> panels, const MemoryPlotOptions& options = {});

// One panel per budget of a comparison run with RecordTimeline::kYes.
std::string comparison_plot_svg(const Comparison& comparison, std::string_view trace_label,
                                const MemoryPlotOptions& options = {});

}  // namespace hyperoffload
