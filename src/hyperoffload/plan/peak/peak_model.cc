#include "hyperoffload/plan/peak/peak_model.h"

#include <algorithm>

#include "hyperoffload/plan/common/offload_floor_rule.h"

namespace hyperoffload::internal {

bool is_alias_forward(const Trace& trace, OpIndex op, StorageIndex storage) {
  bool reads = false;
  bool writes = false;
  for (const Access& access : trace.accesses(op)) {
    if (access.storage != storage) return false;
    (access.kind == AccessKind::kRead ? reads : writes) = true;
  }
  return reads && writes;
}

bool starts_version(std::span<const StorageAccess> list, std::size_t j) {
  return j > 0 && list[j].kind == AccessKind::kWrite &&
         (list[j - 1].kind == AccessKind::kRead || list[j - 1].op < list[j].op);
}

namespace {

// The last alias-forward op of every storage (-1 when it has none), in one pass
// over the ops.
std::vector<OpIndex> last_alias_forward_ops(const Trace& trace) {
  std::vector<OpIndex> last(static_cast<std::size_t>(trace.storage_count()), -1);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    std::span<const Access> list = trace.accesses(op);
    if (list.empty()) continue;
    const StorageIndex storage = list.front().storage;
    if (is_alias_forward(trace, op, storage)) last[static_cast<std::size_t>(storage)] = op;
  }
  return last;
}

// Appends the versions and candidates of one storage. Accesses are ordered by
// op, then by their order within the op.
void add_versions_and_candidates(StorageIndex storage, std::int64_t size_bytes, std::span<const StorageAccess> list,
                                 PeakModel& model) {
  const auto first_version = static_cast<std::int32_t>(model.versions.size());
  // Pass 1: version boundaries and each version's copy op (its last write, or
  // its first access when it has none).
  std::int32_t version = first_version;
  model.versions.push_back(PeakVersion{storage, list.front().op});
  for (std::size_t j = 0; j < list.size(); ++j) {
    const bool write = list[j].kind == AccessKind::kWrite;
    if (starts_version(list, j)) {
      model.versions.push_back(PeakVersion{storage, list[j].op});
      ++version;
    }
    if (write) model.versions[static_cast<std::size_t>(version)].copy_op = list[j].op;
  }

  // Pass 2: gaps. The gap after access j belongs to access j's version, whose
  // copy op (the op that wrote it) is at or before the gap's start: every gap
  // is a candidate.
  version = first_version;
  for (std::size_t j = 0; j + 1 < list.size(); ++j) {
    if (starts_version(list, j)) ++version;
    const OpIndex start = list[j].op;
    const OpIndex end = list[j + 1].op;
    if (end == start) continue;
    bool end_writes = false;
    for (std::size_t k = j + 1; k < list.size() && list[k].op == end; ++k) {
      end_writes = end_writes || list[k].kind == AccessKind::kWrite;
    }
    const PeakCandidate candidate{storage, size_bytes, version, start, end, end_writes};
    (end - start >= 2 ? model.interior : model.boundary).push_back(candidate);
  }
}

}  // namespace

PeakModel build_peak_model(const Trace& trace, const StorageAccesses& accesses) {
  PeakModel model;
  const auto ops = static_cast<std::size_t>(trace.op_count());
  model.last_use.assign(static_cast<std::size_t>(trace.storage_count()), -1);
  if (ops == 0) return model;

  const std::vector<OpIndex> alias_last = last_alias_forward_ops(trace);
  std::vector<std::int64_t> resident_delta(ops + 1, 0);
  std::vector<std::int64_t> edge_delta(ops, 0);
  // Lifetimes and the profile's deltas, in storage order: no result here
  // depends on the order, and in index order the storage table, the access
  // lists and last_use are read and written sequentially.
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const StorageInfo& info = trace.storage(s);
    if (info.size_bytes <= 0 || !accesses.accessed(s)) continue;
    const OpIndex first = accesses.first_op(s);
    const OpIndex last_use = std::max(accesses.last_op(s), alias_last[static_cast<std::size_t>(s)]);
    model.last_use[static_cast<std::size_t>(s)] = last_use;
    const OpIndex last = info.retained() ? trace.op_count() - 1 : last_use;
    resident_delta[static_cast<std::size_t>(first)] += info.size_bytes;
    resident_delta[static_cast<std::size_t>(last) + 1] -= info.size_bytes;
    if (last > first) {
      edge_delta[static_cast<std::size_t>(first)] += info.size_bytes;
      edge_delta[static_cast<std::size_t>(last)] -= info.size_bytes;
    }
  }
  // Every version starts at an access and every candidate is the gap after
  // one, so the access count bounds all three lists: reserved at once, they
  // never move (growing them by doubling copied them and faulted in fresh
  // pages: the model took 297 ms on the 1M-storage random trace then, 237-246
  // ms reserved; untouched capacity stays virtual).
  model.versions.reserve(trace.access_count());
  model.interior.reserve(trace.access_count());
  model.boundary.reserve(trace.access_count());
  // Versions and candidates, in first-appearance order (the order of
  // PeakModel::interior, on which the selection's ties depend). On a trace
  // whose storage indices follow no such order this is a random walk over the
  // storage table and the access lists, so each storage's size, offsets and
  // accesses are prefetched some storages ahead: a 1M-storage random trace
  // spent most of its model waiting for memory.
  const std::span<const StorageIndex> order = accesses.by_first_appearance();
  constexpr std::size_t kAhead = 16;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i + kAhead < order.size()) {
      const StorageIndex ahead = order[i + kAhead];
      __builtin_prefetch(&trace.storage(ahead));
      accesses.prefetch_offsets(ahead);
    }
    if (i + kAhead / 2 < order.size()) accesses.prefetch_entries(order[i + kAhead / 2]);
    const StorageIndex s = order[i];
    const std::int64_t size_bytes = trace.storage(s).size_bytes;
    if (size_bytes > 0) add_versions_and_candidates(s, size_bytes, accesses.of(s), model);
  }

  model.resident_bytes.resize(ops);
  std::int64_t running = 0;
  for (std::size_t op = 0; op < ops; ++op) model.resident_bytes[op] = running += resident_delta[op];
  model.edge_bytes.resize(ops - 1);
  running = 0;
  for (std::size_t i = 0; i + 1 < ops; ++i) model.edge_bytes[i] = running += edge_delta[i];

  // Floor (offload_floor_rule.h): subtract, per op, every storage an interior
  // candidate covers there. A storage's gaps are disjoint, so each storage is
  // counted at most once.
  std::vector<std::int64_t> reducible_delta(ops + 1, 0);
  for (const PeakCandidate& candidate : model.interior) {
    add_offloadable_gap(reducible_delta, candidate.start_op, candidate.end_op, candidate.size_bytes);
  }
  std::int64_t reducible = 0;
  FloorScan floor;
  for (std::size_t op = 0; op < ops; ++op) {
    reducible += reducible_delta[op];
    floor.add(static_cast<OpIndex>(op), model.resident_bytes[op], reducible);
  }
  model.floor = floor.floor();
  return model;
}

}  // namespace hyperoffload::internal
