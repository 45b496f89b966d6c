// ResidencyManager: where each storage's bytes live — device, host or both —
// and the copies that move them, on a Backend.
//
// Per storage id (an int64 the caller chooses) it keeps the device buffer, the
// pinned host block, its residency state and the fences of the last D2H and
// H2D. Which copies take effect, which uses fault and which lose data are the
// execution model's residency rules (model/residency_rules.h), the ones the
// validator and the simulator apply, so a schedule that validates runs here
// unchanged:
//  - Each write makes a new version (mark_written); a host copy holds the
//    version it copied.
//  - copy_d2h: a no-op when the host already holds the current version;
//    otherwise it copies the current version again — also when a stale host
//    copy exists (the reference system skipped that case and lost the write).
//    It needs a resident storage. The copy waits for the compute stream (the
//    producer) and for any in-flight H2D of the storage.
//  - copy_h2d: a no-op when resident; otherwise it needs a current host copy.
//    The copy waits for the compute stream (earlier users of the memory) and for
//    the storage's last D2H (which filled the host block).
//  - release_device / release_host: drop a copy (no-ops when absent).
//  - device_ptr: a pointer the compute stream may use. The compute stream first
//    waits for an in-flight H2D (the data) and, for an access that may write,
//    for an in-flight D2H (which reads the buffer). A released storage with a
//    current host copy is paged in synchronously on the compute stream and
//    counted as a fault; one without is data loss, an error naming the storage.
//
// Device buffers are either allocated here (`bind`) or adopted from the caller
// (`adopt`, with a release callback). Note [Deferred frees]: a device buffer
// released while a copy still reads or writes it (an in-flight D2H or H2D) is
// freed — or handed to its release callback — only once that copy's fence has
// passed; such frees are polled at each allocation and by poll(). Host blocks go
// back to the PinnedHostPool with the same fences (Note [Deferred recycling] in
// pinned_host_pool.h). When a device allocation fails, the manager waits for
// the deferred frees, then asks the reclaim hook (the warmup executor evicts),
// then reports kOutOfMemory naming the storage. A copy that fails to enqueue (a
// failed backend call) leaves its storage as it was, giving back the host block
// or device buffer taken for it (Note [Failed copies] in the .cc).
//
// Note [Held bytes]: resident bytes say which storages have a device copy;
// *held* bytes say how much device memory the step holds for its tracked
// storages at this moment: the resident ones (a buffer being prefetched into
// included), the buffers whose free waits for a copy still reading or writing
// them (deferred frees) and the bytes reserved for outputs about to be made
// (reserve()). A user's out-of-memory depends on held bytes. With a held budget
// (ResidencyOptions::held_budget_bytes, set_held_budget), every allocation for a
// tracked storage — bind, adopt, an H2D's or a fault's buffer, a regenerated
// output, a reservation — first makes room: while held + the new bytes exceed
// the budget it waits for the deferred frees, oldest first, only as many as
// needed, and completes them. These are the capped device's semantics
// (model/capped_memory.h, DeviceMemory::kBudget), which the simulator plays.
// It waits only on copies already enqueued, so it never deadlocks: with no
// deferred free left, the allocation goes ahead over the budget (a budget below
// the floor, or memory the plan does not know of) and is counted
// (ResidencyStats::over_budget_allocations). The time the calling thread spent
// waiting is ResidencyStats::memory_wait_ms.
//
//   ResidencyManager residency(backend, pool, events);
//   void* dev = *residency.bind(/*id=*/7, /*size_bytes=*/4096);
//   ... the producer op writes dev on the compute stream ...
//   residency.copy_d2h(7);          // host holds version 0
//   residency.release_device(7);    // freed once the D2H has read it
//   residency.copy_h2d(7);          // prefetch into a new buffer
//   void* again = *residency.device_ptr(7);   // compute waits for the H2D
//
// Thread-safety: not thread-safe; one thread drives a manager (the thread
// running the step's ops). Callbacks run on that thread. Release callbacks and
// the rematerialize hook must not call back into the manager; the reclaim hook
// may (it runs between allocation attempts, and typically evicts).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"
#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/runtime/backend.h"
#include "hyperoffload/runtime/event_pool.h"
#include "hyperoffload/runtime/pinned_host_pool.h"

