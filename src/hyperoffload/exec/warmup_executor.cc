#include "hyperoffload/exec/warmup_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <utility>

#include "hyperoffload/exec/internal/hook_util.h"
#include "hyperoffload/exec/internal/step_skeleton.h"
#include "hyperoffload/exec/op_time_store.h"

namespace hyperoffload {

double recorded_duration_ms(double measured_ms, OpTimes op_times) {
  if (op_times == OpTimes::kMeasured) return measured_ms;
  constexpr double kZeroBelowMs = 0.01;  // re-fed ops, views: 0 every run
  if (!(measured_ms >= kZeroBelowMs)) return 0.0;
  return std::exp2(std::round(std::log2(measured_ms)));
}

double recorded_bandwidth_gib_per_s(double measured_gib_per_s, OpTimes op_times) {
  if (op_times == OpTimes::kMeasured || !(measured_gib_per_s > 0.0)) return measured_gib_per_s;
  return std::exp2(std::round(std::log2(measured_gib_per_s)));
}

namespace {

using internal::contains;
using internal::in_context;

double gib_per_s(std::int64_t bytes, double ms) {
  return static_cast<double>(bytes) / static_cast<double>(kBytesPerGiB) / (ms / 1e3);
}

}  // namespace

const char* to_string(StepKind kind) { return kind == StepKind::kWarmup ? "warmup" : "replay"; }

Result<std::unique_ptr<WarmupExecutor>> WarmupExecutor::start(ResidencyManager& residency, WarmupOptions options) {
  if (options.budget_bytes && *options.budget_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("warmup budget must be >= 0 bytes, got {}", *options.budget_bytes));
  }
  if (options.copy_bandwidth_gib_per_s &&
      !(*options.copy_bandwidth_gib_per_s > 0 && std::isfinite(*options.copy_bandwidth_gib_per_s))) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("copy bandwidth must be a finite number of GiB/s > 0, "
                                                               "got {}",
                                                               *options.copy_bandwidth_gib_per_s));
  }
  if (!options.continues) HO_RETURN_IF_ERROR(internal::check_fresh_residency(residency, "warmup"));
  return std::unique_ptr<WarmupExecutor>(new WarmupExecutor(residency, options));
}

WarmupExecutor::WarmupExecutor(ResidencyManager& residency, WarmupOptions options)
    : residency_(residency), options_(options), start_time_(std::chrono::steady_clock::now()) {
  // Note [Held bytes] in runtime/residency_manager.h: evictions make resident
  // room; each allocation then waits, when the budget is full, for the
  // evictions' copies to finish so their buffers are freed.
  residency_.set_held_budget(options_.budget_bytes);
  if (options_.continues) {
    start_stats_ = options_.continues->stats;
    start_time_ = options_.continues->time;
  } else {
    residency_.reset_peak();
    start_stats_ = residency_.stats();
  }
  residency_.set_record_copies(RecordCopies::kYes);
  residency_.set_reclaimer([this](std::int64_t) { return evict_one(); });
}

WarmupExecutor::~WarmupExecutor() {
  residency_.set_held_budget(std::nullopt);
  residency_.set_reclaimer({});
  residency_.set_record_copies(RecordCopies::kNo);
  residency_.take_spans();
}

std::string WarmupExecutor::op_label() const {
  const std::size_t index = in_op_ ? ops_.size() - 1 : ops_.size();
  return fmt::format("op {} ({})", index, current_name_);
}

bool WarmupExecutor::used_by_current_op(StorageId id) const {
  if (!in_op_ && current_used_.empty()) return false;
  if (contains(current_used_, id)) return true;
  return current_allocated_.contains(id);
}

void WarmupExecutor::make_evictable(StorageId id, StorageRecord& record) {
  if (record.evictable) return;
  eviction_order_.emplace(record.produced_by, -record.size_bytes, id);
  record.evictable = true;
}

void WarmupExecutor::make_unevictable(StorageId id, StorageRecord& record) {
  if (!record.evictable) return;
  eviction_order_.erase({record.produced_by, -record.size_bytes, id});
  record.evictable = false;
}

