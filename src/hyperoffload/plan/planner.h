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
//
// Note [Planning bounds]
// Every planner's work and memory are bounded by its input: W = ops +
// accesses, S storages, d the most accesses of one op; a trace has at most
// one candidate gap per access. Each planner's header states its own bound:
//
//   planner    time                                              memory
//   greedy     O(W log W)                                        O(W)
//   peak       O(W log² W); ×20 on a trace of W ≤ 20,000 (the    O(W)
//              plans of the lower budgets, lower_budgets.h)
//   hybrid     the peak planner's on the trace and on at most    O(W) per plan
//              clamp(10⁶ / W, 1, 32) + 10 augmented traces of     held, on two
//              ≤ 65 W + candidates × d each; chain searches        threads
//              O(64 W + candidates × d); four eviction walks
//              (W ≤ 250,000); the recompute-only plan's exclusion
//              search (W ≤ 1,562); ×20 on W ≤ 20,000 (lower budgets)
//   recompute  the hybrid planner's without offloads: selections,  O(W)
//              O(log W) recompute-only plans of ≤ 65 W + candidates
//              × d each, four eviction walks (W ≤ 250,000), at
//              most min(128, 10⁵ / W) selections and their prefixes
//              (W ≤ 1,562: Note [Excluding candidates]); ×20 on
//              W ≤ 20,000
//   dtr        O(260 W + S d)                                    O(W)
//   optimal    its time limit (PlannerOptions::time_limit_s) plus  O(program)
//              the program's build; refuses traces over
//              OptimalPlannerOptions::max_ops / max_columns
//
// Four parts could run away and are cut by a work budget, with a note in the
// plan when they are: DTR's walk, whose re-runs thrash below some budget
// (Note [The walk's work bound], dtr_planner.h: planning a vit_b_16 capture
// grew to 6–13 GB), the searches for recompute chains (Note [Chain work],
// plan/recompute/recompute_model.h), the peak selection's lazy
// re-evaluations per pick (Note [A cap on re-evaluations],
// peak/peak_selection.cc: up to 182k in one pick on a 1M-op chain), and those
// of the host-budget trim per storage kept (Note [Keeping storages lazily],
// common/host_budget.cc: a scan of every storage per storage kept took 9-14 s
// on a 28k-op step). With a host budget, every schedule's trim adds
// O((actions + intervals) log actions) plus at most 64 re-evaluations per
// storage kept (common/host_budget.h). tests/plan/planning_bounds_property_test.cc
// holds every planner but optimal, on random traces and on traces built to
// stress these bounds (gen/stress_trace.h), to at most 128 × the trace's heap
// bytes + 1 MiB of heap while it plans (34× at most when written) and 1 ms per
// op or access + 0.5 s (0.25 ms at most when written).
#pragma once

#include <cstdint>
#include <functional>
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

// What a planner that solves a mathematical program (the optimal planner,
// plan/optimal_planner.h) reports about the solve. Times in ms are the
// program's model of the step's makespan (compute + recompute + stall), which
// the simulator measures independently.
enum class SolverStatus : std::uint8_t {
  kOptimal,    // the incumbent is proven optimal (within the solver's gap tolerance)
  kTimeLimit,  // the time limit stopped the search; the incumbent may not be optimal
};
const char* to_string(SolverStatus status);  // "optimal" / "time limit"

struct SolverReport {
  std::string solver;  // "CBC 2.10.8"
  SolverStatus status = SolverStatus::kOptimal;
  double objective_ms = 0.0;  // the schedule's makespan in the model
  double bound_ms = 0.0;      // the solver's proven lower bound on the model's makespan
  // (objective - bound) / objective: 0 when proven optimal.
  double gap = 0.0;
  double solve_seconds = 0.0;  // wall time of the solve (building the model excluded)
  std::int64_t nodes = 0;      // branch-and-bound nodes explored
  std::int64_t columns = 0;    // the program's size
  std::int64_t integer_columns = 0;
  std::int64_t rows = 0;
};