namespace hyperoffload {

// Gives an adopted device buffer back to its owner.
using ReleaseCallback = std::function<void(void* device_ptr)>;

struct AdoptedBuffer {
  void* device_ptr = nullptr;  // may be null only for a 0-byte storage
  // Called once, when the runtime releases the device copy (release_device, an
  // eviction), after every copy reading or writing it has completed. Not called
  // when the runtime merely stops tracking the storage (forget, reset): the
  // buffer is then simply the caller's again. May be empty.
  ReleaseCallback release;
};

// Device memory for a caller-managed (adopted) storage that is brought back by
// an H2D or a fault. Without one, the runtime allocates from the backend and the
// storage's device pointer changes.
using RematerializeFn = std::function<Result<AdoptedBuffer>(StorageId id, std::int64_t size_bytes)>;

// Asked to free device memory when an allocation of `needed_bytes` fails.
// Returns true when it released something (the allocation is retried), false
// when it has nothing left to release.
using ReclaimFn = std::function<Result<bool>(std::int64_t needed_bytes)>;

// How the compute stream will use a storage: reads need only the data (an
// in-flight H2D done); writes must also not race an in-flight D2H reading it.
enum class DeviceAccess : std::uint8_t { kRead, kReadWrite };

// Whether copies, faults and stalls are logged with fences for timing.
enum class RecordCopies : std::uint8_t { kNo, kYes };

struct ResidencyOptions {
  RematerializeFn rematerialize;  // optional
  RecordCopies record_copies = RecordCopies::kNo;
  // Limit on held device bytes (Note [Held bytes]), bytes >= 0; nullopt: no
  // limit (allocations never wait for deferred frees unless the backend is full).
  std::optional<std::int64_t> held_budget_bytes;
};

struct ResidencyStats {
  std::int64_t storages = 0;             // tracked now
  std::int64_t resident_bytes = 0;       // sum of sizes of storages with a device copy
  std::int64_t peak_resident_bytes = 0;  // since construction or reset_peak()
  std::int64_t host_bytes = 0;           // sum of sizes of storages with a host copy
  std::int64_t peak_host_bytes = 0;
  std::int64_t d2h_count = 0;  // effective (non-no-op) copies
  std::int64_t d2h_bytes = 0;
  std::int64_t h2d_count = 0;  // excludes faults
  std::int64_t h2d_bytes = 0;  // includes faults
  std::int64_t faults = 0;     // synchronous demand pages
  std::int64_t fault_bytes = 0;
  std::int64_t regenerations = 0;         // storages a recompute regenerated
  std::int64_t regenerated_bytes = 0;
  std::int64_t deferred_frees = 0;        // device frees that waited for a copy
  std::int64_t pending_device_frees = 0;  // deferred frees not yet done
  // Note [Held bytes]: resident + deferred-free + reserved bytes, now and at
  // their peak (since construction or reset_peak()).
  std::int64_t held_bytes = 0;
  std::int64_t peak_held_bytes = 0;
  std::int64_t reserved_bytes = 0;  // reserve()d and not yet taken
  // Time the calling thread waited for deferred frees to make room (for the
  // held budget, or for a backend allocation that failed), milliseconds.
  double memory_wait_ms = 0.0;
  // Allocations that went over the held budget with no deferred free left to
  // wait for.
  std::int64_t over_budget_allocations = 0;
};

// One timed transfer or wait, for timelines. `start` and `end` are fences on
// the span's stream; the executor turns them into times.
struct TimedSpan {
  SpanKind kind = SpanKind::kCopyD2H;  // kCopyD2H, kCopyH2D, kFault or kStall
  StorageId storage = -1;
  std::int64_t bytes = 0;
  Fence start;
  Fence end;
};

class ResidencyManager {
 public:
  ResidencyManager(Backend& backend, PinnedHostPool& pool, EventPool& events, ResidencyOptions options = {});
  // Drains in-flight copies and frees everything it holds (see reset()).
  ~ResidencyManager();
  ResidencyManager(const ResidencyManager&) = delete;
  ResidencyManager& operator=(const ResidencyManager&) = delete;

