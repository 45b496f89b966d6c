// Internal: the peak selection's per-op memory profile — a segment tree with
// range add, maximum and leftmost argmax, "last position above a threshold"
// search, and an exact count of positions above a fixed limit (a Fenwick
// tree over the positions' sides of it, beside the segment tree). Every
// operation is O(log n) except add(), which is O(log n) plus O(log n) per
// position whose side of the limit it changes.
//
// Like RangeMaxTree, adds are kept lazily at the nodes and never pushed down: a
// node's aggregates describe its range *excluding* its ancestors' adds.
//
// The above-limit count serves the coverage score term ("how many over-budget
// ops does this gap cover"); the threshold search serves the copy-back windows
// after a first pass (peak_selection.cc). The placements, which only add and
// search, copy the profile into the lean RangeMaxTree (values()).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hyperoffload/plan/common/max_tree_search.h"

namespace hyperoffload::internal {

class ProfileTree {
 public:
  static constexpr std::size_t kNotFound = kNoPosition;

  // Precondition: values is non-empty.
  ProfileTree(std::span<const std::int64_t> values, std::int64_t limit) : size_(values.size()), limit_(limit) {
    // Node ids of a mid-split tree over n positions stay below twice the next
    // power of two.
    const std::size_t nodes = 2 * std::bit_ceil(std::max<std::size_t>(size_, 1));
    nodes_.assign(nodes, Node{});
    build(1, 0, size_ - 1, values);
    // The Fenwick tree of the above-limit flags, built in O(n).
    over_tree_.assign(size_ + 1, 0);
    for (std::size_t i = 1; i <= size_; ++i) {
      over_tree_[i] += values[i - 1] > limit_ ? 1 : 0;
      over_total_ += values[i - 1] > limit_ ? 1 : 0;
      const std::size_t parent = i + (i & (~i + 1));
      if (parent <= size_) over_tree_[parent] += over_tree_[i];
    }
  }

  std::size_t size() const { return size_; }
  std::int64_t limit() const { return limit_; }

  // Adds `delta` to positions [first, last]. Precondition: first <= last < size().
  void add(std::size_t first, std::size_t last, std::int64_t delta) {
    if (delta != 0) add(1, 0, size_ - 1, first, last, delta, 0);
  }

  std::int64_t max() const { return nodes_[1].max; }
  std::int64_t max(std::size_t first, std::size_t last) const { return max(1, 0, size_ - 1, first, last); }
  std::int64_t at(std::size_t position) const { return max(position, position); }

