// Internal: solves a MilpProblem with COIN-OR CBC (Debian's coinor-libcbc-dev),
// through CBC's own driver (CbcMain0/CbcMain1: presolve, cutting planes and
// primal heuristics as the `cbc` program runs them), silenced, with a
// wall-clock limit and an event handler that reports progress and stops the
// search at the limit even where CBC's own clock check comes late.
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
#include "hyperoffload/plan/internal/milp_problem.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

struct MilpSolveOptions {
  double time_limit_s = 60.0;
  // The search stops once incumbent - bound <= this (in the objective's units).
  double absolute_gap = 1e-6;
  // Integer columns' values for a first incumbent (any feasible assignment);
  // empty: none.
  std::vector<double> start;
  // Progress (objective values include the problem's cost_offset).
  std::function<void(const SolverProgress&)> progress;
};

enum class MilpStatus : std::uint8_t {
  kOptimal,     // incumbent proven optimal within absolute_gap
  kTimeLimit,   // stopped by the limit; `values` holds the incumbent when has_solution
  kInfeasible,  // proven infeasible
};

struct MilpSolution {
  MilpStatus status = MilpStatus::kOptimal;
  bool has_solution = false;
  std::vector<double> values;  // per column, when has_solution
  double objective = 0.0;      // of `values`, cost_offset included
  double bound = 0.0;          // proven lower bound, cost_offset included
  double seconds = 0.0;
  std::int64_t nodes = 0;
};

// "CBC 2.10.8".
std::string cbc_version();

// Errors: kInternal when CBC fails in a way that is not infeasibility or a
// time limit.
Result<MilpSolution> solve_milp(const MilpProblem& problem, const MilpSolveOptions& options);

}  // namespace hyperoffload::internal
