// Planners: turn a Trace and a device-memory budget into a residency Schedule.
//
// Every planner implements the same interface and is created by name through
// make_planner(), so the CLI, the comparison report and the runtime session can
// switch planners with one string. Planners are deterministic: the same trace
// and options give the same schedule.
//
//   Result<std::unique_ptr<Planner>> planner = make_planner("greedy", {});
//   Result<PlanResult> plan = (*planner)->plan(trace, /*budget_bytes=*/1 << 30);
//
// Thread-safety: plan() is const and may run concurrently on different traces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"  // DeviceMemory: the device a schedule is planned for

namespace hyperoffload {

// The lowest peak any plan can reach on a trace, when a planner computes it
// (the peak planner does): the op where it is reached and its bytes.
struct UnavoidableFloor {
  OpIndex op = -1;
  std::int64_t bytes = 0;
};

struct PlanResult {
  Schedule schedule;
  // Peak resident bytes by the planner's own memory model after planning.
  std::int64_t planned_peak_bytes = 0;
  // Same model, before any action (what the planner started from).
  std::int64_t initial_peak_bytes = 0;
  // Set when the planner computes an unavoidable floor.
  std::optional<UnavoidableFloor> floor;
  // Human-readable remarks (e.g. a budget below the floor), one per line.
  std::vector<std::string> notes;
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual std::string_view name() const = 0;
  // Plans `trace` for `budget_bytes` (nullopt = unlimited, which yields an empty
  // schedule). The trace's own memory_limit_bytes is ignored: callers resolve the
  // budget (see effective_budget_bytes) so a command-line override is one value.
  virtual Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const = 0;
};

// Options shared by the factory; each planner reads the fields it understands.
struct PlannerOptions {
  // Score weights of the peak planner, NAME=VALUE (see plan/peak_planner.h);
  // the hybrid planner passes them to the peak planner for its offloads.
  std::vector<std::pair<std::string, double>> score_weights;
  // The device to tune the schedule for (the peak planner orders its copies
  // and picks its prefetch order for it; the hybrid planners compare their
  // plans on it; greedy ignores it). Never changes the guarantees.
  DeviceMemory device_memory = DeviceMemory::kUnlimited;
};

// Names accepted by make_planner, in the order reports list them.
std::span<const std::string_view> planner_names();

// Creates a planner by name; an unknown name is an error listing the valid ones.
Result<std::unique_ptr<Planner>> make_planner(std::string_view name, const PlannerOptions& options = {});

// The budget a plan should use: the override when given, else the trace's limit.
inline std::optional<std::int64_t> effective_budget_bytes(const Trace& trace,
                                                          std::optional<std::int64_t> override_bytes) {
  return override_bytes ? override_bytes : trace.memory_limit_bytes();
}

}  // namespace hyperoffload
