#include "hyperoffload/runtime/host_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace hyperoffload {
namespace {

using Clock = std::chrono::steady_clock;

// One record of an event. Note [Record nodes]: a wait or synchronize captures
// the node of the record it waits for, so re-recording (or recycling) the event
// afterwards cannot satisfy it early, matching cudaStreamWaitEvent's semantics.
struct RecordNode {
  std::atomic<bool> done{false};
  Clock::time_point time;  // written before `done` is set
};

struct HostEvent {
  std::shared_ptr<RecordNode> latest;  // null: never recorded (counts as completed)
};

struct Task {
  enum class Kind : std::uint8_t { kCopy, kFunction, kRecord, kWait };
  Kind kind = Kind::kCopy;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  std::function<void()> fn;
  std::shared_ptr<RecordNode> node;  // kRecord: completes it; kWait: waits for it
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` for up to `spin`: a short burst of pause instructions (a
// hand-off usually lands within a microsecond or two), then yielding so a
// waiter never starves the thread it waits for. True once ready.
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin) {
  if (ready()) return true;
  if (spin.count() <= 0) return false;
  for (int i = 0; i < 512; ++i) {
    cpu_relax();
    if (ready()) return true;
  }
  const auto deadline = Clock::now() + spin;
  while (Clock::now() < deadline) {
    std::this_thread::yield();
    if (ready()) return true;
  }
  return false;
}

}  // namespace

// Lock order: a stream's mu, events_mu_, completion_mu_ and the arena's lock are
// never held together, except that completion_mu_ is taken alone inside a
// worker's task execution. No callback (host function) runs under a lock.
class HostBackend::Impl {
 public:
  // Note [Spin before sleep]: a waiter (a worker with an empty queue, a
  // thread synchronizing) first polls for `spin_` (yielding), then sleeps on a
  // condition variable. Copies come in bursts and are short, so most hand-offs
  // complete while spinning and skip a futex wake-up and a context switch —
  // tens of microseconds on a loaded machine, more than a 1 MiB memcpy.
  class WorkerStream {
   public:
    WorkerStream(Impl* owner, std::chrono::microseconds spin)
        : owner_(owner), spin_(spin), thread_([this] { run(); }) {}
    ~WorkerStream() {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      work_cv_.notify_one();
      thread_.join();
    }

    void enqueue(Task task) {
      {
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(task));
        submitted_.store(submitted_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      }
      work_cv_.notify_one();
    }

    void synchronize() {
      const std::uint64_t target = submitted_.load(std::memory_order_acquire);
      if (spin_until([&] { return completed_.load(std::memory_order_acquire) >= target; })) return;
      std::unique_lock lock(mu_);
      // The worker wakes sleepers only once the lowest target among them is
      // reached, not after every task; the unsatisfied re-register.
      while (completed_.load(std::memory_order_relaxed) < target) {
        wake_at_ = std::min(wake_at_, target);
        ++sleepers_;
        done_cv_.wait(lock);
        --sleepers_;
      }
    }

   private:
    template <class Ready>
    bool spin_until(Ready ready) const {
      return hyperoffload::spin_until(ready, spin_);
    }

    void run() {
      std::uint64_t taken = 0;
      for (;;) {
        spin_until([&] { return submitted_.load(std::memory_order_acquire) > taken; });
        Task task;
        {
          std::unique_lock lock(mu_);
          work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
          if (queue_.empty()) return;  // stopped and drained
          task = std::move(queue_.front());
          queue_.pop_front();
          ++taken;
        }
        owner_->execute(task);
        bool wake = false;
        {
          std::lock_guard lock(mu_);
          const std::uint64_t completed = completed_.load(std::memory_order_relaxed) + 1;
          completed_.store(completed, std::memory_order_release);
          if (sleepers_ > 0 && completed >= wake_at_) {
            wake_at_ = kNobody;
            wake = true;
          }
        }
        if (wake) done_cv_.notify_all();
      }
    }

    Impl* owner_;
    const std::chrono::microseconds spin_;
    std::mutex mu_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    std::deque<Task> queue_;
    // Written under mu_; atomic so spinning waiters can read them without it.
    std::atomic<std::uint64_t> submitted_{0};
    std::atomic<std::uint64_t> completed_{0};
    static constexpr std::uint64_t kNobody = ~std::uint64_t{0};
    std::uint64_t wake_at_ = kNobody;  // lowest target of a sleeping synchronize()
    int sleepers_ = 0;
    bool stop_ = false;
    std::thread thread_;  // last: starts after the fields it uses
  };

  Impl(std::unique_ptr<DeviceArena> arena, CopyEngines engines, std::chrono::microseconds spin)
      : arena_(std::move(arena)), spin_(spin) {
    streams_.push_back(std::make_unique<WorkerStream>(this, spin_));
    if (engines == CopyEngines::kTwo) streams_.push_back(std::make_unique<WorkerStream>(this, spin_));
    d2h_ = streams_.front().get();
    h2d_ = streams_.back().get();
  }

  ~Impl() {
    // Streams are joined first (each drains its queue); events and memory after.
    std::vector<std::unique_ptr<WorkerStream>> streams;
    {
      std::lock_guard lock(streams_mu_);
      streams.swap(streams_);
    }
    streams.clear();
    for (auto& [ptr, size] : host_allocations_) std::free(ptr);
  }

  // The compute stream is handle 1 (the caller thread); worker streams are
  // their object's address.
  static constexpr std::uintptr_t kComputeHandle = 1;

  Stream handle_of(const WorkerStream* s) const { return Stream{reinterpret_cast<std::uintptr_t>(s)}; }

  // nullptr for the compute stream; error for an unknown handle.
  Result<WorkerStream*> resolve(Stream stream) {
    if (stream.handle == kComputeHandle) return static_cast<WorkerStream*>(nullptr);
    std::lock_guard lock(streams_mu_);
    for (const auto& s : streams_) {
      if (reinterpret_cast<std::uintptr_t>(s.get()) == stream.handle) return s.get();
    }
    return make_error(ErrorCode::kInvalidArgument, fmt::format("host backend: unknown stream {:#x}", stream.handle));
  }

  Result<HostEvent*> resolve_event(Event event) {
    auto* e = reinterpret_cast<HostEvent*>(event.handle);
    std::lock_guard lock(events_mu_);
    if (live_events_.contains(e)) return e;
    return make_error(ErrorCode::kInvalidArgument, fmt::format("host backend: unknown event {:#x}", event.handle));
  }

  void complete(RecordNode& node) {
    {
      std::lock_guard lock(completion_mu_);
      node.time = Clock::now();
      node.done.store(true, std::memory_order_release);
    }
    completion_cv_.notify_all();
  }

  void wait_for(const RecordNode& node) {
    if (spin_until([&] { return node.done.load(std::memory_order_acquire); }, spin_)) return;
    std::unique_lock lock(completion_mu_);
    completion_cv_.wait(lock, [&] { return node.done.load(std::memory_order_acquire); });
  }

  void execute(Task& task) {
    switch (task.kind) {
      case Task::Kind::kCopy:
        std::memcpy(task.dst, task.src, task.bytes);
        return;
      case Task::Kind::kFunction:
        task.fn();
        return;
      case Task::Kind::kRecord:
        complete(*task.node);
        return;
      case Task::Kind::kWait:
        wait_for(*task.node);
        return;
    }
  }

  std::unique_ptr<DeviceArena> arena_;
  const std::chrono::microseconds spin_;

  std::mutex streams_mu_;
  std::vector<std::unique_ptr<WorkerStream>> streams_;
  WorkerStream* d2h_ = nullptr;
  WorkerStream* h2d_ = nullptr;

  std::mutex events_mu_;
  std::vector<std::unique_ptr<HostEvent>> events_;
  std::vector<HostEvent*> free_events_;
  std::unordered_set<HostEvent*> live_events_;

  std::mutex completion_mu_;
  std::condition_variable completion_cv_;

  mutable std::mutex host_mu_;
  std::unordered_map<void*, std::int64_t> host_allocations_;
  std::int64_t host_bytes_ = 0;
};

Result<std::unique_ptr<HostBackend>> HostBackend::create(const HostBackendOptions& options) {
  if (options.copy_engines != CopyEngines::kOne && options.copy_engines != CopyEngines::kTwo) {
    return make_error(ErrorCode::kInvalidArgument, "host backend: copy_engines must be 1 or 2");
  }
  HO_ASSIGN_OR_RETURN(
      std::unique_ptr<DeviceArena> arena,
      DeviceArena::create(DeviceArenaOptions{options.device_capacity_bytes, options.device_alignment_bytes}));
  if (options.spin_before_sleep_us < 0) {
    return make_error(ErrorCode::kInvalidArgument, "host backend: spin_before_sleep_us must be >= 0");
  }
  return std::unique_ptr<HostBackend>(
      new HostBackend(std::move(arena), options.copy_engines, std::chrono::microseconds(options.spin_before_sleep_us)));
}

HostBackend::HostBackend(std::unique_ptr<DeviceArena> arena, CopyEngines copy_engines, std::chrono::microseconds spin)
    : impl_(std::make_unique<Impl>(std::move(arena), copy_engines, spin)), copy_engines_(copy_engines) {}

HostBackend::~HostBackend() = default;

Result<void*> HostBackend::allocate_device(std::int64_t size_bytes) { return impl_->arena_->allocate(size_bytes); }

Status HostBackend::free_device(void* ptr) { return impl_->arena_->free(ptr); }

DeviceMemoryStats HostBackend::device_memory_stats() const { return impl_->arena_->stats(); }

Result<void*> HostBackend::allocate_host(std::int64_t size_bytes) {
  if (size_bytes <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("host allocation of {} bytes: size must be positive", size_bytes));
  }
  constexpr std::int64_t kAlign = 64;
  const std::int64_t rounded = (size_bytes + kAlign - 1) / kAlign * kAlign;
  void* ptr = std::aligned_alloc(kAlign, static_cast<std::size_t>(rounded));
  if (ptr == nullptr) {
    return make_error(ErrorCode::kOutOfMemory, fmt::format("host out of memory: requested {} bytes, in use {} bytes",
                                                           size_bytes, host_bytes_in_use()));
  }
  std::lock_guard lock(impl_->host_mu_);
  impl_->host_allocations_.emplace(ptr, size_bytes);
  impl_->host_bytes_ += size_bytes;
  return ptr;
}

Status HostBackend::free_host(void* ptr) {
  {
    std::lock_guard lock(impl_->host_mu_);
    auto it = impl_->host_allocations_.find(ptr);
    if (it == impl_->host_allocations_.end()) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("host free of {}: not a live host allocation", ptr));
    }
    impl_->host_bytes_ -= it->second;
    impl_->host_allocations_.erase(it);
  }
  std::free(ptr);
  return ok_status();
}

std::int64_t HostBackend::host_bytes_in_use() const {
  std::lock_guard lock(impl_->host_mu_);
  return impl_->host_bytes_;
}

Stream HostBackend::stream(StreamRole role) const {
  switch (role) {
    case StreamRole::kCompute:
      return Stream{Impl::kComputeHandle};
    case StreamRole::kDeviceToHost:
      return impl_->handle_of(impl_->d2h_);
    case StreamRole::kHostToDevice:
      return impl_->handle_of(impl_->h2d_);
  }
  return Stream{Impl::kComputeHandle};
}

Result<Stream> HostBackend::create_stream() {
  auto stream = std::make_unique<Impl::WorkerStream>(impl_.get(), impl_->spin_);
  Stream handle = impl_->handle_of(stream.get());
  std::lock_guard lock(impl_->streams_mu_);
  impl_->streams_.push_back(std::move(stream));
  return handle;
}

Status HostBackend::copy_async(Stream stream, void* dst, const void* src, std::int64_t bytes, CopyKind /*kind*/) {
  if (bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("copy of {} bytes: size must be >= 0", bytes));
  }
  if (bytes == 0) return ok_status();
  if (dst == nullptr || src == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "copy: null source or destination");
  }
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * worker, impl_->resolve(stream));
  if (worker == nullptr) {
    std::memcpy(dst, src, static_cast<std::size_t>(bytes));
    return ok_status();
  }
  Task task;
  task.kind = Task::Kind::kCopy;
  task.dst = dst;
  task.src = src;
  task.bytes = static_cast<std::size_t>(bytes);
  worker->enqueue(std::move(task));
  return ok_status();
}

Status HostBackend::launch_host_function(Stream stream, std::function<void()> fn) {
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * worker, impl_->resolve(stream));
  if (worker == nullptr) {
    fn();
    return ok_status();
  }
  Task task;
  task.kind = Task::Kind::kFunction;
  task.fn = std::move(fn);
  worker->enqueue(std::move(task));
  return ok_status();
}

Status HostBackend::synchronize_stream(Stream stream) {
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * worker, impl_->resolve(stream));
  if (worker != nullptr) worker->synchronize();
  return ok_status();
}

Status HostBackend::stream_wait_stream(Stream waiter, Stream waited) {
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * waited_worker, impl_->resolve(waited));
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * waiter_worker, impl_->resolve(waiter));
  if (waited_worker == nullptr || waited_worker == waiter_worker) return ok_status();  // already ordered
  auto node = std::make_shared<RecordNode>();
  Task record;
  record.kind = Task::Kind::kRecord;
  record.node = node;
  waited_worker->enqueue(std::move(record));
  if (waiter_worker == nullptr) {
    impl_->wait_for(*node);
    return ok_status();
  }
  Task wait;
  wait.kind = Task::Kind::kWait;
  wait.node = std::move(node);
  waiter_worker->enqueue(std::move(wait));
  return ok_status();
}

Status HostBackend::synchronize() {
  std::vector<Impl::WorkerStream*> streams;
  {
    std::lock_guard lock(impl_->streams_mu_);
    for (const auto& s : impl_->streams_) streams.push_back(s.get());
  }
  // A stream may wait on another's later work, so one pass in any order can
  // leave work behind only if new work is enqueued concurrently; that is the
  // caller's race, as with cudaDeviceSynchronize.
  for (Impl::WorkerStream* s : streams) s->synchronize();
  return ok_status();
}

Result<Event> HostBackend::create_event() {
  std::lock_guard lock(impl_->events_mu_);
  HostEvent* event = nullptr;
  if (!impl_->free_events_.empty()) {
    event = impl_->free_events_.back();
    impl_->free_events_.pop_back();
  } else {
    impl_->events_.push_back(std::make_unique<HostEvent>());
    event = impl_->events_.back().get();
  }
  event->latest.reset();
  impl_->live_events_.insert(event);
  return Event{reinterpret_cast<std::uintptr_t>(event)};
}

Status HostBackend::destroy_event(Event event) {
  auto* e = reinterpret_cast<HostEvent*>(event.handle);
  std::lock_guard lock(impl_->events_mu_);
  if (impl_->live_events_.erase(e) == 0) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("host backend: unknown event {:#x}", event.handle));
  }
  // Pending records and waits keep their node alive through the tasks holding it.
  e->latest.reset();
  impl_->free_events_.push_back(e);
  return ok_status();
}

Status HostBackend::record_event(Event event, Stream stream) {
  HO_ASSIGN_OR_RETURN(HostEvent * e, impl_->resolve_event(event));
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * worker, impl_->resolve(stream));
  auto node = std::make_shared<RecordNode>();
  {
    std::lock_guard lock(impl_->events_mu_);
    e->latest = node;
  }
  if (worker == nullptr) {
    impl_->complete(*node);
    return ok_status();
  }
  Task task;
  task.kind = Task::Kind::kRecord;
  task.node = std::move(node);
  worker->enqueue(std::move(task));
  return ok_status();
}

namespace {
std::shared_ptr<RecordNode> latest_of(std::mutex& mu, HostEvent* e) {
  std::lock_guard lock(mu);
  return e->latest;
}
}  // namespace

Result<bool> HostBackend::event_completed(Event event) {
  HO_ASSIGN_OR_RETURN(HostEvent * e, impl_->resolve_event(event));
  std::shared_ptr<RecordNode> node = latest_of(impl_->events_mu_, e);
  return node == nullptr || node->done.load(std::memory_order_acquire);
}

Status HostBackend::synchronize_event(Event event) {
  HO_ASSIGN_OR_RETURN(HostEvent * e, impl_->resolve_event(event));
  std::shared_ptr<RecordNode> node = latest_of(impl_->events_mu_, e);
  if (node != nullptr) impl_->wait_for(*node);
  return ok_status();
}

Status HostBackend::stream_wait_event(Stream stream, Event event) {
  HO_ASSIGN_OR_RETURN(HostEvent * e, impl_->resolve_event(event));
  HO_ASSIGN_OR_RETURN(Impl::WorkerStream * worker, impl_->resolve(stream));
  std::shared_ptr<RecordNode> node = latest_of(impl_->events_mu_, e);
  if (node == nullptr || node->done.load(std::memory_order_acquire)) return ok_status();
  if (worker == nullptr) {
    impl_->wait_for(*node);
    return ok_status();
  }
  Task task;
  task.kind = Task::Kind::kWait;
  task.node = std::move(node);
  worker->enqueue(std::move(task));
  return ok_status();
}

Result<double> HostBackend::elapsed_ms(Event start, Event end) {
  HO_ASSIGN_OR_RETURN(HostEvent * s, impl_->resolve_event(start));
  HO_ASSIGN_OR_RETURN(HostEvent * e, impl_->resolve_event(end));
  std::shared_ptr<RecordNode> a = latest_of(impl_->events_mu_, s);
  std::shared_ptr<RecordNode> b = latest_of(impl_->events_mu_, e);
  if (a == nullptr || b == nullptr) {
    return make_error(ErrorCode::kFailedPrecondition, "elapsed_ms: an event was never recorded");
  }
  if (!a->done.load(std::memory_order_acquire) || !b->done.load(std::memory_order_acquire)) {
    return make_error(ErrorCode::kFailedPrecondition, "elapsed_ms: an event has not completed");
  }
  return std::chrono::duration<double, std::milli>(b->time - a->time).count();
}

}  // namespace hyperoffload
