// Internal: the peak planner's view of a trace before any decision — storage
// lifetimes, the per-op and per-boundary memory profile, versions, eviction
// candidates and the unavoidable floor (docs/PEAK_PLANNER.md, "Model").
//
// Vocabulary used here and in peak_planner.cc:
//   lifetime   a storage (size > 0) is resident from its first access through
//              its last use; the last use is extended over later alias-forward
//              ops (an op whose only storage is this one and that both reads
//              and writes it). Retained storages stay resident to the last op.
//   boundary i the point between op i and op i + 1 (after op i's post actions,
//              before op i+1's pre actions); edge_bytes[i] is what is alive
//              across it.
//   version    a run of a storage's accesses; a new version starts at a write
//              that follows a read. Its data is copied to host once, after the
//              version's last write ("copy op"; the first access when the
//              version has no write), and every eviction in the version reuses
//              that copy.
//   candidate  a gap between consecutive accesses (at ops start < end) of one
//              version whose copy op is at or before `start`. Interior
//              candidates (end - start >= 2) free ops start+1 .. end-1;
//              boundary candidates (end - start == 1) free only boundary start.
//   floor      per op, resident bytes minus the bytes of the storages some
//              interior candidate can evict there; its maximum is the lowest
//              op-granular peak any plan from these candidates reaches.
//
// Thread-safety: build_peak_model is a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

struct PeakVersion {
  StorageIndex storage = 0;
  OpIndex copy_op = 0;  // copy_d2h goes after this op
};

struct PeakCandidate {
  StorageIndex storage = 0;
  std::int64_t size_bytes = 0;
  std::int32_t version = 0;    // index into PeakModel::versions
  OpIndex start_op = 0;        // access before the gap: release no earlier than after it
  OpIndex end_op = 0;          // access after the gap: copy_h2d no later than before it
  bool end_op_writes = false;  // whether op end_op writes the storage

  OpIndex interior_first() const { return start_op + 1; }
  OpIndex interior_last() const { return end_op - 1; }
};

struct PeakModel {
  std::vector<std::int64_t> resident_bytes;  // per op
  std::vector<std::int64_t> edge_bytes;      // per boundary, op_count - 1 entries
  std::vector<OpIndex> last_use;             // per storage; -1 when not modelled (size 0 or never accessed)
  std::vector<PeakVersion> versions;
  // Interior candidates, in (first appearance of storage, gap position) order.
  std::vector<PeakCandidate> interior;
  std::vector<PeakCandidate> boundary;
  UnavoidableFloor floor;  // op -1 for an empty trace
};

// Whether access j of a storage's accesses `list` (ordered by op, then by
// order within the op) starts a new version: it is a write, and the access
// before it is a read or belongs to an earlier op. So a version holds what one
// op wrote (its copy op) and the reads of it until the next write, and any
// gap can be offloaded from that one host copy — including a gap between two
// writes, whose data a partial write at the gap's end still needs. (The
// recompute model splits versions by the same rule.)
bool starts_version(std::span<const StorageAccess> list, std::size_t j);

// Whether `op` is alias-forward for `storage`: every access of the op is to
// that storage, and it both reads and writes it.
bool is_alias_forward(const Trace& trace, OpIndex op, StorageIndex storage);

// O(ops + accesses + candidates).
PeakModel build_peak_model(const Trace& trace, const StorageAccesses& accesses);

}  // namespace hyperoffload::internal