  // ---- Binding ----------------------------------------------------------------
  // Tracks a new storage of `size_bytes` (>= 0) in device memory allocated from
  // the backend; returns its pointer (null for 0 bytes). Version 0, no host copy.
  // Fails for an id already tracked.
  Result<void*> bind(StorageId id, std::int64_t size_bytes);
  // Tracks a new storage in the caller's device buffer.
  Status adopt(StorageId id, std::int64_t size_bytes, AdoptedBuffer buffer);
  // The storage was written: any host copy is now stale. Precondition for
  // meaningful results: the write happened through device_ptr().
  Status mark_written(StorageId id);
  // Stops tracking a storage the caller no longer uses: drops both copies
  // (runtime memory is freed once in-flight copies finish; an adopted buffer
  // is waited for and left to the caller, without calling its release callback).
  Status forget(StorageId id);

  // Gives a tracked storage another id (the caller freed `from`, but a later
  // recompute still needs it; exec/replay_executor.h). Fails when `from` is
  // not tracked or `to` is.
  Status rekey(StorageId from, StorageId to);

  // ---- Schedule actions -----------------------------------------------------------
  Status copy_d2h(StorageId id);
  Status copy_h2d(StorageId id);
  Status release_device(StorageId id);
  Status release_host(StorageId id);

  // ---- Recompute ---------------------------------------------------------------
  // A released storage that a recompute regenerates gets device memory again
  // and is resident at the version it already counts (the recompute writes the
  // same bytes, so a current host copy stays current). regenerate() takes the
  // memory as an H2D would (the rematerialize hook for an adopted storage,
  // else the backend) and returns it for the recompute to write on the compute
  // stream; regenerate_adopted() installs the caller's buffer, which the
  // recompute already wrote. Both fail for an untracked or resident storage.
  Result<void*> regenerate(StorageId id);
  Status regenerate_adopted(StorageId id, AdoptedBuffer buffer);

  // ---- Held bytes (Note [Held bytes]) -----------------------------------------------
  // Makes room for `bytes` (>= 0) under the held budget and holds them for the
  // next allocations (bind, adopt, materialising a storage, regenerate*), which
  // take from the reservation before making room for the rest. Used by the
  // replay for an op's outputs before it runs (the framework allocates them
  // inside the op) and for a recompute's regenerated outputs. Reservations add
  // up; cancel_reservation() drops what is left.
  Status reserve(std::int64_t bytes);
  void cancel_reservation();
  // Sets or clears the held budget (ResidencyOptions::held_budget_bytes).
  void set_held_budget(std::optional<std::int64_t> budget_bytes) { options_.held_budget_bytes = budget_bytes; }
  std::optional<std::int64_t> held_budget() const { return options_.held_budget_bytes; }

  // ---- Use --------------------------------------------------------------------
  Result<void*> device_ptr(StorageId id, DeviceAccess access = DeviceAccess::kReadWrite);
  // Non-blocking: completes deferred frees whose copies have finished (and runs
  // their release callbacks).
  Status poll();

  // ---- State ------------------------------------------------------------------
  bool tracked(StorageId id) const { return entries_.contains(id); }
  bool resident(StorageId id) const;
  bool has_host_copy(StorageId id) const;  // current or stale
  bool has_current_host_copy(StorageId id) const;
  // Writes in place since the storage was bound or adopted (0: it holds what
  // its producer wrote); nullopt for an untracked id.
  std::optional<std::int32_t> writes_since_produced(StorageId id) const;
  std::optional<std::int64_t> size_bytes(StorageId id) const;
  std::int64_t resident_bytes() const { return stats_.resident_bytes; }
  std::int64_t held_bytes() const { return stats_.held_bytes; }
  // Ids of the storages tracked now, in no particular order.
  std::vector<StorageId> tracked_ids() const;
  ResidencyStats stats() const;
  // Restarts the peak gauges at the current values.
  void reset_peak();

  // Every span logged since the last call (with RecordCopies::kYes).
  std::vector<TimedSpan> take_spans();

  void set_reclaimer(ReclaimFn reclaim) { reclaim_ = std::move(reclaim); }
  void set_record_copies(RecordCopies record) { options_.record_copies = record; }
  void set_rematerializer(RematerializeFn fn) { options_.rematerialize = std::move(fn); }

