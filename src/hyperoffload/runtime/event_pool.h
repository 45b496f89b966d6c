// Fences and the event pool behind them.
//
// A Fence marks one point on one stream: "this copy has finished". It is a
// shared handle to a backend event recorded once; whoever must not act before
// that point keeps a copy (a storage's last D2H, a pooled host block awaiting
// recycling, a device buffer awaiting its free). When the last copy is dropped
// the event goes back to the pool for reuse, so a replayed step records events
// without creating any.
//
//   EventPool events(backend);
//   Result<Fence> copied = events.record(backend.stream(StreamRole::kDeviceToHost));
//   ...
//   if (*copied->completed()) { /* the host bytes are there */ }
//
// Thread-safety: EventPool is thread-safe; a Fence may be copied, polled and
// waited on from any thread. Fences may outlive their EventPool (they keep its
// cache alive); the Backend must outlive both.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/runtime/backend.h"

namespace hyperoffload {

namespace internal {
struct EventCache;
struct FenceSlot;
}  // namespace internal

class Fence {
 public:
  // An empty fence: already passed.
  Fence() = default;

  bool empty() const { return slot_ == nullptr; }
  // Polls the backend until the first time it reports completion, then answers
  // from memory. An empty fence is complete.
  Result<bool> completed() const;
  // Blocks the calling thread until the fence is passed.
  Status wait() const;
  // Makes work enqueued on `stream` after this call wait for the fence.
  Status make_stream_wait(Stream stream) const;
  // The underlying event, for elapsed-time queries. Precondition: !empty().
  Event event() const;

 private:
  friend class EventPool;
  explicit Fence(std::shared_ptr<internal::FenceSlot> slot) : slot_(std::move(slot)) {}
  std::shared_ptr<internal::FenceSlot> slot_;
};

class EventPool {
 public:
  explicit EventPool(Backend& backend);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  Backend& backend() const { return backend_; }

  // Takes a pooled event (creating one when none is free) and records it on `stream`.
  Result<Fence> record(Stream stream);

  // Events created and not destroyed (cached + held by fences), for leak checks.
  std::int64_t live_events() const;

 private:
  Backend& backend_;
  std::shared_ptr<internal::EventCache> cache_;
};

namespace internal {

struct EventCache {
  explicit EventCache(Backend& b) : backend(b) {}
  ~EventCache();
  Result<Event> acquire();
  void release(Event event);

  Backend& backend;
  std::mutex mu;
  std::vector<Event> free;  // guarded by mu
  std::atomic<std::int64_t> live{0};
};

struct FenceSlot {
  FenceSlot(std::shared_ptr<EventCache> c, Event e) : cache(std::move(c)), event(e) {}
  ~FenceSlot() { cache->release(event); }
  FenceSlot(const FenceSlot&) = delete;
  FenceSlot& operator=(const FenceSlot&) = delete;

  std::shared_ptr<EventCache> cache;
  Event event;
  std::atomic<bool> passed{false};  // set once the backend reported completion
};

}  // namespace internal
}  // namespace hyperoffload
