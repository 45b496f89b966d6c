// hyperoffload simulate TRACE SCHEDULE [--copy-engines 1|2] [--budget B] [--json] [--timeline FILE]
#include <cstdio>

#include <fmt/format.h>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/cli/common.h"
#include "hyperoffload/io/file.h"
#include "hyperoffload/io/timeline_json.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload::cli {
namespace {

struct SimulateArgs {
  std::string trace_path;
  std::string schedule_path;
  int copy_engines = 2;
  std::string device_memory = to_string(kDefaultDeviceMemory);
  std::string budget;
  std::string host_budget;
  bool json = false;
  std::string timeline_path;
};

void print_summary(std::FILE* out, const SimulateArgs& args, const Trace& trace, const SimulationResult& result,
                   std::optional<std::int64_t> host_budget) {
  const ValidationReport& check = result.validation;
  fmt::print(out, "{}: {}\n", result.valid() ? "valid" : "INVALID", args.schedule_path);
  fmt::print(out, "trace     {}: {} ops, {} storages; {} copy engine{} at d2h {} GiB/s, h2d {} GiB/s\n",
             args.trace_path, group_digits(trace.op_count()), group_digits(trace.storage_count()),
             static_cast<int>(result.copy_engines), result.copy_engines == CopyEngines::kOne ? " (shared)" : "s",
             trace.d2h_bandwidth_gib_per_s(), trace.h2d_bandwidth_gib_per_s());
  fmt::print(out, "compute   {:.3f} ms\n", result.compute_ms);
  fmt::print(out, "makespan  {:.3f} ms\n", result.makespan_ms);
  fmt::print(out, "stall     {:.3f} ms ({:.2f}% of compute), of which faults {:.3f} ms{}\n", result.stall_ms,
             result.stall_percent(), result.fault_ms,
             result.device_memory == DeviceMemory::kBudget
                 ? fmt::format(", waiting for memory {:.3f} ms (memory capped at the budget)", result.memory_stall_ms)
                 : std::string());
  if (result.recompute_count > 0) {
    fmt::print(out, "recompute {:.3f} ms ({:.2f}% of compute) in {} re-run op{}; overhead {:.2f}% of compute\n",
               result.recompute_ms, result.compute_ms > 0 ? 100.0 * result.recompute_ms / result.compute_ms : 0.0,
               group_digits(result.recompute_count), result.recompute_count == 1 ? "" : "s",
               result.overhead_percent());
  }
  fmt::print(out, "peak      {} op-granular at op {}{}; {} timed at {:.3f} ms\n", format_bytes(result.peak_bytes()),
             check.peak_op, check.peak_op >= 0 ? fmt::format(" ({})", trace.op_name(check.peak_op)) : "",
             format_bytes(result.peak_bytes_timed), result.peak_time_ms);
  if (result.budget_bytes >= 0) {
    const std::int64_t over = result.peak_bytes_timed - result.budget_bytes;
    fmt::print(out, "budget    {}: timed peak {}\n", format_bytes(result.budget_bytes),
               over > 0 ? fmt::format("exceeds it by {}", format_bytes(over)) : std::string("within"));
  }
  if (host_budget) {
    const std::int64_t host = result.validation.peak_host_bytes;
    fmt::print(out, "host      {}: peak host {}\n", format_bytes(*host_budget),
               host > *host_budget ? fmt::format("{}, exceeds it by {}", format_bytes(host), format_bytes(host - *host_budget))
                                   : fmt::format("{}, within", format_bytes(host)));
  }
  fmt::print(out, "faults    {}\n", result.faults());
  fmt::print(out, "moved     d2h {} in {} copies, h2d {} in {} copies{}\n", format_bytes(result.d2h_bytes),
             group_digits(result.d2h_count), format_bytes(result.h2d_bytes), group_digits(result.h2d_count),
             result.faults() > 0 ? " and the faults" : "");
  if (!result.valid()) {
    fmt::print(out, "problems  {}\n", check.problem_count);
    for (const std::string& problem : check.problems) fmt::print(out, "  {}\n", problem);
    if (check.problem_count > check.problems.size()) {
      fmt::print(out, "  ... and {} more\n", check.problem_count - check.problems.size());
    }
  }
  if (!args.timeline_path.empty() && args.timeline_path != "-") {
    fmt::print(out, "timeline  written to {}\n", args.timeline_path);
  }
}

int run_simulate(const SimulateArgs& args) {
  if (args.copy_engines != 1 && args.copy_engines != 2) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument,
                             fmt::format("--copy-engines {}: expected 1 (one queue shared by both directions) or 2 "
                                         "(one D2H and one H2D queue)",
                                         args.copy_engines)});
  }
  const Trace trace = load_trace(args.trace_path);
  const Schedule schedule = load_schedule(args.schedule_path);
  SimulatorOptions options;
  options.copy_engines = args.copy_engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
  options.record_timeline = args.timeline_path.empty() ? RecordTimeline::kNo : RecordTimeline::kYes;
  // The budget the device holds: --budget, else the one the schedule was
  // planned for, else the trace's memory_limit_bytes (SimulatorOptions).
  if (!args.budget.empty()) {
    options.budget_bytes = resolve_budget_option(trace, args.budget);
  } else if (schedule.budget_bytes) {
    options.budget_bytes = schedule.budget_bytes;
  }
  options.device_memory = parse_memory_cap(args.device_memory);
  options.host_budget_bytes = resolve_host_budget_option(trace, args.host_budget);
  const SimulationResult result = simulate(trace, schedule, options);

  if (!args.timeline_path.empty()) {
    value_or_throw(write_file_atomically(args.timeline_path, timeline_to_chrome_json(trace, result.timeline)));
  }
  // With --timeline - the trace events own standard output.
  std::FILE* out = args.timeline_path == "-" ? stderr : stdout;
  if (args.json) {
    fmt::print(out, "{}\n", simulation_to_json(result));
  } else {
    print_summary(out, args, trace, result, options.host_budget_bytes);
  }
  return result.valid() ? kExitOk : kExitFailed;
}

Command register_simulate(CLI::App& root) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* app = root.add_subcommand(
      "simulate",
      "Play a schedule in time (one compute stream, FIFO copy engines) and report stalls, the timed\n"
      "memory peak and bytes moved. Exit 0 valid, 1 invalid schedule, 2 bad input");
  app->add_option("trace", args->trace_path, "Trace file (hyperoffload.trace JSON; - for stdin)")->required();
  app->add_option("schedule", args->schedule_path, "Schedule file (hyperoffload.schedule JSON)")->required();
  add_memory_cap_option(*app, args->device_memory);
  app->add_option("--copy-engines", args->copy_engines,
                  "1: D2H and H2D share one FIFO queue; 2: one queue per direction")
      ->capture_default_str();
  app->add_option("--budget,-b", args->budget,
                  "The device's budget (bytes, 2GiB, 40%): what it holds with --memory-cap budget, reported and drawn; "
                  "default: the schedule's budget_bytes (written by plan), else the trace's memory_limit_bytes");
  add_host_budget_option(*app, args->host_budget);
  app->add_flag("--json", args->json, "Print one JSON object");
  app->add_option("--timeline", args->timeline_path,
                  "Write a Chrome trace-event JSON timeline (opens in Perfetto); - for stdout");
  return {app, [args] { return run_simulate(*args); }};
}

const CommandRegistration kRegistration{"simulate", &register_simulate};

}  // namespace
}  // namespace hyperoffload::cli
