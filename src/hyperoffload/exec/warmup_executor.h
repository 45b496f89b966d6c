// WarmupExecutor: runs the first step of a session. It records the trace —
// which op read and wrote which storage, sizes, op durations measured with
// events on the compute stream, the storages still held at the end (retained) —
// while keeping resident bytes near the budget online:
//
//  - Before each op, while the resident bytes of tracked storages exceed the
//    budget, it evicts the oldest-produced storage the op does not use
//    (largest first among storages produced by the same op; then lowest id)
//    with copy_d2h + release_device.
//  - Inputs evicted earlier are demand-paged back (counted as faults), each
//    after evicting, under the same rule, enough to make room for it.
//  - An output allocated with allocate_output() gets room the same way first;
//    so do outputs in the caller's buffers, before on_op_end adopts them (they
//    already exist then, but count as resident only once adopted).
//  - When a device allocation fails (an output, a page-in) it evicts more,
//    under the same rule, and retries; it fails only when nothing is left to
//    evict. So with the emulated device's capacity set to the budget, the step
//    runs within it.
//  - An eviction's buffer stays held until its D2H has read it (Note [Held
//    bytes] in runtime/residency_manager.h). The budget is the residency
//    manager's held budget during the step: each allocation above (an output,
//    a page-in, an adopted output) first waits for the evictions' copies, oldest
//    first, until it fits — so held bytes, not only resident ones, stay within
//    the budget whenever one op's own storages fit in it. Otherwise the
//    allocation goes ahead over it and a note says so.
//
// finish() returns the trace (memory limit = the budget; D2H and H2D bandwidth
// measured from the step's copies, or from a short calibration copy for a
// direction the step never used), the replay guide and the step's stats.
// Storages the caller still holds stay tracked, resident, after finish().
//
//   auto warmup = *WarmupExecutor::start(residency, {.budget_bytes = 64 << 20});
//   ... run the step through *warmup (exec/hooks.h) ...
//   Result<WarmupResult> result = warmup->finish();
//
// Thread-safety: one thread drives it (see StepHooks).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/internal/op_allocations.h"
#include "hyperoffload/exec/op_time_store.h"
#include "hyperoffload/exec/replay_guide.h"
#include "hyperoffload/exec/step_stats.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload {

// Note [Reproducible plans]. A plan is made from the warmup's trace, whose op
// durations and copy bandwidths are measured, so timing noise alone could
// give the same step program another plan from run to run: other step times,
// and other tensors offloaded or re-run. Two steps keep it from doing so.
//
// Quantized times. With OpTimes::kQuantized (the default) the trace records,
// for each group of ops alike (same name, same kinds and sizes of tracked
// accesses: an op and its twins in the model's other layers), the median of
// their measured durations rounded to the nearest power of two of
// milliseconds (0 below 10 microseconds), and each copy bandwidth rounded to
// the nearest power of two of GiB/s. An op re-fed while catching up (another
// executor ran it, so it has no time of its own) takes its measured twins'
// time, or 0 without one. A recorded time changes only when noise
// carries a median across the midpoint between two powers of two (a factor
// of 1.41) — which does happen: in 20 runs of a Llama loop, 118 of 1,137
// recorded times differed between two runs, and the first plan of one step
// program came out two ways (docs/PYTHON.md).
//
// The op-time store (op_time_store.h). So rounding alone cannot make plans
// reproducible: any rounding has edges that noise crosses. With a store
// (WarmupOptions::op_time_store; the Python session's default), the first
// complete warmup of a step program on a machine writes its recorded times to
// the store, and every later warmup of that program on that machine — in
// this process or another, at any budget — plans from those times instead of
// its own. The planners are deterministic functions of the trace, so the same
// program, budget and configuration give the same plan, with the same
// fingerprint (Session::plan_fingerprint), in every run after the first, and
// in the first too. A warmup that continued a replay (the second step of a
// training loop, whose first AccumulateGrad adds where the first step's
// created) writes what it recorded, re-fed ops as above: the same loop leaves
// the replay at the same op in every run. A record that cannot
// be used (unreadable, another program's) is replaced, with a note. The price
// is that the times are those of the first run: a machine that later runs
// faster or slower keeps planning from them until the store's file is
// removed. kMeasured keeps the measured values and uses no store (the
// planner's estimates follow the machine more closely).
enum class OpTimes : std::uint8_t { kQuantized, kMeasured };
inline constexpr OpTimes kDefaultOpTimes = OpTimes::kQuantized;
// The recorded value of a measured duration or bandwidth under `op_times`.
double recorded_duration_ms(double measured_ms, OpTimes op_times);
double recorded_bandwidth_gib_per_s(double measured_gib_per_s, OpTimes op_times);

