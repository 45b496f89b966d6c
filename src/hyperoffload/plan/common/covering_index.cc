#include "hyperoffload/plan/common/covering_index.h"

#include <algorithm>
#include <bit>
#include <numeric>

// Note [A pinned op]
// The peak planner's selection asks for the best candidate at the peak op,
// re-evaluates the leader, asks again, and so on; on the 1M-op chain the
// peak op never moved in 416k picks and 2.1M re-evaluations, and each set()
// walked two per-node segment trees of the root's hundreds of thousands of
// entries (a million dependent loads per thousand picks, most of them cache
// misses). When the op stays, only the entries containing it matter, and
// every change the planner makes is to the leader or to an entry it just
// re-evaluated: a queue per group answers that in O(1), and a changed leader
// goes back in O(1) amortized (a radix heap, since keys only fall: Note [A
// radix heap for falling keys], key_heap.h). The trees are
// brought up to date, one deferred set() at a time in the order of first
// deferral (each applied as set() would have been, so the trees end as if
// every set() had reached them), when a query asks about another op.
//
// Heap items are never removed from the middle: an item is valid while its
// entry is still in that group with that key (compared bit for bit), and
// invalid items are dropped when they reach the top. So the top valid item
// is the best active entry of the group containing the op, ties to the lower
// entry as in the trees. The heaps are built from the path's entries, which
// costs O(entries containing the op); pinning waits until the op has been
// queried (entries containing it) / kPinEntriesPerQuery times, so building
// costs at most kPinEntriesPerQuery per query already made.

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

  // Each node's entries sorted by first ascending (by_first_) and by last
  // descending (by_last_), ties by entry index: a stable counting sort of all
  // entries by that op, then a stable distribution to their nodes.
  auto distribute = [&](auto op_key) {
    std::vector<std::uint32_t> start(static_cast<std::size_t>(ops) + 1, 0);
    for (std::size_t e = 0; e < entries; ++e) ++start[op_key(intervals[e]) + 1];
    std::partial_sum(start.begin(), start.end(), start.begin());
    std::vector<std::int32_t> by_op(entries);
    for (std::size_t e = 0; e < entries; ++e) by_op[start[op_key(intervals[e])]++] = static_cast<std::int32_t>(e);
    std::vector<std::int32_t> out(entries);
    std::vector<std::uint32_t> cursor(offsets_.begin(), offsets_.end() - 1);
    for (const std::int32_t e : by_op) out[cursor[node_[static_cast<std::size_t>(e)]]++] = e;
    return out;
  };
  by_first_.entries = distribute([](const OpInterval& i) { return static_cast<std::uint32_t>(i.first); });
  by_last_.entries =
      distribute([ops](const OpInterval& i) { return ops - 1 - static_cast<std::uint32_t>(i.last); });
  position_in_first_.resize(entries);
  position_in_last_.resize(entries);
  by_first_.ops.resize(entries);
  by_last_.ops.resize(entries);
  for (std::size_t i = 0; i < entries; ++i) {
    const auto first_entry = static_cast<std::size_t>(by_first_.entries[i]);
    const auto last_entry = static_cast<std::size_t>(by_last_.entries[i]);
    by_first_.ops[i] = intervals[first_entry].first;
    by_last_.ops[i] = intervals[last_entry].last;
    position_in_first_[first_entry] = static_cast<std::uint32_t>(i);
    position_in_last_[last_entry] = static_cast<std::uint32_t>(i);
  }
  for (Order* order : {&by_first_, &by_last_}) {
    order->keys.assign(entries, 0.0);
    order->small_tree.assign(2 * entries, kNoEntry);
    order->large_tree.assign(2 * entries, kNoEntry);
  }
  group_.assign(entries, IndexGroup::kNone);
  tree_group_.assign(entries, IndexGroup::kNone);
  key_.assign(entries, 0.0);
  is_pending_.assign(entries, 0);
  intervals_.assign(intervals.begin(), intervals.end());
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

bool CoveringIndex::better_at(const Order& order, std::int32_t a, std::int32_t b) {
  if (a == kNoEntry) return false;
  if (b == kNoEntry) return true;
  const double ka = order.keys[static_cast<std::size_t>(a)];
  const double kb = order.keys[static_cast<std::size_t>(b)];
  return ka != kb ? ka > kb : order.entries[static_cast<std::size_t>(a)] < order.entries[static_cast<std::size_t>(b)];
}