// Note [Op times without the room they wait for]
// An op's recorded duration is the compute stream's time from the end of
// on_op_begin to the start of on_op_end. Room for its inputs is made before
// that span and room for outputs the caller adopts after it, but an output
// allocated inside the op (allocate_output, PyTorch's allocator) gets its
// room inside it: the evictions, and the wait for their copies to host
// within the held budget. That is the warmup's residency work, not the op's
// compute, and a plan made from such times believes the step has more
// compute than it has, to hide copies behind that is not there: a GPT-2
// (python/bench/frontier.py's) warmed up at a quarter of its activation
// memory on an emulated link recorded op times adding up to 1.42x its eager
// step (1.21x on the CPU's own link, 0.99x without a budget), and its hybrid
// plan then stalled where the planner expected none (969 ms a step against
// 764 ms for the recompute-only plan). So where an output needs room, or an
// input reached through device_ptr is paged back, the span from before the
// evictions to after the allocation is marked on the compute stream and
// subtracted from the op's duration: 1.18-1.27x on the emulated link and
// 1.09-1.20x on the CPU's, what is left being the copies' memory traffic
// slowing memory-bound ops (elementwise ops up to 2x), which a replay under
// the plan meets too. (An op whose earlier kernels still run on a device
// while the host makes room for a later output loses that overlap from its
// time; on the CPU the op has not run yet.)

// Note [A full host pool in the warmup]
// The warmup must not fail for lack of host memory: the plan made from it
// keeps within the host budget (the pool's capacity), so a full pool only
// means this step offloads less. An eviction whose copy finds the pool full
// (after the pool waited for blocks whose copies are still in flight) keeps
// that storage on the device and tries the next one, which may be smaller;
// when none fits, the step holds more device memory than its budget (the
// held-bytes wait goes ahead, counted in over_budget_allocations), with a
// note, and StepStats::host_full_kept_storages says how many storages this
// kept. The trace is what the step did, so the plan is unaffected.
Result<bool> WarmupExecutor::evict_one() {
  for (const auto& key : eviction_order_) {
    const StorageId id = std::get<2>(key);
    if (used_by_current_op(id) || contains(kept_, id)) continue;
    StorageRecord& record = storages_.at(id);
    if (auto copied = residency_.copy_d2h(id); !copied) {
      if (copied.error().code == ErrorCode::kOutOfMemory) {
        if (kept_for_host_.insert(id).second) kept_for_host_bytes_ += record.size_bytes;
        continue;  // kept on the device: Note [A full host pool in the warmup]
      }
      return std::unexpected(
          in_context(std::move(copied.error()), fmt::format("{}: evicting storage {}", op_label(), id)));
    }
    HO_RETURN_IF_ERROR(residency_.release_device(id));
    make_unevictable(id, record);
    ++evictions_;
    return true;
  }
  return false;
}

Status WarmupExecutor::evict_while_over_budget(std::int64_t incoming_bytes) {
  while (options_.budget_bytes && residency_.resident_bytes() + incoming_bytes > *options_.budget_bytes) {
    HO_ASSIGN_OR_RETURN(bool evicted, evict_one());
    if (!evicted) break;  // everything left is used by this op
  }
  return ok_status();
}

Result<WarmupExecutor::StorageRecord*> WarmupExecutor::find_alive(StorageId id, std::string_view role) {
  auto it = storages_.find(id);
  if (it == storages_.end() || !it->second.alive) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: {} storage {} is not tracked in this step ({}); pass only storages produced "
                                  "by earlier ops of the step and not yet freed",
                                  op_label(), role, id, it == storages_.end() ? "never produced" : "already freed"));
  }
  return &it->second;
}

