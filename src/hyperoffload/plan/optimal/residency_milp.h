// Internal: the optimal planner's mixed-integer program — joint keep / offload /
// recompute at op granularity, with copy-engine capacity per op interval — and
// the decoding of a solution into a schedule. docs/OPTIMAL_PLANNER.md derives
// the formulation; this header is its summary.
//
// Glossary:
//   slot t      the time from the end of op t-1 to the end of op t: the stall
//               before op t (w_t), the recomputes issued before it, op t itself.
//               Its length is d_t + recompute_t + w_t; the model's makespan is
//               the sum over slots.
//   cell (s,t)  whether storage s is resident during op t (x[s][t]). Fixed to 1
//               at s's accesses, outside the gaps worth moving (below) and for a
//               retained storage after its last access; a free binary inside
//               the gaps that cover an op over the budget, and after the last
//               access of a storage some recompute may read ("extension").
//   need point  an op at which s must be on the device with its H2D done: an
//               access, or a recompute reading s issued before that op.
//   version     the data of s after a write op (or, for data first read, after
//               its first access); the D2H of a version is issued after that op.
//   candidate   (k, t): re-run recomputable op k before op t, where an output
//               of k is needed (directly, or as the input of another candidate
//               at t: chains). Valid only if nothing k reads or writes is
//               written between k and t (no stale input or output).
//
// Columns: w_t >= 0 (stall, ms); R[k,t] binary (candidate chosen); x[s][t]
// binary (free cells); h[s][t] binary (copy_h2d of s issued before op t); per
// reloadable version the D2H work done by the end of each slot (cumulative, ms);
// per pending reload the H2D work outstanding at the start of each slot and the
// work done in the slot before the op (the stall window) and after it.
//
// Rows:
//   residency   x[s][t] <= x[s][t-1] + h[s][t] + sum of R[k,t] with s an output
//               of k: a storage becomes resident only by a reload or a
//               recompute (its first access aside); h[s][t] + x[s][t-1] <= 1.
//   host copy   a reload at t needs its version's whole D2H done in slots
//               before t (D2H work is cumulative and at most the copy's time).
//               With DeviceMemory::kBudget the D2H runs only in slots where s is
//               still resident, since a release frees memory only once its copy
//               to host has completed.
//   H2D         work in a slot is at most what is outstanding; outstanding work
//               needs the memory (x = 1); nothing may be outstanding at an
//               access once the stall and the recomputes before the op have
//               passed, nor at a recompute's input once the stall has passed.
//   engines     per slot: D2H work <= slot length; H2D work <= slot length;
//               H2D work before the op <= w_t + recompute_t, before its
//               recomputes <= w_t; capped: D2H plus H2D work in the stall
//               window <= w_t (the copy back may wait for the memory the copy
//               to host frees) (two engines, one per direction, fluid queues).
//   recompute   R[k,t] <= x[i][t] for each input i of k; memory while k re-runs
//               (everything resident before op t except what op t first
//               allocates, plus all of k's outputs) <= budget.
//   memory      sum of resident sizes during op t <= budget.
// Objective: sum of slot lengths = compute + recompute + stall, in units of
// time_unit_ms() (the trace's mean op duration).
//
// Thread-safety: a built ResidencyMilp is immutable. It refers to the trace it
// was built from, which must outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/optimal/milp_problem.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

struct ResidencyMilpOptions {
  DeviceMemory device_memory = kDefaultDeviceMemory;
  // Levels of recompute chains at one op: 1 = only ops whose outputs the op
  // reads; each further level may regenerate an input of the level before.
  int max_chain_depth = 8;
  // Traces beyond these are refused (kInvalidArgument) before any solve.
  OpIndex max_ops = 500;
  std::int64_t max_columns = 100000;
};

// What decode() makes of a solution.
struct MilpPlan {
  std::vector<Action> actions;  // in execution order
  std::int64_t peak_bytes = 0;  // op-granular peak of the schedule, ops and recomputes
  double makespan_ms = 0.0;     // in the model: compute + recompute + stall
  double stall_ms = 0.0;
  double recompute_ms = 0.0;
  std::int64_t recompute_count = 0;
  std::int64_t reload_count = 0;  // copy_h2d actions
};

class ResidencyMilp {
 public:
  // Errors: kInvalidArgument for a budget below the floor (naming the op) or a
  // trace beyond the options' limits.
  static Result<ResidencyMilp> build(const Trace& trace, std::int64_t budget_bytes,
                                     const ResidencyMilpOptions& options = {});
  // The floor (below) of a trace, without building a program. O(accesses).
  static UnavoidableFloor floor_of(const Trace& trace);

