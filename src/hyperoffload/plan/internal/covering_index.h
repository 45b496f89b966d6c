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
// Thread-safety: query() is const; set() needs exclusive access.
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

  // Activates every entry in `group` with keys[entry], in O(entries): the bulk
  // form of set(). Precondition: every entry is inactive; keys.size() equals
  // the number of entries; group is not kNone.
  void activate_all(IndexGroup group, std::span<const double> keys);

  IndexGroup group(std::int32_t entry) const { return group_[static_cast<std::size_t>(entry)]; }
  double key(std::int32_t entry) const { return key_[static_cast<std::size_t>(entry)]; }

  struct Best {
    std::int32_t small = kNoEntry;
    std::int32_t large = kNoEntry;
  };
  // The best active entry of each group whose interval contains `op`.
  Best query(OpIndex op) const;

 private:
  // Heap-style ids over the trie: internal nodes [1, 2^levels), leaves
  // [2^levels, 2^(levels+1)).
  std::size_t node_of(OpInterval interval) const;
  bool better(std::int32_t a, std::int32_t b) const;  // a ranks above b
  std::int32_t best_of(std::int32_t a, std::int32_t b) const { return better(a, b) ? a : b; }
  void update(std::vector<std::int32_t>& tree, std::size_t node, std::size_t index, std::int32_t value);
  std::int32_t prefix_best(const std::vector<std::int32_t>& tree, std::size_t node, std::size_t count) const;

  int levels_ = 1;
  std::vector<std::uint32_t> offsets_;  // per node: first slot of its entries
  std::vector<std::int32_t> by_first_;  // entries, per node sorted by first ascending
  std::vector<OpIndex> first_sorted_;   // their firsts
  std::vector<std::int32_t> by_last_;   // entries, per node sorted by last descending
  std::vector<OpIndex> last_sorted_;    // their lasts
  // Per-node segment trees over the two orders, one per group: slots
  // [2 * offset, 2 * (offset + count)).
  std::vector<std::int32_t> small_by_first_, large_by_first_, small_by_last_, large_by_last_;
  std::vector<std::uint32_t> node_;           // per entry
  std::vector<std::uint32_t> slot_in_first_;  // per entry, index within its node's first order
  std::vector<std::uint32_t> slot_in_last_;
  std::vector<IndexGroup> group_;
  std::vector<double> key_;
};

}  // namespace hyperoffload::internal