Status WarmupExecutor::on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                                   std::span<const StorageId> written) {
  HO_RETURN_IF_ERROR(internal::check_not_in_op(in_op_, name, [this] { return op_label(); }));
  current_name_.assign(name);
  current_marked_recomputable_ = Recomputable::kNo;
  current_used_.assign(inputs.begin(), inputs.end());
  current_allocated_.clear();
  HO_RETURN_IF_ERROR(residency_.poll());
  for (StorageId id : inputs) {
    HO_ASSIGN_OR_RETURN([[maybe_unused]] StorageRecord * record, find_alive(id, "input"));
  }
  HO_RETURN_IF_ERROR(internal::check_written(inputs, written, [this] { return op_label(); }));
  if (!catching_up_) HO_RETURN_IF_ERROR(evict_while_over_budget(0));
  for (StorageId id : inputs) {
    if (catching_up_) break;
    StorageRecord& record = storages_.at(id);
    // Room first, so paging an input back in does not overshoot the budget.
    if (!residency_.resident(id)) HO_RETURN_IF_ERROR(evict_while_over_budget(record.size_bytes));
    const DeviceAccess access = contains(written, id) ? DeviceAccess::kReadWrite : DeviceAccess::kRead;
    if (auto ptr = residency_.device_ptr(id, access); !ptr) {
      return std::unexpected(in_context(std::move(ptr.error()), fmt::format("{}: input storage {}", op_label(), id)));
    }
    make_evictable(id, record);  // back in the order if it was paged in
  }
  const auto access_begin = static_cast<std::uint32_t>(accesses_.size());
  for (StorageId id : inputs) accesses_.emplace_back(id, AccessKind::kRead);
  HO_ASSIGN_OR_RETURN(current_start_, residency_.mark_compute());
  ops_.push_back(OpRecord{current_name_, access_begin, access_begin, Recomputable::kNo, catching_up_, {}, {}});
  in_op_ = true;
  return ok_status();
}

Result<void*> WarmupExecutor::allocate_output(StorageId id, std::int64_t size_bytes) {
  if (!in_op_) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("allocate_output of storage {}: not inside an op", id));
  }
  if (id < 0) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("{}: output storage id {} is negative", op_label(), id));
  }
  if (catching_up_) return nullptr;  // bound by the executor before this one
  // Continuing a step: the executor before this one bound it.
  const bool bound_before = options_.continues && residency_.tracked(id) && !storages_.contains(id);
  if (!bound_before && (storages_.contains(id) || residency_.tracked(id))) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: output storage id {} was already used in this step", op_label(), id));
  }
  HO_ASSIGN_OR_RETURN(Fence room, room_span_start(!bound_before && over_budget_with(size_bytes)));
  if (!bound_before) HO_RETURN_IF_ERROR(evict_while_over_budget(size_bytes));  // room first, as for page-ins
  Result<void*> ptr =
      bound_before ? residency_.device_ptr(id, DeviceAccess::kReadWrite) : residency_.bind(id, size_bytes);
  if (!ptr) return std::unexpected(in_context(std::move(ptr.error()), op_label()));
  HO_RETURN_IF_ERROR(room_span_end(std::move(room)));
  current_allocated_.add(id, size_bytes);
  return ptr;
}

Status WarmupExecutor::on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) {
  if (!in_op_) return make_error(ErrorCode::kFailedPrecondition, "on_op_end without on_op_begin");
  OpRecord& op = ops_.back();
  op.start = std::move(current_start_);
  HO_ASSIGN_OR_RETURN(op.end, residency_.mark_compute());
  const auto op_index = static_cast<OpIndex>(ops_.size() - 1);
  // Caller buffers (adopted here) already exist, but they enter the resident
  // bytes only now: room first, as for allocate_output, so the step's resident
  // bytes stay within the budget whenever the op's own storages fit in it.
  std::int64_t adopted_bytes = 0;
  auto adopted_before = [&](const OpOutput& output) {
    return options_.continues && residency_.tracked(output.id) && !current_allocated_.contains(output.id) &&
           !storages_.contains(output.id);
  };
  for (const OpOutput& output : outputs) {
    if (!current_allocated_.contains(output.id) && !adopted_before(output)) {
      adopted_bytes += std::max<std::int64_t>(output.size_bytes, 0);
    }
  }
  if (!catching_up_) HO_RETURN_IF_ERROR(evict_while_over_budget(adopted_bytes));
  for (const OpOutput& output : outputs) {
    if (!current_allocated_.contains(output.id)) {
      if (output.id < 0) {
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("{}: output storage id {} is negative", op_label(), output.id));
      }
      if (storages_.contains(output.id)) {
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("{}: output storage id {} was already used in this step", op_label(), output.id));
      }
    }
    if (!catching_up_ && !adopted_before(output)) {
      HO_RETURN_IF_ERROR(
          internal::take_output(current_allocated_, residency_, output, [this] { return op_label(); }));
    }
    StorageRecord& record = storages_[output.id];
    record = StorageRecord{output.size_bytes, op_index, true, false};
    if (!catching_up_) make_evictable(output.id, record);
    declared_.push_back(output.id);
    largest_storage_bytes_ = std::max(largest_storage_bytes_, output.size_bytes);
    accesses_.emplace_back(output.id, AccessKind::kWrite);
  }
  HO_RETURN_IF_ERROR(current_allocated_.check_all_claimed([this] { return op_label(); }));
  for (StorageId id : mutated) {
    HO_ASSIGN_OR_RETURN([[maybe_unused]] StorageRecord * record, find_alive(id, "mutated"));
    if (Status written = catching_up_ ? ok_status() : residency_.mark_written(id); !written) {
      return std::unexpected(in_context(std::move(written.error()), op_label()));
    }
    accesses_.emplace_back(id, AccessKind::kWrite);
  }
  op.access_end = static_cast<std::uint32_t>(accesses_.size());
  // What the trace can check of a recomputable op (ir/trace.h): it writes only
  // storages it creates, or it is an in-place follower: it creates nothing and
  // rewrites one input, whose version a recomputable op made.
  const bool creates = !outputs.empty() && mutated.empty();
  const bool follows = outputs.empty() && !mutated.empty() &&
                       std::all_of(mutated.begin(), mutated.end(), [&](StorageId id) { return id == mutated.front(); }) &&
                       std::any_of(accesses_.begin() + op.access_begin, accesses_.end(), [&](const auto& access) {
                         return access.first == mutated.front() && access.second == AccessKind::kRead;
                       }) &&
                       storages_.at(mutated.front()).version_recomputable;
  op.recomputable = creates || follows ? current_marked_recomputable_ : Recomputable::kNo;
  const bool recomputable = op.recomputable != Recomputable::kNo;
  for (const OpOutput& output : outputs) storages_.at(output.id).version_recomputable = recomputable;
  for (StorageId id : mutated) storages_.at(id).version_recomputable = recomputable && follows;
  in_op_ = false;
  current_used_.clear();
  return ok_status();
}