// One progress report while a solver runs (PlannerOptions::solver_progress).
struct SolverProgress {
  double elapsed_s = 0.0;                  // since the solve started
  std::optional<double> incumbent_ms;      // best schedule's model makespan, once one is found
  double bound_ms = 0.0;                   // proven lower bound so far
  std::optional<double> gap;               // (incumbent - bound) / incumbent, with an incumbent
  std::int64_t nodes = 0;
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
  // Set by planners that solve a mathematical program (optimal).
  std::optional<SolverReport> solver;
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
  DeviceMemory device_memory = kDefaultDeviceMemory;
  // Wall-clock limit of the optimal planner's plan() — building and solving
  // its program — in seconds (> 0; the best schedule found by then is returned
  // with the solver's bound and gap).
  double time_limit_s = 60.0;
  // Called by the optimal planner from the thread that runs plan(), when the
  // solver finds a better schedule and about once a second otherwise. Empty:
  // no reports.
  std::function<void(const SolverProgress&)> solver_progress;
  // Host memory the schedule may hold in host copies, in bytes (nullopt:
  // unlimited): its peak host bytes, as the validator counts them (a copy
  // holds its bytes from its copy_d2h to its release_host), stay within it.
  // Every planner keeps to it; the device budget may then be missed (the
  // budget policy, budget_policy.h, says when no plan keeps both). Greedy,
  // peak and optimal keep storages on the device that do not fit on the host
  // (plan/common/host_budget.h); hybrid also weighs recomputing them;
  // recompute-only holds no host bytes.
  std::optional<std::int64_t> host_budget_bytes;
};

// The lowest op-granular peak an offload-only schedule can reach on `trace`
// (every storage an op touches resident while it runs, the rest offloadable
// wherever its copies allow): the peak planner's model of the floor, for
// planners that do not report one (greedy). Recompute can lower a floor
// further, down to what an op itself touches (the hybrid planner reports its
// own). O(ops + accesses).
UnavoidableFloor offload_floor(const Trace& trace);

// The lowest op-granular peak any recompute-only schedule can reach on
// `trace` by the recompute model's candidates (plan/recompute/
// recompute_model.h): per op, what it touches plus what cannot be dropped and
// regenerated around it — retained storages, storages without a recomputable
// producer (inputs, weights), storages written again in place after their
// producer, and those whose chain cannot be built. The recompute-only planner
// reports its own floor (the peak of its longest decision sequence); `compare`
// prints both, and docs/HYBRID_PLANNER.md ("No artificial floor") explains the
// difference. O(ops + accesses + candidates × chain).
UnavoidableFloor recompute_only_limit(const Trace& trace);

// Names of the heuristic planners, in the order reports list them: fast on any
// trace, so demo, the default comparison and the tests over every planner run
// them all. make_planner also accepts kOptimalPlannerName.
std::span<const std::string_view> planner_names();

// The MILP reference planner (plan/optimal_planner.h): for small traces, and
// seconds to minutes per plan, so planner_names() leaves it out; `compare`
// adds it by default when the trace is small enough.
inline constexpr std::string_view kOptimalPlannerName = "optimal";

// The DTR reference planner (plan/dtr_planner.h): Dynamic Tensor
// Rematerialization's online eviction heuristic, recompute only, for
// comparison with the recompute-only planner. planner_names() leaves it out
// (it is a baseline, not a planner to replay with); `compare` adds it.
inline constexpr std::string_view kDtrPlannerName = "dtr";

// The planner every entry point uses unless told another (the CLI, the C++
// session, Python's OffloadConfig): keep, offload or recompute each gap.
// greedy stays as the reference system's planner.
inline constexpr std::string_view kDefaultPlannerName = "hybrid";

// Creates a planner by name (planner_names(), kOptimalPlannerName or
// kDtrPlannerName); an unknown name is an error listing the valid ones.
Result<std::unique_ptr<Planner>> make_planner(std::string_view name, const PlannerOptions& options = {});

// The budget a plan should use: the override when given, else the trace's limit.
inline std::optional<std::int64_t> effective_budget_bytes(const Trace& trace,
                                                          std::optional<std::int64_t> override_bytes) {
  return override_bytes ? override_bytes : trace.memory_limit_bytes();
}

}  // namespace hyperoffload
