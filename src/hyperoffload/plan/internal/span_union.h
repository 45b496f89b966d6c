// Internal: a growing union of op ranges — "how many ops of [first, last] are
// already inside some added range?" — for the peak planner's neighbour-impact
// term. Each position is marked once (a next-unmarked skip list with path
// halving), and counts come from a Fenwick tree: add() is amortized
// O(log n) per newly covered op, covered() is O(log n).
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace hyperoffload::internal {

class SpanUnion {
 public:
  explicit SpanUnion(std::size_t size) : next_(size + 1), fenwick_(size + 1, 0) {
    std::iota(next_.begin(), next_.end(), std::uint32_t{0});
  }

  // Marks [first, last]. Precondition: first <= last < size.
  void add(std::size_t first, std::size_t last) {
    for (std::size_t at = find(first); at <= last; at = find(at)) {
      for (std::size_t i = at + 1; i < fenwick_.size(); i += i & (~i + 1)) ++fenwick_[i];
      next_[at] = static_cast<std::uint32_t>(at + 1);
    }
  }

  // Marked positions in [first, last]. Precondition: first <= last < size.
  std::size_t covered(std::size_t first, std::size_t last) const { return prefix(last + 1) - prefix(first); }

 private:
  // The first unmarked position at or after `at` (size when none).
  std::size_t find(std::size_t at) {
    while (next_[at] != at) {
      next_[at] = next_[next_[at]];
      at = next_[at];
    }
    return at;
  }
  std::size_t prefix(std::size_t count) const {
    std::size_t total = 0;
    for (std::size_t i = count; i > 0; i -= i & (~i + 1)) total += fenwick_[i];
    return total;
  }

  std::vector<std::uint32_t> next_;     // next_[i] == i: unmarked (or the end sentinel)
  std::vector<std::uint32_t> fenwick_;  // counts of marked positions
};

}  // namespace hyperoffload::internal
