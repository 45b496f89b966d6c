// Trace: one recorded training step — which op reads or writes which storage,
// how large each storage is and how long each op runs.
//
// A Trace is immutable once built. It is stored compactly (op names interned,
// accesses in one flat array) so a 1M-op, 1M-storage step fits in well under
// 100 MiB. Build one with TraceBuilder, or parse one with io/trace_json.h.
//
//   TraceBuilder builder;
//   builder.add_storage(7, 4096);
//   builder.add_op("aten::mm", /*duration_ms=*/0.25);
//   builder.add_access(7, AccessKind::kWrite);
//   Result<Trace> trace = std::move(builder).build();
//
// Thread-safety: a const Trace may be read from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/op_names.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload {

enum class AccessKind : std::uint8_t { kRead, kWrite };
const char* to_string(AccessKind kind);  // "read" / "write"

// Whether a storage outlives the step (parameters, optimizer state, outputs the
// user keeps). Retained storages are never released at the end of their use.
enum class Retention : std::uint8_t { kReleasable, kRetained };

// Whether re-running an op with the same inputs regenerates exactly what it
// wrote (trace format v2, `ops[].recomputable`): it is deterministic (no seeded
// randomness such as dropout), reads only what its accesses list, and either
// writes only storages it creates or is an in-place follower (Note [In-place
// units]). Only such an op may be the source of a recompute action
// (ir/schedule.h). The builder checks what it can see: a recomputable op
// writes at least one storage, and either every storage it writes is first
// accessed by that write and not also read by the op, or it is a follower.
//
// Note [In-place units]
// An in-place op (relu_, add_, masked_fill_ on what an op just made) cannot be
// re-run from its inputs: it read the version it overwrote. But the op that
// made that version can be re-run, and the in-place op after it: together they
// are regenerable as one unit. A recomputable op that reads and writes exactly
// one storage S (and writes nothing else), whose current version a
// recomputable op P made, is a *follower*; P is its previous unit member. The
// unit of op k is k, its previous member, that one's, ... back to the *head*,
// the op that created S (each member but the head rewrites S in place). A
// recompute of k re-runs the whole unit in order: it reads what the members
// read except S's versions inside the unit, and regenerates S at the version
// k made plus the head's other outputs (model/residency_rules.h).
// kWithRngReplay: the op draws random numbers (PyTorch's nondeterministic_seeded
// ops: dropout, bernoulli_, rand*), so it regenerates its bytes only when re-run
// with its generator's state as it first ran (trace format v3,
// `ops[].rng_replay`); the runtime saves and restores that state
// (docs/PYTHON.md, "Recompute"). Planners treat it as kYes.
enum class Recomputable : std::uint8_t { kNo, kYes, kWithRngReplay };

struct StorageInfo {
  StorageId id = 0;
  std::int64_t size_bytes = 0;
  Retention retention = Retention::kReleasable;

  bool retained() const { return retention == Retention::kRetained; }
};

struct Access {
  StorageIndex storage = 0;  // dense index into Trace::storages()
  AccessKind kind = AccessKind::kRead;
};

// Default copy bandwidth when a trace does not say, in GiB/s (2^30 bytes/s).
inline constexpr double kDefaultBandwidthGiBPerS = 16.0;

class Trace {
 public:
  Trace() = default;

  OpIndex op_count() const { return static_cast<OpIndex>(ops_.size()); }
  StorageIndex storage_count() const { return static_cast<StorageIndex>(storages_.size()); }
  std::size_t access_count() const { return accesses_.size(); }

