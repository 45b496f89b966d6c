#include "hyperoffload/plan/peak/peak_placement.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "hyperoffload/plan/common/op_set.h"

namespace hyperoffload::internal {

std::vector<OpIndex> prefetch_room(const PeakPass& pass, std::span<const std::int32_t> selected,
                                   const RangeMaxTree& profile) {
  std::vector<OpIndex> room_from;
  room_from.reserve(selected.size());
  for (const std::int32_t k : selected) {
    const PeakCandidate& c = pass.model.interior[static_cast<std::size_t>(k)];
    const std::size_t blocked_last =
        profile.find_last_above(static_cast<std::size_t>(c.interior_first()),
                                static_cast<std::size_t>(c.interior_last()), pass.limit_bytes - c.size_bytes);
    room_from.push_back(blocked_last == RangeMaxTree::kNotFound ? c.interior_first()
                                                                : static_cast<OpIndex>(blocked_last) + 1);
  }
  return room_from;
}

std::vector<std::int32_t> engine_order(const PeakPass& pass, std::span<const std::int32_t> selected,
                                       std::span<const OpIndex> room_from, std::span<const double> ready_ms,
                                       EngineRule rule) {
  const PeakModel& model = pass.model;
  const std::span<const double> start_ms = pass.start_ms;
  std::vector<EngineJob> jobs;
  jobs.reserve(selected.size());
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const std::int32_t k = selected[i];
    const PeakCandidate& c = model.interior[static_cast<std::size_t>(k)];
    jobs.push_back({std::max(ready_ms[static_cast<std::size_t>(c.version)],
                             start_ms[static_cast<std::size_t>(room_from[i])]),
                    start_ms[static_cast<std::size_t>(c.end_op)], tie_key(c.end_op, k), pass.trace.h2d_ms(c.size_bytes)});
  }
  std::vector<std::int32_t> order;
  order.reserve(jobs.size());
  for (const std::size_t j : sequence_jobs(jobs, rule)) order.push_back(selected[j]);
  return order;
}

std::vector<Placement> place(const PeakPass& pass, std::span<const std::int32_t> selected,
                             std::span<const OpIndex> room_from, std::span<const double> ready_ms,
                             RangeMaxTree& profile, EngineRule rule) {
  const PeakModel& model = pass.model;
  const std::int64_t limit = pass.limit_bytes;
  const DeviceMemory device = pass.device;
  auto interior = [&](std::int32_t k) -> const PeakCandidate& { return model.interior[static_cast<std::size_t>(k)]; };
  const std::vector<std::int32_t> by_need =
      engine_order(pass, selected, room_from, ready_ms, rule);
  std::vector<std::int32_t> engine_rank(model.interior.size(), 0);
  for (std::size_t i = 0; i < by_need.size(); ++i)
    engine_rank[static_cast<std::size_t>(by_need[i])] = static_cast<std::int32_t>(i);
  std::vector<OpIndex> prefetch_op(model.interior.size(), -1);
  OpSet issued_at(static_cast<std::size_t>(pass.trace.op_count()));  // ops of the prefetches placed so far
  for (const std::int32_t k : by_need) {
    const PeakCandidate& c = interior(k);
    const auto first = static_cast<std::size_t>(c.interior_first());
    const auto last = static_cast<std::size_t>(c.interior_last());
    const std::int64_t threshold = limit - c.size_bytes;  // ops above it cannot hold the storage
    const std::size_t blocked_last = profile.find_last_above(first, last, threshold);
    if (blocked_last == RangeMaxTree::kNotFound) {
      profile.add(first, last, c.size_bytes);
      continue;
    }
    // Keep the engine order: no earlier than the copies queued before it. One
    // of those placed after this copy's use cannot be waited for; then it
    // follows the latest one placed no later than its use — never later than
    // the order and the budget require (blocked_last + 1 <= end_op).
    const std::int64_t latest = issued_at.at_or_before(static_cast<std::size_t>(c.end_op));
    const OpIndex queued_before = latest == OpSet::kNone ? 0 : static_cast<OpIndex>(latest);
    const OpIndex prefetch = std::max(static_cast<OpIndex>(blocked_last) + 1, queued_before);
    if (prefetch <= c.interior_last()) profile.add(static_cast<std::size_t>(prefetch), last, c.size_bytes);
    prefetch_op[static_cast<std::size_t>(k)] = prefetch;
    issued_at.insert(static_cast<std::size_t>(prefetch));
  }

  std::vector<Placement> placements;
  placements.reserve(selected.size());
  // Releases go as late as the budget allows, one candidate after the other:
  // the earlier a candidate is placed, the later its release. First goes the
  // one whose copy to host can wait the longest — on a capped device the one
  // whose copy to host completes last (its release frees memory only then), on
  // unlimited memory the one copied back last (a release only bounds when its
  // copy to host may be issued) — then the others; ties in selection order.
  // Sorted as (key, selection position) pairs, the keys read once: a
  // comparison that looked both candidates up read two cache lines each time
  // (on the 1M-op chain a fifth of the placement).
  std::vector<std::pair<double, std::int32_t>> by_release;
  by_release.reserve(selected.size());
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const PeakCandidate& c = interior(selected[i]);
    const double key = device == DeviceMemory::kBudget ? ready_ms[static_cast<std::size_t>(c.version)]
                                                       : static_cast<double>(c.end_op);
    by_release.emplace_back(key, static_cast<std::int32_t>(i));
  }
  // Largest key first; ties in selection order.
  std::sort(by_release.begin(), by_release.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (const auto& [key, position] : by_release) {
    const std::int32_t k = selected[static_cast<std::size_t>(position)];
    const OpIndex prefetch = prefetch_op[static_cast<std::size_t>(k)];
    if (prefetch < 0) continue;  // dropped
    const PeakCandidate& c = interior(k);
    const auto first = static_cast<std::size_t>(c.interior_first());
    // Memory only grew since the prefetch was placed, so the op that blocked it
    // still blocks: there is a first blocked op before the prefetch.
    const std::size_t blocked_first =
        profile.find_first_above(first, static_cast<std::size_t>(prefetch) - 1, limit - c.size_bytes);
    if (blocked_first > first) profile.add(first, blocked_first - 1, c.size_bytes);
    placements.push_back(
        Placement{k, static_cast<OpIndex>(blocked_first) - 1, prefetch, engine_rank[static_cast<std::size_t>(k)]});
  }
  return placements;
}

