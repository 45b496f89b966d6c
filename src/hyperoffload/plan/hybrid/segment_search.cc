#include "hyperoffload/plan/hybrid/segment_search.h"

#include <algorithm>
#include <array>
#include <utility>

#include "hyperoffload/plan/common/plan_order.h"
#include "hyperoffload/plan/recompute/augmented_trace.h"

namespace hyperoffload::internal {

const SegmentSearch::Shape& SegmentSearch::measure(const Trace& trace, const RecomputeModel& model,
                                                   const SegmentReruns& segments, int count, int dropped) {
  const auto [it, inserted] = memo_.try_emplace({segments.balance(), count, dropped});
  Shape& shape = it->second;
  if (inserted) {
    shape.balance = segments.balance();
    shape.count = count;
    shape.dropped = dropped;
    shape.decisions = segments.decisions(count, dropped);
    const UnpinnedSegments plan = without_pinned(trace, model, shape.decisions);
    const OpIndex op = plan.peak.op;
    shape.peak = {plan.peak.bytes, op >= 0 ? plan.augmented.original_op[static_cast<std::size_t>(op)] : -1};
    shape.recompute_ms = plan.augmented.recompute_ms;
  }
  return shape;
}

SegmentSearch::Best SegmentSearch::best(const Trace& trace, const RecomputeModel& model,
                                        std::span<const std::int64_t> resident_bytes, std::int64_t budget_bytes) {
  const std::lock_guard lock(mu_);
  const std::array balances{SegmentReruns(trace, model, resident_bytes, SegmentBalance::kBytes),
                            SegmentReruns(trace, model, resident_bytes, SegmentBalance::kCompute)};
  const std::int64_t work =
      static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count());
  std::int64_t evaluations_left =
      std::clamp<std::int64_t>(kEvaluationWork / std::max<std::int64_t>(work, 1), kMinEvaluations, kMaxEvaluations);
  const auto fits = [&](const Shape& s) { return s.peak.bytes <= budget_bytes; };
  // A segment plan copies nothing, so nothing waits: its step is the compute
  // plus its re-runs, and the re-runs order shapes as their steps do.
  const auto beats = [&](const Shape* a, const Shape* b) {
    return better_outcome({a->peak.bytes, a->recompute_ms}, {b->peak.bytes, b->recompute_ms}, budget_bytes);
  };
  // Every segment dropped, at most a quarter of the evaluations per balance.
  std::vector<const Shape*> shapes;
  for (const SegmentReruns& segments : balances) {
    std::int64_t made = 0;
    for (const int count : kCounts) {
      if (count > segments.max_segments() || made == evaluations_left / 4) break;
      shapes.push_back(&measure(trace, model, segments, count, count));
      ++made;
    }
  }
  evaluations_left -= static_cast<std::int64_t>(shapes.size());
  if (shapes.empty()) return {};
  const Shape& lowest = **std::ranges::min_element(shapes, {}, [](const Shape* s) { return s->peak.bytes; });
  Best best{std::nullopt, lowest.peak};
  std::ranges::stable_sort(shapes, beats);
  const Shape* chosen = shapes.front();
  for (std::size_t i = 0; i < std::min(shapes.size(), kBisectedShapes) && fits(*shapes[i]); ++i) {
    const Shape* fit = shapes[i];
    int over = 0;
    while (over + 1 < fit->dropped && evaluations_left > 0) {
      --evaluations_left;
      const SegmentReruns& segments = balances[static_cast<std::size_t>(fit->balance)];
      const Shape& m = measure(trace, model, segments, fit->count, over + (fit->dropped - over) / 2);
      if (fits(m)) {
        fit = &m;
      } else {
        over = m.dropped;
      }
    }
    if (beats(fit, chosen)) chosen = fit;
  }
  best.shape = *chosen;
  return best;
}

}  // namespace hyperoffload::internal