void CoveringIndex::update(Order& order, IndexGroup group, std::size_t node, std::size_t position, bool present) {
  std::vector<std::int32_t>& tree = order.tree(group);
  const std::size_t begin = offsets_[node];
  const std::size_t base = 2 * begin;
  const std::size_t count = offsets_[node + 1] - begin;
  const auto at = static_cast<std::int32_t>(position);
  std::size_t j = count + (position - begin);
  tree[base + j] = present ? at : kNoEntry;
  for (j >>= 1; j >= 1; j >>= 1) {
    const std::int32_t left = tree[base + 2 * j], right = tree[base + 2 * j + 1];
    const std::int32_t best = better_at(order, left, right) ? left : right;
    // Above a node whose best neither changed nor is the changed position,
    // every comparison is as before: stop.
    if (best == tree[base + j] && best != at) break;
    tree[base + j] = best;
  }
}

std::int32_t CoveringIndex::prefix_best(const Order& order, IndexGroup group, std::size_t node,
                                        std::size_t count) const {
  const std::vector<std::int32_t>& tree = order.tree(group);
  const std::size_t base = 2 * static_cast<std::size_t>(offsets_[node]);
  const std::size_t size = offsets_[node + 1] - offsets_[node];
  // The root (or, for one entry, the leaf) holds the best of the whole node.
  const std::int32_t root = tree[base + 1];
  if (root == kNoEntry) return kNoEntry;
  if (count == size) return order.entries[static_cast<std::size_t>(root)];
  std::int32_t best = kNoEntry;
  auto consider = [&](std::int32_t candidate) {
    if (better_at(order, candidate, best)) best = candidate;
  };
  for (std::size_t l = size, r = size + count; l < r; l >>= 1, r >>= 1) {
    if (l & 1) consider(tree[base + l++]);
    if (r & 1) consider(tree[base + --r]);
  }
  return best == kNoEntry ? kNoEntry : order.entries[static_cast<std::size_t>(best)];
}

void CoveringIndex::place(std::int32_t entry, IndexGroup group, bool present) {
  const auto e = static_cast<std::size_t>(entry);
  update(by_first_, group, node_[e], position_in_first_[e], present);
  update(by_last_, group, node_[e], position_in_last_[e], present);
}

void CoveringIndex::set(std::int32_t entry, IndexGroup group, double key) {
  const auto e = static_cast<std::size_t>(entry);
  if (!pinned_) {
    touch(node_[e]);
    group_[e] = group;
    key_[e] = key;
    apply(entry, group, key);
    return;
  }
  if (group != IndexGroup::kNone && intervals_[e].first <= cached_op_ && cached_op_ <= intervals_[e].last) {
    KeyHeap& to = heap(group);
    // The planner changes the leader most: it sinks from the top.
    const bool leads = to.size() > 0 && to.top().entry == entry && valid(to.top(), group);
    if (leads) {
      to.replace_top({key, entry});
    } else {
      to.push({key, entry});
    }
  }
  group_[e] = group;
  key_[e] = key;
  if (is_pending_[e] == 0) {
    is_pending_[e] = 1;
    pending_.push_back(entry);
  }
}

void CoveringIndex::apply(std::int32_t entry, IndexGroup group, double key) {
  const IndexGroup old = tree_group_[static_cast<std::size_t>(entry)];
  // Clear the old group's leaves first, while the old key still orders them.
  if (old != group && old != IndexGroup::kNone) place(entry, old, false);
  record_for_trees(entry, group, key);
  if (group != IndexGroup::kNone) place(entry, group, true);
}

void CoveringIndex::record_for_trees(std::int32_t entry, IndexGroup group, double key) {
  const auto e = static_cast<std::size_t>(entry);
  tree_group_[e] = group;
  by_first_.keys[position_in_first_[e]] = key;
  by_last_.keys[position_in_last_[e]] = key;
}

void CoveringIndex::activate_all(IndexGroup group, std::span<const double> keys, std::span<const std::uint8_t> active) {
  unpin();
  cached_op_ = -1;
  // An entry left inactive keeps its key and group, as set() never called.
  const auto is_active = [&](std::size_t e) { return active.empty() || active[e] != 0; };
  for (std::size_t e = 0; e < key_.size(); ++e) {
    if (!is_active(e)) continue;
    key_[e] = keys[e];
    group_[e] = group;
    tree_group_[e] = group;
  }
  for (Order* order : {&by_first_, &by_last_}) {
    for (std::size_t i = 0; i < order->entries.size(); ++i) {
      const auto e = static_cast<std::size_t>(order->entries[i]);
      if (is_active(e)) order->keys[i] = keys[e];
    }
    // Every entry was inactive, so the active ones are those the trees now
    // hold in `group`.
    for (std::size_t node = 0; node + 1 < offsets_.size(); ++node) rebuild(*order, group, node);
  }
}

