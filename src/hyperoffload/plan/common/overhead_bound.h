// A lower bound on what any plan adds to a step's compute — its stall plus its
// recompute time — within a budget, offloads and recomputes together: how far
// from optimal the hybrid planner can be at most, on traces far too large for
// the MILP, and which targets no plan can reach (`hyperoffload compare`;
// docs/HYBRID_PLANNER.md, "How far from optimal").
//
// Scope: every valid, fault-free schedule (format version 2, with recomputes)
// whose op-granular peak is within the budget and that keeps every retained
// storage (on the device, or copied to host before its release: it outlives
// the step), timed as the simulator times it (sim/simulator.h) with one or two
// copy engines and either memory cap. Unlike stall_bound.h it holds for plans
// that recompute, and for plans that offload retained storages after their
// last access.
//
// The argument, per op q. R(q) is the unplanned resident bytes during op q and
// E(q) = R(q) - budget > 0 the bytes that must be off the device then; h is
// the plan's stall plus recompute, C(q) the compute before op q and A(q) the
// compute after it, so op q starts by C(q) + h and the last op ends by
// compute + h. A storage resident at q in the unplanned profile and not
// accessed by op q is off the device during op q only in one of these ways:
//
//  1. Retained and past its last access: copied to host and released.
//  2. Accessed again after q, and copied to host: it comes back, fault-free,
//     by a copy issued after op q ends and completed before the last op ends,
//     so one H2D engine moves at most (A(q) + h) * bandwidth such bytes.
//  3. Accessed again after q, dropped, and regenerated after op q, before its
//     next access, by a re-run of the recomputable op that created it (its
//     producer). A re-run costs that op's duration on the compute stream and
//     regenerates every output of the op, so dropping outputs of a set S of
//     producers costs at least the sum of their durations. A re-run also needs
//     every input at the version it read: an input that is dead at q (its last
//     access before q, not retained) must then be kept through q (its bytes
//     count at q), copied back (taking bytes of 2.'s engine) or regenerated
//     after q by a re-run of its own producer. Re-runs and kept inputs that
//     several producers share are split among them, so that nothing is
//     counted twice.
// On a device that holds only the budget, the memory of 1. and 2. is free
// during op q only once their copies to host completed, before op q starts:
// at most (C(q) + h) * D2H bandwidth bytes of them together. (One shared copy
// engine satisfies both limits too.) On a device that holds M > budget (a
// plan made for a lower budget, timed at a larger one: Note [Plans for lower
// budgets]), buffers whose copies are still running may hold the M - budget
// bytes the plan leaves free, so only E(q) - (M - budget) bytes of 1. and 2.
// must have completed their copies; the rest of the argument is unchanged.
//
// Each producer k with B_k bytes of outputs as in 3. is an item of a
// fractional knapsack: its least cost per byte over the choices for its dead
// inputs (regenerate or keep each; with more than four dead inputs the item
// costs only its own duration), taking up to
// B_k bytes. With K(Y) the knapsack's least cost of Y bytes, a plan needs
// h >= K(E(q) - what 1. and 2. can take off within h); the least such h at
// op q bounds h, and the bound is the largest over the ops evaluated.
//
// Cost: O(ops + accesses) plus O(storages + accesses of the producers) per
// evaluated op: the op with the largest excess and the one with the largest
// excess in each of up to 31 equal slices of the op range, fewer on large
// traces (evaluating fewer ops only weakens the bound).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/common/stall_bound.h"

namespace hyperoffload {

// The least stall plus recompute, in ms, of any plan in the scope above;
// nullopt when no plan fits the budget (an op touches more than the budget).
// `memory_cap_bytes` (at least the budget; DeviceMemory::kBudget only): the
// device holds that much, not the budget; nullopt: the budget.
std::optional<double> overhead_lower_bound_ms(const Trace& trace, std::int64_t budget_bytes,
                                              const StallBoundOptions& options = {},
                                              std::optional<std::int64_t> memory_cap_bytes = std::nullopt);

// The least recompute time, in ms, of any plan in the scope above that copies
// nothing (a recompute-only plan: it stalls on nothing, so its step is the
// compute plus this): the argument above with no bytes for 1. and 2., so at
// each op evaluated the least cost K(E(q)) of the whole excess from the
// knapsack of 3. +infinity when re-runs alone cannot take some evaluated op's
// excess off the device; nullopt when no plan fits the budget at all. The
// same cost as overhead_lower_bound_ms without its bisection.
std::optional<double> recompute_only_lower_bound_ms(const Trace& trace, std::int64_t budget_bytes);

}  // namespace hyperoffload
