// Internal: keeping a schedule within a host-memory budget
// (PlannerOptions::host_budget_bytes).
//
// A schedule's host bytes are counted as the validator counts them
// (ValidationReport::peak_host_bytes): a storage's host copy holds its bytes
// from the copy_d2h that creates it to its release_host. A planner that
// offloads more than the host can hold gives its schedule to
// trim_to_host_budget, which keeps storages on the device instead: while the
// host peak is over the budget, one storage holding a host copy at the peak
// has all of its offloads dropped (every copy_d2h, copy_h2d and release_host
// of it, and each release_device a copy_h2d brings it back from), so it stays
// resident through those gaps. Of the storages at the host peak, the one whose
// gaps then reach the lowest device peak goes first (ties: the larger, then the
// lower storage id), so the device budget is missed as little as possible.
//
// Dropping a storage's offloads never makes a schedule invalid unless the
// schedule faults on it (an access that reads the host copy without a
// copy_h2d); storages with faults are never dropped, so a schedule whose host
// peak is made of faulting storages stays over the budget. The planners here
// make fault-free schedules. Recomputes are kept: what a plan recomputes needs
// no host memory.
//
// Bound, with n ops, S storages, A actions and I host intervals (at most one
// per copy to host): one validation (model/schedule_walk.h: O(ops + accesses
// + actions)), and when the host peak is over the budget a second one, O(S +
// A + n) to collect each storage's host intervals and evictions, O((I + A)
// log A) for the index of the intervals (Note [Keeping storages lazily],
// host_budget.cc) and O(E log n) for every storage's first key (E evictions);
// then per storage kept (k ≤ S) a query, O(log² A), and at most
// kMaxRefreshesPerKeep (64) re-evaluations of O(e log n + i log A) each (e, i
// the storage's evictions and intervals). So O(W + (I + A) log A + k × 64 ×
// (e log n + i log A)): near-linear for storages of a few gaps each. Memory
// O(n + S + A + I).
//
// Thread-safety: a pure function of its inputs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload::internal {

struct HostTrim {
  std::vector<Action> actions;
  std::int64_t peak_bytes = 0;       // the validator's op-granular peak of `actions`
  std::int64_t peak_host_bytes = 0;  // the validator's peak host bytes of `actions`
  std::int32_t storages_kept = 0;    // storages whose offloads were dropped
  // Rounds that stopped re-evaluating at their cap and kept the best storage
  // re-evaluated so far (Note [Keeping storages lazily], host_budget.cc).
  std::int32_t cut_rounds = 0;
};

// `actions` with offloads dropped until the peak host bytes are at most
// `host_budget_bytes` (unchanged when they already are). Precondition: the
// actions are a valid schedule of `trace`.
HostTrim trim_to_host_budget(const Trace& trace, std::vector<Action> actions, std::int64_t host_budget_bytes);

// A note on HostTrim::cut_rounds (> 0): "3 round(s) of the host-budget trim
// stopped re-evaluating at the cap and kept the best storage re-evaluated so far".
std::string describe_cut_rounds(std::int32_t cut_rounds);

// Peak host bytes of `actions`, as the validator counts them (without its
// other checks; the actions must be a valid schedule of `trace`).
std::int64_t peak_host_bytes(const Trace& trace, std::span<const Action> actions);

}  // namespace hyperoffload::internal
