// SVG memory plots: a well-formed document with axes, units, legend, budget
// line, and curves that keep their peaks when reduced to pixel columns.
#include "hyperoffload/report/memory_plot.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <limits>
#include <string>
#include <vector>

namespace hyperoffload {
namespace {

// Every opened element is closed, in order (self-closing tags count as both).
// A hand scanner rather than std::regex: libstdc++'s regex recurses per
// character and overflows the stack on long path data under ASan.
bool balanced_tags(const std::string& svg) {
  std::vector<std::string> open;
  for (std::size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    std::size_t name_start = at + 1;
    const bool closing = name_start < svg.size() && svg[name_start] == '/';
    if (closing) ++name_start;
    std::size_t name_end = name_start;
    while (name_end < svg.size() && std::isalpha(static_cast<unsigned char>(svg[name_end]))) ++name_end;
    if (name_end == name_start) continue;  // "<?xml", "<!--": not an element
    const std::size_t end = svg.find('>', name_end);
    if (end == std::string::npos) return false;
    const std::string name = svg.substr(name_start, name_end - name_start);
    if (svg[end - 1] == '/') continue;  // self-closing
    if (closing) {
      if (open.empty() || open.back() != name) return false;
      open.pop_back();
    } else {
      open.push_back(name);
    }
  }
  return open.empty();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Found by fuzzing (fuzz/planners_fuzzer.cc): a step of subnormal length, here
// 1e-323 ms = 2d with d the smallest double, made the tick step 0 (10^-324
// underflows) and the tick loop endless; then a pixel column's width (2d / 858)
// underflowed to 0 and column indices became NaN. Now the step is d: ticks at
// 0, d and 2d, three labels plus the two axis titles. The 858 columns (960 -
// 78 - 24) split at d: 0 B in columns 0..428 (x 78..507, y 288.0), 100 B from
// column 429 (x 507 on); the axis goes to 120 B (step 20), so 100 B is at
// 288 - 100/120 * 230 = 96.3.
TEST(MemoryPlot, DrawsASubnormalMakespan) {
  const double d = std::numeric_limits<double>::denorm_min();
  const std::vector<MemorySample> samples = {{0.0, 0}, {d, 100}};
  PlotPanel panel;
  panel.series = {PlotSeries{"peak", samples, 2 * d}};
  const std::string svg = memory_plot_svg(std::span<const PlotPanel>(&panel, 1));
  EXPECT_TRUE(balanced_tags(svg));
  EXPECT_EQ(count(svg, "text-anchor=\"middle\""), 3U + 2U);
  EXPECT_EQ(count(svg, fmt::format(">{:g}<", 2 * d)), 1U);
  EXPECT_EQ(count(svg, "506.0,288.0 507.0,288.0 507.0,96.3 508.0,96.3"), 1U);
  EXPECT_EQ(count(svg, "935.0,96.3 936.0,96.3\""), 1U);
}

// One panel, budget 100 B, a curve 0 → 200 B (for 1 µs at 5 ms) → 50 B over 10
// ms. The y axis is in bytes: max 200 * 1.05 = 210 → step 50 → axis to 250.
// The plot area spans y 58..288 (340 tall, margins 58 and 52), so 100 B is at
// 288 - 100/250 * 230 = 196.0 and the 200 B spike at 104.0.
TEST(MemoryPlot, DrawsAxesLegendBudgetLineAndKeepsPeaks) {
  const std::vector<MemorySample> samples = {{0.0, 0}, {5.0, 200}, {5.001, 50}};
  PlotPanel panel;
  panel.title = "a <tricky> & \"quoted\" title";
  panel.budget_bytes = 100;
  panel.series = {PlotSeries{"greedy", samples, 10.0}, PlotSeries{"peak", samples, 10.0}};
  const std::string svg = memory_plot_svg(std::span<const PlotPanel>(&panel, 1));
  EXPECT_EQ(svg.rfind("<?xml", 0), 0U);
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_TRUE(balanced_tags(svg));
  EXPECT_FALSE(balanced_tags("<svg><g><rect/></svg>"));  // the checker itself can fail
  EXPECT_NE(svg.find("a &lt;tricky&gt; &amp; &quot;quoted&quot; title"), std::string::npos);
  EXPECT_NE(svg.find(">time (ms)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">device memory (B)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">greedy</text>"), std::string::npos);
  EXPECT_NE(svg.find(">peak</text>"), std::string::npos);
  EXPECT_NE(svg.find(">budget 100 B</text>"), std::string::npos);
  EXPECT_NE(svg.find("y1=\"196.0\" x2=\"936.0\" y2=\"196.0\" stroke=\"#d62728\""), std::string::npos) << svg;
  EXPECT_EQ(count(svg, "<polyline"), 2U);
  EXPECT_NE(svg.find(",104.0 "), std::string::npos);      // the 1 µs spike survives
  EXPECT_NE(svg.find(">250</text>"), std::string::npos);  // top y tick
  EXPECT_NE(svg.find(">10</text>"), std::string::npos);   // last x tick
}

TEST(MemoryPlot, StacksOnePanelPerBudgetAndPicksByteUnits) {
  const std::vector<MemorySample> gib = {{0.0, 3LL << 30}};
  const std::vector<MemorySample> mib = {{0.0, 5LL << 20}};
  std::vector<PlotPanel> panels(2);
  panels[0].series = {PlotSeries{"a", gib, 1.0}};
  panels[1].series = {PlotSeries{"b", mib, 1.0}};
  panels[1].budget_bytes = -1;  // no budget line
  MemoryPlotOptions options;
  options.panel_height_px = 300;
  const std::string svg = memory_plot_svg(panels, options);
  EXPECT_NE(svg.find("height=\"600\""), std::string::npos);
  EXPECT_EQ(count(svg, "<g class=\"panel\">"), 2U);
  EXPECT_NE(svg.find("device memory (GiB)"), std::string::npos);
  EXPECT_NE(svg.find("device memory (MiB)"), std::string::npos);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 0U);
  EXPECT_TRUE(balanced_tags(svg));
}

TEST(MemoryPlot, DrawsAComparisonWithOneCurvePerPlanner) {
  Comparison comparison;
  comparison.unplanned_peak_bytes = 400;
  comparison.budgets_bytes = {200};
  comparison.planner_count = 2;
  comparison.rows.resize(2);
  comparison.rows[0].planner = "greedy";
  comparison.rows[0].timed_peak_bytes = 300;
  comparison.rows[0].memory = {{0.0, 300}};
  comparison.rows[0].end_ms = 2.0;
  comparison.rows[1].planner = "peak";
  comparison.rows[1].timed_peak_bytes = 200;
  comparison.rows[1].memory = {{0.0, 200}};
  comparison.rows[1].end_ms = 2.0;
  const std::string svg = comparison_plot_svg(comparison, "/some/dir/model.json");
  EXPECT_NE(svg.find("model.json: budget 200 B (50.0% of the unplanned peak)"), std::string::npos);
  EXPECT_EQ(svg.find("/some/dir"), std::string::npos);
  EXPECT_NE(svg.find(">greedy (timed peak 300 B)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">peak (timed peak 200 B)</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2U);
}

}  // namespace
}  // namespace hyperoffload
