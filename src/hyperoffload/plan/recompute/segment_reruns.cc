#include "hyperoffload/plan/recompute/segment_reruns.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"

namespace hyperoffload::internal {

SegmentReruns::SegmentReruns(const Trace& trace, const RecomputeModel& model,
                             std::span<const std::int64_t> resident_bytes, SegmentBalance balance)
    : balance_(balance), model_(model) {
  if (resident_bytes.empty()) return;
  pivot_ = static_cast<OpIndex>(std::max_element(resident_bytes.begin(), resident_bytes.end()) - resident_bytes.begin());
  for (std::size_t c = 0; c < model.candidates.size(); ++c) {
    const RecomputeCandidate& candidate = model.candidates[c];
    if (candidate.start_op < pivot_ && pivot_ < candidate.end_op) crossing_.push_back(static_cast<std::int32_t>(c));
  }
  std::ranges::stable_sort(crossing_, {}, [&](std::int32_t c) { return model.candidates[static_cast<std::size_t>(c)].source_op; });
  // Each candidate's position: the crossing bytes (or the compute) before it.
  if (balance == SegmentBalance::kBytes) {
    double total = 0.0;
    for (const std::int32_t c : crossing_) total += static_cast<double>(model.candidates[static_cast<std::size_t>(c)].size_bytes);
    double before = 0.0;
    for (const std::int32_t c : crossing_) {
      position_.push_back(total > 0.0 ? before / total : 0.0);
      before += static_cast<double>(model.candidates[static_cast<std::size_t>(c)].size_bytes);
    }
  } else {
    std::vector<double> before(static_cast<std::size_t>(pivot_) + 1, 0.0);
    for (OpIndex op = 0; op < pivot_; ++op) {
      before[static_cast<std::size_t>(op) + 1] = before[static_cast<std::size_t>(op)] + trace.op_duration_ms(op);
    }
    const double total = before.back();
    for (const std::int32_t c : crossing_) {
      // A source after the pivot cannot be (its storage is dropped before the
      // pivot, so it was made before), but stay in range whatever the input.
      const OpIndex source = std::min(model.candidates[static_cast<std::size_t>(c)].source_op, pivot_);
      position_.push_back(total > 0.0 ? before[static_cast<std::size_t>(source)] / total : 0.0);
    }
  }
  OpIndex previous = -1;
  for (std::size_t i = 0; i < crossing_.size(); ++i) {
    position_[i] = std::min(position_[i], std::nextafter(1.0, 0.0));
    const OpIndex source = model.candidates[static_cast<std::size_t>(crossing_[i])].source_op;
    distinct_sources_ += source != previous ? 1 : 0;
    previous = source;
  }
}

std::vector<RecomputeDecision> SegmentReruns::decisions(int segments, int dropped) const {
  std::vector<RecomputeDecision> out;
  std::size_t i = 0;
  for (int segment = 0; segment < dropped; ++segment) {
    const std::size_t first = i;
    OpIndex point = std::numeric_limits<OpIndex>::max();
    while (i < crossing_.size() && static_cast<int>(position_[i] * segments) <= segment) {
      point = std::min(point, model_.candidates[static_cast<std::size_t>(crossing_[i])].end_op);
      ++i;
    }
    for (std::size_t j = first; j < i; ++j) out.push_back(RecomputeDecision{crossing_[j], point});
  }
  std::ranges::stable_sort(out, {}, &RecomputeDecision::regenerate_before);
  return out;
}

UnpinnedSegments without_pinned(const Trace& trace, const RecomputeModel& model,
                                std::vector<RecomputeDecision>& decisions) {
  constexpr int kMaxRounds = 4;
  for (int round = 1;; ++round) {
    AugmentedTrace augmented = build_augmented_trace(trace, model, decisions);
    const StorageAccesses accesses(augmented.trace);
    // The original storages keep their indices in the augmented trace; one
    // whose last access there is an inserted re-run was read while dropped.
    const auto pinned = [&](const RecomputeDecision& d) {
      const StorageIndex s = model.candidates[static_cast<std::size_t>(d.candidate)].storage;
      return augmented.source_op[static_cast<std::size_t>(accesses.last_op(s))] >= 0;
    };
    if (round == kMaxRounds || std::erase_if(decisions, pinned) == 0) {
      const PeakBytes peak = unplanned_peak(augmented.trace, accesses);
      return {std::move(augmented), peak};
    }
    // What is left of each segment (the decisions of one point) is
    // regenerated where the first of it is needed. Later points can pin
    // more: the next round looks.
    for (std::size_t first = 0; first < decisions.size();) {
      std::size_t end = first;
      OpIndex point = std::numeric_limits<OpIndex>::max();
      while (end < decisions.size() && decisions[end].regenerate_before == decisions[first].regenerate_before) {
        point = std::min(point, model.candidates[static_cast<std::size_t>(decisions[end].candidate)].end_op);
        ++end;
      }
      for (std::size_t d = first; d < end; ++d) decisions[d].regenerate_before = point;
      first = end;
    }
    std::ranges::stable_sort(decisions, {}, &RecomputeDecision::regenerate_before);
  }
}

}  // namespace hyperoffload::internal
