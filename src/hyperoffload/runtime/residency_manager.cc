#include "hyperoffload/runtime/residency_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace hyperoffload {
namespace {

Error with_context(Error error, std::string_view context) {
  error.message = fmt::format("{}: {}", context, error.message);
  return error;
}

}  // namespace

ResidencyManager::ResidencyManager(Backend& backend, PinnedHostPool& pool, EventPool& events, ResidencyOptions options)
    : backend_(backend),
      pool_(pool),
      events_(events),
      options_(std::move(options)),
      compute_(backend.stream(StreamRole::kCompute)),
      d2h_(backend.stream(StreamRole::kDeviceToHost)),
      h2d_(backend.stream(StreamRole::kHostToDevice)) {}

ResidencyManager::~ResidencyManager() {
  // Nothing to report to at destruction; reset() frees what it can.
  (void)reset();
}

Result<ResidencyManager::Entry*> ResidencyManager::find(StorageId id, const char* operation) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return make_error(
        ErrorCode::kNotFound,
        fmt::format("{} of storage {}: unknown storage (not bound, or already forgotten)", operation, id));
  }
  return &it->second;
}

void ResidencyManager::add_resident(std::int64_t bytes) {
  stats_.resident_bytes += bytes;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, stats_.resident_bytes);
  update_held();
}

void ResidencyManager::sub_resident(std::int64_t bytes) {
  stats_.resident_bytes -= bytes;
  update_held();
}

void ResidencyManager::update_held() {
  stats_.held_bytes = stats_.resident_bytes + deferred_bytes_ + stats_.reserved_bytes;
  stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, stats_.held_bytes);
  stats_.pending_device_frees = static_cast<std::int64_t>(deferred_.size());
}

void ResidencyManager::push_deferred(DeferredFree free) {
  ++stats_.deferred_frees;
  deferred_bytes_ += free.size_bytes;
  deferred_.push_back(std::move(free));
  update_held();
}

// Note [Held bytes] in the header. The oldest deferred free is waited for
// first: copies run FIFO per engine, so it is usually the first to pass, and
// a poll after each wait completes any other that passed meanwhile.
Status ResidencyManager::make_room(std::int64_t bytes) {
  if (!options_.held_budget_bytes || bytes <= 0) return ok_status();
  const std::int64_t budget = *options_.held_budget_bytes;
  // Frees whose copies have passed are completed first even when the bytes
  // fit: held bytes are then those of this moment (the capped simulation
  // frees at the copy's end, not when the host next looks).
  HO_RETURN_IF_ERROR(poll());
  if (stats_.held_bytes + bytes <= budget) return ok_status();
  // With nothing to wait for (and no wait to time) the allocation goes over.
  if (!deferred_.empty()) {
    HO_RETURN_IF_ERROR(timed_wait([&] {
      Status status = ok_status();
      while (status && stats_.held_bytes + bytes > budget && !deferred_.empty()) {
        DeferredFree free = std::move(deferred_.front());
        deferred_.pop_front();
        deferred_bytes_ -= free.size_bytes;
        update_held();
        for (const Fence& fence : free.fences) {
          if (Status done = fence.wait(); !done && status) status = std::move(done);
        }
        if (Status done = complete_free(free); !done && status) status = std::move(done);
        if (status) status = poll();
      }
      return status;
    }));
  }
  if (stats_.held_bytes + bytes > budget) ++stats_.over_budget_allocations;
  return ok_status();
}

Status ResidencyManager::timed_wait(const std::function<Status()>& wait) {
  const auto start = std::chrono::steady_clock::now();
  Status status = wait();
  stats_.memory_wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return status;
}

Status ResidencyManager::take_room(std::int64_t size_bytes) {
  if (size_bytes <= 0) return ok_status();
  const std::int64_t taken = std::min(stats_.reserved_bytes, size_bytes);
  HO_RETURN_IF_ERROR(make_room(size_bytes - taken));
  stats_.reserved_bytes -= taken;
  update_held();
  return ok_status();
}

Status ResidencyManager::reserve(std::int64_t bytes) {
  if (bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("reserve of {} bytes: size is negative", bytes));
  }
  HO_RETURN_IF_ERROR(make_room(bytes));
  stats_.reserved_bytes += bytes;
  update_held();
  return ok_status();
}

