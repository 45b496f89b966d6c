#include "hyperoffload/report/sweep_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "hyperoffload/plan/budget.h"
#include "hyperoffload/report/internal/comparison_json.h"

namespace hyperoffload {
namespace {

// "3.26 GiB (25.0%)": a ladder point for the violation lines.
std::string budget_label(const Comparison& comparison, std::size_t budget) {
  const std::int64_t bytes = comparison.budgets_bytes[budget];
  return fmt::format("{} ({:.1f}%)", format_bytes(bytes), comparison.budget_percent(bytes));
}

std::string violation_value(SweepProperty property, double value) {
  switch (property) {
    case SweepProperty::kOverheadIncreases:
      return fmt::format("{:.4f}%", value);
    case SweepProperty::kFeasibilityLost:
      return value > 0.0 ? "feasible" : "infeasible";
    case SweepProperty::kTimedPeakAboveBudget:
    case SweepProperty::kTimedPeakDecreases:
      break;
  }
  return fmt::format("{} ({} bytes)", format_bytes(static_cast<std::int64_t>(value)),
                     group_digits(static_cast<std::int64_t>(value)));
}

std::string memory_cap_words(DeviceMemory device_memory) {
  return device_memory == DeviceMemory::kBudget ? "a device that holds only the budget"
                                                : "a device with unlimited memory";
}

}  // namespace

std::string format_sweep_table(const BudgetSweep& sweep, std::string_view trace_label) {
  const Comparison& comparison = sweep.comparison;
  std::string out;
  out += fmt::format("trace      {}: {} ops, {} storages, {:.3f} ms of compute\n", trace_label,
                     group_digits(comparison.op_count), group_digits(comparison.storage_count), comparison.compute_ms);
  out += fmt::format("unplanned  {} op-granular peak (op {})\n", format_bytes(comparison.unplanned_peak_bytes),
                     comparison.unplanned_peak_op);
  out += fmt::format("sweep      on {}, {} copy engine{}: from the floor, {} ({:.1f}%), to the unplanned peak in "
                     "steps of {:g}%\n",
                     memory_cap_words(comparison.device_memory), static_cast<int>(comparison.copy_engines),
                     comparison.copy_engines == CopyEngines::kOne ? "" : "s", format_bytes(sweep.floor_bytes),
                     comparison.budget_percent(sweep.floor_bytes), sweep.step_percent);

  // Header, then one line per budget: budget, percent, the least overhead any
  // plan can have, then per planner its overhead and timed peak.
  const std::size_t planners = comparison.planner_count;
  std::vector<std::string> headers = {"budget", "% peak", "bound"};
  std::vector<bool> right = {false, true, true};
  for (std::size_t p = 0; p < planners; ++p) {
    const std::string& name = comparison.rows[p].planner;
    headers.push_back(name + " overhead");
    headers.push_back(name + " timed peak");
    right.push_back(true);
    right.push_back(true);
  }
  std::vector<std::vector<std::string>> body;
  for (std::size_t b = 0; b < comparison.budgets_bytes.size(); ++b) {
    std::vector<std::string> line;
    const std::int64_t budget = comparison.budgets_bytes[b];
    line.push_back(format_bytes(budget));
    line.push_back(fmt::format("{:.1f}%", comparison.budget_percent(budget)));
    const std::optional<double> bound_ms = comparison.overhead_bound_ms(b);
    line.push_back(bound_ms && comparison.compute_ms > 0.0
                       ? fmt::format("{:.2f}%", 100.0 * *bound_ms / comparison.compute_ms)
                       : std::string("-"));
    for (std::size_t p = 0; p < planners; ++p) {
      const ComparisonRow& row = sweep.row(b, p);
      const std::string mark = sweep.violates(b, p) ? "*" : "";
      if (!row.feasible()) {
        line.push_back(mark + (row.refused.empty() ? "-" : "refused"));
        line.push_back("-");
        continue;
      }
      line.push_back(mark + fmt::format("{:.2f}%", row.overhead_percent));
      line.push_back(format_bytes(row.timed_peak_bytes));
    }
    body.push_back(std::move(line));
  }
  std::vector<std::size_t> widths(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) {
    widths[c] = headers[c].size();
    for (const auto& line : body) widths[c] = std::max(widths[c], line[c].size());
  }
  auto append_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string pad(widths[c] - cells[c].size(), ' ');
      line += right[c] ? pad + cells[c] : cells[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  out += "\n";
  append_line(headers);
  for (const auto& line : body) append_line(line);

  out += "\n";
  if (sweep.violations.empty()) {
    out += "monotone: every planner's timed peak is within the budget and never lower, and its overhead never "
           "higher, than at a smaller budget\n";
  }
  for (const SweepViolation& v : sweep.violations) {
    out += fmt::format("* {} at {}: {}: {}", v.planner_name, budget_label(comparison, v.budget), to_string(v.property),
                       violation_value(v.property, v.value));
    if (v.property == SweepProperty::kTimedPeakAboveBudget) {
      out += "\n";
    } else {
      out += fmt::format(" against {} at {}\n", violation_value(v.property, v.reference_value),
                         budget_label(comparison, v.reference_budget));
    }
  }
  out +=
      "\nbound: the least stall plus recompute any plan within the budget adds, as a percentage of compute "
      "(docs/HYBRID_PLANNER.md); overhead: the plan's stall plus recompute, as a percentage of compute; "
      "timed peak: the simulated device memory's maximum over time; -: not feasible at that budget\n";
  return out;
}

std::string sweep_to_json(const BudgetSweep& sweep, std::string_view trace_label) {
  const Comparison& comparison = sweep.comparison;
  nlohmann::ordered_json root;
  internal::add_comparison_header(root, comparison, trace_label);
  root["floor_bytes"] = sweep.floor_bytes;
  root["step_percent"] = sweep.step_percent;
  auto optional_ms = [](std::optional<double> ms) { return ms ? nlohmann::ordered_json(*ms) : nullptr; };
  nlohmann::ordered_json budgets = nlohmann::ordered_json::array();
  for (std::size_t b = 0; b < comparison.budgets_bytes.size(); ++b) {
    const std::int64_t budget = comparison.budgets_bytes[b];
    nlohmann::ordered_json results = nlohmann::ordered_json::array();
    for (std::size_t p = 0; p < comparison.planner_count; ++p) {
      const ComparisonRow& row = sweep.row(b, p);
      nlohmann::ordered_json broken = nlohmann::ordered_json::array();
      for (const SweepViolation& v : sweep.violations) {
        if (v.budget == b && v.planner == p) broken.push_back(to_string(v.property));
      }
      nlohmann::ordered_json item = {{"planner", row.planner},
                                     {"feasible", row.feasible()},
                                     {"op_peak_bytes", row.op_peak_bytes},
                                     {"timed_peak_bytes", row.timed_peak_bytes},
                                     {"overhead_percent", row.overhead_percent},
                                     {"stall_ms", row.stall_ms},
                                     {"memory_stall_ms", row.memory_stall_ms},
                                     {"recompute_ms", row.recompute_ms},
                                     {"recompute_count", row.recompute_count},
                                     {"bytes_moved", row.bytes_moved()},
                                     {"planning_ms", row.planning_ms},
                                     {"violations", std::move(broken)}};
      if (row.floor) item["floor"] = {{"op", row.floor->op}, {"bytes", row.floor->bytes}};
      if (!row.refused.empty()) item["refused"] = row.refused;
      results.push_back(std::move(item));
    }
    budgets.push_back({{"budget_bytes", budget},
                       {"budget_percent", comparison.budget_percent(budget)},
                       {"stall_lower_bound_ms", optional_ms(comparison.stall_bound_ms(b))},
                       {"overhead_lower_bound_ms", optional_ms(comparison.overhead_bound_ms(b))},
                       {"results", std::move(results)}});
  }
  root["budgets"] = std::move(budgets);
  nlohmann::ordered_json violations = nlohmann::ordered_json::array();
  for (const SweepViolation& v : sweep.violations) {
    violations.push_back({{"planner", v.planner_name},
                          {"property", to_string(v.property)},
                          {"budget_bytes", comparison.budgets_bytes[v.budget]},
                          {"reference_budget_bytes", comparison.budgets_bytes[v.reference_budget]},
                          {"value", v.value},
                          {"reference_value", v.reference_value}});
  }
  root["violations"] = std::move(violations);
  return root.dump(2) + "\n";
}

}  // namespace hyperoffload
