// Internal: which recompute candidates to take (docs/HYBRID_PLANNER.md,
// "Recompute decisions"), peak-driven like the peak planner's selection.
//
// While the peak of the profile exceeds `stop_bytes`: among the active
// candidates covering the peak op, take the one that removes the most of the
// excess E per ms of recompute, min(size, E) / cost, and subtract its size over
// the ops it frees. Only candidates whose cost is at most `max_ratio` times the
// H2D time of their bytes (the copy back they replace) take part. Stops when no
// candidate covers the peak.
//
// A taken candidate re-runs its producer (and chain) before its end op; every
// input a re-run reads where it is gets a *lock* there: it must be on the
// device at that point. The two kinds of decision must agree:
//  - a candidate whose gap contains a lock of its storage is regenerated
//    before the first such lock instead (it frees less) when
//    may_regenerate_early allows, and is not taken otherwise;
//  - a re-run that reads a storage dropped there by an earlier decision moves
//    that decision's regeneration to this point when may_regenerate_early
//    allows (the earlier decision frees less), and the candidate is not taken
//    otherwise.
// So every re-run reads its inputs from the device or regenerates them at that
// point, and the augmented trace (augmented_trace.h) needs no other rule. A
// candidate that no longer lowers the peak op is passed over. A candidate
// whose source an earlier decision re-runs nearby (another output of the
// same op) shares that re-run where the same rules allow, and decisions
// sharing a re-run move together (Note [One re-run for sibling outputs],
// recompute_selection.cc).
//
// A candidate that can keep its source's dead inputs instead (Note [Keeping a
// dead input], recompute_model.h) has two ways, each with its bytes and cost:
// the chain (its size, cost_ms) and the kept inputs (its size less
// keep_bytes, keep_cost_ms). It ranks by the better of the two that the cost
// limit admits and is tried that way first, then the other. Keeping adds each
// kept input's bytes to the profile from its last access (or the end of what
// an earlier decision keeps) to the re-run; a later move of the decision's
// regeneration earlier does not take them off again, so the profile then
// counts a little more than the plan holds.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/recompute/recompute_model.h"

namespace hyperoffload::internal {

struct RecomputeDecision {
  std::int32_t candidate = 0;    // index into RecomputeModel::candidates
  OpIndex regenerate_before = 0;  // its end op, or earlier where a re-run reads the storage
  // The source's inputs dead at regenerate_before are kept on the device
  // until then rather than regenerated (Note [Keeping a dead input],
  // recompute_model.h).
  bool keeps_dead_inputs = false;
};

// How far before its gap's end a decision may be regenerated where a re-run
// reads its storage (a lock, or a move of an earlier decision).
enum class RegenerationRule : std::uint8_t {
  kWhileThePeakAllows,  // a lock: however early; a move: while the ops it holds stay below the peak
  kWithinAnEighth,      // at most an eighth of the gap (or one op) early: the rule before issue 26
};

// RecomputeSelectionParams::max_ratio for no cost limit.
inline constexpr double kNoRatioLimit = std::numeric_limits<double>::infinity();

struct RecomputeSelectionParams {
  double max_ratio = 0.0;       // cost limit, in H2D times of the candidate's bytes (kNoRatioLimit: none)
  std::int64_t stop_bytes = 0;  // stop once the profile's peak is at most this
  RegenerationRule regeneration = RegenerationRule::kWhileThePeakAllows;
  // Whether a candidate may keep its source's dead inputs instead of
  // regenerating them (Note [Keeping a dead input], recompute_model.h).
  bool keep_dead_inputs = false;
};

struct RecomputeSelection {
  // In the order taken, with their final regeneration points.
  std::vector<RecomputeDecision> decisions;
  // The profile's peak after each decision.
  std::vector<std::int64_t> peak_after;

  // The first `length` decisions with their regeneration points as they were
  // right after the length-th was taken (later decisions can move them
  // earlier). Precondition: length <= decisions.size().
  std::vector<RecomputeDecision> prefix(std::size_t length) const;

  // Moves of regeneration points: at step `step`, decision `decision` moved
  // from `previous` to its new point.
  struct Move {
    std::size_t step;
    std::size_t decision;
    OpIndex previous;
  };
  std::vector<Move> moves;
  // Whether the chain work budget (Note [Chain work], recompute_model.h) was
  // spent and a candidate whose chain needed more than its producer was
  // passed over for it.
  bool cut = false;
};

// `resident_bytes` is the per-op profile before any decision (the peak
// model's). `excluded` candidates are never taken. O((candidates + moves) log
// ops + kChainWorkFactor × W + candidates × d) time with W = ops + accesses
// and d the most accesses of one op (Note [Chain work]), O(W) memory.
RecomputeSelection select_recomputes(const Trace& trace, std::span<const std::int64_t> resident_bytes,
                                     const RecomputeModel& model, const RecomputeSelectionParams& params,
                                     std::span<const std::int32_t> excluded = {});

// Candidates to leave to the offloads rather than recompute: of the
// candidates covering `peak_op`, the most expensive to recompute
// per byte first, each taken while the D2H engine — running the copies of the
// taken ones in the order their data is ready (after their copy op, in a run
// without stalls), one after the other — still finishes them all by
// `deadline_ms` (compute time from the start of the step). A copy that finishes
// by then is one that a plan can hide before the memory is needed at the peak.
// O(ops + candidates log candidates + candidates log ops) time, O(ops +
// candidates) memory.
std::vector<std::int32_t> reserve_for_offload(const Trace& trace, const RecomputeModel& model, OpIndex peak_op,
                                              double deadline_ms);

}  // namespace hyperoffload::internal