void CoveringIndex::rebuild(Order& order, IndexGroup group, std::size_t node) {
  const std::size_t begin = offsets_[node];
  const std::size_t count = offsets_[node + 1] - begin;
  if (count == 0) return;
  std::vector<std::int32_t>& tree = order.tree(group);
  const std::size_t base = 2 * begin;
  for (std::size_t i = 0; i < count; ++i) {
    tree[base + count + i] = tree_group_[static_cast<std::size_t>(order.entries[begin + i])] == group
                                 ? static_cast<std::int32_t>(begin + i)
                                 : kNoEntry;
  }
  for (std::size_t j = count - 1; j >= 1; --j) {
    const std::int32_t left = tree[base + 2 * j], right = tree[base + 2 * j + 1];
    tree[base + j] = better_at(order, left, right) ? left : right;
  }
}

CoveringIndex::Best CoveringIndex::query(OpIndex op) {
  unpin();
  Best best;
  const auto p = static_cast<std::uint32_t>(op);
  auto visit = [&](std::size_t node, const Order& order, std::size_t count) {
    if (count == 0) return;
    const std::int32_t small = prefix_best(order, IndexGroup::kSmall, node, count);
    const std::int32_t large = prefix_best(order, IndexGroup::kLarge, node, count);
    if (better(small, best.small)) best.small = small;
    if (better(large, best.large)) best.large = large;
  };
  for (int level = levels_ - 1; level >= 0; --level) {
    const std::size_t node = (std::size_t{1} << (levels_ - 1 - level)) + (p >> (level + 1));
    const std::uint32_t begin = offsets_[node];
    const std::uint32_t end = offsets_[node + 1];
    if (begin == end) continue;
    if (((p >> level) & 1U) == 0) {
      // p is left of the split: the intervals here end right of it, so they
      // contain p exactly when they start at or before it.
      const auto it = std::upper_bound(by_first_.ops.begin() + begin, by_first_.ops.begin() + end, op);
      visit(node, by_first_, static_cast<std::size_t>(it - (by_first_.ops.begin() + begin)));
    } else {
      const auto it = std::partition_point(by_last_.ops.begin() + begin, by_last_.ops.begin() + end,
                                           [op](OpIndex last) { return last >= op; });
      visit(node, by_last_, static_cast<std::size_t>(it - (by_last_.ops.begin() + begin)));
    }
  }
  const std::size_t leaf = (std::size_t{1} << levels_) + p;
  visit(leaf, by_first_, offsets_[leaf + 1] - offsets_[leaf]);
  return best;
}

void CoveringIndex::touch(std::size_t node) {
  if (cached_op_ < 0) return;
  const auto depth = static_cast<std::size_t>(std::bit_width(node) - 1);
  if (path_[depth].node == node) path_[depth].dirty = true;
}

CoveringIndex::Best CoveringIndex::node_best(const PathNode& at) const {
  if (at.count == 0) return {};
  const Order& order = at.by_first ? by_first_ : by_last_;
  return {prefix_best(order, IndexGroup::kSmall, at.node, at.count),
          prefix_best(order, IndexGroup::kLarge, at.node, at.count)};
}

// The same walk as query(): at depth d the path node of p is (1 << d) + (p >>
// (levels_ - d)); left of its split the entries containing p are a prefix of
// by_first_, right of it a prefix of by_last_; at the leaf all of them.
void CoveringIndex::fill_path(OpIndex op) {
  const auto p = static_cast<std::uint32_t>(op);
  path_.assign(static_cast<std::size_t>(levels_) + 1, PathNode{});
  for (int depth = 0; depth < levels_; ++depth) {
    PathNode& at = path_[static_cast<std::size_t>(depth)];
    const int level = levels_ - 1 - depth;
    at.node = (std::size_t{1} << depth) + (p >> (level + 1));
    const std::uint32_t begin = offsets_[at.node];
    const std::uint32_t end = offsets_[at.node + 1];
    if (((p >> level) & 1U) == 0) {
      at.by_first = true;
      const auto it = std::upper_bound(by_first_.ops.begin() + begin, by_first_.ops.begin() + end, op);
      at.count = static_cast<std::size_t>(it - (by_first_.ops.begin() + begin));
    } else {
      at.by_first = false;
      const auto it = std::partition_point(by_last_.ops.begin() + begin, by_last_.ops.begin() + end,
                                           [op](OpIndex last) { return last >= op; });
      at.count = static_cast<std::size_t>(it - (by_last_.ops.begin() + begin));
    }
    at.best = node_best(at);
  }
  PathNode& leaf = path_[static_cast<std::size_t>(levels_)];
  leaf.node = (std::size_t{1} << levels_) + p;
  leaf.by_first = true;
  leaf.count = offsets_[leaf.node + 1] - offsets_[leaf.node];
  leaf.best = node_best(leaf);
  cached_op_ = op;
  queries_at_op_ = 0;
  path_entries_ = 0;
  for (const PathNode& at : path_) path_entries_ += at.count;
}

