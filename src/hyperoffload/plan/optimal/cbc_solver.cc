#include "hyperoffload/plan/optimal/cbc_solver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

#include <fmt/format.h>

#include <coin/CbcConfig.h>
#include <coin/CbcEventHandler.hpp>
#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

namespace hyperoffload::internal {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Note [CBC progress]: CBC calls the handler at events of its main search and
// of the small searches its heuristics start (sub-models with a parent); only
// the main model's incumbent and bound mean anything here. The handler reports
// each better incumbent at once and otherwise at most once a second, and stops
// the search at the time limit itself: CBC checks its own limit only between
// nodes, and its root processing can run long past it.
class ProgressHandler final : public CbcEventHandler {
 public:
  ProgressHandler(Clock::time_point start, const MilpSolveOptions& options, double offset)
      : start_(start), options_(&options), offset_(offset) {}
  ProgressHandler(const ProgressHandler& other) = default;
  ProgressHandler& operator=(const ProgressHandler&) = delete;
  ~ProgressHandler() override = default;
  CbcEventHandler* clone() const override { return new ProgressHandler(*this); }

  CbcAction event(CbcEvent which) override {
    if (model_ == nullptr || model_->parentModel() != nullptr) return noAction;
    const double elapsed_s = seconds_since(start_);
    if (elapsed_s >= options_->time_limit_s) return stop;
    if (!options_->progress) return noAction;
    const bool found = which == solution || which == heuristicSolution;
    const double incumbent = model_->getObjValue();
    const bool has_incumbent = model_->getSolutionCount() > 0 && std::isfinite(incumbent) && incumbent < 1e49;
    const bool better = found && has_incumbent && (!reported_incumbent_ || incumbent < *reported_incumbent_ - 1e-9);
    if (!better && elapsed_s < last_report_s_ + 1.0) return noAction;
    last_report_s_ = elapsed_s;
    SolverProgress progress;
    progress.elapsed_s = elapsed_s;
    progress.bound_ms = model_->getBestPossibleObjValue() + offset_;
    progress.nodes = model_->getNodeCount();
    if (has_incumbent) {
      reported_incumbent_ = incumbent;
      progress.incumbent_ms = incumbent + offset_;
      progress.bound_ms = std::min(progress.bound_ms, *progress.incumbent_ms);
      progress.gap = *progress.incumbent_ms > 0 ? (*progress.incumbent_ms - progress.bound_ms) / *progress.incumbent_ms
                                                : 0.0;
    }
    options_->progress(progress);
    return noAction;
  }