// The default calibration copy of every entry point (WarmupOptions,
// SessionOptions, OffloadConfig): 4 MiB.
inline constexpr std::int64_t kDefaultCalibrationBytes = std::int64_t{4} << 20;

struct WarmupOptions {
  // Limit on resident bytes of tracked storages; nullopt: never evict.
  std::optional<std::int64_t> budget_bytes;
  // Bytes of the calibration copy for a direction the step did not copy (at
  // most the largest storage); 0 disables calibration (the default bandwidth
  // is kept and a note says so).
  std::int64_t calibration_bytes = kDefaultCalibrationBytes;
  // The copy bandwidth the trace records for both directions, in GiB/s (> 0),
  // instead of the one the step's copies measured: to plan for another link
  // (a GPU's PCIe link while running on the CPU) or conservatively.
  std::optional<double> copy_bandwidth_gib_per_s;
  // How measured op durations and bandwidths enter the trace (Note
  // [Reproducible plans]); a given copy_bandwidth_gib_per_s is kept as it is.
  OpTimes op_times = kDefaultOpTimes;
  // Where recorded times are kept per step program and machine (Note
  // [Reproducible plans]); nullopt: none (each warmup plans from its own
  // times). Used with OpTimes::kQuantized only.
  std::optional<OpTimeStoreOptions> op_time_store;
  // Continues a step another executor of the same step began (Session: a
  // replay that diverged before any irreversible action becomes a warmup): as
  // ReplayOptions::continues — outputs the residency already tracks are taken
  // as they are, frees of storages it no longer tracks are only recorded, the
  // peak is not reset and the step's stats count from the origin.
  std::optional<StepOrigin> continues;
};

struct WarmupResult {
  Trace trace;
  ReplayGuide guide;
  StepStats stats;
  std::vector<std::string> notes;  // e.g. a bandwidth that could not be measured
};

class WarmupExecutor final : public StepHooks {
 public:
  // Starts the step. Precondition: `residency` tracks no storage and outlives
  // the executor.
  static Result<std::unique_ptr<WarmupExecutor>> start(ResidencyManager& residency, WarmupOptions options);
  ~WarmupExecutor() override;
  WarmupExecutor(const WarmupExecutor&) = delete;
  WarmupExecutor& operator=(const WarmupExecutor&) = delete;

