// Internal: "which active interval containing op p has the highest key?" in
// O(log² n), with O(log n) key updates — the peak planner's candidate index.
//
// Each entry is an op interval [first, last] that belongs to one of two groups
// (or none, i.e. inactive) and carries a key; a query at op p returns, per group,
// the entry with the highest key among the active entries whose interval
// contains p (ties: lowest entry index). The planner keeps candidates that are
// smaller than the current excess in one group and the others in the second,
// because their scores scale differently (docs/PEAK_PLANNER.md, "Selection").
//
// Layout: an interval tree over a perfect binary trie of op positions. An
// interval lives at exactly one trie node — the one whose split point it
// straddles (single-position intervals at a leaf) — so memory is O(entries +
// ops). A node's entries are kept twice, sorted by first ascending and by last
// descending; a query at p walks the O(log n) nodes on p's path and, at each,
// the entries containing p form a prefix of one of the two orders. Each order
// carries a per-node segment tree of the best entry per group, so a prefix
// maximum is O(log n).
//
// A pinned op (Note [A pinned op], covering_index.cc): once query_cached() has
// been asked at one op often enough to pay for it, the active entries
// containing that op go into one heap per group, and until a query at another
// op the index answers from the heaps and set() updates them instead of the
// trees (O(1) amortized per set or query while keys fall, plus the scan of a
// bucket when the top's empties; O(log_8 m) for a key that rises, m the
// heap's size: plan/common/key_heap.h), deferring the
// trees' updates to that next query (O(log c) each in a node of c entries, or
// O(c) for the node at once when at least c / log2(c) of them are its).
//
// Keys are compared as doubles and must not be NaN.
//
// Thread-safety: none; every member needs exclusive access.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/plan/common/key_heap.h"

namespace hyperoffload::internal {

struct OpInterval {
  OpIndex first = 0;
  OpIndex last = 0;  // inclusive
};

enum class IndexGroup : std::uint8_t { kNone, kSmall, kLarge };

class CoveringIndex {
 public:
  static constexpr std::int32_t kNoEntry = -1;

  // Every entry starts inactive. Precondition: 0 <= first <= last < op_count for
  // every interval.
  CoveringIndex(OpIndex op_count, std::span<const OpInterval> intervals);
  // No entries: a place to move an index into.
  CoveringIndex() = default;

  // Moves `entry` to `group` with `key` (kNone deactivates it). O(log n).
  void set(std::int32_t entry, IndexGroup group, double key);

  // Activates every entry in `group` with keys[entry] — or, given `active`,
  // those whose active[entry] is not 0, the others left inactive — in
  // O(entries): the bulk form of set(), with the same result. Precondition:
  // every entry is inactive; keys.size() (and active.size(), when given)
  // equals the number of entries; group is not kNone.
  void activate_all(IndexGroup group, std::span<const double> keys, std::span<const std::uint8_t> active = {});

  IndexGroup group(std::int32_t entry) const { return group_[static_cast<std::size_t>(entry)]; }
  double key(std::int32_t entry) const { return key_[static_cast<std::size_t>(entry)]; }

  struct Best {
    std::int32_t small = kNoEntry;
    std::int32_t large = kNoEntry;
  };
  // The best active entry of each group whose interval contains `op`:
  // O(log² n), after applying the updates a pinned op deferred (O(log n)
  // each, or a node's trees rebuilt in O(its entries) where most changed).
  Best query(OpIndex op);

  // The same as query(op), but remembers the per-node results along op's path
  // and, when asked at the same op again, recomputes only the nodes whose
  // entries set() has changed since: O(log n) per changed node plus O(log n),
  // instead of O(log² n). The planner re-asks at the peak op after every lazy
  // re-evaluation, which changes one entry. Asked at the same op about
  // (entries containing it) / kPinEntriesPerQuery times in a row, it pins the
  // op: O(entries containing it) once, then per query there O(1) amortized
  // (KeyHeap's cost, key_heap.h) for each item dropped from the heaps' tops.
  Best query_cached(OpIndex op);

  // At a pinned op, entries likely to lead `group` if the leader's key fell
  // (KeyHeap::runners_up: at most eight, some maybe stale); empty when no op
  // is pinned. The planner asks for their data ahead while it re-evaluates
  // the leader.
  std::span<const std::int32_t> runners_up(IndexGroup group) const;

