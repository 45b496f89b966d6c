// hyperoffload validate TRACE SCHEDULE [--budget B] [--json]
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/cli/command.h"
#include "hyperoffload/cli/common.h"
#include "hyperoffload/plan/budget.h"

namespace hyperoffload::cli {
namespace {

struct ValidateArgs {
  std::string trace_path;
  std::string schedule_path;
  std::string budget;
  std::string host_budget;
  bool json = false;
};

int run_validate(const ValidateArgs& args) {
  const Trace trace = load_trace(args.trace_path);
  const Schedule schedule = load_schedule(args.schedule_path);
  // -1 = no --budget given (a plain integer keeps GCC's optional analysis quiet).
  const std::int64_t budget_bytes =
      args.budget.empty() ? -1 : resolve_budget_option(trace, args.budget).value_or(-1);
  const bool budget = budget_bytes >= 0;
  ValidatorOptions validator_options;
  validator_options.host_budget_bytes = resolve_host_budget_option(trace, args.host_budget);
  const ValidationReport report = validate_schedule(trace, schedule, validator_options);
  const bool over_budget = budget && report.peak_bytes > budget_bytes;
  const bool ok = report.valid() && !over_budget;

  if (args.json) {
    nlohmann::json out;
    out["valid"] = report.valid();
    out["problem_count"] = report.problem_count;
    out["problems"] = report.problems;
    out["faults"] = report.faults.size();
    nlohmann::json fault_list = nlohmann::json::array();
    for (const Fault& fault : report.faults) fault_list.push_back({{"op", fault.op}, {"storage", fault.storage}});
    out["fault_sites"] = std::move(fault_list);
    out["peak_bytes"] = report.peak_bytes;
    out["peak_op"] = report.peak_op;
    if (report.peak_recompute_source >= 0) out["peak_recompute_source"] = report.peak_recompute_source;
    out["recompute_count"] = report.recompute_count;
    out["d2h_bytes"] = report.d2h_bytes;
    out["h2d_bytes"] = report.h2d_bytes;
    out["peak_host_bytes"] = report.peak_host_bytes;
    out["resident_at_end_bytes"] = report.resident_at_end_bytes;
    if (budget) {
      out["budget_bytes"] = budget_bytes;
      out["within_budget"] = !over_budget;
    }
    if (validator_options.host_budget_bytes) {
      out["host_budget_bytes"] = *validator_options.host_budget_bytes;
      out["within_host_budget"] = report.peak_host_bytes <= *validator_options.host_budget_bytes;
    }
    fmt::print("{}\n", out.dump(1));
    return ok ? kExitOk : kExitFailed;
  }

  fmt::print("{}: {}\n", ok ? "valid" : "INVALID", args.schedule_path);
  fmt::print("peak      {} ({} bytes) at op {}{}{}\n", format_bytes(report.peak_bytes),
             group_digits(report.peak_bytes), report.peak_op,
             report.peak_op >= 0 ? fmt::format(" ({})", trace.op_name(report.peak_op)) : "",
             report.peak_recompute_source >= 0
                 ? fmt::format(", while recomputing op {} ({})", report.peak_recompute_source,
                               trace.op_name(report.peak_recompute_source))
                 : "");
  if (budget) {
    fmt::print("budget    {}: {}\n", format_bytes(budget_bytes),
               over_budget ? fmt::format("EXCEEDED by {}", format_bytes(report.peak_bytes - budget_bytes)) : "within");
  }
  if (validator_options.host_budget_bytes) {
    const std::int64_t host_budget = *validator_options.host_budget_bytes;
    fmt::print("host      {}: peak host {} {}\n", format_bytes(host_budget), format_bytes(report.peak_host_bytes),
               report.peak_host_bytes > host_budget
                   ? fmt::format("EXCEEDED by {}", format_bytes(report.peak_host_bytes - host_budget))
                   : std::string("within"));
  }
  fmt::print("faults    {}\n", report.faults.size());
  for (std::size_t i = 0; i < report.faults.size() && i < 10; ++i) {
    fmt::print("  op {} ({}) demand-paged storage {}\n", report.faults[i].op, trace.op_name(report.faults[i].op),
               report.faults[i].storage);
  }
  if (report.faults.size() > 10) fmt::print("  ... and {} more\n", report.faults.size() - 10);
  fmt::print("moved     d2h {}, h2d {}\n", format_bytes(report.d2h_bytes), format_bytes(report.h2d_bytes));
  if (report.recompute_count > 0) {
    fmt::print("recompute {} op{} re-run\n", report.recompute_count, report.recompute_count == 1 ? "" : "s");
  }
  if (!report.valid()) {
    fmt::print("problems  {}\n", report.problem_count);
    for (const std::string& problem : report.problems) fmt::print("  {}\n", problem);
    if (report.problem_count > report.problems.size()) {
      fmt::print("  ... and {} more\n", report.problem_count - report.problems.size());
    }
  }
  return ok ? kExitOk : kExitFailed;
}

Command register_validate(CLI::App& root) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* app = root.add_subcommand(
      "validate", "Check that a schedule never loses data; report faults and the op-granular peak.\n"
                  "Exit 0 valid, 1 invalid (or over --budget), 2 bad input");
  app->add_option("trace", args->trace_path, "Trace file")->required();
  app->add_option("schedule", args->schedule_path, "Schedule file")->required();
  app->add_option("--budget,-b", args->budget, "Also require the peak to be within this budget (bytes, 2GiB, 40%)");
  add_host_budget_option(*app, args->host_budget);
  app->add_flag("--json", args->json, "Print one JSON object");
  return {app, [args] { return run_validate(*args); }};
}

const CommandRegistration kRegistration{"validate", &register_validate};

}  // namespace
}  // namespace hyperoffload::cli