  Status on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                     std::span<const StorageId> written) override;
  Result<void*> allocate_output(StorageId id, std::int64_t size_bytes) override;
  Status on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) override;
  Status mark_recomputable(Recomputable how = Recomputable::kYes) override;
  Status on_storage_freed(StorageId id) override;
  Result<void*> device_ptr(StorageId id, DeviceAccess access = DeviceAccess::kReadWrite) override;

  // Ends the step. Precondition: not inside an op.
  Result<WarmupResult> finish();

  // Catching up (with WarmupOptions::continues): the session re-feeds the
  // hooks of the ops another executor already ran, in whatever residency state
  // it left (copies, offloads, releases of its plan). They are only recorded
  // into the trace — nothing is bound, adopted, evicted or paged in, and their
  // durations are what the re-feed takes (about 0). end_catch_up() then makes
  // the live storages resident now candidates for eviction; the others are
  // paged in when an op uses them (a fault), or fail if the plan dropped them.
  void begin_catch_up() { catching_up_ = true; }
  void end_catch_up();
  // After catching up (Note [Leaving a plan] in exec/session.h): makes room
  // under the budget for `bytes` about to come back, evicting none of `keep`
  // (the inputs of an op about to be re-run), and takes the storages another
  // executor brought back as resident ones (candidates for eviction).
  Status make_room(std::int64_t bytes, std::span<const StorageId> keep);
  void brought_back(std::span<const StorageId> ids);

 private:
  WarmupExecutor(ResidencyManager& residency, WarmupOptions options);

  struct StorageRecord {
    std::int64_t size_bytes = 0;
    OpIndex produced_by = 0;
    bool alive = true;
    bool evictable = false;  // in eviction_order_
    // A recomputable op made its current version: an in-place op rewriting
    // it may be a follower (Note [In-place units] in ir/trace.h).
    bool version_recomputable = false;
  };
  using EvictionKey = std::tuple<OpIndex, std::int64_t, StorageId>;  // (producer, -size, id)

  std::string op_label() const;
  bool used_by_current_op(StorageId id) const;
  void make_evictable(StorageId id, StorageRecord& record);
  void make_unevictable(StorageId id, StorageRecord& record);
  // Evicts one storage under the policy, none used by the current op or in
  // kept_; false when none is eligible.
  Result<bool> evict_one();
  // Evicts while resident bytes + incoming_bytes exceed the budget (and
  // something is eligible).
  Status evict_while_over_budget(std::int64_t incoming_bytes);
  Result<StorageRecord*> find_alive(StorageId id, std::string_view role);
  // Inside an op, where making room may wait (`waits`): marks the start of a
  // span that is not the op's time (Note [Op times without the room they wait
  // for], warmup_executor.cc); room_span_end marks its end on the current op.
  // Outside an op, or when nothing waits: no span (an empty fence).
  Result<Fence> room_span_start(bool waits);
  // Whether the held bytes and `incoming_bytes` exceed the budget: an
  // allocation that evicts or waits for evictions' copies.
  bool over_budget_with(std::int64_t incoming_bytes) const;
  Status room_span_end(Fence start);
  // What make_room must not evict, while it runs.
  std::span<const StorageId> kept_;
  Result<double> measure_bandwidth(CopyKind kind, std::int64_t bytes);

  ResidencyManager& residency_;
  WarmupOptions options_;
  ResidencyStats start_stats_;
  std::chrono::steady_clock::time_point start_time_;

  std::unordered_map<StorageId, StorageRecord> storages_;
  std::vector<StorageId> declared_;  // bind order
  std::set<EvictionKey> eviction_order_;

  struct OpRecord {
    std::string name;
    std::uint32_t access_begin = 0;
    std::uint32_t access_end = 0;
    Recomputable recomputable = Recomputable::kNo;  // as marked, when it produced a storage and wrote no input
    bool refed = false;  // re-fed while catching up: another executor ran it, its time is not measured
    Fence start;
    Fence end;
    // Spans inside [start, end] spent making room for an output or paging an
    // input back (Note [Op times without the room they wait for],
    // warmup_executor.cc): not the op's time.
    std::vector<std::pair<Fence, Fence>> making_room;
  };
  std::vector<OpRecord> ops_;
  std::vector<std::pair<StorageId, AccessKind>> accesses_;
  std::vector<TimedSpan> copy_spans_;

  bool in_op_ = false;
  bool catching_up_ = false;
  Recomputable current_marked_recomputable_ = Recomputable::kNo;
  std::string current_name_;
  // Storages the current op uses (inputs, and any it reaches through
  // device_ptr): never evicted to make room while it runs.
  std::vector<StorageId> current_used_;
  internal::OpAllocations current_allocated_;  // outputs allocated for the current op
  Fence current_start_;
  std::int64_t evictions_ = 0;
  // Storages an eviction kept on the device because the pinned host pool was
  // full (Note [A full host pool in the warmup], warmup_executor.cc), and
  // their bytes, each storage counted once.
  std::set<StorageId> kept_for_host_;
  std::int64_t kept_for_host_bytes_ = 0;
  std::int64_t largest_storage_bytes_ = 0;
};

}  // namespace hyperoffload