  // Precondition for every op accessor: 0 <= op < op_count().
  std::string_view op_name(OpIndex op) const { return (*names_)[ops_[op].name_index]; }
  std::uint32_t op_name_index(OpIndex op) const { return ops_[op].name_index; }
  double op_duration_ms(OpIndex op) const { return ops_[op].duration_ms; }
  bool op_recomputable(OpIndex op) const { return ops_[op].recomputable != Recomputable::kNo; }
  // Whether re-running the op needs its generator's state replayed (kWithRngReplay).
  bool op_rng_replay(OpIndex op) const { return ops_[op].recomputable == Recomputable::kWithRngReplay; }
  Recomputable op_recomputability(OpIndex op) const { return ops_[op].recomputable; }
  // A follower's previous unit member (Note [In-place units]); -1 for every
  // other op. O(1).
  OpIndex op_unit_previous(OpIndex op) const {
    return unit_previous_.empty() ? -1 : unit_previous_[static_cast<std::size_t>(op)];
  }
  // Whether any op is a follower (a unit of more than one op exists).
  bool has_in_place_units() const { return !unit_previous_.empty(); }
  // Whether any op needs RNG replay (such a trace is written as version 3).
  bool has_rng_replay_ops() const { return rng_replay_count_ > 0; }
  // Whether any op is recomputable (a v1 trace has none).
  bool has_recomputable_ops() const { return recomputable_count_ > 0; }
  std::span<const Access> accesses(OpIndex op) const {
    const OpRecord& r = ops_[op];
    return {accesses_.data() + r.access_begin, r.access_end - r.access_begin};
  }
  // All accesses of all ops, op by op; accesses(op) is a sub-span of it.
  std::span<const Access> all_accesses() const { return accesses_; }
  // Position of accesses(op)[0] inside all_accesses().
  std::size_t access_offset(OpIndex op) const { return ops_[op].access_begin; }
  // Interned op names; op_name_index() indexes this.
  const OpNames& op_names() const { return *names_; }
  // The same table, for a derived trace to share (TraceBuilder::use_op_names).
  std::shared_ptr<const OpNames> op_names_shared() const { return names_; }

  std::span<const StorageInfo> storages() const { return storages_; }
  const StorageInfo& storage(StorageIndex index) const { return storages_[index]; }
  // Dense index of an external storage id, or nullopt when undeclared.
  std::optional<StorageIndex> find_storage(StorageId id) const;

  // Device-memory budget the trace asks for; nullopt means unlimited.
  std::optional<std::int64_t> memory_limit_bytes() const { return memory_limit_bytes_; }
  void set_memory_limit_bytes(std::optional<std::int64_t> limit) { memory_limit_bytes_ = limit; }
  // Host-memory budget the trace asks for (bytes held in host copies);
  // nullopt means unlimited. Written only when set, so traces without it
  // read and write as before.
  std::optional<std::int64_t> host_memory_limit_bytes() const { return host_memory_limit_bytes_; }
  void set_host_memory_limit_bytes(std::optional<std::int64_t> limit) { host_memory_limit_bytes_ = limit; }

  double d2h_bandwidth_gib_per_s() const { return d2h_bandwidth_gib_per_s_; }
  double h2d_bandwidth_gib_per_s() const { return h2d_bandwidth_gib_per_s_; }
  // Transfer time of `bytes` at the trace's bandwidths, in milliseconds.
  double d2h_ms(std::int64_t bytes) const;
  double h2d_ms(std::int64_t bytes) const;

  // Sum of op durations, in milliseconds, added in op order (kept by the
  // builder: O(1)).
  double total_compute_ms() const { return total_compute_ms_; }

 private:
  friend class TraceBuilder;

  struct OpRecord {
    std::uint32_t name_index = 0;
    std::uint32_t access_begin = 0;
    std::uint32_t access_end = 0;
    Recomputable recomputable = Recomputable::kNo;  // fits in the padding before duration_ms
    double duration_ms = 0.0;
  };

