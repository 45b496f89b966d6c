#include "hyperoffload/report/comparison_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "hyperoffload/report/internal/comparison_json.h"

namespace hyperoffload {
namespace {

struct Column {
  std::string_view header;
  bool right_aligned;
};

constexpr std::array<Column, 10> kColumns = {{{"planner", false},
                                              {"feasible", false},
                                              {"op peak", true},
                                              {"timed peak", true},
                                              {"stall ms", true},
                                              {"recompute ms (n)", true},
                                              {"above bound", true},
                                             {"overhead %", true},
                                             {"bytes moved", true},
                                             {"planning ms", true}}};

std::array<std::string, kColumns.size()> cells(const ComparisonRow& row, std::optional<double> bound_ms) {
  if (!row.refused.empty()) {
    std::array<std::string, kColumns.size()> refused;
    refused.fill("-");
    refused[0] = row.planner;
    refused[1] = "refused";
    return refused;
  }
  const std::optional<double> above = row.overhead_above_bound_ms(bound_ms);
  return {row.planner,
          row.valid ? (row.feasible() ? "yes" : "no") : "INVALID",
          format_bytes(row.op_peak_bytes),
          format_bytes(row.timed_peak_bytes) + (row.timed_within_budget() ? "  " : " !"),
          fmt::format("{:.3f}", row.stall_ms),
          row.recompute_count > 0 ? fmt::format("{:.3f} ({})", row.recompute_ms, row.recompute_count) : "-",
          above ? fmt::format("{:.3f}", *above) : "-",
          fmt::format("{:.2f}%", row.overhead_percent),
          format_bytes(row.bytes_moved()),
          fmt::format("{:.2f}", row.planning_ms)};
}

void append_table(std::string& out, std::span<const ComparisonRow> rows, std::optional<double> bound_ms) {
  std::vector<std::array<std::string, kColumns.size()>> body;
  std::array<std::size_t, kColumns.size()> widths{};
  for (std::size_t c = 0; c < kColumns.size(); ++c) widths[c] = kColumns[c].header.size();
  for (const ComparisonRow& row : rows) {
    body.push_back(cells(row, bound_ms));
    for (std::size_t c = 0; c < kColumns.size(); ++c) widths[c] = std::max(widths[c], body.back()[c].size());
  }
  auto append_line = [&](auto cell_at) {
    std::string line;
    for (std::size_t c = 0; c < kColumns.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string_view text = cell_at(c);
      const std::string pad(widths[c] - text.size(), ' ');
      line += kColumns[c].right_aligned ? pad + std::string(text) : std::string(text) + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  append_line([&](std::size_t c) { return kColumns[c].header; });
  for (const auto& row : body) append_line([&](std::size_t c) { return std::string_view(row[c]); });
}

}  // namespace

std::string format_comparison_table(const Comparison& comparison, std::string_view trace_label) {
  std::string out;
  out += fmt::format("trace      {}: {} ops, {} storages, {:.3f} ms of compute\n", trace_label,
                     group_digits(comparison.op_count), group_digits(comparison.storage_count), comparison.compute_ms);
  out += fmt::format("unplanned  {} op-granular peak (op {})\n", format_bytes(comparison.unplanned_peak_bytes),
                     comparison.unplanned_peak_op);
  out += fmt::format(
      "copies     {} engine{}, D2H {:.4g} GiB/s, H2D {:.4g} GiB/s\n", static_cast<int>(comparison.copy_engines),
      comparison.copy_engines == CopyEngines::kOne ? " shared by both directions" : "s, one per direction",
      comparison.d2h_bandwidth_gib_per_s, comparison.h2d_bandwidth_gib_per_s);
  out += comparison.device_memory == DeviceMemory::kBudget
             ? "memory     capped at the budget: ops and prefetches wait for memory to be freed (stall includes it)\n"
             : "memory     unlimited (--memory-cap unlimited): freed whenever copies allow, nothing waits for it; "
               "the timed peak may exceed the budget\n";
  const std::size_t planners = comparison.planner_count;
  for (std::size_t b = 0; b < comparison.budgets_bytes.size(); ++b) {
    const std::int64_t budget = comparison.budgets_bytes[b];
    const std::span<const ComparisonRow> rows(comparison.rows.data() + b * planners, planners);
    std::string floor;
    for (const ComparisonRow& row : rows) {
      if (row.floor) {
        floor = fmt::format(", floor {} at op {}", format_bytes(row.floor->bytes), row.floor->op);
        break;
      }
    }
    for (const ComparisonRow& row : rows) {
      if (row.planner != "recompute" || !row.floor || !comparison.recompute_only_limit) continue;
      // Beside the trace's floor: how low recompute alone goes, and how low
      // any recompute-only plan could (docs/HYBRID_PLANNER.md, "No artificial floor").
      floor += fmt::format("; recompute-only floor {} at op {} (limit {} at op {})", format_bytes(row.floor->bytes),
                           row.floor->op, format_bytes(comparison.recompute_only_limit->bytes),
                           comparison.recompute_only_limit->op);
    }
    const std::optional<double> bound_ms = comparison.stall_bound_ms(b);
    std::string bound;
    if (b < comparison.stall_bounds_ms.size()) {
      bound = bound_ms ? fmt::format("; offload-only stall bound {:.3f} ms", *bound_ms)
                       : std::string("; no offload-only plan fits it");
    }
    out += fmt::format("\nbudget {} ({:.1f}% of the unplanned peak){}{}\n", format_bytes(budget),
                       comparison.budget_percent(budget), floor, bound);
    if (b < comparison.overhead_bounds_ms.size()) {
      const std::optional<double> overhead_ms = comparison.overhead_bound_ms(b);
      const auto percent = [&](double ms) { return comparison.compute_ms > 0.0 ? 100.0 * ms / comparison.compute_ms : 0.0; };
      std::string recompute_only;
      if (const std::optional<double> least_ms = comparison.recompute_only_bound_ms(b)) {
        recompute_only = std::isinf(*least_ms) ? std::string("; no recompute-only plan fits it")
                                               : fmt::format("; a recompute-only plan at least {:.3f} ms ({:.2f}%)",
                                                             *least_ms, percent(*least_ms));
      }
      out += overhead_ms ? fmt::format("any plan adds at least {:.3f} ms of stall plus recompute ({:.2f}% of compute){}\n",
                                       *overhead_ms, percent(*overhead_ms), recompute_only)
                         : std::string("no plan fits it: an op touches more than the budget\n");
    }
    append_table(out, rows, bound_ms);
    if (comparison.host_budget_bytes) {
      std::vector<std::string> hosts;
      for (const ComparisonRow& row : rows) {
        hosts.push_back(fmt::format("{} {}", row.planner, row.refused.empty() ? format_bytes(row.peak_host_bytes) : "-"));
      }
      out += fmt::format("peak host (host budget {}): {}\n", format_bytes(*comparison.host_budget_bytes),
                         fmt::join(hosts, ", "));
    }
    for (const ComparisonRow& row : rows) {
      if (!row.refused.empty()) out += fmt::format("refused ({}): {}\n", row.planner, row.refused);
      if (!row.valid)
        out +=
            fmt::format("problem ({}): {} problem(s); first: {}\n", row.planner, row.problem_count, row.first_problem);
      for (const std::string& note : row.notes) out += fmt::format("note ({}): {}\n", row.planner, note);
    }
  }
  out +=
      "\nfeasible: valid, no faults and op-granular peak within the budget; ! marks a timed peak above the "
      "budget; recompute: time re-running ops (count); above bound: stall plus recompute minus the least stall "
      "any offload-only plan within the budget can have (feasible plans; negative where recompute beats it; "
      "docs/PEAK_PLANNER.md); overhead: stall plus recompute as a percentage of compute; any plan adds at least: "
      "a lower bound on stall plus recompute for plans that offload, recompute or both, and on the re-runs of "
      "plans that copy nothing (docs/HYBRID_PLANNER.md)\n";
  return out;
}

namespace internal {

void add_comparison_header(nlohmann::ordered_json& root, const Comparison& comparison, std::string_view trace_label) {
  root["trace"] = {{"label", std::string(trace_label)},
                   {"ops", comparison.op_count},
                   {"storages", comparison.storage_count},
                   {"compute_ms", comparison.compute_ms},
                   {"unplanned_peak_bytes", comparison.unplanned_peak_bytes},
                   {"unplanned_peak_op", comparison.unplanned_peak_op},
                   {"d2h_bandwidth_gib_per_s", comparison.d2h_bandwidth_gib_per_s},
                   {"h2d_bandwidth_gib_per_s", comparison.h2d_bandwidth_gib_per_s}};
  if (comparison.recompute_only_limit) {
    root["recompute_only_limit"] = {{"bytes", comparison.recompute_only_limit->bytes},
                                    {"op", comparison.recompute_only_limit->op}};
  }
  root["copy_engines"] = static_cast<int>(comparison.copy_engines);
  root["memory_cap"] = to_string(comparison.device_memory);
}

}  // namespace internal

std::string comparison_to_json(const Comparison& comparison, std::string_view trace_label) {
  nlohmann::ordered_json root;
  internal::add_comparison_header(root, comparison, trace_label);
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < comparison.rows.size(); ++r) {
    const ComparisonRow& row = comparison.rows[r];
    const std::optional<double> bound_ms =
        comparison.planner_count > 0 ? comparison.stall_bound_ms(r / comparison.planner_count) : std::nullopt;
    const std::optional<double> above_ms = row.stall_above_bound_ms(bound_ms);
    const std::optional<double> overhead_above = row.overhead_above_bound_ms(bound_ms);
    const std::optional<double> any_plan_ms =
        comparison.planner_count > 0 ? comparison.overhead_bound_ms(r / comparison.planner_count) : std::nullopt;
    std::optional<double> recompute_only_ms =
        comparison.planner_count > 0 ? comparison.recompute_only_bound_ms(r / comparison.planner_count) : std::nullopt;
    if (recompute_only_ms && std::isinf(*recompute_only_ms)) recompute_only_ms.reset();  // JSON has no infinity
    nlohmann::ordered_json item = {{"planner", row.planner},
                                   {"budget_bytes", row.budget_bytes},
                                   {"budget_percent", comparison.budget_percent(row.budget_bytes)},
                                   {"feasible", row.feasible()},
                                   {"valid", row.valid},
                                   {"problem_count", row.problem_count},
                                   {"faults", row.faults},
                                   {"op_peak_bytes", row.op_peak_bytes},
                                   {"timed_peak_bytes", row.timed_peak_bytes},
                                   {"timed_within_budget", row.timed_within_budget()},
                                   {"stall_ms", row.stall_ms},
                                   {"memory_stall_ms", row.memory_stall_ms},
                                   {"stall_lower_bound_ms", bound_ms ? nlohmann::ordered_json(*bound_ms) : nullptr},
                                   {"stall_above_bound_ms", above_ms ? nlohmann::ordered_json(*above_ms) : nullptr},
                                   {"overhead_above_bound_ms",
                                    overhead_above ? nlohmann::ordered_json(*overhead_above) : nullptr},
                                   {"overhead_lower_bound_ms",
                                    any_plan_ms ? nlohmann::ordered_json(*any_plan_ms) : nullptr},
                                   {"recompute_only_lower_bound_ms",
                                    recompute_only_ms ? nlohmann::ordered_json(*recompute_only_ms) : nullptr},
                                   {"recompute_ms", row.recompute_ms},
                                   {"recompute_count", row.recompute_count},
                                   {"overhead_percent", row.overhead_percent},
                                   {"makespan_ms", row.makespan_ms},
                                   {"bytes_moved", row.bytes_moved()},
                                   {"d2h_bytes", row.d2h_bytes},
                                   {"h2d_bytes", row.h2d_bytes},
                                   {"planning_ms", row.planning_ms}};
    if (comparison.host_budget_bytes) {
      item["host_budget_bytes"] = *comparison.host_budget_bytes;
      item["peak_host_bytes"] = row.peak_host_bytes;
    }
    if (row.floor) item["floor"] = {{"op", row.floor->op}, {"bytes", row.floor->bytes}};
    if (!row.first_problem.empty()) item["first_problem"] = row.first_problem;
    if (!row.refused.empty()) item["refused"] = row.refused;
    if (row.solver) {
      item["solver"] = {{"name", row.solver->solver},
                        {"status", to_string(row.solver->status)},
                        {"objective_ms", row.solver->objective_ms},
                        {"bound_ms", row.solver->bound_ms},
                        {"gap", row.solver->gap},
                        {"solve_seconds", row.solver->solve_seconds},
                        {"nodes", row.solver->nodes}};
    }
    item["notes"] = row.notes;
    results.push_back(std::move(item));
  }
  root["results"] = std::move(results);
  return root.dump(2) + "\n";
}

}  // namespace hyperoffload
