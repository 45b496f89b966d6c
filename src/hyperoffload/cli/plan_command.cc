// hyperoffload plan TRACE [--budget B] [--planner NAME] [--fallback peak|none] [--score-weight N=V]...
//                        [--time-limit S] [-o SCHEDULE] [--timings]
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/cli/common.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/plan/budget_policy.h"
#include "hyperoffload/report/plan_summary.h"

namespace hyperoffload::cli {
namespace {

struct PlanArgs {
  std::string trace_path;
  std::string budget;
  std::string host_budget;
  std::string planner{kDefaultPlannerName};
  bool planner_named = false;  // --planner given: its own plan, unless --fallback peak
  std::string fallback;        // "peak", "none" or empty (by planner_named)
  std::vector<std::string> score_weights;
  std::string device_memory = to_string(kDefaultDeviceMemory);
  double time_limit_s = PlannerOptions{}.time_limit_s;
  std::string output;
  bool timings = false;  // --timings: print the phases' wall times
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int run_plan(const PlanArgs& args) {
  const auto parse_start = std::chrono::steady_clock::now();
  const Trace trace = load_trace(args.trace_path);
  const double parse_ms = ms_since(parse_start);
  PlannerOptions planner_options;
  planner_options.score_weights = parse_score_weights(args.score_weights);
  planner_options.device_memory = parse_memory_cap(args.device_memory);
  planner_options.time_limit_s = args.time_limit_s;
  planner_options.solver_progress = print_solver_progress;
  planner_options.host_budget_bytes = resolve_host_budget_option(trace, args.host_budget);
  if (Result<std::unique_ptr<Planner>> made = make_planner(args.planner, planner_options);
      !made && !args.score_weights.empty()) {
    throw HyperoffloadError({made.error().code, fmt::format("--score-weight: {}", made.error().message)});
  }
  const std::optional<std::int64_t> budget = resolve_budget_option(trace, args.budget);

  // The budget policy the runtime session applies too (plan/budget_policy.h),
  // so without a named planner this plan is the one a session would replay; a
  // named planner gives its own plan, over the budget or not (a note says).
  const FallbackToPeak fallback =
      args.fallback == "peak" || (args.fallback.empty() && !args.planner_named) ? FallbackToPeak::kYes
                                                                                 : FallbackToPeak::kNo;
  const auto start = std::chrono::steady_clock::now();
  BudgetedPlan plan = value_or_throw(plan_within_budget(trace, budget, args.planner, planner_options, fallback));
  const double planning_ms = ms_since(start);
  if (plan.outcome == BudgetOutcome::kRefused) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument, plan.refusal});
  }
  plan.result.schedule.budget_bytes = budget;  // simulate's device, unless told another
  // The check and the write only read the schedule, and the file is written
  // whatever the check says: the write (mostly the disk's copy of the file,
  // which the fsync waits for: 0.2-0.5 s for 2.8M actions with writeback
  // started as it goes, Note [Writeback as the pieces come] in io/file.cc) runs
  // on a second thread beside the check (0.15-0.3 s), and its error, if any, is
  // raised after both.
  double write_ms = 0.0;
  Status written = ok_status();
  std::jthread writer;
  if (!args.output.empty()) {
    writer = std::jthread([&] {
      const auto write_start = std::chrono::steady_clock::now();
      written = write_schedule_file(plan.result.schedule, args.output);
      write_ms = ms_since(write_start);
    });
  }
  const auto check_start = std::chrono::steady_clock::now();
  const PlanSummary summary = summarize_plan(
      trace, plan.result.schedule, plan.result.floor,
      {.budget_bytes = budget, .device_memory = planner_options.device_memory, .copy_engines = CopyEngines::kTwo,
       .record_timeline = RecordTimeline::kNo, .host_budget_bytes = planner_options.host_budget_bytes});
  const SimulationResult& timed = summary.simulation;
  const ValidationReport& check = timed.validation;
  const PeakBytes& unplanned = summary.unplanned;
  const double check_ms = ms_since(check_start);
  if (writer.joinable()) writer.join();
  value_or_throw(written);