  // Maps external storage ids to dense indices: a direct table when ids are
  // dense enough (the common case: 0..n-1), a hash map otherwise.
  class StorageIdMap {
   public:
    void build(std::span<const StorageInfo> storages);
    // Inline: the builder and the readers look up every access.
    std::optional<StorageIndex> find(StorageId id) const {
      if (!use_direct_) return find_sparse(id);
      if (id < 0 || static_cast<std::size_t>(id) >= direct_.size()) return std::nullopt;
      const StorageIndex index = direct_[static_cast<std::size_t>(id)];
      if (index < 0) return std::nullopt;
      return index;
    }

   private:
    std::optional<StorageIndex> find_sparse(StorageId id) const;

    std::vector<StorageIndex> direct_;  // -1 = absent
    std::unordered_map<StorageId, StorageIndex> sparse_;
    bool use_direct_ = true;
  };

  std::vector<OpRecord> ops_;
  std::vector<Access> accesses_;
  std::vector<OpIndex> unit_previous_;  // per op when any follower exists, else empty
  std::shared_ptr<const OpNames> names_ = std::make_shared<const OpNames>();  // shared by derived traces
  std::vector<StorageInfo> storages_;
  StorageIdMap id_map_;
  std::optional<std::int64_t> memory_limit_bytes_;
  std::optional<std::int64_t> host_memory_limit_bytes_;
  std::int64_t recomputable_count_ = 0;
  std::int64_t rng_replay_count_ = 0;
  double total_compute_ms_ = 0.0;
  double d2h_bandwidth_gib_per_s_ = kDefaultBandwidthGiBPerS;
  double h2d_bandwidth_gib_per_s_ = kDefaultBandwidthGiBPerS;
};

// start_ms[x] = compute ms of ops [0, x), x in [0, ops]: when op x starts in a
// run without stalls, the clock every planner's timing estimates use.
// O(ops).
std::vector<double> op_start_ms(const Trace& trace);

// Builds a Trace incrementally and checks it. Every error names its place with
// the trace file's JSON paths ("storages[3].id", "ops[12].accesses[3].storage"),
// because positions in the builder are positions in the file.
//
// Storages may be declared before or after the ops that access them; accesses
// are resolved in build().
class TraceBuilder {
 public:
  // The most bytes a trace's storages may add up to: 2^62 (4 EiB). Every byte
  // count derived from a trace (resident bytes, peaks, bytes moved, a budget
  // plus a size) then fits in int64 with room to spare.
  static constexpr std::int64_t kMaxTotalStorageBytes = std::int64_t{1} << 62;

  // The most milliseconds a trace's times may add up to: 1e15 ms (about 31,700
  // years), for the ops' durations together and for copying all its storages
  // once at either bandwidth. Every time derived from a trace (makespan,
  // stall, a timeline in microseconds, a sum over any schedule's copies and
  // faults) then stays a finite double with hundreds of orders of magnitude
  // to spare, so no output ever holds an infinity.
  static constexpr double kMaxTotalMs = 1e15;
  TraceBuilder() = default;
  // Not copyable: a copy would append to the same names table (owned_names_).
  TraceBuilder(const TraceBuilder&) = delete;
  TraceBuilder& operator=(const TraceBuilder&) = delete;
  TraceBuilder(TraceBuilder&&) = default;
  TraceBuilder& operator=(TraceBuilder&&) = default;

  void set_memory_limit_bytes(std::optional<std::int64_t> limit) { limit_ = limit; }
  void set_host_memory_limit_bytes(std::optional<std::int64_t> limit) { host_limit_ = limit; }
  void set_d2h_bandwidth_gib_per_s(double value) { d2h_ = value; }
  void set_h2d_bandwidth_gib_per_s(double value) { h2d_ = value; }

  // Declares storage number storage_count(); ids must be unique and
  // non-negative, sizes non-negative, and all sizes together at most
  // kMaxTotalStorageBytes.
  Status add_storage(StorageId id, std::int64_t size_bytes,
                     Retention retention = Retention::kReleasable);

  // Appends an op; later add_access calls attach to it. duration_ms >= 0, and
  // all durations together at most kMaxTotalMs.
  Status add_op(std::string_view name, double duration_ms = 0.0,
                Recomputable recomputable = Recomputable::kNo);

