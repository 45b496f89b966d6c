// Internal: solves a MilpProblem with COIN-OR CBC (Debian's coinor-libcbc-dev),
// through CBC's own driver (CbcMain0/CbcMain1: presolve, cutting planes and
// primal heuristics as the `cbc` program runs them), silenced, with a
// wall-clock limit and an event handler that reports progress and stops the
// search at the limit even where CBC's own clock check comes late.
//
// No initial incumbent is passed in: CBC 2.10.8's driver crashes in its
// post-processing when the model carries one (setBestSolution or a named MIP
// start), so the caller keeps its own fallback for a search that ends with
// no solution.
//
// Bound, with c columns, r rows and z nonzeros: O(c + r + z) here to copy the
// program into CBC (plus CBC's own loading) and the solution out; then CBC's
// branch and cut, exponential at worst, which only the wall clock bounds:
// MilpSolveOptions::time_limit_s, counted from the call (a wait for the CBC
// lock spends it), CBC's own limit set to 0.85 of what is left and the
// handler stopping it at the limit at CBC's next event. Not bounded by the
// program, and not exactly by the limit: what CBC does between two events (its
// preprocessing, one LP solve, undoing its preprocessing after the stop) runs
// past it. Memory: the program twice (ours and CBC's copy) plus CBC's search
// tree, which grows with the nodes explored within the limit; nothing here
// bounds it.
//
// Thread-safety: solve_milp() may be called from several threads; calls are
// serialized (CBC's driver keeps process-wide state).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/plan/optimal/milp_problem.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

struct MilpSolveOptions {
  double time_limit_s = 60.0;
  // The search stops once incumbent - bound <= this (in the objective's units).
  double absolute_gap = 1e-6;
  // Progress, in the objective's units (cost_offset included; the *_ms fields
  // of SolverProgress hold objective values).
  std::function<void(const SolverProgress&)> progress;
};

enum class MilpStatus : std::uint8_t {
  kOptimal,     // incumbent proven optimal within absolute_gap
  kTimeLimit,   // stopped by the limit; `values` holds the incumbent when has_solution
  kInfeasible,  // proven infeasible by a search that ended before the limit
};

struct MilpSolution {
  MilpStatus status = MilpStatus::kOptimal;
  bool has_solution = false;
  std::vector<double> values;  // per column, when has_solution
  double objective = 0.0;      // of `values`, cost_offset included
  // Proven lower bound, cost_offset included; cost_offset itself (the columns'
  // costs are non-negative in our programs) when CBC lost its bound.
  double bound = 0.0;
  double seconds = 0.0;
  std::int64_t nodes = 0;
};

// "CBC 2.10.8".
std::string cbc_version();

// Errors: kInternal when CBC fails in a way that is not infeasibility or a
// time limit.
Result<MilpSolution> solve_milp(const MilpProblem& problem, const MilpSolveOptions& options);

}  // namespace hyperoffload::internal