std::vector<std::int32_t> boundaries_by_edge(const PeakModel& model) {
  std::vector<std::int32_t> order(model.boundary.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const PeakCandidate& x = model.boundary[static_cast<std::size_t>(a)];
    const PeakCandidate& y = model.boundary[static_cast<std::size_t>(b)];
    return std::tie(x.start_op, x.size_bytes) < std::tie(y.start_op, y.size_bytes);
  });
  return order;
}

std::vector<std::int32_t> select_boundaries(const PeakModel& model, std::span<const Placement> placements,
                                            std::int64_t limit, std::span<const std::int32_t> by_edge) {
  std::vector<std::int32_t> chosen;
  const std::size_t boundaries = model.edge_bytes.size();
  if (boundaries == 0 || model.boundary.empty()) return chosen;
  std::vector<std::int64_t> freed_delta(boundaries + 1, 0);
  for (const Placement& p : placements) {
    const std::int64_t size = model.interior[static_cast<std::size_t>(p.candidate)].size_bytes;
    freed_delta[static_cast<std::size_t>(p.release_op)] += size;
    freed_delta[static_cast<std::size_t>(p.prefetch_op)] -= size;
  }
  auto size_of = [&](std::int32_t k) { return model.boundary[static_cast<std::size_t>(k)].size_bytes; };
  std::vector<std::int32_t> unused;  // the candidates of one boundary not taken yet, smallest first
  std::int64_t freed = 0;
  std::size_t at = 0;
  for (std::size_t boundary = 0; boundary < boundaries; ++boundary) {
    freed += freed_delta[boundary];
    std::size_t group_end = at;
    while (group_end < by_edge.size() &&
           model.boundary[static_cast<std::size_t>(by_edge[group_end])].start_op == static_cast<OpIndex>(boundary)) {
      ++group_end;
    }
    std::int64_t edge = model.edge_bytes[boundary] - freed;
    // Only when the boundary candidates here can bring the edge within the
    // limit: a partial reduction would add round trips and leave it over.
    std::int64_t available = 0;
    for (std::size_t i = at; i < group_end; ++i) available += size_of(by_edge[i]);
    if (edge <= limit || edge - available > limit) {
      at = group_end;
      continue;
    }
    unused.assign(by_edge.begin() + static_cast<std::ptrdiff_t>(at),
                  by_edge.begin() + static_cast<std::ptrdiff_t>(group_end));
    while (edge > limit && !unused.empty()) {
      const std::int64_t excess = edge - limit;
      // The smallest that clears the excess (same reduction, fewest bytes
      // moved), else the largest (removes the most).
      auto pick = std::partition_point(unused.begin(), unused.end(),
                                       [&](std::int32_t k) { return size_of(k) < excess; });
      if (pick == unused.end()) --pick;
      chosen.push_back(*pick);
      edge -= size_of(*pick);
      unused.erase(pick);
    }
    at = group_end;
  }
  return chosen;
}

}  // namespace hyperoffload::internal