  // Gives the trace these op names (another trace's op_names_shared()) for
  // add_named_op, which then skips interning: a trace derived from another
  // (the hybrid planner's augmented trace) shares its names without copying
  // or hashing any. Precondition: no op has been added yet. A later add_op
  // of one of these names interns it again under a new index (and copies the
  // table first, which stays the other trace's as it was).
  void use_op_names(std::shared_ptr<const OpNames> names);

  // add_op with the name op_names()[name_index]. Precondition: name_index <
  // the number of names given to use_op_names or interned by add_op.
  Status add_named_op(std::uint32_t name_index, double duration_ms = 0.0,
                      Recomputable recomputable = Recomputable::kNo);

  // Adds an access by the most recently added op (precondition: an op exists).
  void add_access(StorageId storage, AccessKind kind);

  // Reserves room for this many ops, storages and accesses more than added
  // so far (optional, for large traces).
  void reserve(std::size_t ops, std::size_t storages, std::size_t accesses);

  // Takes the storages added to `other`, as if added here: the trace reader
  // reads them beside the ops (Note [Storages and ops read at once],
  // io/internal/trace_fast_reader.cc). Precondition: none were added here,
  // and `other` had only storages added.
  void take_storages(TraceBuilder&& other);

  // Appends the ops added to `other`, with their accesses, after those added
  // here so far: each through add_named_op with its name interned here and
  // then its accesses — the calls adding them here would have made, in the
  // same order — so the trace, its names table and any error (and its place)
  // are the ones adding them here gives. The trace reader reads a large
  // trace's last ops on a second builder (Note [Storages and ops read at
  // once], io/internal/trace_fast_reader.cc). Precondition: `other` had only
  // ops added, with names of its own (no use_op_names). O(its ops + accesses).
  Status take_ops(TraceBuilder&& other);

  // Resolves storage ids and returns the trace, or the first error found.
  // Bandwidths must be positive and fast enough to copy all storages in at
  // most kMaxTotalMs each way.
  Result<Trace> build() &&;

 private:
  // Checks the recomputable marks and records the followers' previous
  // members (Note [In-place units]).
  Status check_recomputable_ops();

  Trace trace_;
  std::vector<StorageId> pending_ids_;  // external id per access, resolved in build()
  // Interned op names: open addressing over indices into trace_.names_, at
  // most half full. The names are appended through owned_names_, which is
  // null while the table is shared (use_op_names) until the first add_op.
  // An unordered_map of strings held a node and a second copy of each name.
  // 8 bytes a slot: the low 32 bits of the hash place a slot at any table
  // size up to 2^32 slots and screen the name comparisons. Where nearly every
  // name is new the table is dropped after 65,536 names (Note [Interning
  // while it pays]), so it stays within 1 MiB there.
  struct NameSlot {
    std::uint32_t hash_low = 0;
    std::uint32_t index_plus_one = 0;  // 0: empty
  };
  std::uint32_t intern(std::string_view name);
  OpNames& owned_names();
  OpNames* owned_names_ = nullptr;
  std::vector<NameSlot> name_slots_;
  std::size_t interned_count_ = 0;  // names in name_slots_
  // Note [Interning while it pays] (trace.cc): names looked up so far, and
  // whether later names are still looked up.
  std::size_t intern_lookups_ = 0;
  bool interning_ = true;
  std::optional<std::int64_t> limit_;
  std::optional<std::int64_t> host_limit_;
  std::int64_t total_storage_bytes_ = 0;  // sum of size_bytes declared so far
  double total_duration_ms_ = 0.0;        // sum of duration_ms so far, as Trace::total_compute_ms() adds it
  double d2h_ = kDefaultBandwidthGiBPerS;
  double h2d_ = kDefaultBandwidthGiBPerS;
};

}  // namespace hyperoffload