void WarmupExecutor::end_catch_up() {
  catching_up_ = false;
  for (auto& [id, record] : storages_) {
    if (record.alive && residency_.tracked(id) && residency_.resident(id)) {
      make_evictable(id, record);
    } else {
      make_unevictable(id, record);
    }
  }
}

bool WarmupExecutor::over_budget_with(std::int64_t incoming_bytes) const {
  return options_.budget_bytes && residency_.held_bytes() + incoming_bytes > *options_.budget_bytes;
}

Result<Fence> WarmupExecutor::room_span_start(bool waits) {
  if (!in_op_ || !waits) return Fence();
  return residency_.mark_compute();
}

Status WarmupExecutor::room_span_end(Fence start) {
  if (start.empty()) return ok_status();
  HO_ASSIGN_OR_RETURN(Fence end, residency_.mark_compute());
  ops_.back().making_room.emplace_back(std::move(start), std::move(end));
  return ok_status();
}

Status WarmupExecutor::make_room(std::int64_t bytes, std::span<const StorageId> keep) {
  kept_ = keep;
  Status made = evict_while_over_budget(bytes);
  kept_ = {};
  return made;
}

void WarmupExecutor::brought_back(std::span<const StorageId> ids) {
  for (StorageId id : ids) {
    auto it = storages_.find(id);
    if (it != storages_.end() && it->second.alive && residency_.resident(id)) make_evictable(id, it->second);
  }
}

Status WarmupExecutor::mark_recomputable(Recomputable how) {
  if (!in_op_) return make_error(ErrorCode::kFailedPrecondition, "mark_recomputable outside an op");
  current_marked_recomputable_ = how;
  return ok_status();
}

Status WarmupExecutor::on_storage_freed(StorageId id) {
  auto it = storages_.find(id);
  if (it == storages_.end() || !it->second.alive) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("freeing storage {}: not tracked in this step ({})", id,
                                  it == storages_.end() ? "never produced" : "already freed"));
  }
  make_unevictable(id, it->second);
  it->second.alive = false;
  if (options_.continues && !residency_.tracked(id)) return ok_status();  // forgotten before the switch
  return residency_.forget(id);
}