  // Waits for every in-flight copy, completes every deferred free and stops
  // tracking every storage (as forget() does). On error the manager may still
  // hold memory; calling reset() again retries.
  Status reset();

  Backend& backend() const { return backend_; }
  PinnedHostPool& pool() const { return pool_; }
  EventPool& events() const { return events_; }
  // A fence on the compute stream after the work queued there so far: where
  // the executors mark an op's span (and the parts of it that are not the
  // op's).
  Result<Fence> mark_compute() const { return events_.record(backend_.stream(StreamRole::kCompute)); }

 private:
  enum class Owner : std::uint8_t { kRuntime, kCaller };

  struct Entry {
    std::int64_t size_bytes = 0;
    void* device = nullptr;  // current device buffer (null when not resident or 0 bytes)
    ResidencyState residency;       // model/residency_rules.h; seen from bind/adopt on
    Owner owner = Owner::kRuntime;  // of the current device buffer
    bool caller_managed = false;    // adopted at bind time: rematerialize through the hook
    ReleaseCallback release;        // for an Owner::kCaller buffer
    PinnedBlock host;
    Fence d2h;               // last D2H: reads `device`, writes `host`
    Fence h2d;               // last H2D: reads `host`, writes `device`
    bool h2d_waited = true;  // the compute stream already waits for h2d
    bool d2h_waited = true;  // the compute stream already waits for d2h
  };

  struct DeferredFree {
    void* device = nullptr;
    std::int64_t size_bytes = 0;
    Owner owner = Owner::kRuntime;
    ReleaseCallback release;
    Fence fences[2];
  };

  Result<Entry*> find(StorageId id, const char* operation);
  // The entry of a storage a recompute regenerates: tracked, not resident.
  Result<Entry*> find_released(StorageId id);
  void count_regenerated(Entry& entry);
  Status track(StorageId id, std::int64_t size_bytes, Entry entry);
  // Device memory for a storage being brought back (H2D or fault).
  Status materialize(StorageId id, Entry& entry);
  Result<void*> allocate_device(StorageId id, std::int64_t size_bytes);
  // Gives back the buffer materialize() just took for a copy that failed to
  // enqueue, after draining `stream` (Note [Failed copies]).
  void undo_new_device_buffer(Entry& entry, Stream stream);
  // Gives up the device buffer; deferred while `entry`'s copies are in flight.
  Status free_device_buffer(Entry& entry, ReleaseCallback* callback_out);
  Status complete_free(DeferredFree& free);
  Status wait_deferred_frees();
  // Note [Held bytes]: waits for deferred frees, oldest first, until `bytes`
  // more fit under the held budget (or none is left).
  Status make_room(std::int64_t bytes);
  // Makes room for a new buffer of `size_bytes` for a tracked storage, taking
  // the reservation first. Call before the allocation; add_resident() after.
  Status take_room(std::int64_t size_bytes);
  // Runs `wait` (a wait for deferred frees) and adds its time to
  // ResidencyStats::memory_wait_ms.
  Status timed_wait(const std::function<Status()>& wait);
  void push_deferred(DeferredFree free);
  void add_resident(std::int64_t bytes);
  void sub_resident(std::int64_t bytes);
  void update_held();
  void add_host(std::int64_t bytes);
  Result<Fence> start_span(Stream stream);
  Status end_span(SpanKind kind, StorageId id, std::int64_t bytes, Fence start, Stream stream);
  bool recording() const { return options_.record_copies == RecordCopies::kYes; }

  Backend& backend_;
  PinnedHostPool& pool_;
  EventPool& events_;
  ResidencyOptions options_;
  ReclaimFn reclaim_;
  Stream compute_;
  Stream d2h_;
  Stream h2d_;
  std::unordered_map<StorageId, Entry> entries_;
  std::deque<DeferredFree> deferred_;  // oldest first
  std::int64_t deferred_bytes_ = 0;    // sum of deferred_'s sizes
  std::vector<TimedSpan> spans_;
  ResidencyStats stats_;
};

}  // namespace hyperoffload
