// PeakPlanner ("peak"): a peak-driven, bandwidth-aware residency planner.
//
// Where the greedy planner walks candidates in one fixed ranking and prefetches
// at the last moment, this planner repeatedly attacks the current global peak
// with the candidate that scores best there, then places every transfer as
// early (prefetch) or as late (release) as the budget allows, so copies overlap
// compute. docs/PEAK_PLANNER.md describes the algorithm in full; in short:
//
//  1. Model. A storage (size > 0) is resident from its first access through its
//     last use (extended over later alias-forward ops); retained storages stay
//     to the end. Bytes are profiled per op and per op boundary.
//  2. Versions. A new version starts at a write that follows a read; a version
//     is copied to host once, after its last write, and all its evictions reuse
//     that copy. A host copy is released after its last use (before the op that
//     writes the next version, when that op is where it was last used).
//  3. Candidates: gaps between consecutive accesses. Interior candidates (at
//     least one op strictly inside) free the ops inside; boundary candidates
//     (adjacent ops) free only the boundary between them and are used only
//     where edge memory is over the budget and they can bring it within.
//  4. Floor: per op, resident bytes minus what candidates could evict there. Its
//     maximum is the lowest reachable peak; a budget below it is reported in
//     PlanResult::notes, and the planner still gets as close as it can.
//  5. Selection: while the global peak exceeds the budget, pick the best
//     candidate whose interior covers the peak op (score below) and subtract it.
//  6. Placement: copy_h2d at the earliest op the budget allows, in the order
//     the copy engine should run them; release_device at the latest op the
//     budget allows, latest for the storage whose copy to host can wait the
//     longest; copy_d2h after the version's last write, in the order the data
//     is needed (which a first placement tells; the prefetches are then placed
//     again), no later than its first release; release_host after the host
//     copy's last use. Actions of one (op, phase) run in a fixed order:
//     copy_d2h, copy_h2d, release_device, release_host; copies in engine order;
//     duplicates removed. Two prefetch orders are tried (soonest needed first,
//     or filling idle engine time) and the one with the smaller stall under the
//     simulator's timing rules — on the device of PeakPlannerOptions::
//     device_memory — is kept.
//  7. Lower budgets: on a small trace, the plans this makes at every rung of
//     the trace's budget ladder below the budget are timed at the budget too,
//     and the quickest is kept (Note [Plans for lower budgets],
//     plan/common/lower_budgets.h): so more budget never gives a slower plan
//     on that ladder.
//
// Score of candidate k at peak op p, with excess E = resident(p) - budget:
//
//   score = min(size_k, E) / E * max(0, peak_reduction + hiding * H
//                                       + coverage * C - neighbor_impact * N)
//
//   H = how much of the copy back fits between the data reaching the host and
//       its use: clamp((start of the end op - time the copy to host ends) /
//       H2D ms, 0, 1), where the copy to host starts after the version's copy
//       op, behind the copies of selected candidates issued no later (FIFO).
//       With nothing selected, 1 exactly when the compute from the copy op to
//       the use covers D2H + H2D.
//   C = over-budget ops inside the gap other than p / (ops over budget before
//       planning - 1): how much of the rest of the problem it also solves.
//   N = copy-engine contention: the copy time of selected candidates (spread
//       over the compute of their windows) falling inside this candidate's
//       window (copy op to use), per unit of compute there, capped at 2 (a
//       window twice oversubscribed weighs more than one merely busy).
//
// Every term is credited per byte removed from the current peak, so a small
// candidate with perfect hiding cannot outrank one that actually resolves the
// peak. Ties go to the candidate generated first (storage first appearance,
// then gap position).
//
// Guarantees: the schedule passes the validator with zero faults; its
// op-granular peak is within the budget whenever the budget is at or above the
// floor. Cost: O((ops + accesses + candidates) log ops) to build, then
// O(log² ops) per selection step and O(log ops) per lazy re-evaluation of a
// cached score bound (no rescans), O(log ops) per placement; on a small trace
// once more per rung below the budget (step 7: at most 19 rungs, on traces of
// at most internal::kLowerBudgetMaxWork ops plus accesses). Memory O(ops +
// accesses + candidates) (Note [Planning bounds], planner.h).
//
// Thread-safety: plan() is const and may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

// Weights of the selection score's terms (see above). Non-negative and finite;
// every default is 1.0. Names as accepted by --score-weight NAME=VALUE.
struct PeakScoreWeights {
  double peak_reduction = 1.0;   // "peak_reduction": base credit for the bytes removed at the peak
  double hiding = 1.0;           // "hiding": compute inside the gap covers the round trip
  double coverage = 1.0;         // "coverage": the gap also covers other over-budget ops
  double neighbor_impact = 1.0;  // "neighbor_impact": penalty for overlap with selected spans
};


// How selection breaks a tie between candidates that all remove the excess at
// the peak and score alike (docs/PEAK_PLANNER.md, "Selection").
enum class SelectionTies : std::uint8_t {
  kFirstGenerated,  // the candidate generated first (storage first appearance, then gap position)
  kSmallestFirst,   // the smallest: fewest bytes to copy back when none of them hides
};