Result<void*> WarmupExecutor::device_ptr(StorageId id, DeviceAccess access) {
  HO_ASSIGN_OR_RETURN(StorageRecord * record, find_alive(id, "used"));
  // A storage the op writes without reading it reaches the runtime only here:
  // from now on it is the op's, so making room for another of its storages
  // (or its outputs at on_op_end) must not evict it.
  if (in_op_ && !contains(current_used_, id)) current_used_.push_back(id);
  const bool pages_in = !residency_.resident(id);
  HO_ASSIGN_OR_RETURN(Fence room, room_span_start(pages_in));
  if (pages_in) HO_RETURN_IF_ERROR(evict_while_over_budget(record->size_bytes));
  HO_ASSIGN_OR_RETURN(void* ptr, residency_.device_ptr(id, access));
  HO_RETURN_IF_ERROR(room_span_end(std::move(room)));
  make_evictable(id, *record);  // back in the order if it was paged in (the op's own use protects it)
  return ptr;
}

Result<double> WarmupExecutor::measure_bandwidth(CopyKind kind, std::int64_t bytes) {
  Backend& backend = residency_.backend();
  const Stream stream =
      backend.stream(kind == CopyKind::kDeviceToHost ? StreamRole::kDeviceToHost : StreamRole::kHostToDevice);
  HO_ASSIGN_OR_RETURN(void* device, backend.allocate_device(bytes));
  Result<PinnedBlock> host = residency_.pool().acquire(bytes);
  if (!host) {
    (void)backend.free_device(device);
    return std::unexpected(std::move(host.error()));
  }
  void* dst = kind == CopyKind::kDeviceToHost ? host->ptr : device;
  const void* src = kind == CopyKind::kDeviceToHost ? device : host->ptr;
  // One untimed copy first: it pays for first-touch page faults.
  auto timed = [&]() -> Result<double> {
    HO_RETURN_IF_ERROR(backend.copy_async(stream, dst, src, bytes, kind));
    HO_ASSIGN_OR_RETURN(Fence start, residency_.events().record(stream));
    HO_RETURN_IF_ERROR(backend.copy_async(stream, dst, src, bytes, kind));
    HO_RETURN_IF_ERROR(backend.copy_async(stream, dst, src, bytes, kind));
    HO_ASSIGN_OR_RETURN(Fence end, residency_.events().record(stream));
    HO_RETURN_IF_ERROR(end.wait());
    HO_ASSIGN_OR_RETURN(double ms, backend.elapsed_ms(start.event(), end.event()));
    return ms;
  };
  Result<double> ms = timed();
  Status synced = backend.synchronize_stream(stream);
  residency_.pool().release(*host);
  Status freed = backend.free_device(device);
  if (!ms) return ms;
  HO_RETURN_IF_ERROR(synced);
  HO_RETURN_IF_ERROR(freed);
  if (*ms <= 0.0) return make_error(ErrorCode::kInternal, "calibration copy took no measurable time");
  return gib_per_s(2 * bytes, *ms);
}