 private:
  Clock::time_point start_;
  const MilpSolveOptions* options_;
  double offset_;
  double last_report_s_ = -1.0;
  std::optional<double> reported_incumbent_;
};

double to_coin(double bound, double infinity) {
  if (bound == kMilpInfinity) return infinity;
  if (bound == -kMilpInfinity) return -infinity;
  return bound;
}

// The last progress report: where the search ended.
void report_final(const MilpSolution& result, const MilpSolveOptions& options) {
  if (!options.progress) return;
  SolverProgress progress;
  progress.elapsed_s = result.seconds;
  progress.bound_ms = result.bound;
  progress.nodes = result.nodes;
  if (result.has_solution) {
    progress.incumbent_ms = result.objective;
    progress.gap = result.objective > 0 ? (result.objective - result.bound) / result.objective : 0.0;
  }
  options.progress(progress);
}

std::mutex& cbc_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

std::string cbc_version() { return std::string("CBC ") + CBC_VERSION; }

Result<MilpSolution> solve_milp(const MilpProblem& problem, const MilpSolveOptions& options) {
  // The limit counts from the call: a solve that waits for another on the
  // lock spends its own time there, not time beyond its limit.
  const auto start = Clock::now();
  const std::lock_guard<std::mutex> lock(cbc_mutex());
  const int columns = static_cast<int>(problem.column_count());
  const int rows = static_cast<int>(problem.row_count());

  OsiClpSolverInterface solver;
  const double infinity = solver.getInfinity();
  {
    std::vector<int> row_index;
    row_index.reserve(problem.entry_column().size());
    for (int r = 0; r < rows; ++r) {
      for (std::size_t e = problem.row_begin()[static_cast<std::size_t>(r)];
           e < problem.row_begin()[static_cast<std::size_t>(r) + 1]; ++e) {
        row_index.push_back(r);
      }
    }
    const CoinPackedMatrix matrix(false, row_index.data(), problem.entry_column().data(), problem.entry_value().data(),
                                  static_cast<CoinBigIndex>(row_index.size()));
    std::vector<double> col_lower(problem.column_lower().begin(), problem.column_lower().end());
    std::vector<double> col_upper(problem.column_upper().begin(), problem.column_upper().end());
    std::vector<double> row_lower(problem.row_lower().begin(), problem.row_lower().end());
    std::vector<double> row_upper(problem.row_upper().begin(), problem.row_upper().end());
    for (double& v : col_lower) v = to_coin(v, infinity);
    for (double& v : col_upper) v = to_coin(v, infinity);
    for (double& v : row_lower) v = to_coin(v, infinity);
    for (double& v : row_upper) v = to_coin(v, infinity);
    // A matrix built from triplets may have fewer rows or columns than the
    // problem when trailing ones are empty.
    CoinPackedMatrix sized(matrix);
    sized.setDimensions(rows, columns);
    solver.loadProblem(sized, col_lower.data(), col_upper.data(), problem.column_cost().data(), row_lower.data(),
                       row_upper.data());
  }
  solver.messageHandler()->setLogLevel(0);
  for (int c = 0; c < columns; ++c) {
    if (problem.column_integer(c)) solver.setInteger(c);
  }

  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  ProgressHandler handler(start, options, problem.cost_offset);
  model.passInEventHandler(&handler);
  CbcSolverUsefulData data;
  data.noPrinting_ = true;
  data.useSignalHandler_ = false;
  CbcMain0(model, data);
  // CBC's own limit is set a little short of ours: after it stops, undoing its
  // preprocessing takes time too (Note [CBC progress] stops it at our limit).
  const std::string seconds = fmt::format("{:.3f}", std::max(0.01, 0.85 * (options.time_limit_s - seconds_since(start))));
  const std::string gap = fmt::format("{:.9g}", options.absolute_gap);
  const char* argv[] = {"hyperoffload", "-log",    "0",         "-timeMode", "elapsed", "-sec", seconds.c_str(),
                        "-allowableGap", gap.c_str(), "-ratioGap", "0",        "-solve", "-quit"};
  const int argc = static_cast<int>(std::size(argv));
  CbcMain1(argc, argv, model, [](CbcModel*, int) { return 0; }, data);

  MilpSolution result;
  result.seconds = seconds_since(start);
  result.nodes = model.getNodeCount();
  const double* best = model.bestSolution();
  if (best != nullptr && model.getNumCols() == columns) {
    result.has_solution = true;
    result.values.assign(best, best + columns);
    result.objective = problem.objective(result.values);
  }
  if (model.isProvenInfeasible()) {
    // Also what CBC 2.10.8 reports when a time limit stops it inside its root
    // processing (its preprocessing then drops the search's state); only a
    // search that ran to its end before the limit is believed.
    const bool finished = model.status() == 0 && result.seconds < 0.85 * options.time_limit_s;
    result.status = finished ? MilpStatus::kInfeasible : MilpStatus::kTimeLimit;
    result.has_solution = false;
    result.values.clear();
    result.bound = problem.cost_offset;
    report_final(result, options);
    return result;
  }
  result.bound = model.getBestPossibleObjValue() + problem.cost_offset;
  if (!std::isfinite(result.bound)) result.bound = problem.cost_offset;
  if (result.has_solution) result.bound = std::min(result.bound, result.objective);
  // Stopped by the limit with the incumbent already at the bound is optimal too.
  const bool closed = result.has_solution && result.objective - result.bound <= options.absolute_gap;
  result.status = result.has_solution && (model.isProvenOptimal() || closed) ? MilpStatus::kOptimal
                                                                             : MilpStatus::kTimeLimit;
  report_final(result, options);
  return result;
}

}  // namespace hyperoffload::internal
