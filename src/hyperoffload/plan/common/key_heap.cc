#include "hyperoffload/plan/common/key_heap.h"

#include <algorithm>
#include <bit>

namespace hyperoffload::internal {

void EightAryHeap::push(KeyItem item) {
  const std::size_t lines = (size_ + 1 + kPad + kArity - 1) / kArity;
  if (lines_.size() < lines) lines_.resize(std::max(lines, 2 * lines_.size()));
  ++size_;
  sift_up(size_ - 1, item);
}

void EightAryHeap::pop() {
  --size_;
  if (size_ > 0) sift_down(0, {key_at(size_), entry_at(size_)});
}

void EightAryHeap::sift_down(std::size_t i, KeyItem item) {
  for (;;) {
    const std::size_t first = kArity * i + 1;
    if (first >= size_) break;
    const std::size_t end = std::min(first + kArity, size_);
    // The children's children fill the eight lines after the children's
    // (logical node c's children are 8c+1 .. 8c+8, physical line c + 1): ask
    // for them now, so the next level is on its way whichever child wins.
    for (std::size_t line = first + 1; line < std::min(end + 1, lines_.size()); ++line) {
      __builtin_prefetch(&lines_[line].key[0]);
      __builtin_prefetch(&lines_[line].entry[0]);
    }
    std::size_t best = first;
    for (std::size_t c = first + 1; c < end; ++c) {
      if (ranks_above({key_at(c), entry_at(c)}, {key_at(best), entry_at(best)})) best = c;
    }
    if (!ranks_above({key_at(best), entry_at(best)}, item)) break;
    key_at(i) = key_at(best);
    entry_at(i) = entry_at(best);
    i = best;
  }
  key_at(i) = item.key;
  entry_at(i) = item.entry;
}

void EightAryHeap::sift_up(std::size_t i, KeyItem item) {
  while (i > 0) {
    const std::size_t parent = (i - 1) / kArity;
    if (!ranks_above(item, {key_at(parent), entry_at(parent)})) break;
    key_at(i) = key_at(parent);
    entry_at(i) = entry_at(parent);
    i = parent;
  }
  key_at(i) = item.key;
  entry_at(i) = item.entry;
}

KeyHeap::Rank KeyHeap::rank(KeyItem item) {
  // Non-negative doubles order as their bits; negative ones in reverse, below
  // them. Adding 0.0 makes -0.0 into 0.0, which compares equal to it.
  const auto bits = std::bit_cast<std::uint64_t>(item.key + 0.0);
  const std::uint64_t ordered = (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
  return {ordered, 0xFFFF'FFFFU - static_cast<std::uint32_t>(item.entry)};
}

int KeyHeap::bucket_of(Rank top, Rank rank) {
  const std::uint64_t high = top.key_bits ^ rank.key_bits;
  return high != 0 ? 32 + static_cast<int>(std::bit_width(high))
                   : static_cast<int>(std::bit_width(top.entry_bits ^ rank.entry_bits));
}

void KeyHeap::add(int bucket, KeyItem item) {
  buckets_[static_cast<std::size_t>(bucket)].push_back(item);
  filled_[static_cast<std::size_t>(bucket) / 64] |= std::uint64_t{1} << (bucket % 64);
  ++in_buckets_;
}

int KeyHeap::lowest_filled_above(int bucket) const {
  for (int word = (bucket + 1) / 64; word < 2; ++word) {
    std::uint64_t bits = filled_[static_cast<std::size_t>(word)];
    if (word == (bucket + 1) / 64) bits &= ~std::uint64_t{0} << ((bucket + 1) % 64);
    if (bits != 0) return 64 * word + std::countr_zero(bits);
  }
  return -1;
}

KeyItem KeyHeap::top() const {
  if (in_buckets_ == 0) return above_.top();
  const KeyItem best = buckets_[0].back();
  return above_.size() > 0 && ranks_above(above_.top(), best) ? above_.top() : best;
}

void KeyHeap::clear() {
  for (int b = 0; b < kBuckets; ++b) buckets_[static_cast<std::size_t>(b)].clear();
  filled_ = {};
  in_buckets_ = 0;
  above_.clear();
  appended_.clear();
}

void KeyHeap::build() {
  if (appended_.empty()) return;
  Rank best;
  for (const KeyItem& item : appended_) best = std::max(best, rank(item));
  if (in_buckets_ == 0) {
    top_rank_ = best;
  } else if (best > top_rank_) {
    for (const KeyItem& item : appended_) push(item);
    appended_.clear();
    return;
  }
  for (const KeyItem& item : appended_) add(bucket_of(top_rank_, rank(item)), item);
  appended_.clear();
}

void KeyHeap::push(KeyItem item) {
  const Rank r = rank(item);
  if (in_buckets_ == 0) {
    top_rank_ = r;
    add(0, item);
  } else if (r > top_rank_) {
    above_.push(item);
  } else {
    add(bucket_of(top_rank_, r), item);
  }
}

bool KeyHeap::take_top() {
  if (in_buckets_ == 0 || (above_.size() > 0 && ranks_above(above_.top(), buckets_[0].back()))) {
    above_.pop();
    return false;
  }
  buckets_[0].pop_back();
  --in_buckets_;
  if (!buckets_[0].empty()) return false;
  filled_[0] &= ~std::uint64_t{1};
  return true;
}

void KeyHeap::pop() {
  if (take_top()) settle();
}

void KeyHeap::replace_top(KeyItem item) {
  // Pushed before settling, against the rank of the top it replaces (which
  // it does not exceed when keys fall): a re-evaluated leader that still leads
  // goes to a bucket and settles back on top, where pushed after settling it
  // would rank above the new top and go to the 8-ary heap (on the 1M-op chain
  // 340k of 2.1M pushes did).
  const bool emptied = take_top();
  push(item);
  if (emptied && (filled_[0] & 1U) == 0) settle();
}

void KeyHeap::settle() {
  if (in_buckets_ == 0) return;
  const int from = lowest_filled_above(0);
  std::vector<KeyItem>& moving = buckets_[static_cast<std::size_t>(from)];
  Rank best;
  for (const KeyItem& item : moving) best = std::max(best, rank(item));
  top_rank_ = best;
  filled_[static_cast<std::size_t>(from) / 64] &= ~(std::uint64_t{1} << (from % 64));
  in_buckets_ -= moving.size();
  // Every item here shares the bits above `from` with the new top and ranks
  // at or below it, so each goes to a bucket below `from`.
  for (const KeyItem& item : moving) add(bucket_of(top_rank_, rank(item)), item);
  moving.clear();
}

std::span<const std::int32_t> KeyHeap::runners_up() const {
  const int next = in_buckets_ > 0 ? lowest_filled_above(0) : -1;
  if (next < 0) return {};
  const std::vector<KeyItem>& bucket = buckets_[static_cast<std::size_t>(next)];
  const std::size_t count = std::min(bucket.size(), runners_up_.size());
  for (std::size_t i = 0; i < count; ++i) runners_up_[i] = bucket[i].entry;
  return {runners_up_.data(), count};
}

}  // namespace hyperoffload::internal
