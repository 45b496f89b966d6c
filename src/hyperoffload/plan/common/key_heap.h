// Internal: the max-priority queue of (key, entry) items behind the covering
// index's pinned op (Note [A pinned op], covering_index.cc). An item ranks
// above another by the higher key, then by the lower entry; keys are doubles,
// not NaN (-0.0 and 0.0 rank alike, as they compare equal), and entries are
// >= 0. The queue holds items, not entries: the same entry may be pushed
// again with another key, and the caller drops the stale ones when they reach
// the top.
//
// Note [A radix heap for falling keys]
// The planner's lazy evaluation pops the leader, re-evaluates it and pushes it
// back with a key that is at most the one it had (every key is an upper bound
// that only falls), so the top only falls: the queue is monotone, which a
// radix heap serves with no comparisons along a path. Items are kept in
// buckets by the highest bit where their rank (key and entry as one 96-bit
// number) differs from the top's; a push is one append, and when the top's
// bucket empties, the lowest non-empty bucket is scanned for its best item,
// which becomes the top, and its items go to lower buckets. Each item moves
// down at most 96 times, sequentially through memory. The 8-ary heap it
// replaced walked a path of cache misses per update: on the 1M-op chain a
// third of the selection, about 2.5M sifts through 800k items.
// A push that ranks above the top — a key re-evaluated up by rounding, or an
// entry moved in from the other group — goes to an 8-ary heap beside the
// buckets (EightAryHeap), and top() is the better of the two; so every
// sequence of operations gives the answers of one exact priority queue.
//
// Cost: push O(1); pop and replace_top O(1) amortized plus the scan of the
// bucket they empty (each item moves down at most 96 times in all); items
// ranked above the top O(log_8 m) each in the 8-ary heap. Memory: the items.
//
// Thread-safety: none; every member needs exclusive access.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hyperoffload::internal {

struct KeyItem {
  double key = 0.0;
  std::int32_t entry = -1;
};

// Whether a ranks above b: the higher key, then the lower entry.
inline bool ranks_above(KeyItem a, KeyItem b) { return a.key != b.key ? a.key > b.key : a.entry < b.entry; }

// An 8-ary max-heap of KeyItems: the children of logical position i are 8i+1
// .. 8i+8, stored from physical position 8(i+1), so that their keys and
// entries fill one pair of adjacent cache lines (which the hardware fetches
// together): a sift costs about one miss per level. O(log_8 m) per push or
// pop.
class EightAryHeap {
 public:
  std::size_t size() const { return size_; }
  // Precondition for top() and pop(): size() > 0.
  KeyItem top() const { return {key_at(0), entry_at(0)}; }
  void clear() { size_ = 0; }
  void push(KeyItem item);
  void pop();

 private:
  static constexpr std::size_t kArity = 8;
  static constexpr std::size_t kPad = kArity - 1;  // physical = logical + kPad
  struct alignas(128) Line {
    double key[kArity];
    std::int32_t entry[kArity];
  };
  double& key_at(std::size_t i) { return lines_[(i + kPad) / kArity].key[(i + kPad) % kArity]; }
  double key_at(std::size_t i) const { return lines_[(i + kPad) / kArity].key[(i + kPad) % kArity]; }
  std::int32_t& entry_at(std::size_t i) { return lines_[(i + kPad) / kArity].entry[(i + kPad) % kArity]; }
  std::int32_t entry_at(std::size_t i) const { return lines_[(i + kPad) / kArity].entry[(i + kPad) % kArity]; }
  void sift_down(std::size_t i, KeyItem item);
  void sift_up(std::size_t i, KeyItem item);

  std::size_t size_ = 0;
  std::vector<Line> lines_;
};

class KeyHeap {
 public:
  std::size_t size() const { return in_buckets_ + above_.size(); }
  // The best item. Precondition: size() > 0.
  KeyItem top() const;
  // Empties the queue (its memory is kept for the next use).
  void clear();
  // Adds many items at once: append() each, then build() before any other
  // call. O(items).
  void append(KeyItem item) { appended_.push_back(item); }
  void build();
  void push(KeyItem item);
  // Removes the top item. Precondition: size() > 0.
  void pop();
  // pop(), then push(item), in one step: an item ranking at or below the
  // one it replaces (a re-evaluated leader) goes to the buckets even when it
  // still leads. Precondition: size() > 0.
  void replace_top(KeyItem item);
  // Entries likely to lead if the top fell (the first few items of the
  // lowest non-empty bucket below the top's, which holds the next leader when
  // the top's bucket empties): a hint for prefetching, at most eight, maybe
  // stale or none.
  std::span<const std::int32_t> runners_up() const;

 private:
  // Key and entry as one number: the key's bits in an order that matches the
  // doubles' (-0.0 as 0.0), then the entry reversed, so that higher ranks
  // better, as ranks_above() says.
  struct Rank {
    std::uint64_t key_bits = 0;
    std::uint32_t entry_bits = 0;
    friend auto operator<=>(const Rank&, const Rank&) = default;
  };
  static Rank rank(KeyItem item);
  // The bucket of `rank` against the top's: the bit width of their XOR, 0
  // (the top's own rank) to 96.
  static int bucket_of(Rank top, Rank rank);
  static constexpr int kBuckets = 97;
  void add(int bucket, KeyItem item);
  // Removes the top item without settling: from above_ when it is there's.
  // Returns whether the top's bucket is left empty.
  bool take_top();
  int lowest_filled_above(int bucket) const;  // the lowest non-empty bucket > `bucket`, or -1
  // After the top's bucket empties: the best item of the lowest non-empty
  // bucket becomes the top, and that bucket's items go to lower buckets.
  void settle();

  std::array<std::vector<KeyItem>, kBuckets> buckets_;
  std::array<std::uint64_t, 2> filled_{};  // bit b of the pair: bucket b is non-empty
  Rank top_rank_;                     // every bucketed item ranks at or below it; bucket 0 holds its equals
  std::size_t in_buckets_ = 0;
  EightAryHeap above_;  // items pushed ranking above top_rank_
  std::vector<KeyItem> appended_;
  mutable std::array<std::int32_t, 8> runners_up_{};
};

}  // namespace hyperoffload::internal