// Where selection's hiding term lets a candidate's copy back start
// (docs/PEAK_PLANNER.md, "Selection"): once the data is on the host, or also
// not before the last op of its gap that is over the budget.
enum class CopyBackWindows : std::uint8_t {
  kNone,             // once the data is on the host
  kBeforePlanning,   // after the gap's last op over the budget before anything is offloaded
  kAfterAFirstPass,  // the same after a first selection pass, with the candidate resident: two passes
};

// Whether selection's hiding term also asks that a candidate's copy to host
// end before the op whose peak the pick resolves starts (docs/PEAK_PLANNER.md,
// "Selection"): on a device that holds only the budget that op otherwise waits
// for the memory, however well the copy back hides.
enum class HostCopyDeadline : std::uint8_t {
  kNone,        // hiding is about the copy back only
  kBeforePeak,  // no hiding credit for a copy to host estimated to end after the peak op starts
};

// How the D2H engine orders the copies to host that wait for it
// (docs/PEAK_PLANNER.md, "Copies to host"); either way it never idles while
// one could run.
enum class HostCopySequencing : std::uint8_t {
  kSoonestNeeded,  // by when each is needed: bounds the latest copy's lateness
  kLeastLateness,  // by modified due date: short late copies before long late ones (lower total lateness)
};

// Whether plan() also makes the plans of the lower budgets of the trace's
// ladder and keeps the quickest within the budget, which makes its plans
// monotone in the budget on that ladder (Note [Plans for lower budgets],
// plan/common/lower_budgets.h). Only on small traces either way.
enum class LowerBudgetPlans : std::uint8_t {
  kRungs,  // the plans of every rung below the budget too
  kNone,   // only the plan for the budget
};

struct PeakPlannerOptions {
  PeakScoreWeights weights;
  // None is better on every trace: the hybrid planner makes plans with each
  // (docs/HYBRID_PLANNER.md).
  CopyBackWindows windows = CopyBackWindows::kNone;
  // Neither choice is better on every trace; the hybrid planner makes plans
  // with both (docs/HYBRID_PLANNER.md).
  SelectionTies ties = SelectionTies::kFirstGenerated;
  // Neither is better on every trace. On a transfer-bound step least
  // lateness keeps the long copies waiting behind short ones (gpt3-1.3b at
  // 30%, unlimited: 147% overhead instead of 97%); on a small step at its
  // floor the soonest-needed order runs a 3 ms copy ahead of a short one whose
  // release the next op waits for (docs/PEAK_PLANNER.md, "Copies to host").
  // The hybrid planner makes plans with both.
  HostCopySequencing host_copies = HostCopySequencing::kSoonestNeeded;
  // kBeforePeak suits offloads planned around recomputes on a device that
  // holds only the budget (the hybrid planner's decision sets that leave the
  // oldest data to the offloads, docs/HYBRID_PLANNER.md); the peak planner's
  // own plans use kNone.
  HostCopyDeadline host_copy_deadline = HostCopyDeadline::kNone;
  // The device to tune for (planner.h): it changes the order of the copies to
  // host and the stall estimate that picks between prefetch orders, never the
  // guarantees.
  DeviceMemory device_memory = kDefaultDeviceMemory;
  // PeakPlanner::plan only (the hybrid planner's runs of the peak planner
  // never plan for other budgets; it does that itself).
  LowerBudgetPlans lower_budgets = LowerBudgetPlans::kRungs;
  // Host bytes the schedule may hold (PlannerOptions::host_budget_bytes;
  // nullopt: unlimited). Each schedule the run makes is trimmed to it
  // (plan/common/host_budget.h) before it is timed.
  std::optional<std::int64_t> host_budget_bytes;
  // The most lazy re-evaluations of candidates one selection pick makes
  // before it takes the best re-evaluated so far (Note [A cap on
  // re-evaluations], peak/peak_selection.cc; at least 1). It bounds the
  // selection's work on every trace; the peak planner's plan notes how many
  // picks it cut (the hybrid planner's runs of it weigh plans by their
  // timing and say nothing of it).
  std::int32_t max_refreshes_per_pick = 64;
  // Interior candidates from which the run's passes that read only the model
  // (the selection's covering index, the boundary order, the copy ops' ready
  // times) go on threads of their own beside the work that follows; below,
  // they run in line (plan/common/beside.h). The schedule is the same either
  // way (a property test plans with 0 and with the largest value).
  std::size_t beside_min_candidates = std::size_t{1} << 16;
};

// The names accepted for score weights, in documentation order.
std::span<const std::string_view> peak_score_weight_names();

// Applies NAME=VALUE pairs (later pairs win). An unknown name is an
// kInvalidArgument error that lists the valid names; so is a negative or
// non-finite value.
Result<PeakPlannerOptions> peak_planner_options(std::span<const std::pair<std::string, double>> score_weights);

class PeakPlanner final : public Planner {
 public:
  explicit PeakPlanner(PeakPlannerOptions options = {}) : options_(options) {}
  std::string_view name() const override { return "peak"; }
  Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const override;

 private:
  PeakPlannerOptions options_;
};

}  // namespace hyperoffload
