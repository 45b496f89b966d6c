// Internal: recompute decisions turned into an ordinary trace, so that the
// peak planner can plan the offloads around them, and its schedule turned back
// into one for the original trace (docs/HYBRID_PLANNER.md, "Augmented trace").
//
// Given the recompute decisions (recompute_selection.h), the augmented trace
// is the original one with an inserted op before each op `b` for every
// producer k re-run there: it has op k's duration and accesses, except that it
// writes a fresh storage (an *instance*) for each output regenerated there,
// and later accesses of that output read the instance. The original storage's
// last access is then the access before the gap, so any planner releases it
// there. Before b, in producer order:
//  - each decision regenerated before b regenerates its storage (an instance
//    that lives on to the storage's later accesses);
//  - an input of a re-run op that is dead at b is regenerated into an instance
//    read only by the ops re-run at b (a chain; recompute_model.h bounds its
//    depth), unless a decision regenerated at b or later keeps it (its
//    source's dead inputs, RecomputeDecision::keeps_dead_inputs): then it is
//    still on the device, read where it is, and the keeping decision's re-run
//    is its last access; every other input is read where it is (the
//    selection guarantees it is not dropped there);
//  - an output of a re-run op that is not regenerated for later is written
//    into such a short-lived instance when it is not on the device (dead and
//    not kept, or dropped), and read where it is otherwise (the recompute
//    semantics: each output is either released or already resident at that
//    version).
// Mapping a schedule of the augmented trace back: actions of real ops stay;
// the actions of an inserted op and its recompute go to pre(b), in order —
// its pre actions, the recompute, its post actions — ahead of b's own pre
// actions; instances become their original storages again.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/plan/recompute/recompute_model.h"
#include "hyperoffload/plan/recompute/recompute_selection.h"

namespace hyperoffload::internal {

struct AugmentedTrace {
  Trace trace;
  // Per augmented op: the original op it is (source_op -1), or the op it is
  // inserted before (source_op = the op it re-runs).
  std::vector<OpIndex> original_op;
  std::vector<OpIndex> source_op;
  // Per augmented storage (index == id, 0..n-1): the original storage's id.
  std::vector<StorageId> original_id;
  std::int64_t recompute_count = 0;
  double recompute_ms = 0.0;
};

// Precondition: model is build_recompute_model(trace, ...) and the decisions
// come from select_recomputes on it (or a prefix of them). O(ops + accesses +
// re-runs × (d + log re-runs)) time and O(ops + accesses + re-runs × d)
// memory, d the most accesses of one op; the re-runs are at most the
// selection's chain work (Note [Chain work], recompute_model.h): at most
// 64 (ops + accesses) + candidates × (1 + d) accesses.
AugmentedTrace build_augmented_trace(const Trace& trace, const RecomputeModel& model,
                                     std::span<const RecomputeDecision> decisions);

// The peak of build_augmented_trace(trace, model, decisions).trace with
// every storage released after its last access (unplanned_peak,
// ir/memory_profile.h), and the original op where it is reached (the first
// augmented op with that peak: an original op, or the op a re-run there
// precedes; -1 when there are no ops); that trace's offload floor
// (offload_floor, plan/planner.h: the peak planner's floor on it), its op
// mapped back the same way; and its re-runs — without building the trace
// (Note [One walk, two sinks], augmented_trace.cc). Same preconditions and
// bound.
struct AugmentedPeak {
  std::int64_t bytes = 0;
  OpIndex original_op = -1;
  UnavoidableFloor floor{-1, 0};
  std::int64_t recompute_count = 0;
  double recompute_ms = 0.0;
};
AugmentedPeak augmented_peak(const Trace& trace, const RecomputeModel& model,
                             std::span<const RecomputeDecision> decisions);

// The schedule for the original trace. Precondition: `actions` are in
// execution order for augmented.trace.
std::vector<Action> map_back(const AugmentedTrace& augmented, std::span<const Action> actions);

// End-of-life releases for a trace (what a plan without offloads does): every
// non-retained storage of size > 0 is released after its last access.
std::vector<Action> end_of_life_releases(const Trace& trace, const StorageAccesses& accesses);

}  // namespace hyperoffload::internal
