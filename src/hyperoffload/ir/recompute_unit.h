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

// What the unit's re-run takes: its members' durations, in ms.
inline double unit_duration_ms(const Trace& trace, std::span<const OpIndex> members) {
  double ms = 0.0;
  for (const OpIndex member : members) ms += trace.op_duration_ms(member);
  return ms;
}

// Whether a member's access is part of what the unit's re-run reads or writes,
// as one op would: every write, and every read except a member's read of a
// storage the head writes (a follower's in-place storage, or another output of
// the head: a version the re-run makes itself). Followers write only the
// storage they rewrite, which the head created, so what earlier members wrote
// is what the head writes. `head_writes` is the head's accesses.
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
