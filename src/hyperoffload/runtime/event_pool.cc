#include "hyperoffload/runtime/event_pool.h"

namespace hyperoffload {
namespace internal {

EventCache::~EventCache() {
  // Destruction has no caller to report to; a failing destroy only leaks a handle.
  for (Event event : free) (void)backend.destroy_event(event);
}

Result<Event> EventCache::acquire() {
  {
    std::lock_guard lock(mu);
    if (!free.empty()) {
      Event event = free.back();
      free.pop_back();
      return event;
    }
  }
  HO_ASSIGN_OR_RETURN(Event event, backend.create_event());
  live.fetch_add(1, std::memory_order_relaxed);
  return event;
}

void EventCache::release(Event event) {
  std::lock_guard lock(mu);
  free.push_back(event);
}

}  // namespace internal

Result<bool> Fence::completed() const {
  if (slot_ == nullptr || slot_->passed.load(std::memory_order_acquire)) return true;
  HO_ASSIGN_OR_RETURN(bool done, slot_->cache->backend.event_completed(slot_->event));
  if (done) slot_->passed.store(true, std::memory_order_release);
  return done;
}

Status Fence::wait() const {
  if (slot_ == nullptr || slot_->passed.load(std::memory_order_acquire)) return ok_status();
  HO_RETURN_IF_ERROR(slot_->cache->backend.synchronize_event(slot_->event));
  slot_->passed.store(true, std::memory_order_release);
  return ok_status();
}

Status Fence::make_stream_wait(Stream stream) const {
  if (slot_ == nullptr || slot_->passed.load(std::memory_order_acquire)) return ok_status();
  return slot_->cache->backend.stream_wait_event(stream, slot_->event);
}

Event Fence::event() const { return slot_->event; }

EventPool::EventPool(Backend& backend) : backend_(backend), cache_(std::make_shared<internal::EventCache>(backend)) {}

EventPool::~EventPool() = default;

Result<Fence> EventPool::record(Stream stream) {
  HO_ASSIGN_OR_RETURN(Event event, cache_->acquire());
  if (Status recorded = backend_.record_event(event, stream); !recorded) {
    cache_->release(event);
    return std::unexpected(std::move(recorded.error()));
  }
  return Fence(std::make_shared<internal::FenceSlot>(cache_, event));
}

std::int64_t EventPool::live_events() const { return cache_->live.load(std::memory_order_relaxed); }

}  // namespace hyperoffload