void ResidencyManager::cancel_reservation() {
  stats_.reserved_bytes = 0;
  update_held();
}

void ResidencyManager::add_host(std::int64_t bytes) {
  stats_.host_bytes += bytes;
  stats_.peak_host_bytes = std::max(stats_.peak_host_bytes, stats_.host_bytes);
}

Status ResidencyManager::track(StorageId id, std::int64_t size_bytes, Entry entry) {
  entry.size_bytes = size_bytes;
  entry.residency.seen = true;  // bound storages exist: no "first access"
  entry.residency.resident = true;
  entries_.emplace(id, std::move(entry));
  ++stats_.storages;
  add_resident(size_bytes);
  return ok_status();
}

Result<void*> ResidencyManager::bind(StorageId id, std::int64_t size_bytes) {
  if (size_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("bind of storage {}: size {} bytes is negative", id, size_bytes));
  }
  if (entries_.contains(id)) {
    return make_error(ErrorCode::kFailedPrecondition, fmt::format("bind of storage {}: already bound", id));
  }
  Entry entry;
  if (size_bytes > 0) {
    HO_RETURN_IF_ERROR(take_room(size_bytes));
    HO_ASSIGN_OR_RETURN(entry.device, allocate_device(id, size_bytes));
  }
  void* ptr = entry.device;
  HO_RETURN_IF_ERROR(track(id, size_bytes, std::move(entry)));
  return ptr;
}

Status ResidencyManager::adopt(StorageId id, std::int64_t size_bytes, AdoptedBuffer buffer) {
  if (size_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("adopt of storage {}: size {} bytes is negative", id, size_bytes));
  }
  if (size_bytes > 0 && buffer.device_ptr == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("adopt of storage {}: null device pointer for {} bytes", id, size_bytes));
  }
  if (entries_.contains(id)) {
    return make_error(ErrorCode::kFailedPrecondition, fmt::format("adopt of storage {}: already bound", id));
  }
  HO_RETURN_IF_ERROR(poll());
  // The buffer exists already; it is counted as held from now on (the replay
  // reserved it before the op ran).
  HO_RETURN_IF_ERROR(take_room(size_bytes));
  Entry entry;
  entry.device = buffer.device_ptr;
  entry.owner = Owner::kCaller;
  entry.caller_managed = true;
  entry.release = std::move(buffer.release);
  return track(id, size_bytes, std::move(entry));
}

Status ResidencyManager::mark_written(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "write"));
  if (!entry->residency.resident) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("write of storage {}: not resident (writes must go through device_ptr)", id));
  }
  apply_access(entry->residency, AccessKind::kWrite);
  return ok_status();
}

Result<void*> ResidencyManager::allocate_device(StorageId id, std::int64_t size_bytes) {
  HO_RETURN_IF_ERROR(poll());
  for (;;) {
    Result<void*> ptr = backend_.allocate_device(size_bytes);
    if (ptr) return ptr;
    if (ptr.error().code != ErrorCode::kOutOfMemory) {
      return std::unexpected(with_context(std::move(ptr.error()), fmt::format("storage {}", id)));
    }
    // The fallback ladder: memory awaiting a copy, then the reclaim hook.
    if (!deferred_.empty()) {
      HO_RETURN_IF_ERROR(timed_wait([this] { return wait_deferred_frees(); }));
      continue;
    }
    if (reclaim_) {
      HO_ASSIGN_OR_RETURN(bool progressed, reclaim_(size_bytes));
      if (progressed) continue;
    }
    return std::unexpected(
        with_context(std::move(ptr.error()),
                     fmt::format("storage {} ({} bytes resident in tracked storages)", id, stats_.resident_bytes)));
  }
}

