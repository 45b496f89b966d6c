// DtrPlanner ("dtr"): a reference planner for recompute, Dynamic Tensor
// Rematerialization's online heuristic (Kirisame et al., ICLR 2021) played
// over the trace, op by op, as DTR would run the step: it never looks ahead.
//
// The walk keeps each storage's residency. Before op t:
//  - every storage t accesses that is not on the device (evicted earlier) is
//    rematerialized: its producer (or in-place unit) is re-run (a `recompute`
//    action), after its own missing inputs, recursively — a chain as deep as
//    it must be;
//  - whenever an allocation (an op's or a re-run's new outputs) would take
//    the resident bytes over the budget, the resident storage with the lowest
//    h = cost / (size × staleness) is evicted (`release_device`) until it fits.
//    cost: the producer's duration plus the cost of its evicted
//    neighbourhood (DtrHeuristic: by default DTR's h_DTR^eq, the whole
//    neighbourhood in equivalence classes; or its first level, the producers
//    of its inputs not on the device now); staleness: compute time since the
//    storage was last accessed or regenerated. Storages the current op or
//    re-run needs, and the inputs a pending re-run has already gathered, are
//    locked.
// After op t every storage whose last access it was is released, as are the
// storages regenerated only for a chain (dead at t) once t's re-runs are done.
//
// Only storages that can always be regenerated are evicted (a static rule,
// so the walk never strands a storage): a storage's producer must be
// recomputable and valid (recompute_model.h, valid_until) through the storage's
// last access, and its producer's inputs must be on the device or themselves
// regenerable there. A storage rewritten in place is evicted only after its
// last write, and only when in-place followers made every version since its
// producer: their unit regenerates it (Note [In-place units] in ir/trace.h),
// as DTR rematerializes a mutated tensor by replaying its producer and the
// mutations after it. Retained storages, inputs and storages written in place
// otherwise stay.
//
// The result: a valid schedule of releases and recomputes, no copies. When no
// eviction can make room the walk goes on over the budget;
// PlanResult::planned_peak_bytes (the validator's op-granular peak, over ops
// and recomputes) says by how much, and a note says so. No floor is reported.
//
// Note [The walk's work bound]
// Below some budget DTR thrashes: a re-run's allocation evicts what the next
// re-run of the same chain needs, and the re-runs grow exponentially with the
// depth of the chains (torchvision's vit_b_16 captured through the dispatch
// mode, 1,638 ops: 820,673 re-runs at 10% of its peak, and more below; the
// recompute and hybrid planners met it on their lower-budget ladder and took
// 17–38 s and 6.3 GiB to plan at 30–70%, the capture 12.8 GB and then
// std::bad_alloc). And each eviction weighs every resident storage
// that may be evicted, which on a trace of 100k ops is quadratic. So the walk
// counts two kinds of work, with W = ops + accesses:
//  - re-run work: 1 + the op's accesses per re-run, at most
//    kDtrRerunWorkFactor × W;
//  - eviction work: per eviction, 1 per storage looked at plus its
//    producer's accesses when it is priced (with equivalence classes, also
//    the accesses of the ops that read it), at most kDtrScanWorkFactor × W
//    (the corpus and example traces needed at most 108 × W with local costs
//    when the walk is not cut; not remeasured with equivalence classes).
// When either passes its bound (DtrOptions overrides them) the walk is cut:
// from then on it evicts nothing and keeps what it regenerates for a chain,
// so each storage is regenerated at most twice more (once before its last
// access, once for chains after it). The plan stays valid and may go over the
// budget (then a note says the budget is not met, as above); a note names the
// op of the cut and the bound passed (DtrPlan::cut_op).
//
// Bound, with S storages and d the most accesses of one op:
//  - re-runs ≤ kDtrRerunWorkFactor × W + 2 S;
//  - time O((kDtrRerunWorkFactor + kDtrScanWorkFactor) × W + S d): the last
//    re-run or eviction that passes a bound adds at most S d;
//  - memory O(W): the trace's indexes, the actions (≤ 2 per storage
//    regenerated plus the re-runs and evictions) and the chain stack (≤ ops
//    frames holding ≤ accesses pins in all).
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

// The walk's plan with what a portfolio of plans compares (the recompute-only
// planner takes it as one more plan: plan/hybrid/hybrid_plans.h): the op
// where planned_peak_bytes is first reached (an op of the trace; when a re-run
// reaches it, the op it runs before; -1 without ops) and the re-runs.
struct DtrPlan {
  PlanResult result;
  OpIndex peak_op = -1;
  std::int64_t recompute_count = 0;
  double recompute_ms = 0.0;
  OpIndex cut_op = -1;  // the op before which the work bound cut the walk; -1: not cut
};

// Re-run and eviction work per op or access of the trace before the walk is
// cut (Note [The walk's work bound]).
inline constexpr std::int64_t kDtrRerunWorkFactor = 4;
inline constexpr std::int64_t kDtrScanWorkFactor = 256;

// How the walk prices a storage it may evict: h = cost / (size × staleness),
// staleness the compute time since the storage was last accessed or
// regenerated (DTR's, online), and the cost
//  - kEquivalenceClasses (DTR's h_DTR^eq, the paper's heuristic and the
//    reference DtrPlanner walks): the producer's run plus the runs of the
//    whole evicted neighbourhood. Evicted storages that neighbour each other
//    (one's producer reads the other) form classes, kept in a union-find as
//    DTR does (never split: a member regenerated leaves its run out of the
//    class's cost); evicting a storage makes every class next to it (its
//    producer's evicted inputs, the evicted outputs of the ops that read it)
//    more expensive, so each counts once.
//  - kLocal: the first level of that neighbourhood only: the producer's run
//    plus the producers' runs of its evicted inputs. Cheaper and sometimes
//    better (the DenseNet of the DTR families at 30–70%).
//  - kNextUse: kEquivalenceClasses's cost, and in place of the staleness the
//    compute time from the current op to the storage's next access in the
//    trace. Not DTR, which runs online and cannot know it: a planner sees the
//    whole step, and a storage needed again soon is a poor victim however
//    long it has sat (Belady's rule, weighted by cost and size). On the DTR
//    families' U-Net at 30% of the peak it re-runs 64.2% of the compute
//    where the two above re-run 92.2% and 98.7%.
//  - kFarthestNextUse: Belady's rule itself: the storage whose next access
//    is furthest goes first, whatever it costs; among those used next at
//    the same time, the lowest kEquivalenceClasses cost per byte. On the
//    ResNet-32 at 30% it re-runs 38.4% of the compute (the others 48.9%,
//    129.5% and 52.1%); on the U-Net it is the worst of the four.
// The recompute-only plans weigh all four walks.
enum class DtrHeuristic : std::uint8_t { kEquivalenceClasses, kLocal, kNextUse, kFarthestNextUse };

struct DtrOptions {
  DtrHeuristic heuristic = DtrHeuristic::kEquivalenceClasses;
  // Re-run work before the cut; nullopt: kDtrRerunWorkFactor × (ops + accesses).
  std::optional<std::int64_t> max_rerun_work;
  // Eviction work before the cut; nullopt: kDtrScanWorkFactor × (ops + accesses).
  std::optional<std::int64_t> max_scan_work;
};

DtrPlan plan_dtr(const Trace& trace, std::int64_t budget_bytes, const DtrOptions& options = {});

class DtrPlanner final : public Planner {
 public:
  std::string_view name() const override { return "dtr"; }
  Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const override;
};

}  // namespace hyperoffload
