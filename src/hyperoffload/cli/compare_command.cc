// hyperoffload compare TRACE [--budget B | --budgets B1,B2,...] [--planners greedy,peak,hybrid,recompute,optimal]
//                    [--copy-engines 1|2] [--memory-cap unlimited|budget] [--score-weight N=V]...
//                    [--time-limit S] [--plot FILE.svg] [--json]
// hyperoffload compare TRACE --sweep [--sweep-step 5%] [--planners ...] [--memory-cap ...] [--plot FILE.svg] [--json]
// The planners are tuned to the memory cap simulated; each budget's table
// shows the offload-only stall lower bound (plan/common/stall_bound.h) and, per
// plan, its recomputes and how far its stall plus recompute is above it.
// Without --planners the heuristic planners are compared, and the optimal
// planner too when the trace is small enough for it (plan/optimal_planner.h).
// --sweep plans from the floor to the unplanned peak instead of at given
// budgets, on a device that holds only the budget unless --memory-cap says
// otherwise, and marks where a planner is not monotone in the budget
// (report/budget_sweep.h); its default planners leave the optimal one out.
#include <fmt/format.h>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/cli/common.h"
#include "hyperoffload/io/file.h"
#include "hyperoffload/plan/optimal_planner.h"
#include "hyperoffload/report/budget_sweep.h"
#include "hyperoffload/report/comparison.h"
#include "hyperoffload/report/comparison_table.h"
#include "hyperoffload/report/host_sweep.h"
#include "hyperoffload/report/memory_plot.h"
#include "hyperoffload/report/sweep_plot.h"
#include "hyperoffload/report/sweep_table.h"

namespace hyperoffload::cli {
namespace {

struct CompareArgs {
  std::string trace_path;
  std::string budget;
  std::string budgets;
  std::string host_budget;
  std::string planners;  // empty: planner_names() and dtr, plus optimal on small traces
  int copy_engines = 2;
  std::string device_memory = to_string(kDefaultDeviceMemory);
  std::vector<std::string> score_weights;
  double time_limit_s = PlannerOptions{}.time_limit_s;
  std::string plot;
  bool json = false;
  bool sweep = false;
  bool host_sweep = false;
  std::string sweep_step = "5%";
};

// "a,b,c" → {"a", "b", "c"}; an empty item is an error naming the option.
std::vector<std::string> split_list(const std::string& text, std::string_view option) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) {
      throw HyperoffloadError({ErrorCode::kInvalidArgument,
                               fmt::format("{} \"{}\": empty item in the comma-separated list", option, text)});
    }
    items.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

// --sweep: every planner from the floor to the unplanned peak (report/budget_sweep.h).
int run_sweep(const CompareArgs& args) {
  if (!args.host_budget.empty()) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument,
                             "--sweep sweeps the device budget with unlimited host memory: give --host-budget with "
                             "--budget or --budgets instead"});
  }
  if (!args.budget.empty() || !args.budgets.empty()) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument,
                             "--sweep chooses its own budgets (the floor to the unplanned peak): give --sweep-step "
                             "instead of --budget or --budgets"});
  }
  const BudgetSpec step = value_or_throw(parse_budget(args.sweep_step));
  if (step.unit != BudgetSpec::Unit::kPercentOfPeak) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument,
                             fmt::format("--sweep-step {}: expected a percentage of the unplanned peak (5%)",
                                         args.sweep_step)});
  }
  const Trace trace = load_trace(args.trace_path);
  BudgetSweepOptions options;
  if (!args.planners.empty()) options.planners = split_list(args.planners, "--planners");
  options.step_percent = step.value;
  options.time_limit_s = args.time_limit_s;
  options.score_weights = parse_score_weights(args.score_weights);
  options.copy_engines = args.copy_engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
  options.device_memory = parse_memory_cap(args.device_memory);
  const BudgetSweep sweep = value_or_throw(run_budget_sweep(trace, options));
  if (!args.plot.empty()) {
    value_or_throw(write_file_atomically(args.plot, sweep_plot_svg(sweep, args.trace_path)));
  }
  if (args.json) {
    fmt::print("{}", sweep_to_json(sweep, args.trace_path));
  } else {
    fmt::print("{}", format_sweep_table(sweep, args.trace_path));
    if (!args.plot.empty()) fmt::print("plot written to {}\n", args.plot);
  }
  for (const ComparisonRow& row : sweep.comparison.rows) {
    if (!row.valid) return kExitFailed;  // a planner produced an unsafe schedule: a bug worth failing on
  }
  return kExitOk;
}

// --host-sweep: every planner at one device budget, from no host memory to
// what the hybrid plan holds with unlimited host memory (report/host_sweep.h).
int run_host_sweep_command(const CompareArgs& args) {
  if (!args.budgets.empty() || !args.host_budget.empty() || args.json) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument,
                             "--host-sweep takes one device budget (--budget) and chooses its own host budgets; "
                             "leave out --budgets, --host-budget and --json"});
  }
  const Trace trace = load_trace(args.trace_path);
  const std::optional<std::int64_t> budget = resolve_budget_option(trace, args.budget);
  if (!budget) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument,
                             "--host-sweep needs a device budget: give --budget (the trace has no memory_limit_bytes)"});
  }
  HostSweepOptions options;
  options.comparison.planners = args.planners.empty() ? std::vector<std::string>{"greedy", "peak", "hybrid", "recompute"}
                                                      : split_list(args.planners, "--planners");
  options.comparison.score_weights = parse_score_weights(args.score_weights);
  options.comparison.copy_engines = args.copy_engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
  options.comparison.device_memory = parse_memory_cap(args.device_memory);
  options.comparison.time_limit_s = args.time_limit_s;
  const HostSweep sweep = value_or_throw(run_host_sweep(trace, *budget, options));
  if (!args.plot.empty()) {
    value_or_throw(write_file_atomically(args.plot, host_sweep_plot_svg(sweep, args.trace_path)));
  }
  fmt::print("{}", host_sweep_table(sweep));
  if (!args.plot.empty()) fmt::print("plot written to {}\n", args.plot);
  for (const Comparison& comparison : sweep.comparisons) {
    for (const ComparisonRow& row : comparison.rows) {
      if (!row.valid && row.peak_host_bytes <= comparison.host_budget_bytes.value_or(row.peak_host_bytes)) {
        return kExitFailed;  // an unsafe schedule, not one over the host budget: a bug worth failing on
      }
    }
  }
  return kExitOk;
}