Status ResidencyManager::materialize(StorageId id, Entry& entry) {
  if (entry.size_bytes == 0) return ok_status();
  HO_RETURN_IF_ERROR(take_room(entry.size_bytes));
  if (entry.caller_managed && options_.rematerialize) {
    HO_ASSIGN_OR_RETURN(AdoptedBuffer buffer, options_.rematerialize(id, entry.size_bytes));
    if (buffer.device_ptr == nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("storage {}: the rematerialize hook returned a null buffer", id));
    }
    entry.device = buffer.device_ptr;
    entry.owner = Owner::kCaller;
    entry.release = std::move(buffer.release);
    return ok_status();
  }
  HO_ASSIGN_OR_RETURN(entry.device, allocate_device(id, entry.size_bytes));
  entry.owner = Owner::kRuntime;
  entry.release = {};
  return ok_status();
}

// Note [Failed copies]: a copy whose enqueueing fails (a CUDA call, an event
// record, an injected failure in fuzz/runtime_fuzzer.cc) leaves its storage as
// it was: the host block or device buffer taken for it goes back. The copy's
// stream is drained first: the copy itself may have been enqueued before a
// later call (its fence's record) failed, and would still run with no fence
// to wait for. Without this the block or buffer stayed with an entry that did
// not count it as a copy, and no release or reset ever gave it back.
void ResidencyManager::undo_new_device_buffer(Entry& entry, Stream stream) {
  (void)backend_.synchronize_stream(stream);
  if (entry.device == nullptr) return;
  if (entry.owner == Owner::kRuntime) {
    (void)backend_.free_device(entry.device);
  } else if (entry.release) {
    entry.release(entry.device);
  }
  entry.device = nullptr;
  entry.release = {};
}

Result<Fence> ResidencyManager::start_span(Stream stream) {
  if (!recording()) return Fence();
  return events_.record(stream);
}

Status ResidencyManager::end_span(SpanKind kind, StorageId id, std::int64_t bytes, Fence start, Stream stream) {
  if (!recording()) return ok_status();
  HO_ASSIGN_OR_RETURN(Fence end, events_.record(stream));
  spans_.push_back(TimedSpan{kind, id, bytes, std::move(start), std::move(end)});
  return ok_status();
}

Status ResidencyManager::rekey(StorageId from, StorageId to) {
  auto it = entries_.find(from);
  if (it == entries_.end()) {
    return make_error(ErrorCode::kNotFound, fmt::format("rekey of storage {}: unknown storage", from));
  }
  if (entries_.contains(to)) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("rekey of storage {} to {}: {} is already tracked", from, to, to));
  }
  auto node = entries_.extract(it);
  node.key() = to;
  entries_.insert(std::move(node));
  return ok_status();
}

Result<ResidencyManager::Entry*> ResidencyManager::find_released(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "regenerate"));
  if (entry->residency.resident) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("regenerate of storage {}: already resident (only a released storage is "
                                  "regenerated)",
                                  id));
  }
  return entry;
}

void ResidencyManager::count_regenerated(Entry& entry) {
  apply_recompute_output(entry.residency);
  // The new buffer has no copies in flight; the fences of the old one stay
  // (they also order the host block's users).
  entry.h2d_waited = true;
  add_resident(entry.size_bytes);
  ++stats_.regenerations;
  stats_.regenerated_bytes += entry.size_bytes;
}

Result<void*> ResidencyManager::regenerate(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find_released(id));
  HO_RETURN_IF_ERROR(materialize(id, *entry));
  count_regenerated(*entry);
  return entry->device;
}

Status ResidencyManager::regenerate_adopted(StorageId id, AdoptedBuffer buffer) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find_released(id));
  if (entry->size_bytes > 0 && buffer.device_ptr == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("regenerate of storage {}: null device pointer for {} bytes", id,
                                  entry->size_bytes));
  }
  HO_RETURN_IF_ERROR(poll());
  HO_RETURN_IF_ERROR(take_room(entry->size_bytes));
  entry->device = buffer.device_ptr;
  entry->owner = Owner::kCaller;
  entry->release = std::move(buffer.release);
  count_regenerated(*entry);
  return ok_status();
}

