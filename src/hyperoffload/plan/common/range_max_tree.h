// Internal: a segment tree over per-op byte counts with range add and range
// maximum, both O(log n). The planners keep their memory profile in one so that
// "subtract this storage over these ops" and "what is the peak over these ops"
// never rescan the trace.
//
// The peak planner's ProfileTree (profile_tree.h) answers more questions (ops
// over a limit, the count of them) at the price of more work per add: greedy on
// it plans a 1M-op trace about 30% slower, so greedy keeps this lean tree,
// and so does the recompute selection (recompute_selection.h), which asks only
// for maxima: about 5% of the recompute planner's time on the 1M-op chain. The
// peak planner's placements too (peak_placement.h): they only add and search
// for the first or last position above a threshold, and half the bytes per
// node is half the cache lines on a large trace.
//
// Lazy adds are kept at the nodes without being pushed down: a node's value is
// the maximum of its range *excluding* the adds of its ancestors, which is exact
// because adding a constant to a range shifts its maximum by that constant.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hyperoffload/plan/common/max_tree_search.h"

namespace hyperoffload::internal {

class RangeMaxTree {
 public:
  RangeMaxTree() = default;
  explicit RangeMaxTree(std::span<const std::int64_t> values) { assign(values); }

  void assign(std::span<const std::int64_t> values) {
    size_ = values.size();
    // Node ids of a mid-split tree over n positions stay below twice the next
    // power of two.
    nodes_.assign(2 * std::bit_ceil(std::max<std::size_t>(size_, 1)), Node{});
    if (size_ > 0) build(1, 0, size_ - 1, values);
  }

  std::size_t size() const { return size_; }

  // Adds `delta` to every position in [first, last] (inclusive). Precondition:
  // first <= last < size().
  void add(std::size_t first, std::size_t last, std::int64_t delta) { add(1, 0, size_ - 1, first, last, delta); }

  // Maximum over [first, last] (inclusive). Precondition: first <= last < size().
  std::int64_t max(std::size_t first, std::size_t last) const { return max(1, 0, size_ - 1, first, last); }

  // Maximum over everything (kNone when empty).
  std::int64_t max() const { return size_ == 0 ? kNone : nodes_[1].max; }

  // Leftmost position holding the overall maximum. Precondition: size() > 0.
  std::size_t argmax() const {
    std::size_t node = 1, lo = 0, hi = size_ - 1;
    std::int64_t pending = 0;  // adds of the ancestors of `node`
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

  // Value at one position.
  std::int64_t at(std::size_t position) const { return max(position, position); }

  // First (last) position in [first, last] whose value is above `threshold`,
  // or kNotFound. O(log n) (max_tree_search.h). Precondition: first <= last <
  // size().
  std::size_t find_first_above(std::size_t first, std::size_t last, std::int64_t threshold) const {
    return internal::find_first_above(std::span<const Node>(nodes_), size_, first, last, threshold);
  }
  std::size_t find_last_above(std::size_t first, std::size_t last, std::int64_t threshold) const {
    return internal::find_last_above(std::span<const Node>(nodes_), size_, first, last, threshold);
  }

  static constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min() / 4;
  static constexpr std::size_t kNotFound = kNoPosition;

 private:
  void build(std::size_t node, std::size_t lo, std::size_t hi, std::span<const std::int64_t> values) {
    if (lo == hi) {
      nodes_[node].max = values[lo];
      return;
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    build(2 * node, lo, mid, values);
    build(2 * node + 1, mid + 1, hi, values);
    nodes_[node].max = std::max(nodes_[2 * node].max, nodes_[2 * node + 1].max);
  }

  void add(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last,
           std::int64_t delta) {
    if (first <= lo && hi <= last) {
      nodes_[node].max += delta;
      nodes_[node].add += delta;
      return;
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    if (first <= mid) add(2 * node, lo, mid, first, last, delta);
    if (last > mid) add(2 * node + 1, mid + 1, hi, first, last, delta);
    nodes_[node].max = std::max(nodes_[2 * node].max, nodes_[2 * node + 1].max) + nodes_[node].add;
  }

  std::int64_t max(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last) const {
    if (first <= lo && hi <= last) return nodes_[node].max;
    const std::size_t mid = lo + (hi - lo) / 2;
    std::int64_t best = kNone;
    if (first <= mid) best = std::max(best, max(2 * node, lo, mid, first, last));
    if (last > mid) best = std::max(best, max(2 * node + 1, mid + 1, hi, first, last));
    return best + nodes_[node].add;
  }

  std::size_t size_ = 0;
  // A node's maximum and add side by side: an update reads and writes both,
  // and on a large trace the deep nodes are cache misses, one per node
  // instead of two (16 bytes: four nodes a cache line).
  struct Node {
    std::int64_t max = kNone;  // range maximum, own add included
    std::int64_t add = 0;      // lazy add, not pushed down
  };
  std::vector<Node> nodes_;
};

}  // namespace hyperoffload::internal