  fmt::print("trace     {}: {} ops, {} storages, {:.3f} ms of compute\n", args.trace_path,
             group_digits(trace.op_count()), group_digits(trace.storage_count()), trace.total_compute_ms());
  if (!budget) {
    fmt::print("budget    unlimited (no --budget and no memory_limit_bytes): nothing to offload\n");
  } else {
    fmt::print("budget    {} ({} bytes, {:.1f}% of the unplanned peak)\n", format_bytes(*budget), group_digits(*budget),
               summary.budget_percent());
  }
  fmt::print("planner   {} in {:.2f} ms{}\n", args.planner, planning_ms,
             plan.result.schedule.planner != args.planner
                 ? fmt::format(" (the plan is {}'s: see the note)", plan.result.schedule.planner)
                 : std::string());
  if (budget) {
    fmt::print("peak      {} unplanned (op {}) -> {} planned (op {}), op-granular\n", format_bytes(unplanned.bytes),
               unplanned.op, format_bytes(check.peak_bytes), check.peak_op);
  } else {
    // Without a budget the schedule is empty, and an empty schedule frees
    // nothing (release_device actions are a schedule's only frees): its peak
    // is every storage at once, which no run of the step holds.
    fmt::print("peak      {} unplanned (op {}), op-granular; nothing planned\n", format_bytes(unplanned.bytes),
               unplanned.op);
  }
  if (budget && check.peak_bytes > *budget) {
    fmt::print("shortfall planned peak exceeds the budget by {}\n", format_bytes(check.peak_bytes - *budget));
  }
  if (budget) {
    // The number a user's out-of-memory depends on: device memory held in
    // time, on the device the plan was made for.
    fmt::print("timed     {} peak in time on {} ({}), overhead {:.2f}% of compute\n",
               format_bytes(timed.peak_bytes_timed),
               planner_options.device_memory == DeviceMemory::kBudget ? "a device that holds only the budget"
                                                                       : "an unlimited device",
               timed.peak_bytes_timed > *budget
                   ? fmt::format("over the budget by {}", format_bytes(timed.peak_bytes_timed - *budget))
                   : std::string("within the budget"),
               timed.overhead_percent());
  }
  if (const std::optional<std::int64_t>& host_budget = planner_options.host_budget_bytes) {
    fmt::print("host      peak host {} {} the host budget of {}\n", format_bytes(check.peak_host_bytes),
               check.peak_host_bytes > *host_budget ? "EXCEEDS" : "within",
               format_bytes(*host_budget));
    if (plan.outcome == BudgetOutcome::kBelowHostFloor && budget) {
      fmt::print("shortfall {}\n", describe_host_shortfall(plan, *budget, *host_budget));
    }
  }
  if (summary.floor) {
    fmt::print("floor     {} at op {} ({}): the lowest peak this planner reaches\n", format_bytes(summary.floor->bytes),
               summary.floor->op, trace.op_name(summary.floor->op));
  }
  if (const std::optional<SolverReport>& solver = plan.result.solver) {
    fmt::print("solver    {}: {}, model makespan {:.6g} ms, lower bound {:.6g} ms, gap {:.2f}% ({:.2f} s, {} nodes)\n",
               solver->solver, to_string(solver->status), solver->objective_ms, solver->bound_ms, 100.0 * solver->gap,
               solver->solve_seconds, solver->nodes);
  }
  fmt::print("moved     d2h {} in {} copies, h2d {} in {} copies\n", format_bytes(check.d2h_bytes),
             group_digits(check.d2h_count), format_bytes(check.h2d_bytes), group_digits(check.h2d_count));
  if (timed.recompute_count > 0) {
    fmt::print("recompute {} re-runs of earlier ops, {:.3f} ms of compute\n", group_digits(timed.recompute_count),
               timed.recompute_ms);
  }
  fmt::print("actions   {} ({} pre, {} post)\n", group_digits(summary.pre_actions + summary.post_actions),
             group_digits(summary.pre_actions), group_digits(summary.post_actions));
  if (check.valid()) {
    fmt::print("check     valid, {} faults\n", check.faults.size());
  } else {
    fmt::print("check     INVALID: {} problems; first: {}\n", check.problem_count, check.problems.front());
  }
  for (const std::string& note : plan.result.notes) fmt::print("note      {}\n", note);
  if (!args.output.empty()) fmt::print("schedule  written to {}\n", args.output);
  if (args.timings) {
    // Planning includes the budget policy's validation of the schedule; check
    // is the summary's walk (validation and simulation) printed above.
    fmt::print("timings   parse {:.1f} ms, plan {:.1f} ms, check {:.1f} ms, write {:.1f} ms (beside the check)\n",
               parse_ms, planning_ms, check_ms, write_ms);
  }
  return check.valid() ? kExitOk : kExitFailed;
}

Command register_plan(CLI::App& root) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* app = root.add_subcommand("plan", "Plan a residency schedule for a trace under a memory budget");
  app->add_option("trace", args->trace_path, "Trace file (hyperoffload.trace JSON; - for stdin)")->required();
  app->add_option("--budget,-b", args->budget,
                  "Device-memory budget: bytes, a size (2GiB, 512MB) or a percentage of the unplanned "
                  "op-granular peak (40%); overrides the trace's memory_limit_bytes");
  app->add_option("--planner,-p", args->planner,
                  "Planner: greedy, peak, hybrid (recompute + offload), recompute (recompute only), dtr (DTR's "
                  "heuristic, a reference) or optimal (a MILP reference for small traces). A named planner's own "
                  "plan is written even when it goes over the budget (see --fallback)")
      ->capture_default_str()
      ->each([args](const std::string&) { args->planner_named = true; });
  app->add_option("--fallback", args->fallback,
                  "When the plan goes over a budget at or above the floor: peak (plan with the peak planner, which "
                  "keeps it; the default without --planner, as in the Python session) or none (keep the plan and "
                  "say so; the default with --planner)")
      ->check(CLI::IsMember({"peak", "none"}));
  app->add_option("--score-weight", args->score_weights,
                  "Peak planner score weight NAME=VALUE, also for the hybrid planner's offloads (repeatable)");
  add_host_budget_option(*app, args->host_budget);
  add_memory_cap_option(*app, args->device_memory);
  add_time_limit_option(*app, args->time_limit_s);
  app->add_option("-o,--output", args->output, "Write the schedule here (hyperoffload.schedule JSON; - for stdout)");
  app->add_flag("--timings", args->timings,
                "Print the wall time of each phase: parse, plan (with the budget policy's validation), check (the "
                "summary's validation and simulation) and write");
  return {app, [args] { return run_plan(*args); }};
}

const CommandRegistration kRegistration{"plan", &register_plan};

}  // namespace
}  // namespace hyperoffload::cli