Status ResidencyManager::copy_d2h(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "copy_d2h"));
  switch (classify_d2h(entry->residency)) {
    case CopyOutcome::kNoOp: return ok_status();  // the host already holds the current version
    case CopyOutcome::kError:
      return make_error(ErrorCode::kFailedPrecondition,
                        fmt::format("copy_d2h of storage {}: not resident and {}", id,
                                    entry->residency.host_present ? "the host copy is stale" : "no host copy exists"));
    case CopyOutcome::kCopies: break;
  }
  const bool new_block = !entry->residency.host_present && entry->size_bytes > 0;
  if (new_block) {
    Result<PinnedBlock> block = pool_.acquire(entry->size_bytes);
    if (!block)
      return std::unexpected(with_context(std::move(block.error()), fmt::format("copy_d2h of storage {}", id)));
    entry->host = *block;
  }
  if (entry->size_bytes > 0) {
    Status enqueued = [&]() -> Status {
      // The producer's writes (compute) and an H2D still reading the host block
      // (a stale copy is overwritten in place) come first.
      HO_RETURN_IF_ERROR(backend_.stream_wait_stream(d2h_, compute_));
      HO_RETURN_IF_ERROR(entry->h2d.make_stream_wait(d2h_));
      HO_ASSIGN_OR_RETURN(Fence start, start_span(d2h_));
      HO_RETURN_IF_ERROR(
          backend_.copy_async(d2h_, entry->host.ptr, entry->device, entry->size_bytes, CopyKind::kDeviceToHost));
      HO_ASSIGN_OR_RETURN(entry->d2h, events_.record(d2h_));
      entry->d2h_waited = false;
      return end_span(SpanKind::kCopyD2H, id, entry->size_bytes, std::move(start), d2h_);
    }();
    if (!enqueued) {  // Note [Failed copies]
      (void)backend_.synchronize_stream(d2h_);
      if (new_block) {
        pool_.release(entry->host);
        entry->host = {};
      }
      return enqueued;
    }
  }
  if (!entry->residency.host_present) add_host(entry->size_bytes);
  apply_d2h(entry->residency);
  ++stats_.d2h_count;
  stats_.d2h_bytes += entry->size_bytes;
  return ok_status();
}

Status ResidencyManager::copy_h2d(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "copy_h2d"));
  switch (classify_h2d(entry->residency)) {
    case CopyOutcome::kNoOp: return ok_status();  // already resident
    case CopyOutcome::kError:
      if (!entry->residency.host_present) {
        return make_error(ErrorCode::kFailedPrecondition, fmt::format("copy_h2d of storage {}: no host copy", id));
      }
      return make_error(ErrorCode::kFailedPrecondition,
                        fmt::format("copy_h2d of storage {}: the host copy is stale (written after it was copied)", id));
    case CopyOutcome::kCopies: break;
  }
  HO_RETURN_IF_ERROR(materialize(id, *entry));
  if (entry->size_bytes > 0) {
    Status enqueued = [&]() -> Status {
      // Earlier users of the new memory (compute) and the D2H filling the host
      // block come first.
      HO_RETURN_IF_ERROR(backend_.stream_wait_stream(h2d_, compute_));
      HO_RETURN_IF_ERROR(entry->d2h.make_stream_wait(h2d_));
      HO_ASSIGN_OR_RETURN(Fence start, start_span(h2d_));
      HO_RETURN_IF_ERROR(
          backend_.copy_async(h2d_, entry->device, entry->host.ptr, entry->size_bytes, CopyKind::kHostToDevice));
      HO_ASSIGN_OR_RETURN(entry->h2d, events_.record(h2d_));
      entry->h2d_waited = false;
      return end_span(SpanKind::kCopyH2D, id, entry->size_bytes, std::move(start), h2d_);
    }();
    if (!enqueued) {
      undo_new_device_buffer(*entry, h2d_);  // Note [Failed copies]
      return enqueued;
    }
  }
  apply_h2d(entry->residency);
  add_resident(entry->size_bytes);
  ++stats_.h2d_count;
  stats_.h2d_bytes += entry->size_bytes;
  return ok_status();
}

Status ResidencyManager::free_device_buffer(Entry& entry, ReleaseCallback* callback_out) {
  DeferredFree free{entry.device, entry.size_bytes, entry.owner, std::move(entry.release), {}};
  entry.device = nullptr;
  entry.release = {};
  if (free.device == nullptr) return ok_status();
  int pending = 0;
  for (const Fence* fence : {&entry.d2h, &entry.h2d}) {
    HO_ASSIGN_OR_RETURN(bool done, fence->completed());
    if (!done) free.fences[pending++] = *fence;
  }
  if (pending == 0) {
    if (free.owner == Owner::kRuntime) return backend_.free_device(free.device);
    if (callback_out != nullptr) *callback_out = std::move(free.release);
    return ok_status();
  }
  push_deferred(std::move(free));
  return ok_status();
}