Result<WarmupResult> WarmupExecutor::finish() {
  if (in_op_) {
    return make_error(ErrorCode::kFailedPrecondition, fmt::format("finish inside {}: the op did not end", op_label()));
  }
  WarmupResult result;
  current_name_ = "end of step";
  // Storages the caller still holds must be on the device when the step ends;
  // none of them may be evicted to make room for another.
  current_used_.clear();
  for (StorageId id : declared_) {
    if (storages_.at(id).alive) current_used_.push_back(id);
  }
  internal::EndRestores restores;
  for (StorageId id : declared_) {
    const StorageRecord& record = storages_.at(id);
    if (record.alive) HO_RETURN_IF_ERROR(internal::restore_held(residency_, id, record.size_bytes, restores));
  }
  HO_RETURN_IF_ERROR(residency_.poll());

  // Durations: the compute stream's events, resolved now that they completed.
  if (!ops_.empty()) HO_RETURN_IF_ERROR(ops_.back().end.wait());
  Backend& backend = residency_.backend();
  std::vector<double> durations_ms;
  durations_ms.reserve(ops_.size());
  for (const OpRecord& op : ops_) {
    HO_RETURN_IF_ERROR(op.end.wait());
    HO_ASSIGN_OR_RETURN(double ms, backend.elapsed_ms(op.start.event(), op.end.event()));
    for (const auto& [room_start, room_end] : op.making_room) {
      HO_ASSIGN_OR_RETURN(double room_ms, backend.elapsed_ms(room_start.event(), room_end.event()));
      ms -= room_ms;
    }
    // A re-fed op's span is the re-feed's, not the op's: 0, every run.
    durations_ms.push_back(op.refed ? 0.0 : std::max(0.0, ms));
  }
  if (options_.op_times == OpTimes::kQuantized) {
    // Note [Reproducible plans]: ops alike (same name, same tracked accesses'
    // kinds and sizes: a layer's op and its twins in the other layers) take
    // the median of those measured, so one slow first call (lazy
    // initialisation, a cold cache) does not decide, then the median is
    // rounded. A re-fed op takes its measured twins' time too (it has none
    // of its own).
    std::map<std::pair<std::string_view, std::vector<std::int64_t>>, std::vector<std::size_t>> alike;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      std::vector<std::int64_t> shape;
      for (std::uint32_t a = ops_[i].access_begin; a < ops_[i].access_end; ++a) {
        const auto& [id, kind] = accesses_[a];
        shape.push_back(storages_.at(id).size_bytes * 2 + (kind == AccessKind::kWrite ? 1 : 0));
      }
      alike[{ops_[i].name, std::move(shape)}].push_back(i);
    }
    std::vector<double> group;
    for (const auto& [key, members] : alike) {
      group.clear();
      for (std::size_t i : members) {
        if (!ops_[i].refed) group.push_back(durations_ms[i]);
      }
      if (group.empty()) continue;  // re-fed ops only: 0
      std::nth_element(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(group.size() / 2), group.end());
      const double median = recorded_duration_ms(group[group.size() / 2], OpTimes::kQuantized);
      for (std::size_t i : members) durations_ms[i] = median;
    }
  }
  // The trace, with the given times.
  auto build_trace = [&](std::span<const double> durations, double d2h, double h2d) -> Result<Trace> {
    TraceBuilder builder;
    builder.reserve(ops_.size(), declared_.size(), accesses_.size());
    for (StorageId id : declared_) {
      const StorageRecord& record = storages_.at(id);
      HO_RETURN_IF_ERROR(
          builder.add_storage(id, record.size_bytes, record.alive ? Retention::kRetained : Retention::kReleasable));
    }
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const OpRecord& op = ops_[i];
      HO_RETURN_IF_ERROR(builder.add_op(op.name, durations[i], op.recomputable));
      for (std::uint32_t a = op.access_begin; a < op.access_end; ++a) {
        builder.add_access(accesses_[a].first, accesses_[a].second);
      }
    }
    builder.set_memory_limit_bytes(options_.budget_bytes);
    builder.set_d2h_bandwidth_gib_per_s(d2h);
    builder.set_h2d_bandwidth_gib_per_s(h2d);
    return std::move(builder).build();
  };
  // Note [Reproducible plans]: the times an earlier warmup of this step
  // program recorded on this machine, when the store has them.
  std::optional<OpTimeStoreOptions> store;
  std::optional<std::uint64_t> program;
  std::optional<OpTimesRecord> stored;
  if (options_.op_time_store && options_.op_times == OpTimes::kQuantized) {
    store = *options_.op_time_store;
    // Times on another backend, or with a given link instead of a measured
    // one, are kept apart.
    store->machine += fmt::format("; {} backend", residency_.backend().name());
    if (options_.copy_bandwidth_gib_per_s) store->machine += "; copy bandwidth given";
    HO_ASSIGN_OR_RETURN(const Trace measured,
                        build_trace(durations_ms, kDefaultBandwidthGiBPerS, kDefaultBandwidthGiBPerS));
    program = step_program_key(measured, store->machine);
    Result<std::optional<OpTimesRecord>> loaded = load_op_times(*store, *program, measured.op_count());
    if (loaded) {
      stored = std::move(*loaded);
    } else {
      result.notes.push_back(fmt::format("op times: ignored a stored record that cannot be used ({}); this "
                                         "warmup's times replace it",
                                         loaded.error().message));
    }
  }

  // Bandwidth: total bytes over total time of the step's copies per direction
  // (faults are host→device copies too).
  std::int64_t d2h_bytes = 0, h2d_bytes = 0;
  double d2h_ms = 0.0, h2d_ms = 0.0;
  for (const TimedSpan& span : residency_.take_spans()) {
    if (span.kind == SpanKind::kStall) continue;
    HO_RETURN_IF_ERROR(span.end.wait());
    HO_ASSIGN_OR_RETURN(double ms, backend.elapsed_ms(span.start.event(), span.end.event()));
    if (span.kind == SpanKind::kCopyD2H) {
      d2h_bytes += span.bytes;
      d2h_ms += ms;
    } else {
      h2d_bytes += span.bytes;
      h2d_ms += ms;
    }
  }
  const std::int64_t calibration = std::min(options_.calibration_bytes, largest_storage_bytes_);
  auto resolve = [&](std::int64_t bytes, double ms, CopyKind kind, const char* direction) -> double {
    if (options_.copy_bandwidth_gib_per_s) return *options_.copy_bandwidth_gib_per_s;
    if (bytes > 0 && ms > 0.0) return recorded_bandwidth_gib_per_s(gib_per_s(bytes, ms), options_.op_times);
    if (calibration > 0) {
      Result<double> measured = measure_bandwidth(kind, calibration);
      if (measured) return recorded_bandwidth_gib_per_s(*measured, options_.op_times);
      result.notes.push_back(fmt::format("{} bandwidth not measured (calibration failed: {}); using {} GiB/s",
                                         direction, measured.error().message, kDefaultBandwidthGiBPerS));
    } else {
      result.notes.push_back(fmt::format("{} bandwidth not measured (no copies, calibration off); using {} GiB/s",
                                         direction, kDefaultBandwidthGiBPerS));
    }
    return kDefaultBandwidthGiBPerS;
  };
  if (stored) {
    // A record the trace refuses (times beyond what a trace may hold) is
    // replaced like one that does not parse.
    Result<Trace> timed = build_trace(stored->durations_ms,
                                      options_.copy_bandwidth_gib_per_s.value_or(stored->d2h_gib_per_s),
                                      options_.copy_bandwidth_gib_per_s.value_or(stored->h2d_gib_per_s));
    if (timed) {
      result.trace = std::move(*timed);
      result.notes.push_back(fmt::format("op times: as an earlier warmup of this step program recorded them on "
                                         "this machine ({})",
                                         op_times_path(*store, *program).string()));
    } else {
      result.notes.push_back(fmt::format("op times: ignored a stored record that cannot be used ({}: {}); this "
                                         "warmup's times replace it",
                                         op_times_path(*store, *program).string(), timed.error().message));
      stored.reset();
    }
  }
  if (!stored) {
    const double d2h = resolve(d2h_bytes, d2h_ms, CopyKind::kDeviceToHost, "d2h");
    const double h2d = resolve(h2d_bytes, h2d_ms, CopyKind::kHostToDevice, "h2d");
    HO_ASSIGN_OR_RETURN(result.trace, build_trace(durations_ms, d2h, h2d));
    if (program) {
      Result<std::filesystem::path> saved =
          save_op_times(*store, OpTimesRecord{store->machine, *program, durations_ms, d2h, h2d});
      result.notes.push_back(saved ? fmt::format("op times: recorded for later warmups of this step program ({})",
                                                 saved->string())
                                   : fmt::format("op times: not stored: {}", saved.error().message));
    }
  }
  HO_ASSIGN_OR_RETURN(result.guide, ReplayGuide::from_trace(result.trace));

  result.stats = internal::step_stats_between(StepKind::kWarmup, static_cast<OpIndex>(ops_.size()), start_stats_,
                                             residency_.stats(), restores.count, restores.bytes, start_time_);
  result.stats.evictions = evictions_;
  result.stats.host_full_kept_storages = static_cast<std::int64_t>(kept_for_host_.size());
  if (!kept_for_host_.empty()) {
    result.notes.push_back(fmt::format(
        "warning: the pinned host pool was full during the warmup: {} storage(s) ({} bytes) stayed on the device "
        "instead of being offloaded (the plan keeps within the host budget)",
        kept_for_host_.size(), kept_for_host_bytes_));
  }
  if (result.stats.over_budget_allocations > 0 && options_.budget_bytes) {
    result.notes.push_back(fmt::format(
        "the warmup held up to {} bytes of device memory, above the budget of {} bytes: {} allocations went ahead "
        "with no copy left to wait for (the budget is below the step's floor: an op's own storages, or the ones "
        "held at the end of the step, do not fit in it)",
        result.stats.peak_held_bytes, *options_.budget_bytes, result.stats.over_budget_allocations));
  }
  return result;
}

}  // namespace hyperoffload