CoveringIndex::Best CoveringIndex::query_cached(OpIndex op) {
  if (pinned_) {
    if (op == cached_op_) return pinned_best();
    unpin();
  }
  if (op != cached_op_) {
    fill_path(op);
  } else {
    for (PathNode& at : path_) {
      if (!at.dirty) continue;
      at.best = node_best(at);
      at.dirty = false;
    }
    ++queries_at_op_;
    if (queries_at_op_ * kPinEntriesPerQuery >= static_cast<std::int64_t>(path_entries_)) {
      pin();
      return pinned_best();
    }
  }
  // Keys only change through set(), which marks the node: the per-node bests
  // are current, and combining them compares current keys.
  Best best;
  for (const PathNode& at : path_) {
    if (better(at.best.small, best.small)) best.small = at.best.small;
    if (better(at.best.large, best.large)) best.large = at.best.large;
  }
  return best;
}

std::span<const std::int32_t> CoveringIndex::runners_up(IndexGroup group) const {
  if (!pinned_ || group == IndexGroup::kNone) return {};
  return heap(group).runners_up();
}

bool CoveringIndex::valid(const KeyItem& item, IndexGroup group) const {
  const auto e = static_cast<std::size_t>(item.entry);
  return group_[e] == group && std::bit_cast<std::uint64_t>(key_[e]) == std::bit_cast<std::uint64_t>(item.key);
}

void CoveringIndex::pin() {
  for (KeyHeap& h : heaps_) h.clear();
  // The path's entries containing the op: a prefix of one order per node.
  for (const PathNode& at : path_) {
    const Order& order = at.by_first ? by_first_ : by_last_;
    const std::size_t begin = offsets_[at.node];
    for (std::size_t i = begin; i < begin + at.count; ++i) {
      const std::int32_t entry = order.entries[i];
      const IndexGroup group = group_[static_cast<std::size_t>(entry)];
      if (group != IndexGroup::kNone) heap(group).append({key_[static_cast<std::size_t>(entry)], entry});
    }
  }
  for (KeyHeap& h : heaps_) h.build();
  pinned_ = true;
}

void CoveringIndex::unpin() {
  if (!pinned_) return;
  pinned_ = false;
  for (KeyHeap& h : heaps_) h.clear();
  cached_op_ = -1;  // the path's bests predate the deferred updates
  // Note [Trees rebuilt when most of a node changed]: one set() costs
  // O(log c) in a node of c entries and a rebuild of its trees O(c), so a
  // node with at least c / log2(c) deferred changes is rebuilt instead, once
  // its entries' groups and keys are in place. A tree is a function of its
  // leaves (each internal node the better of its two children), so it ends
  // as the set() calls would have left it. (On the 1M-op chain the peak op
  // moved once, with 612k changes deferred, most at the root's 828k entries:
  // 151 ms one by one.)
  if (pending_in_node_.empty()) pending_in_node_.assign(offsets_.size() - 1, 0);
  for (const std::int32_t entry : pending_) ++pending_in_node_[node_[static_cast<std::size_t>(entry)]];
  const auto rebuilt = [&](std::size_t node) {
    const std::size_t count = offsets_[node + 1] - offsets_[node];
    return static_cast<std::size_t>(pending_in_node_[node]) * std::bit_width(count) >= count;
  };
  for (const std::int32_t entry : pending_) {
    const auto e = static_cast<std::size_t>(entry);
    is_pending_[e] = 0;
    if (rebuilt(node_[e])) {
      record_for_trees(entry, group_[e], key_[e]);
    } else {
      apply(entry, group_[e], key_[e]);
    }
  }
  for (const std::int32_t entry : pending_) {
    const std::size_t node = node_[static_cast<std::size_t>(entry)];
    if (pending_in_node_[node] == 0) continue;  // already done
    if (rebuilt(node)) {
      for (Order* order : {&by_first_, &by_last_}) {
        for (const IndexGroup group : {IndexGroup::kSmall, IndexGroup::kLarge}) rebuild(*order, group, node);
      }
    }
    pending_in_node_[node] = 0;
  }
  pending_.clear();
}

CoveringIndex::Best CoveringIndex::pinned_best() {
  Best best;
  for (const IndexGroup group : {IndexGroup::kSmall, IndexGroup::kLarge}) {
    KeyHeap& h = heap(group);
    while (h.size() > 0 && !valid(h.top(), group)) h.pop();
    if (h.size() > 0) (group == IndexGroup::kSmall ? best.small : best.large) = h.top().entry;
  }
  return best;
}

}  // namespace hyperoffload::internal