Status ResidencyManager::release_device(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "release_device"));
  if (!apply_release_device(entry->residency)) return ok_status();
  void* ptr = entry->device;
  ReleaseCallback callback;
  sub_resident(entry->size_bytes);
  HO_RETURN_IF_ERROR(free_device_buffer(*entry, &callback));
  if (callback) callback(ptr);  // state is consistent before the caller's code runs
  return ok_status();
}

Status ResidencyManager::release_host(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "release_host"));
  if (!apply_release_host(entry->residency)) return ok_status();
  if (!entry->host.empty()) {
    const Fence fences[] = {entry->d2h, entry->h2d};
    pool_.release(entry->host, fences);
  }
  entry->host = {};
  stats_.host_bytes -= entry->size_bytes;
  return ok_status();
}

Result<void*> ResidencyManager::device_ptr(StorageId id, DeviceAccess access) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "use"));
  const AccessOutcome outcome = classify_access(entry->residency);
  if (outcome == AccessOutcome::kDataLoss) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("storage {}: data lost: its device copy was released and {}", id,
                                  entry->residency.host_present ? "its host copy is stale (written after it was copied)"
                                                                : "no host copy exists"));
  }
  if (outcome == AccessOutcome::kFault) {
    // A fault: a synchronous demand page on the compute stream.
    HO_RETURN_IF_ERROR(materialize(id, *entry));
    if (entry->size_bytes > 0) {
      Status enqueued = [&]() -> Status {
        HO_RETURN_IF_ERROR(entry->d2h.make_stream_wait(compute_));
        HO_ASSIGN_OR_RETURN(Fence start, start_span(compute_));
        HO_RETURN_IF_ERROR(backend_.copy_async(compute_, entry->device, entry->host.ptr, entry->size_bytes,
                                               CopyKind::kHostToDevice));
        return end_span(SpanKind::kFault, id, entry->size_bytes, std::move(start), compute_);
      }();
      if (!enqueued) {
        undo_new_device_buffer(*entry, compute_);  // Note [Failed copies]
        return std::unexpected(std::move(enqueued.error()));
      }
    }
    apply_h2d(entry->residency);
    add_resident(entry->size_bytes);
    ++stats_.faults;
    stats_.fault_bytes += entry->size_bytes;
    stats_.h2d_bytes += entry->size_bytes;
  }
  const bool wait_d2h = access == DeviceAccess::kReadWrite && !entry->d2h_waited;
  if (!entry->h2d_waited || wait_d2h) {
    HO_ASSIGN_OR_RETURN(bool h2d_done, entry->h2d.completed());
    bool d2h_done = true;
    if (wait_d2h) {
      HO_ASSIGN_OR_RETURN(d2h_done, entry->d2h.completed());
    }
    if (!h2d_done || !d2h_done) {
      HO_ASSIGN_OR_RETURN(Fence start, start_span(compute_));
      if (!h2d_done) HO_RETURN_IF_ERROR(entry->h2d.make_stream_wait(compute_));
      if (!d2h_done) HO_RETURN_IF_ERROR(entry->d2h.make_stream_wait(compute_));
      HO_RETURN_IF_ERROR(end_span(SpanKind::kStall, id, 0, std::move(start), compute_));
    }
    entry->h2d_waited = true;
    if (wait_d2h) entry->d2h_waited = true;
  }
  return entry->device;
}

Status ResidencyManager::complete_free(DeferredFree& free) {
  if (free.owner == Owner::kRuntime) return backend_.free_device(free.device);
  if (free.release) {
    ReleaseCallback callback = std::move(free.release);
    free.release = {};
    callback(free.device);
  }
  return ok_status();
}