  const MilpProblem& problem() const { return problem_; }
  // The program's unit of time, in ms (its objective times this is ms).
  double time_unit_ms() const { return time_unit_ms_; }
  // The least any plan of this model can keep resident at its worst op: the
  // storages an op accesses plus retained storages past their last access.
  UnavoidableFloor floor() const { return floor_; }
  // A feasible assignment (cost = its model makespan): every free gap's storage
  // leaves the device right after its access and comes back just before the next
  // one, with no recompute. Solvers start from it.
  std::vector<double> offload_everything() const;
  // Turns a feasible assignment (integer columns within 1e-6 of integers) into
  // a schedule. kInternal when the assignment is inconsistent with the model.
  Result<MilpPlan> decode(std::span<const double> values) const;

  std::int64_t free_cells() const { return free_cells_; }
  std::int64_t candidate_count() const { return static_cast<std::int64_t>(candidates_.size()); }

  struct Version {
    OpIndex copy_op = 0;     // its D2H may be issued after this op
    OpIndex end_op = 0;      // the last op before which a reload restores it
    // D2H done by the end of slot copy_op + 1 + i: column d2h_first_col + i.
    int d2h_first_col = -1;
    // DeviceMemory::kBudget: the part of slot copy_op + 1 + i's D2H work done in
    // its stall window: column d2h_pre_first_col + i.
    int d2h_pre_first_col = -1;
    int d2h_slots = 0;
  };
  struct StorageModel {
    StorageIndex index = 0;
    StorageId id = 0;
    std::int64_t size_bytes = 0;
    bool retained = false;
    OpIndex first = 0, last = 0, end = 0;  // cells cover [first, end]
    std::vector<OpIndex> accesses;         // distinct ops, ascending
    std::vector<OpIndex> writes;           // distinct ops, ascending
    std::vector<Version> versions;         // by copy_op
    // Per op first..end (index t - first); -1 where absent. x == -1: fixed resident.
    // work_pre: H2D work in the stall window before op t's recomputes;
    // work_mid: during those recomputes (only where a candidate exists);
    // work_rest: during op t (only at free cells).
    std::vector<int> x, h, pending, work_pre, work_mid, work_rest;

    int cell(OpIndex t) const { return static_cast<int>(t - first); }
    bool in_horizon(OpIndex t) const { return t >= first && t <= end; }
    int x_at(OpIndex t) const { return x[static_cast<std::size_t>(cell(t))]; }
    const Version* version_before(OpIndex t) const;  // the version current before op t
  };
  struct Candidate {
    OpIndex source = 0;  // the op re-run
    OpIndex at = 0;      // before this op
    int column = -1;
    int depth = 1;
  };

 private:
  ResidencyMilp() = default;
  // The steps of build(), in order.
  void index_trace();
  // Sets floor_ (and floor_retained_bytes_); check_floor() fails when the
  // budget is below it.
  void find_floor();
  Status check_floor() const;
  void find_free_gaps();
  void find_candidates();
  Status allocate_cells();
  void add_columns();
  void add_rows();
  // Times in the program's unit (time_unit_ms).
  double duration(OpIndex op) const { return trace_->op_duration_ms(op) / time_unit_ms_; }
  double d2h(std::int64_t bytes) const { return trace_->d2h_ms(bytes) / time_unit_ms_; }
  double h2d(std::int64_t bytes) const { return trace_->h2d_ms(bytes) / time_unit_ms_; }
  // Helpers of find_candidates(), on positions in storages_.
  bool fixed_resident(int model, OpIndex t) const;
  OpIndex creator(int model, OpIndex t) const;
  bool valid_candidate(OpIndex source, OpIndex at) const;
  // decode(): residency per storage and cell with what serves nothing removed;
  // fills used_at with the candidates kept, per op.
  std::vector<std::vector<std::uint8_t>> effective_residency(std::span<const double> values,
                                                             std::vector<std::vector<int>>& used_at) const;

  const Trace* trace_ = nullptr;
  std::int64_t budget_bytes_ = 0;
  double time_unit_ms_ = 1.0;
  ResidencyMilpOptions options_;
  MilpProblem problem_;
  UnavoidableFloor floor_;
  std::int64_t floor_retained_bytes_ = 0;  // retained storages past their last access, at the floor's op
  std::vector<std::int64_t> unplanned_;           // per op: resident bytes with no schedule
  std::vector<StorageModel> storages_;            // only storages with accesses
  std::vector<int> model_of_;                     // StorageIndex -> position in storages_, -1 if none
  // Per position in storages_: the gaps (access a, next access b) whose cells are free.
  std::vector<std::vector<std::pair<OpIndex, OpIndex>>> free_gaps_;
  std::vector<OpIndex> extension_end_;            // per position: last op a candidate reads it at, or -1
  std::vector<Candidate> candidates_;             // by (at, source)
  std::vector<std::vector<int>> candidates_at_;   // op -> candidate positions, by source
  std::vector<std::vector<StorageIndex>> reads_, writes_;  // per op, distinct (recomputable ops only)
  std::vector<int> stall_col_;                    // per op
  std::int64_t free_cells_ = 0;
};

}  // namespace hyperoffload::internal