  // Leftmost position holding the overall maximum.
  std::size_t argmax() const {
    std::size_t node = 1, lo = 0, hi = size_ - 1;
    std::int64_t pending = 0;
    const std::int64_t target = nodes_[1].max;
    while (lo < hi) {
      pending += nodes_[node].add;
      const std::size_t mid = lo + (hi - lo) / 2;
      if (nodes_[2 * node].max + pending == target) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    return lo;
  }

  // Every position's value, in order. O(n).
  std::vector<std::int64_t> values() const {
    std::vector<std::int64_t> out(size_);
    collect(1, 0, size_ - 1, 0, out);
    return out;
  }

  // Positions in [first, last] whose value is above limit().
  std::size_t count_over(std::size_t first, std::size_t last) const {
    return static_cast<std::size_t>(over_before(last + 1) - over_before(first));
  }
  std::size_t count_over() const { return static_cast<std::size_t>(over_total_); }

  // Last position in [first, last] whose value is above `threshold`, or
  // kNotFound.
  std::size_t find_last_above(std::size_t first, std::size_t last, std::int64_t threshold) const {
    return internal::find_last_above(std::span<const Node>(nodes_), size_, first, last, threshold);
  }

 private:
  // Sentinels far from any byte count, so adding deltas to them stays harmless.
  static constexpr std::int64_t kHigh = std::numeric_limits<std::int64_t>::max() / 4;
  static constexpr std::int64_t kLow = std::numeric_limits<std::int64_t>::min() / 4;

  void set_leaf(std::size_t node, std::int64_t value) {
    nodes_[node].max = value;
    const bool over = value > limit_;
    nodes_[node].min_over = over ? value : kHigh;
    nodes_[node].max_under = over ? kLow : value;
  }

  void pull(std::size_t node) {
    const std::size_t l = 2 * node, r = 2 * node + 1;
    const std::int64_t a = nodes_[node].add;
    nodes_[node].max = std::max(nodes_[l].max, nodes_[r].max) + a;
    const std::int64_t min_over = std::min(nodes_[l].min_over, nodes_[r].min_over);
    nodes_[node].min_over = min_over >= kHigh / 2 ? kHigh : min_over + a;
    const std::int64_t max_under = std::max(nodes_[l].max_under, nodes_[r].max_under);
    nodes_[node].max_under = max_under <= kLow / 2 ? kLow : max_under + a;
  }

  void build(std::size_t node, std::size_t lo, std::size_t hi, std::span<const std::int64_t> values) {
    if (lo == hi) {
      set_leaf(node, values[lo]);
      return;
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    build(2 * node, lo, mid, values);
    build(2 * node + 1, mid + 1, hi, values);
    pull(node);
  }

  void collect(std::size_t node, std::size_t lo, std::size_t hi, std::int64_t pending,
               std::vector<std::int64_t>& out) const {
    if (lo == hi) {
      out[lo] = nodes_[node].max + pending;
      return;
    }
    const std::int64_t below = pending + nodes_[node].add;
    const std::size_t mid = lo + (hi - lo) / 2;
    collect(2 * node, lo, mid, below, out);
    collect(2 * node + 1, mid + 1, hi, below, out);
  }

  // Whether some position below `node` is on the wrong side of the limit, given
  // the adds of its strict ancestors.
  bool needs_fix(std::size_t node, std::int64_t pending) const {
    return (nodes_[node].min_over < kHigh / 2 && nodes_[node].min_over + pending <= limit_) ||
           (nodes_[node].max_under > kLow / 2 && nodes_[node].max_under + pending > limit_);
  }

  void fix(std::size_t node, std::size_t lo, std::size_t hi, std::int64_t pending) {
    if (lo == hi) {
      set_leaf_shifted(node, lo, 0, pending);
      return;
    }
    const std::int64_t below = pending + nodes_[node].add;
    const std::size_t mid = lo + (hi - lo) / 2;
    if (needs_fix(2 * node, below)) fix(2 * node, lo, mid, below);
    if (needs_fix(2 * node + 1, below)) fix(2 * node + 1, mid + 1, hi, below);
    pull(node);
  }

  // Leaves store their value in max_ with add_ folded in; `pending` is the sum
  // of the strict ancestors' adds, so a leaf's true value is max_ + pending.
  void add(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last, std::int64_t delta,
           std::int64_t pending) {
    if (first <= lo && hi <= last) {
      if (lo == hi) {
        set_leaf_shifted(node, lo, delta, pending);
        return;
      }
      nodes_[node].add += delta;
      nodes_[node].max += delta;
      if (nodes_[node].min_over < kHigh / 2) nodes_[node].min_over += delta;
      if (nodes_[node].max_under > kLow / 2) nodes_[node].max_under += delta;
      if (needs_fix(node, pending)) fix(node, lo, hi, pending);
      return;
    }
    const std::int64_t below = pending + nodes_[node].add;
    const std::size_t mid = lo + (hi - lo) / 2;
    if (first <= mid) add(2 * node, lo, mid, first, last, delta, below);
    if (last > mid) add(2 * node + 1, mid + 1, hi, first, last, delta, below);
    pull(node);
  }

  // The leaf of `position`; its side of the limit goes to the Fenwick tree.
  void set_leaf_shifted(std::size_t node, std::size_t position, std::int64_t delta, std::int64_t pending) {
    const bool was_over = nodes_[node].min_over < kHigh / 2;
    const std::int64_t stored = nodes_[node].max + delta;
    nodes_[node].max = stored;
    const bool over = stored + pending > limit_;
    nodes_[node].min_over = over ? stored : kHigh;
    nodes_[node].max_under = over ? kLow : stored;
    if (over != was_over) add_over(position, over ? 1 : -1);
  }

  // Positions above the limit among [0, end).
  std::int64_t over_before(std::size_t end) const {
    std::int64_t total = 0;
    for (std::size_t i = end; i > 0; i -= i & (~i + 1)) total += over_tree_[i];
    return total;
  }
  void add_over(std::size_t position, std::int32_t change) {
    over_total_ += change;
    for (std::size_t i = position + 1; i <= size_; i += i & (~i + 1)) over_tree_[i] += change;
  }

  std::int64_t max(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last) const {
    if (first <= lo && hi <= last) return nodes_[node].max;
    const std::size_t mid = lo + (hi - lo) / 2;
    std::int64_t best = kLow;
    if (first <= mid) best = std::max(best, max(2 * node, lo, mid, first, last));
    if (last > mid) best = std::max(best, max(2 * node + 1, mid + 1, hi, first, last));
    return best + nodes_[node].add;
  }

  // One node's aggregates side by side: an update or search reads and writes
  // several of them per node, and on a large trace the deep nodes are cache
  // misses, one per node instead of one per field (32 bytes: two nodes a
  // cache line).
  struct Node {
    std::int64_t max = kLow;        // range maximum (own add included)
    std::int64_t add = 0;           // lazy add of internal nodes; leaves keep 0
    std::int64_t min_over = kHigh;  // minimum over positions above the limit (kHigh: none)
    std::int64_t max_under = kLow;  // maximum over positions at or below it (kLow: none)
  };

  std::size_t size_ = 0;
  std::int64_t limit_ = 0;
  std::vector<Node> nodes_;
  // The count of positions above the limit: a Fenwick tree (1-based) of
  // per-position flags, and their total. The count is asked for once per
  // candidate re-evaluated, several times per pick, and a Fenwick query
  // touches a few cache lines of a compact array where a walk down the
  // segment tree touched two nodes per level.
  std::vector<std::int32_t> over_tree_;
  std::int64_t over_total_ = 0;
};

}  // namespace hyperoffload::internal