Status ResidencyManager::poll() {
  if (deferred_.empty()) return ok_status();
  // Completed frees are moved out first so callbacks run on a consistent list;
  // the rest keep their order (oldest first, Note [Held bytes]).
  std::vector<DeferredFree> ready;
  std::size_t kept = 0;
  Status polled = ok_status();
  for (std::size_t i = 0; i < deferred_.size(); ++i) {
    bool passed = polled.has_value();
    for (const Fence& fence : deferred_[i].fences) {
      if (!passed) break;
      Result<bool> done = fence.completed();
      if (!done) {
        polled = std::unexpected(std::move(done.error()));
        passed = false;
      } else {
        passed = *done;
      }
    }
    if (passed) {
      deferred_bytes_ -= deferred_[i].size_bytes;
      ready.push_back(std::move(deferred_[i]));
    } else {
      if (kept != i) deferred_[kept] = std::move(deferred_[i]);
      ++kept;
    }
  }
  deferred_.resize(kept);
  update_held();
  HO_RETURN_IF_ERROR(polled);
  Status status = ok_status();
  for (DeferredFree& free : ready) {
    if (Status done = complete_free(free); !done && status) status = std::move(done);
  }
  return status;
}

Status ResidencyManager::wait_deferred_frees() {
  std::deque<DeferredFree> waiting;
  waiting.swap(deferred_);
  deferred_bytes_ = 0;
  update_held();
  Status status = ok_status();
  for (DeferredFree& free : waiting) {
    for (const Fence& fence : free.fences) {
      if (Status done = fence.wait(); !done && status) status = std::move(done);
    }
    if (Status done = complete_free(free); !done && status) status = std::move(done);
  }
  return status;
}

Status ResidencyManager::forget(StorageId id) {
  HO_ASSIGN_OR_RETURN(Entry * entry, find(id, "forget"));
  Status status = ok_status();
  if (apply_release_device(entry->residency)) sub_resident(entry->size_bytes);
  if (entry->device != nullptr) {
    if (entry->owner == Owner::kCaller) {
      // The buffer goes back to the caller, who may free it at once: the copies
      // touching it must be finished.
      for (const Fence* fence : {&entry->d2h, &entry->h2d}) {
        if (Status done = fence->wait(); !done && status) status = std::move(done);
      }
      entry->device = nullptr;
      entry->release = {};
    } else if (Status freed = free_device_buffer(*entry, nullptr); !freed && status) {
      status = std::move(freed);
    }
  }
  if (entry->residency.host_present) {
    if (!entry->host.empty()) {
      const Fence fences[] = {entry->d2h, entry->h2d};
      pool_.release(entry->host, fences);
    }
    stats_.host_bytes -= entry->size_bytes;
  }
  entries_.erase(id);
  --stats_.storages;
  return status;
}

Status ResidencyManager::reset() {
  Status status = ok_status();
  auto keep_first = [&](Status s) {
    if (!s && status) status = std::move(s);
  };
  // Drain first, so every fence below has passed and nothing is deferred.
  keep_first(backend_.synchronize_stream(d2h_));
  keep_first(backend_.synchronize_stream(h2d_));
  for (StorageId id : tracked_ids()) keep_first(forget(id));
  keep_first(wait_deferred_frees());
  cancel_reservation();
  spans_.clear();
  return status;
}

bool ResidencyManager::resident(StorageId id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.residency.resident;
}

bool ResidencyManager::has_host_copy(StorageId id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.residency.host_present;
}

bool ResidencyManager::has_current_host_copy(StorageId id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.residency.host_current();
}

std::optional<std::int32_t> ResidencyManager::writes_since_produced(StorageId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.residency.version;
}

std::optional<std::int64_t> ResidencyManager::size_bytes(StorageId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.size_bytes;
}

std::vector<StorageId> ResidencyManager::tracked_ids() const {
  std::vector<StorageId> ids;
  ids.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) ids.push_back(id);
  return ids;
}

ResidencyStats ResidencyManager::stats() const { return stats_; }

void ResidencyManager::reset_peak() {
  stats_.peak_resident_bytes = stats_.resident_bytes;
  stats_.peak_held_bytes = stats_.held_bytes;
  stats_.peak_host_bytes = stats_.host_bytes;
}

std::vector<TimedSpan> ResidencyManager::take_spans() { return std::exchange(spans_, {}); }

}  // namespace hyperoffload
