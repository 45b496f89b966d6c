// The unit a recompute of op k re-runs (Note [In-place units] in trace.h): op
// k and, when it is a follower, its previous members back to the head. One
// home for what such a re-run reads and writes, for the residency rules
// (model/residency_rules.h) and the planners (plan/recompute/).
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

// Op k's unit members into `out` (reused), head first, k last: just {k} for an
// op that is no follower. O(members).
void unit_members(const Trace& trace, OpIndex k, std::vector<OpIndex>& out);

// Op k's unit's head (k for an op that is no follower). O(members).
inline OpIndex unit_head(const Trace& trace, OpIndex k) {
  while (trace.op_unit_previous(k) >= 0) k = trace.op_unit_previous(k);
  return k;
}

// How many ops op k's unit has (1 for an op that is no follower). O(members).
inline std::size_t unit_size(const Trace& trace, OpIndex k) {
  std::size_t size = 1;
  for (OpIndex member = trace.op_unit_previous(k); member >= 0; member = trace.op_unit_previous(member)) ++size;
  return size;
}

// What a re-run of op k's unit takes: its members' durations, in ms.
// O(members).
inline double unit_duration_ms(const Trace& trace, OpIndex k) {
  double ms = 0.0;
  for (OpIndex member = k; member >= 0; member = trace.op_unit_previous(member)) ms += trace.op_duration_ms(member);
  return ms;
}

// The storage a follower rewrites: the one storage it writes. Precondition:
// trace.op_unit_previous(follower) >= 0.
inline StorageIndex rewritten_storage(const Trace& trace, OpIndex follower) {
  for (const Access& access : trace.accesses(follower)) {
    if (access.kind == AccessKind::kWrite) return access.storage;
  }
  return -1;  // unreachable for a follower
}

// Whether a member's access is part of what the unit's re-run reads or writes,
// as one op would: every write, and every read except a member's read of a
// storage the head writes (a follower's in-place storage, or another output of
// the head: a version the re-run makes itself). Followers write only the
// storage they rewrite, which the head created, so what earlier members wrote
// is what the head writes. `head_accesses` is the head's accesses.
inline bool unit_access_counts(bool is_head, std::span<const Access> head_accesses, const Access& access) {
  if (is_head || access.kind == AccessKind::kWrite) return true;
  return std::none_of(head_accesses.begin(), head_accesses.end(), [&](const Access& h) {
    return h.kind == AccessKind::kWrite && h.storage == access.storage;
  });
}

// Calls visit(member, index in trace.accesses(member), access) for each access
// of the unit's re-run (unit_access_counts), member by member, head first.
// `members` is unit_members' result. O(unit accesses × head accesses).
template <class Visit>
void for_each_unit_access(const Trace& trace, std::span<const OpIndex> members, Visit&& visit) {
  const std::span<const Access> head = trace.accesses(members.front());
  for (std::size_t m = 0; m < members.size(); ++m) {
    const std::span<const Access> list = trace.accesses(members[m]);
    for (std::size_t a = 0; a < list.size(); ++a) {
      if (unit_access_counts(m == 0, head, list[a])) visit(members[m], a, list[a]);
    }
  }
}

}  // namespace hyperoffload
