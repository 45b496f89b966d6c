// Internal: segment re-runs — activation checkpointing's plan, with the
// segments chosen per trace and budget (docs/HYBRID_PLANNER.md, "Segment
// re-runs").
//
// Note [Segment re-runs]
// The decision sequences (recompute_selection.h) free one storage at a time,
// and each regenerates its storage just before the op that reads it next,
// re-running whatever dead inputs it needs on the way. Near the floor that
// re-runs a block's early ops once for every storage of the block that the
// backward pass reads, in the order the backward reads them. Checkpointing
// re-runs a block once: its ops in order, at the first point the backward
// needs any of them, keeping every result until its own backward use.
//
// A segment plan is that, as recompute decisions:
//  - The pivot is the unplanned profile's peak op (the end of the forward
//    pass in a training step). The *crossing* candidates are the gaps that
//    span it: a storage dropped after its last access before the pivot and
//    read again after it (recompute_model.h's candidates; at most one per
//    storage).
//  - The crossing candidates, in the op order of what re-runs them (their
//    sources), are split into `segments` segments of equal bytes (what a
//    segment's re-run brings back at once) or of equal compute before their
//    sources (what it costs); a source's candidates share a segment.
//  - A plan drops the first `dropped` segments (the earliest data, which the
//    backward pass reads last, so that dropping it lowers the profile for
//    the longest stretch): every crossing candidate of segment j is
//    regenerated before b_j, the first op after the pivot that reads any
//    of them. The augmented trace (augmented_trace.h) re-runs those sources
//    in op order there, each once, with the dead inputs they need as a chain,
//    and keeps each regenerated storage until its later accesses: one re-run
//    of the segment per step.
//  - A dropped storage that a re-run at another point reads while it is off
//    the device is *pinned*: the augmented trace reads it where it is, so it
//    stays on the device until that read, and dropping it would only add its
//    regeneration. Pinned decisions are removed (without_pinned), which keeps
//    what checkpointing keeps: each segment's inputs from the segments before
//    it; what is left of a segment is then regenerated where the first of it
//    is needed.
// Every plan is valid whatever the segments: the augmented trace reads a
// storage where it is unless it was regenerated or is dead, and the plan
// releases each storage after its last access there. Which shape is best
// depends on the budget; the planner tries several (PlanMaker::segment_reruns).
//
// Thread-safety: const methods may run concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/recompute/augmented_trace.h"
#include "hyperoffload/plan/recompute/recompute_model.h"
#include "hyperoffload/plan/recompute/recompute_selection.h"

namespace hyperoffload::internal {

// What the segments of a plan share equally.
enum class SegmentBalance : std::uint8_t {
  kBytes,    // the bytes of their crossing candidates: what a re-run brings back at once
  kCompute,  // the compute of their ops: what a re-run costs
};

class SegmentReruns {
 public:
  // `resident_bytes`: the unplanned per-op profile (PeakModel::resident_bytes),
  // one entry per op. O(ops + candidates log candidates).
  SegmentReruns(const Trace& trace, const RecomputeModel& model, std::span<const std::int64_t> resident_bytes,
                SegmentBalance balance);

  SegmentBalance balance() const { return balance_; }
  // The pivot: the profile's first peak op.
  OpIndex pivot() const { return pivot_; }
  // The number of distinct sources among the crossing candidates: more
  // segments than that leave some empty. 0 when no candidate crosses the pivot.
  int max_segments() const { return distinct_sources_; }

  // The decisions of the plan of `segments` segments that drops the first
  // `dropped` (Note [Segment re-runs]), in op order of their regeneration
  // points; pinned ones are not removed yet. Preconditions: 1 <= segments,
  // 0 <= dropped <= segments. O(crossing candidates).
  std::vector<RecomputeDecision> decisions(int segments, int dropped) const;

 private:
  SegmentBalance balance_;
  OpIndex pivot_ = 0;
  int distinct_sources_ = 0;
  // The crossing candidates (indices into the model's), by source op, and
  // per candidate the share of the crossing bytes, or of the compute up to
  // the pivot, before it, in [0, 1).
  std::vector<std::int32_t> crossing_;
  std::vector<double> position_;
  const RecomputeModel& model_;
};

// The augmented trace of a segment plan, and its peak there.
struct UnpinnedSegments {
  AugmentedTrace augmented;
  PeakBytes peak;  // at an augmented op
};

// Removes the pinned decisions (Note [Segment re-runs]), moves the
// regeneration of what is left of each segment (the decisions of one point)
// to where the first of it is needed, and returns the augmented trace of the
// result. A later point can pin another decision, so it looks again, at most
// four rounds (a plan with pinned decisions left is still valid, only less
// thrifty). Precondition: decisions in point order. O(rounds ×
// build_augmented_trace).
UnpinnedSegments without_pinned(const Trace& trace, const RecomputeModel& model,
                                std::vector<RecomputeDecision>& decisions);

}  // namespace hyperoffload::internal
