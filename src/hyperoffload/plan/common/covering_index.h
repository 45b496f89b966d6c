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
// Thread-safety: query() is const; set() and query_cached() need exclusive
// access.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hyperoffload/ir/ids.h"

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
  // The best active entry of each group whose interval contains `op`.
  Best query(OpIndex op) const;

  // The same as query(op), but remembers the per-node results along op's path
  // and, when asked at the same op again, recomputes only the nodes whose
  // entries set() has changed since: O(log n) per changed node plus O(log n),
  // instead of O(log² n). The planner re-asks at the peak op after every lazy
  // re-evaluation, which changes one entry. Not const (it updates the cache).
  Best query_cached(OpIndex op);

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
  Best node_best(const PathNode& at) const;
  void fill_path(OpIndex op);
  void touch(std::size_t node);
};

}  // namespace hyperoffload::internal
