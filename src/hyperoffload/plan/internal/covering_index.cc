#include "hyperoffload/plan/internal/covering_index.h"

#include <algorithm>
#include <bit>
#include <numeric>

namespace hyperoffload::internal {

CoveringIndex::CoveringIndex(OpIndex op_count, std::span<const OpInterval> intervals) {
  const auto ops = static_cast<std::uint32_t>(std::max<OpIndex>(op_count, 1));
  levels_ = std::max(1, static_cast<int>(std::bit_width(ops - 1)));
  const std::size_t nodes = std::size_t{2} << levels_;
  const std::size_t entries = intervals.size();

  node_.resize(entries);
  offsets_.assign(nodes + 1, 0);
  for (std::size_t e = 0; e < entries; ++e) {
    node_[e] = static_cast<std::uint32_t>(node_of(intervals[e]));
    ++offsets_[node_[e] + 1];
  }
  std::partial_sum(offsets_.begin(), offsets_.end(), offsets_.begin());

  by_first_.resize(entries);
  {
    std::vector<std::uint32_t> cursor(offsets_.begin(), offsets_.end() - 1);
    for (std::size_t e = 0; e < entries; ++e) by_first_[cursor[node_[e]]++] = static_cast<std::int32_t>(e);
  }
  by_last_ = by_first_;
  first_sorted_.resize(entries);
  last_sorted_.resize(entries);
  slot_in_first_.resize(entries);
  slot_in_last_.resize(entries);
  for (std::size_t node = 0; node < nodes; ++node) {
    const auto begin = static_cast<std::ptrdiff_t>(offsets_[node]);
    const auto end = static_cast<std::ptrdiff_t>(offsets_[node + 1]);
    if (begin == end) continue;
    std::sort(by_first_.begin() + begin, by_first_.begin() + end, [&](std::int32_t a, std::int32_t b) {
      const OpInterval& x = intervals[static_cast<std::size_t>(a)];
      const OpInterval& y = intervals[static_cast<std::size_t>(b)];
      return x.first != y.first ? x.first < y.first : a < b;
    });
    std::sort(by_last_.begin() + begin, by_last_.begin() + end, [&](std::int32_t a, std::int32_t b) {
      const OpInterval& x = intervals[static_cast<std::size_t>(a)];
      const OpInterval& y = intervals[static_cast<std::size_t>(b)];
      return x.last != y.last ? x.last > y.last : a < b;
    });
    for (auto i = begin; i < end; ++i) {
      const auto first_entry = static_cast<std::size_t>(by_first_[static_cast<std::size_t>(i)]);
      const auto last_entry = static_cast<std::size_t>(by_last_[static_cast<std::size_t>(i)]);
      first_sorted_[static_cast<std::size_t>(i)] = intervals[first_entry].first;
      last_sorted_[static_cast<std::size_t>(i)] = intervals[last_entry].last;
      slot_in_first_[first_entry] = static_cast<std::uint32_t>(i - begin);
      slot_in_last_[last_entry] = static_cast<std::uint32_t>(i - begin);
    }
  }
  small_by_first_.assign(2 * entries, kNoEntry);
  large_by_first_.assign(2 * entries, kNoEntry);
  small_by_last_.assign(2 * entries, kNoEntry);
  large_by_last_.assign(2 * entries, kNoEntry);
  group_.assign(entries, IndexGroup::kNone);
  key_.assign(entries, 0.0);
}

std::size_t CoveringIndex::node_of(OpInterval interval) const {
  const auto first = static_cast<std::uint32_t>(interval.first);
  const auto last = static_cast<std::uint32_t>(interval.last);
  if (first == last) return (std::size_t{1} << levels_) + first;
  const int level = static_cast<int>(std::bit_width(first ^ last)) - 1;
  return (std::size_t{1} << (levels_ - 1 - level)) + (first >> (level + 1));
}

bool CoveringIndex::better(std::int32_t a, std::int32_t b) const {
  if (a == kNoEntry) return false;
  if (b == kNoEntry) return true;
  const double ka = key_[static_cast<std::size_t>(a)];
  const double kb = key_[static_cast<std::size_t>(b)];
  return ka != kb ? ka > kb : a < b;
}

void CoveringIndex::update(std::vector<std::int32_t>& tree, std::size_t node, std::size_t index,
                           std::int32_t value) {
  const std::size_t base = 2 * static_cast<std::size_t>(offsets_[node]);
  const std::size_t count = offsets_[node + 1] - offsets_[node];
  std::size_t j = count + index;
  tree[base + j] = value;
  for (j >>= 1; j >= 1; j >>= 1) tree[base + j] = best_of(tree[base + 2 * j], tree[base + 2 * j + 1]);
}

std::int32_t CoveringIndex::prefix_best(const std::vector<std::int32_t>& tree, std::size_t node,
                                        std::size_t count) const {
  const std::size_t base = 2 * static_cast<std::size_t>(offsets_[node]);
  const std::size_t size = offsets_[node + 1] - offsets_[node];
  std::int32_t best = kNoEntry;
  for (std::size_t l = size, r = size + count; l < r; l >>= 1, r >>= 1) {
    if (l & 1) best = best_of(best, tree[base + l++]);
    if (r & 1) best = best_of(best, tree[base + --r]);
  }
  return best;
}

void CoveringIndex::set(std::int32_t entry, IndexGroup group, double key) {
  const auto e = static_cast<std::size_t>(entry);
  const IndexGroup old = group_[e];
  group_[e] = group;
  key_[e] = key;
  const std::size_t node = node_[e];
  // Clear the old group's leaves first so the new key is compared consistently.
  if (old != group && old != IndexGroup::kNone) {
    update(old == IndexGroup::kSmall ? small_by_first_ : large_by_first_, node, slot_in_first_[e], kNoEntry);
    update(old == IndexGroup::kSmall ? small_by_last_ : large_by_last_, node, slot_in_last_[e], kNoEntry);
  }
  if (group != IndexGroup::kNone) {
    update(group == IndexGroup::kSmall ? small_by_first_ : large_by_first_, node, slot_in_first_[e], entry);
    update(group == IndexGroup::kSmall ? small_by_last_ : large_by_last_, node, slot_in_last_[e], entry);
  }
}

void CoveringIndex::activate_all(IndexGroup group, std::span<const double> keys) {
  std::copy(keys.begin(), keys.end(), key_.begin());
  std::fill(group_.begin(), group_.end(), group);
  auto& by_first_tree = group == IndexGroup::kSmall ? small_by_first_ : large_by_first_;
  auto& by_last_tree = group == IndexGroup::kSmall ? small_by_last_ : large_by_last_;
  for (std::size_t node = 0; node + 1 < offsets_.size(); ++node) {
    const std::size_t begin = offsets_[node];
    const std::size_t count = offsets_[node + 1] - begin;
    if (count == 0) continue;
    const std::size_t base = 2 * begin;
    for (std::size_t i = 0; i < count; ++i) {
      by_first_tree[base + count + i] = by_first_[begin + i];
      by_last_tree[base + count + i] = by_last_[begin + i];
    }
    for (std::size_t j = count - 1; j >= 1; --j) {
      by_first_tree[base + j] = best_of(by_first_tree[base + 2 * j], by_first_tree[base + 2 * j + 1]);
      by_last_tree[base + j] = best_of(by_last_tree[base + 2 * j], by_last_tree[base + 2 * j + 1]);
    }
  }
}

CoveringIndex::Best CoveringIndex::query(OpIndex op) const {
  Best best;
  const auto p = static_cast<std::uint32_t>(op);
  auto visit = [&](std::size_t node, bool use_first_order, std::size_t count) {
    if (count == 0) return;
    const auto& small = use_first_order ? small_by_first_ : small_by_last_;
    const auto& large = use_first_order ? large_by_first_ : large_by_last_;
    best.small = best_of(best.small, prefix_best(small, node, count));
    best.large = best_of(best.large, prefix_best(large, node, count));
  };
  for (int level = levels_ - 1; level >= 0; --level) {
    const std::size_t node = (std::size_t{1} << (levels_ - 1 - level)) + (p >> (level + 1));
    const std::uint32_t begin = offsets_[node];
    const std::uint32_t end = offsets_[node + 1];
    if (begin == end) continue;
    if (((p >> level) & 1U) == 0) {
      // p is left of the split: the intervals here end right of it, so they
      // contain p exactly when they start at or before it.
      const auto it = std::upper_bound(first_sorted_.begin() + begin, first_sorted_.begin() + end, op);
      visit(node, true, static_cast<std::size_t>(it - (first_sorted_.begin() + begin)));
    } else {
      const auto it = std::partition_point(last_sorted_.begin() + begin, last_sorted_.begin() + end,
                                           [op](OpIndex last) { return last >= op; });
      visit(node, false, static_cast<std::size_t>(it - (last_sorted_.begin() + begin)));
    }
  }
  const std::size_t leaf = (std::size_t{1} << levels_) + p;
  visit(leaf, true, offsets_[leaf + 1] - offsets_[leaf]);
  return best;
}

}  // namespace hyperoffload::internal
