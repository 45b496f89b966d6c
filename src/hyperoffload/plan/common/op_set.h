// Internal: a set of op positions with insert and "the largest at or before
// an op" — the peak placement's record of the ops its prefetches were placed
// at. Bits in 64-bit words, a level of words above the words for every 64 of
// them: O(log_64 n) per call on a few cache lines, where a std::set's tree
// walk missed the cache at most of its 20 levels (on the 1M-op chain a
// placement inserts 416k ops and asks as often).
//
// Memory: n / 64 words, n / 64² above them, and so on: 125 KB for 1M ops.
//
// Thread-safety: const members may run concurrently; insert() needs
// exclusive access.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace hyperoffload::internal {

class OpSet {
 public:
  static constexpr std::int64_t kNone = -1;

  // An empty set of positions [0, size).
  explicit OpSet(std::size_t size) {
    std::size_t count = size;
    do {
      count = (count + 63) / 64;
      levels_.emplace_back(count, 0);
    } while (count > 1);
  }

  // Precondition: position < size.
  void insert(std::size_t position) {
    for (std::vector<std::uint64_t>& words : levels_) {
      words[position / 64] |= std::uint64_t{1} << (position % 64);
      position /= 64;
    }
  }

  // The largest position in the set at or before `position`, or kNone.
  // Precondition: position < size.
  std::int64_t at_or_before(std::size_t position) const {
    for (std::size_t level = 0; level < levels_.size(); ++level) {
      const std::size_t word = position / 64;
      const std::size_t bit = position % 64;
      const std::uint64_t upto = bit == 63 ? ~std::uint64_t{0} : (std::uint64_t{2} << bit) - 1;
      const std::uint64_t found = levels_[level][word] & upto;
      if (found != 0) {
        // Down from this level: the highest set bit of each word below.
        std::size_t at = word * 64 + static_cast<std::size_t>(63 - std::countl_zero(found));
        for (std::size_t below = level; below-- > 0;) {
          at = at * 64 + static_cast<std::size_t>(63 - std::countl_zero(levels_[below][at]));
        }
        return static_cast<std::int64_t>(at);
      }
      // Nothing in this word at or before the bit: the words before it, one
      // level up.
      if (word == 0) return kNone;
      position = word - 1;
    }
    return kNone;
  }

 private:
  std::vector<std::vector<std::uint64_t>> levels_;  // levels_[0]: one bit per position
};

}  // namespace hyperoffload::internal