int run_compare(const CompareArgs& args) {
  if (args.sweep && args.host_sweep) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument, "give either --sweep or --host-sweep, not both"});
  }
  if (args.sweep) return run_sweep(args);
  if (args.host_sweep) return run_host_sweep_command(args);
  if (!args.budget.empty() && !args.budgets.empty()) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument, "give either --budget or --budgets, not both"});
  }
  const Trace trace = load_trace(args.trace_path);
  ComparisonOptions options;
  if (args.planners.empty()) {
    options.planners.assign(planner_names().begin(), planner_names().end());
    options.planners.emplace_back(kDtrPlannerName);  // the recompute baseline, beside recompute-only
    if (trace.op_count() <= kOptimalPlannerDefaultMaxOps) options.planners.emplace_back(kOptimalPlannerName);
  } else {
    options.planners = split_list(args.planners, "--planners");
  }
  options.time_limit_s = args.time_limit_s;
  options.solver_progress = print_solver_progress;
  options.score_weights = parse_score_weights(args.score_weights);
  options.copy_engines = args.copy_engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
  options.device_memory = parse_memory_cap(args.device_memory);
  options.record_timeline = args.plot.empty() ? RecordTimeline::kNo : RecordTimeline::kYes;
  options.host_budget_bytes = resolve_host_budget_option(trace, args.host_budget);
  const std::string& budget_text = args.budget.empty() ? args.budgets : args.budget;
  if (!budget_text.empty()) {
    for (const std::string& item : split_list(budget_text, args.budget.empty() ? "--budgets" : "--budget")) {
      options.budgets.push_back(value_or_throw(parse_budget(item)));
    }
  }

  const Comparison comparison = value_or_throw(run_comparison(trace, options));
  if (!args.plot.empty()) {
    value_or_throw(write_file_atomically(args.plot, comparison_plot_svg(comparison, args.trace_path)));
  }
  if (args.json) {
    fmt::print("{}", comparison_to_json(comparison, args.trace_path));
  } else {
    fmt::print("{}", format_comparison_table(comparison, args.trace_path));
    if (!args.plot.empty()) fmt::print("plot written to {}\n", args.plot);
  }
  for (const ComparisonRow& row : comparison.rows) {
    if (!row.valid) return kExitFailed;  // a planner produced an unsafe schedule: a bug worth failing on
  }
  return kExitOk;
}

Command register_compare(CLI::App& root) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* app = root.add_subcommand(
      "compare", "Plan a trace with several planners, validate and simulate each, and compare them in one table");
  app->add_option("trace", args->trace_path, "Trace file (hyperoffload.trace JSON; - for stdin)")->required();
  app->add_option("--budget,-b", args->budget,
                  "Device-memory budget: bytes, a size (2GiB) or a percentage of the unplanned op-granular peak "
                  "(40%); default: the trace's memory_limit_bytes");
  app->add_option("--budgets", args->budgets, "Compare at several budgets, comma-separated (30%,50%,70%)");
  add_host_budget_option(*app, args->host_budget);
  app->add_option("--planners", args->planners,
                  "Planners to compare, comma-separated (default: greedy,peak,hybrid,recompute, and optimal when "
                  "the trace has at most 200 ops)");
  add_memory_cap_option(*app, args->device_memory);
  app->add_option("--copy-engines", args->copy_engines,
                  "Copy engines in the simulation: 2 (one per direction) or 1 (shared)")
      ->check(CLI::IsMember({1, 2}))
      ->capture_default_str();
  app->add_option("--score-weight", args->score_weights,
                  "Peak planner score weight NAME=VALUE, also for the hybrid planner's offloads (repeatable)");
  add_time_limit_option(*app, args->time_limit_s);
  app->add_option("--plot", args->plot,
                  "Write an SVG plot of device memory over time per planner and budget (with --sweep: overhead "
                  "against budget per planner)");
  app->add_flag("--json", args->json, "Print the results as JSON instead of a table");
  app->add_flag("--sweep", args->sweep,
                "Plan from the floor to the unplanned peak and mark where a planner's timed peak or overhead is "
                "not monotone in the budget");
  app->add_flag("--host-sweep", args->host_sweep,
                "At one device budget, plan with host budgets from 0 to what the hybrid plan holds with unlimited "
                "host memory (every 10% of it) and unlimited: overhead against host budget (--plot draws it)");
  app->add_option("--sweep-step", args->sweep_step, "The sweep's step, a percentage of the unplanned peak")
      ->capture_default_str();
  return {app, [args, app] {
            if (!args->sweep && app->count("--sweep-step") > 0) {
              throw HyperoffloadError({ErrorCode::kInvalidArgument, "--sweep-step needs --sweep"});
            }
            return run_compare(*args);
          }};
}

const CommandRegistration kRegistration{"compare", &register_compare};

}  // namespace
}  // namespace hyperoffload::cli
