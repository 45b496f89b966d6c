// Internal: "the first (last) position in [first, last] whose value is above
// a threshold" on the planners' lazy-add segment trees (range_max_tree.h,
// profile_tree.h), one home for the descent both use.
//
// The trees share their layout: a mid-split tree over n positions, node 1 the
// root, node k's children 2k and 2k + 1, each node's `max` the maximum of its
// range with its own `add` included and its ancestors' adds not (adds are
// never pushed down; a leaf's add is 0 or already in its max). A descent
// enters a subtree only when its maximum, with the adds above it, is above the
// threshold: O(log n).
//
// Tested through both trees (range_max_tree_test.cc, peak_internals_test.cc:
// against a scan of the values, on random adds).
//
// Thread-safety: pure functions of the nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

namespace hyperoffload::internal {

inline constexpr std::size_t kNoPosition = std::numeric_limits<std::size_t>::max();

namespace max_tree_search {

// The first (kLast: the last) position above `threshold` below `node`, which
// spans positions [lo, hi]; `pending`: the adds of its strict ancestors.
template <bool kLast, class Node>
std::size_t above(const Node* nodes, std::size_t node, std::size_t lo, std::size_t hi, std::size_t first,
                  std::size_t last, std::int64_t threshold, std::int64_t pending) {
  if (hi < first || last < lo || nodes[node].max + pending <= threshold) return kNoPosition;
  if (lo == hi) return lo;
  const std::int64_t below = pending + nodes[node].add;
  const std::size_t mid = lo + (hi - lo) / 2;
  // The near side first: the left one for the first position, the right one
  // for the last.
  const std::size_t near = kLast ? above<kLast>(nodes, 2 * node + 1, mid + 1, hi, first, last, threshold, below)
                                 : above<kLast>(nodes, 2 * node, lo, mid, first, last, threshold, below);
  if (near != kNoPosition) return near;
  return kLast ? above<kLast>(nodes, 2 * node, lo, mid, first, last, threshold, below)
               : above<kLast>(nodes, 2 * node + 1, mid + 1, hi, first, last, threshold, below);
}

}  // namespace max_tree_search

// The first (last) position in [first, last] of a tree over `size` positions
// whose value is above `threshold`, or kNoPosition. Precondition: first <=
// last < size.
template <class Node>
std::size_t find_first_above(std::span<const Node> nodes, std::size_t size, std::size_t first, std::size_t last,
                             std::int64_t threshold) {
  return max_tree_search::above<false>(nodes.data(), 1, 0, size - 1, first, last, threshold, 0);
}
template <class Node>
std::size_t find_last_above(std::span<const Node> nodes, std::size_t size, std::size_t first, std::size_t last,
                            std::int64_t threshold) {
  return max_tree_search::above<true>(nodes.data(), 1, 0, size - 1, first, last, threshold, 0);
}

}  // namespace hyperoffload::internal