 private:
  // One of the two orders of every node's entries: the entries, their sort key
  // (first or last op), their score keys (copied here so that the per-node
  // segment trees compare neighbouring memory) and, per group, the trees. Tree
  // values are positions in this order (kNoEntry: none).
  struct Order {
    std::vector<std::int32_t> entries;
    std::vector<OpIndex> ops;
    std::vector<double> keys;
    std::vector<std::int32_t> small_tree, large_tree;  // per node: [2 * offset, 2 * (offset + count))
    std::vector<std::int32_t>& tree(IndexGroup group) { return group == IndexGroup::kSmall ? small_tree : large_tree; }
    const std::vector<std::int32_t>& tree(IndexGroup group) const {
      return group == IndexGroup::kSmall ? small_tree : large_tree;
    }
  };

  // Heap-style ids over the trie: internal nodes [1, 2^levels), leaves
  // [2^levels, 2^(levels+1)).
  std::size_t node_of(OpInterval interval) const;
  // Whether entry a ranks above entry b (either may be kNoEntry).
  bool better(std::int32_t a, std::int32_t b) const;
  // The same for positions a, b of one order.
  static bool better_at(const Order& order, std::int32_t a, std::int32_t b);
  void update(Order& order, IndexGroup group, std::size_t node, std::size_t position, bool present);
  // set()'s change to the trees, from the group they hold the entry in.
  void apply(std::int32_t entry, IndexGroup group, double key);
  // What the trees go by for an entry — the group they hold it in and its
  // key in both orders — without touching the trees (apply(), and a rebuild
  // after it).
  void record_for_trees(std::int32_t entry, IndexGroup group, double key);
  // The tree of `group` over `node`'s entries in `order`, made afresh from
  // the groups the trees hold the entries in (tree_group_) and the order's
  // keys. O(entries of the node).
  void rebuild(Order& order, IndexGroup group, std::size_t node);
  // The best position among the first `count` of `node` in `order`.
  std::int32_t prefix_best(const Order& order, IndexGroup group, std::size_t node, std::size_t count) const;
  void place(std::int32_t entry, IndexGroup group, bool present);

  int levels_ = 1;
  std::vector<std::uint32_t> offsets_;            // per node: first position of its entries in each order
  Order by_first_;                                // per node sorted by first ascending
  Order by_last_;                                 // per node sorted by last descending
  std::vector<std::uint32_t> node_;               // per entry
  std::vector<std::uint32_t> position_in_first_;  // per entry, global position in by_first_
  std::vector<std::uint32_t> position_in_last_;
  std::vector<IndexGroup> group_;
  std::vector<double> key_;

  // query_cached's path: per depth d (root 0 .. leaves levels_), the node on
  // the cached op's path, how many of its entries in which order contain the
  // op, the best of each group among them, and whether set() touched the node
  // since. cached_op_ -1: no cache.
  struct PathNode {
    std::size_t node = 0;
    bool by_first = true;  // which order holds the entries containing the op as a prefix
    std::size_t count = 0;
    Best best;
    bool dirty = false;
  };
  OpIndex cached_op_ = -1;
  std::vector<PathNode> path_;
  std::size_t path_entries_ = 0;     // entries on the cached path containing the op, active or not
  std::int64_t queries_at_op_ = 0;  // query_cached() calls at cached_op_ since fill_path
  Best node_best(const PathNode& at) const;
  void fill_path(OpIndex op);
  void touch(std::size_t node);

  // Note [A pinned op]: while pinned_, the active entries containing
  // cached_op_ sit in heaps_ (kSmall, kLarge), each item valid while its
  // entry's group and key are still the item's; the trees hold the entries
  // as tree_group_ and the orders' keys say, and pending_ lists the entries
  // whose state differs.
  static constexpr std::int64_t kPinEntriesPerQuery = 64;
  bool pinned_ = false;
  KeyHeap heaps_[2];  // by group: kSmall, kLarge
  std::vector<OpInterval> intervals_;  // per entry
  std::vector<IndexGroup> tree_group_;  // per entry: the group the trees hold it in
  std::vector<std::int32_t> pending_;   // entries whose trees lag their group or key
  std::vector<std::uint8_t> is_pending_;
  // unpin()'s count of deferred changes per node (all 0 between calls; made
  // at the first unpin).
  std::vector<std::uint32_t> pending_in_node_;
  KeyHeap& heap(IndexGroup group) { return heaps_[group == IndexGroup::kSmall ? 0 : 1]; }
  const KeyHeap& heap(IndexGroup group) const { return heaps_[group == IndexGroup::kSmall ? 0 : 1]; }
  bool valid(const KeyItem& item, IndexGroup group) const;
  void pin();
  // Applies what a pinned op deferred and leaves it; the cached path is dropped.
  void unpin();
  Best pinned_best();
};

}  // namespace hyperoffload::internal
