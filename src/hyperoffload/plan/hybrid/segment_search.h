// Internal: which segment plan (plan/recompute/segment_reruns.h, Note [Segment
// re-runs]) the recompute-only plan weighs at a budget, and the segment plans
// measured so far. A segment plan's decisions, peak and re-runs depend on the
// trace alone, not on the budget, so the plans of the lower budgets' rungs
// (Note [Plans for lower budgets]) share one SegmentSearch with the plan at
// the budget: each shape is measured once per `plan` call.
//
// The search at a budget B: for segments of equal bytes and of equal
// compute, each count of kCounts (at most a quarter of the evaluations per
// balance), each with all its segments
// dropped (whatever B: the lowest of those peaks is the floor of this way of
// planning); then, for the kBisectedShapes of those that fit B with the
// fewest re-runs, the fewest segments dropped that fit (a bisection). The
// best fits B with the fewest re-run milliseconds (a segment plan copies
// nothing, so nothing waits: its step is the compute plus its re-runs), else
// has the lowest peak. At most clamp(kEvaluationWork / (ops + accesses),
// kMinEvaluations, kMaxEvaluations) shapes are asked for, memoized or not, so
// the result does not depend on what was measured before.
//
// Thread-safety: best() may be called from any thread; the memo is guarded.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/recompute/recompute_model.h"
#include "hyperoffload/plan/recompute/recompute_selection.h"
#include "hyperoffload/plan/recompute/segment_reruns.h"

namespace hyperoffload::internal {

class SegmentSearch {
 public:
  // The segment counts tried, in steps of about √2.
  static constexpr std::array kCounts{1, 2, 3, 4, 6, 8, 11, 16, 22, 32, 45, 64};
  static constexpr std::size_t kBisectedShapes = 2;
  static constexpr std::int64_t kEvaluationWork = 4'000'000;  // ops + accesses
  static constexpr std::int64_t kMinEvaluations = 12;
  static constexpr std::int64_t kMaxEvaluations = 60;

  // A segment plan without its actions.
  struct Shape {
    SegmentBalance balance = SegmentBalance::kBytes;
    int count = 0;
    int dropped = 0;
    PeakBytes peak;  // at an original op
    double recompute_ms = 0.0;
    std::vector<RecomputeDecision> decisions;  // without the pinned ones
  };
  struct Best {
    std::optional<Shape> shape;  // none when no crossing candidate exists
    PeakBytes floor;             // the lowest peak of the shapes that drop every segment
  };

  // The best segment plan for `budget_bytes` on `trace`, with its recompute
  // model and unplanned per-op profile (PeakModel::resident_bytes). Every call
  // on one SegmentSearch must pass the same trace and equal models and
  // profiles (those of any HybridModels of the trace: they do not depend on
  // the budget); nothing is kept that refers to them.
  Best best(const Trace& trace, const RecomputeModel& model, std::span<const std::int64_t> resident_bytes,
            std::int64_t budget_bytes);

 private:
  const Shape& measure(const Trace& trace, const RecomputeModel& model, const SegmentReruns& segments, int count,
                       int dropped);

  std::mutex mu_;
  std::map<std::tuple<SegmentBalance, int, int>, Shape> memo_;  // guarded by mu_; nodes are stable
};

}  // namespace hyperoffload::internal
