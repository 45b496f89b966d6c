// hyperoffload demo [--budget 50%] [--copy-engines 1|2] [--plot FILE.svg] [--save-trace FILE]
//
// The `make run` job: generates the embedded default model (a GPT-style
// decoder, gen/transformer_trace.h), plans it with every planner at half of its
// unplanned peak — the hybrid planner first — validates and simulates each
// plan on a device that holds only the budget (the default everywhere), then
// shows what the reference system's unlimited device would have reported.
#include <fmt/format.h>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/cli/common.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/io/file.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/report/comparison.h"
#include "hyperoffload/report/comparison_table.h"
#include "hyperoffload/report/memory_plot.h"

namespace hyperoffload::cli {
namespace {

struct DemoArgs {
  std::string budget = "50%";
  int copy_engines = 2;
  std::string plot;
  std::string save_trace;
};

int run_demo(const DemoArgs& args) {
  const TransformerOptions model = demo_transformer_options();
  const TransformerTrace generated = value_or_throw(generate_transformer(model));
  const Trace& trace = generated.trace;
  if (!args.save_trace.empty()) value_or_throw(write_trace_file(trace, args.save_trace));

  ComparisonOptions options;
  // The hybrid planner first: it is the one to use; the others show what each
  // lever alone (and the reference greedy planner) gets.
  options.planners = {"hybrid"};
  for (const std::string_view name : planner_names()) {
    if (name != "hybrid") options.planners.emplace_back(name);
  }
  options.budgets = {value_or_throw(parse_budget(args.budget))};
  options.copy_engines = args.copy_engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
  options.record_timeline = args.plot.empty() ? RecordTimeline::kNo : RecordTimeline::kYes;
  const Comparison comparison = value_or_throw(run_comparison(trace, options));

  fmt::print("hyperoffload demo: one training step of a GPT-style decoder ({} layers, hidden {}, {} heads,\n"
             "{} parameters, seq {}, batch {}, fp16 on an A100) whose activations do not fit.\n\n",
             model.layers, model.hidden, model.heads, group_digits(generated.parameter_count), model.seq,
             model.batch);
  const std::string label = "built-in demo model";
  fmt::print("{}", format_comparison_table(comparison, label));

  const ComparisonRow* best = nullptr;
  for (const ComparisonRow& row : comparison.rows) {
    if (row.feasible() && (best == nullptr || row.overhead_percent < best->overhead_percent)) best = &row;
  }
  if (best != nullptr) {
    fmt::print("\nBest: {} keeps the device within {} (timed peak {}) and adds {:.1f} ms of stall and {:.1f} ms "
               "of recompute to a {:.1f} ms step ({:.1f}%).\n",
               best->planner, format_bytes(best->budget_bytes), format_bytes(best->timed_peak_bytes), best->stall_ms,
               best->recompute_ms, comparison.compute_ms, best->overhead_percent);
  }
  // The reference system counted memory between ops and freed it whenever the
  // copies allowed: on such an unlimited device the timed peak runs above the
  // budget while copies to host are in flight, and the overhead looks lower
  // than a device holding only the budget can give. Show the difference.
  ComparisonOptions unlimited_options = options;
  unlimited_options.device_memory = DeviceMemory::kUnlimited;
  unlimited_options.record_timeline = RecordTimeline::kNo;
  const Comparison unlimited = value_or_throw(run_comparison(trace, unlimited_options));
  fmt::print("\nOn a device with unlimited memory (--memory-cap unlimited, the reference system's model):\n");
  for (const ComparisonRow& row : unlimited.rows) {
    fmt::print("  {:<9} overhead {:.1f}% of compute (stall {:.1f} ms, recompute {:.1f} ms), timed peak {}{}\n",
               row.planner, row.overhead_percent, row.stall_ms, row.recompute_ms, format_bytes(row.timed_peak_bytes),
               row.timed_within_budget() ? "" : " (over the budget)");
  }
  if (!args.plot.empty()) {
    value_or_throw(write_file_atomically(args.plot, comparison_plot_svg(comparison, label)));
    fmt::print("Memory over time written to {}\n", args.plot);
  }
  if (!args.save_trace.empty()) fmt::print("Trace written to {}\n", args.save_trace);
  fmt::print("\nNext: hyperoffload generate transformer --help, then plan / validate / simulate / compare "
             "(docs/FORMATS.md).\n");
  for (const Comparison* run : {&comparison, &unlimited}) {
    for (const ComparisonRow& row : run->rows) {
      if (!row.valid) return kExitFailed;
    }
  }
  return kExitOk;
}

Command register_demo(CLI::App& root) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* app = root.add_subcommand(
      "demo", "Plan the built-in GPT-style model with every planner at half its peak memory and compare them");
  app->add_option("--budget,-b", args->budget, "Budget: bytes, a size (2GiB) or a percentage of the unplanned peak")
      ->capture_default_str();
  app->add_option("--copy-engines", args->copy_engines, "Copy engines: 1 (shared) or 2 (one per direction)")
      ->check(CLI::IsMember({1, 2}))
      ->capture_default_str();
  app->add_option("--plot", args->plot, "Also draw device memory over time for each planner (SVG)");
  app->add_option("--save-trace", args->save_trace, "Also write the generated trace (hyperoffload.trace JSON)");
  return {app, [args] { return run_demo(*args); }};
}

const CommandRegistration kRegistration{"demo", &register_demo};

}  // namespace
}  // namespace hyperoffload::cli
