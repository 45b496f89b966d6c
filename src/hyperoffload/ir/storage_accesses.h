// Per-storage view of a trace's accesses: for each storage, its accesses ordered
// by op (and, within one op, in the op's access order). Built in O(accesses) by
// a counting sort; planners, the validator and the simulator all start here.
//
// Thread-safety: immutable after construction.
#pragma once

#include <span>
#include <vector>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

struct StorageAccess {
  OpIndex op = 0;
  AccessKind kind = AccessKind::kRead;
};

class StorageAccesses {
 public:
  explicit StorageAccesses(const Trace& trace);

  // Accesses of one storage, ordered by op. Empty for a storage never accessed.
  std::span<const StorageAccess> of(StorageIndex storage) const {
    return std::span<const StorageAccess>(entries_).subspan(offsets_[storage],
                                                            offsets_[storage + 1] - offsets_[storage]);
  }
  bool accessed(StorageIndex storage) const { return offsets_[storage + 1] > offsets_[storage]; }
  OpIndex first_op(StorageIndex storage) const { return entries_[offsets_[storage]].op; }
  OpIndex last_op(StorageIndex storage) const { return entries_[offsets_[storage + 1] - 1].op; }

  // Cache hints for a loop that visits storages in an order unrelated to
  // their indices (by_first_appearance on a trace whose storages were not
  // numbered in that order): each storage costs a chain of cache misses —
  // its offsets, then its accesses — that a loop can start ahead of time,
  // the offsets some iterations before the accesses. Hints only: they
  // change no result. Precondition of prefetch_entries: accessed(storage).
  void prefetch_offsets(StorageIndex storage) const { __builtin_prefetch(&offsets_[storage]); }
  void prefetch_entries(StorageIndex storage) const { __builtin_prefetch(&entries_[offsets_[storage]]); }

  // Storages in order of first appearance in the trace (op order, then access
  // order within the op). Storages never accessed are not listed.
  std::span<const StorageIndex> by_first_appearance() const { return first_appearance_; }

 private:
  std::vector<std::uint32_t> offsets_;  // storage_count + 1
  std::vector<StorageAccess> entries_;
  std::vector<StorageIndex> first_appearance_;
};

// Per storage, the op that created it when that op is recomputable: its first
// access is a write by a recomputable op (the trace builder guarantees that a
// recomputable op writes only storages it creates); -1 otherwise. The op a
// recompute re-runs to regenerate the storage. O(storages).
std::vector<OpIndex> recompute_producers(const Trace& trace, const StorageAccesses& accesses);

}  // namespace hyperoffload
