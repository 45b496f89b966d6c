// Internal: a segment tree over per-op byte counts with range add and range
// maximum, both O(log n). The planners keep their memory profile in one so that
// "subtract this storage over these ops" and "what is the peak over these ops"
// never rescan the trace.
//
// The peak planner's ProfileTree (profile_tree.h) answers more questions (ops
// over a limit, threshold searches) at the price of more work per add: greedy on
// it plans a 1M-op trace about 30% slower, so greedy keeps this lean tree.
//
// Lazy adds are kept at the nodes without being pushed down: a node's value is
// the maximum of its range *excluding* the adds of its ancestors, which is exact
// because adding a constant to a range shifts its maximum by that constant.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace hyperoffload::internal {

class RangeMaxTree {
 public:
  RangeMaxTree() = default;
  explicit RangeMaxTree(std::span<const std::int64_t> values) { assign(values); }

  void assign(std::span<const std::int64_t> values) {
    size_ = values.size();
    max_.assign(4 * std::max<std::size_t>(size_, 1), kNone);
    add_.assign(max_.size(), 0);
    if (size_ > 0) build(1, 0, size_ - 1, values);
  }

  std::size_t size() const { return size_; }

  // Adds `delta` to every position in [first, last] (inclusive). Precondition:
  // first <= last < size().
  void add(std::size_t first, std::size_t last, std::int64_t delta) { add(1, 0, size_ - 1, first, last, delta); }

  // Maximum over [first, last] (inclusive). Precondition: first <= last < size().
  std::int64_t max(std::size_t first, std::size_t last) const { return max(1, 0, size_ - 1, first, last); }

  // Maximum over everything (kNone when empty).
  std::int64_t max() const { return size_ == 0 ? kNone : max_[1]; }

  // Leftmost position holding the overall maximum. Precondition: size() > 0.
  std::size_t argmax() const {
    std::size_t node = 1, lo = 0, hi = size_ - 1;
    std::int64_t pending = 0;  // adds of the ancestors of `node`
    const std::int64_t target = max_[1];
    while (lo < hi) {
      pending += add_[node];
      const std::size_t mid = lo + (hi - lo) / 2;
      if (max_[2 * node] + pending == target) {
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

  static constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min() / 4;

 private:
  void build(std::size_t node, std::size_t lo, std::size_t hi, std::span<const std::int64_t> values) {
    if (lo == hi) {
      max_[node] = values[lo];
      return;
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    build(2 * node, lo, mid, values);
    build(2 * node + 1, mid + 1, hi, values);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
  }

  void add(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last,
           std::int64_t delta) {
    if (first <= lo && hi <= last) {
      max_[node] += delta;
      add_[node] += delta;
      return;
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    if (first <= mid) add(2 * node, lo, mid, first, last, delta);
    if (last > mid) add(2 * node + 1, mid + 1, hi, first, last, delta);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }

  std::int64_t max(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last) const {
    if (first <= lo && hi <= last) return max_[node];
    const std::size_t mid = lo + (hi - lo) / 2;
    std::int64_t best = kNone;
    if (first <= mid) best = std::max(best, max(2 * node, lo, mid, first, last));
    if (last > mid) best = std::max(best, max(2 * node + 1, mid + 1, hi, first, last));
    return best + add_[node];
  }

  std::size_t size_ = 0;
  std::vector<std::int64_t> max_;
  std::vector<std::int64_t> add_;
};

}  // namespace hyperoffload::internal
