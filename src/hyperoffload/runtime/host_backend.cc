#include "hyperoffload/runtime/host_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/runtime/internal/mpsc_ring.h"

namespace hyperoffload {
namespace {

using Clock = std::chrono::steady_clock;

class WorkerStream;

// One record of an event. Note [Record nodes]: a wait or synchronize captures
// the node of the record it waits for, so re-recording (or recycling) the event
// afterwards cannot satisfy it early, matching cudaStreamWaitEvent's semantics.
struct RecordNode {
  std::atomic<bool> done{false};
  Clock::time_point time;  // written before `done` is set
  // Where the record sits: it is done once `stream` has completed `target`
  // items, so waiting for it is waiting for the stream to get that far (null
  // stream: recorded on the compute stream, done at once). Written before the
  // node is shared.
  WorkerStream* stream = nullptr;
  std::uint64_t target = 0;
  // When the record was enqueued on a stream with an emulated link (Note
  // [Emulated link]): its time is then the link's virtual time.
  Clock::time_point enqueued;
};

struct HostEvent {
  std::shared_ptr<RecordNode> latest;  // null: never recorded (counts as completed)
};

// One item of a worker stream's queue. A variant rather than a struct with
// every field keeps a queue slot within one 64-byte cache line (std::function
// is 32 bytes), and a copy needs no allocation.
struct CopyTask {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  std::int64_t link_ns = 0;  // emulated duration on the link (Note [Emulated link]); 0: none
  Clock::time_point enqueued;  // set only with link_ns > 0
};
struct RecordTask {
  std::shared_ptr<RecordNode> node;  // completed when the stream reaches it
};
struct WaitTask {
  std::shared_ptr<RecordNode> node;  // the stream waits until it completes
};
using Task = std::variant<std::monostate, CopyTask, std::function<void()>, RecordTask, WaitTask>;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` for up to `spin`: a burst of plain loads (a line another core
// writes is seen the moment it arrives, and a hand-off usually lands within a
// microsecond), then pause instructions, then yielding so a waiter never
// starves the thread it waits for. True once ready.
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin) {
  if (ready()) return true;
  if (spin.count() <= 0) return false;
  for (int i = 0; i < 4096; ++i) {
    if (ready()) return true;
  }
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

void wait_for(const RecordNode& node);

// Note [Emulated link]: with HostBackendOptions::emulated_copy_bandwidth_gib_per_s
// a device↔host copy takes bytes / bandwidth on its stream's link. Copies on
// one stream are one link of that bandwidth, FIFO, as a copy engine is in the
// simulator's model: a copy starts on the link when it was enqueued, the
// previous copy has left the link and the stream's earlier waits have
// returned, whichever is last, and ends bytes / bandwidth later (its memcpy
// runs inside that window; a slower memcpy is not hidden). The link's clock
// is virtual: the thread sleeps until the copy's end, and when it wakes late
// (on a loaded machine a sleeping thread is woken milliseconds late, and a
// yield hands the core away for a whole time slice) the next copies still
// start at the previous one's end on the link, not at the late wake-up, so
// lateness does not add up along the queue; a copy whose end has passed
// already runs at once. Event records on the stream take the same virtual
// time (at most the real one), so a copy's span between two records is its
// time on the link. The worker threads' timer slack is 1 µs, so a sleep ends
// on time when the core is free. A copy on the compute stream (a fault) runs
// on the caller, from when it is called.
void sleep_until(Clock::time_point end) {
  if (Clock::now() < end) std::this_thread::sleep_until(end);
}

void run_copy(const CopyTask& copy, Clock::time_point link_start) {
  std::memcpy(copy.dst, copy.src, copy.bytes);
  if (copy.link_ns > 0) sleep_until(link_start + std::chrono::nanoseconds(copy.link_ns));
}

// Note [Spin before sleep]: a waiter (a worker with an empty queue, a thread
// synchronizing, a producer facing a full queue) first polls for `spin_`
// (pausing, then yielding), then sleeps on a condition variable. Copies come
// in bursts and are short, so most hand-offs complete while spinning and skip a
// futex wake-up and a context switch — tens of microseconds on a loaded
// machine, more than a 1 MiB memcpy. A waiter that does sleep is woken early,
// when the worker *starts* the item it waits for, and spins for the rest, so
// the wake-up overlaps that item instead of following it.
//
// Note [Small copies on an idle stream]: waking a parked worker costs a
// futex wake-up on the caller's thread and a context switch on the worker's,
// and a later wait for the copy often sleeps too; in a VM each is tens of
// microseconds (on this project's 2-vCPU machine, a replay at 50% spent about
// 0.7 ms of a 4 ms step in them for twelve copies of 40-80 KiB), more than a
// memcpy of a quarter of a MiB. With HostBackendOptions::inline_copy_max_bytes
// a copy no larger than that, enqueued on a stream whose worker has run every
// item pushed so far, is run at once by the caller, and so is a record that
// follows such a copy with nothing pushed in between. That is the order the
// worker would have given them: idle() reads, with the seq_cst load that
// waiters poll, the slot that the worker's last pop released with a seq_cst
// store after running the item, so every earlier item's effects are visible;
// a later item on the stream comes after the copy, which is done; and the
// record's time is the copy's end, when the worker would have reached it. A
// record on an idle stream with no such copy before it still goes to the
// worker: the record that starts a timed span before a larger copy would
// otherwise take its time before the worker's wake-up, and the span would
// hold it. Host functions and waits still go to the worker: a function could
// take a lock its caller holds, and a wait would block the caller.
//
// Note [Lock-free hand-off]: enqueueing is a push onto the stream's MpscRing
// (one compare-and-swap and one store; no allocation for a copy); the worker
// runs the item in place, then pops it with one store to its slot, which is
// also how the item's completion is published: a waiter for item n polls
// slot n (MpscRing::consumed), not a counter the worker would write after
// every item. Neither side takes a lock unless the other sleeps, which each
// side learns from an atomic it reads after its own seq_cst store — a Dekker
// handshake:
//   producer: publish item;        then if parked_:               wake worker
//   worker:   parked_ = true;      then re-check ring;            sleep
//   worker:   pop item n;          then if n >= wake_at_:         wake waiters
//   waiter:   wake_at_ = target;   then re-check the slot;        sleep
//   worker:   pop (frees a slot);  then if space_waiters_ > 0:    wake producers
//   producer: ++space_waiters_;    then re-try the push;          sleep
// With every one of these accesses seq_cst, at least one side of each pair
// sees the other's store, so no wake-up is lost. A sleeper announces itself
// and re-checks under mu_, and a waker takes mu_ before notifying, so a
// notification cannot fall between a sleeper's check and its wait.
//
// Every wait in the backend is "this stream has completed n items": a stream
// synchronize waits for the items pushed so far, an event for the position of
// its record (RecordNode::target).
class WorkerStream {
 public:
  WorkerStream(std::chrono::microseconds spin, std::size_t queue_capacity, bool emulated_link)
      : spin_(spin), ring_(queue_capacity), emulated_link_(emulated_link), thread_([this] { run(); }) {}
  ~WorkerStream() {
    {
      std::lock_guard lock(mu_);
      stop_.store(true, std::memory_order_seq_cst);
    }
    work_cv_.notify_one();
    thread_.join();
  }
  WorkerStream(const WorkerStream&) = delete;
  WorkerStream& operator=(const WorkerStream&) = delete;

  // Any thread. Returns the completed-item count at which `task` has run.
  std::uint64_t enqueue(Task task) {
    std::optional<std::uint64_t> position = ring_.try_push(task);
    if (!position) position = wait_for_space(task);
    if (parked_.load(std::memory_order_seq_cst)) {
      { std::lock_guard lock(mu_); }
      work_cv_.notify_one();
    }
    return *position + 1;
  }

  // Note [Small copies on an idle stream]: runs `copy` on the calling thread
  // when every item pushed so far has run; whether it did.
  bool run_if_idle(const CopyTask& copy) {
    if (!idle()) return false;
    run_copy(copy, {});
    ran_inline_at_.store(ring_.pushed(), std::memory_order_release);
    return true;
  }

  // Whether the last item given to the stream was a copy run_if_idle() ran
  // (nothing pushed since) and everything pushed has run: a record now
  // completes at once, as the worker would have completed it right after.
  bool idle_after_inline_copy() const {
    return ran_inline_at_.load(std::memory_order_acquire) == ring_.pushed() && idle();
  }

  // Any thread: whether the worker has completed `target` items.
  bool reached(std::uint64_t target) const { return target == 0 || ring_.consumed(target - 1); }

  // Blocks until the worker has completed `target` items.
  void wait_until(std::uint64_t target) {
    if (spin_until([&] { return reached(target); })) return;
    std::unique_lock lock(mu_);
    for (;;) {
      // The worker wakes sleepers when it reaches the lowest target among
      // them, not after every item; the unsatisfied re-register.
      if (target < wake_at_.load(std::memory_order_relaxed)) wake_at_.store(target, std::memory_order_seq_cst);
      if (reached(target)) return;
      done_cv_.wait(lock);
      // Usually woken as the worker starts the last item we wait for: spin
      // through it rather than sleep again.
      lock.unlock();
      if (spin_until([&] { return reached(target); })) return;
      lock.lock();
    }
  }

  // Any thread: whether every item pushed so far has run (the worker may still
  // be spinning for the next one).
  bool idle() const { return reached(ring_.pushed()); }

  // Any thread: the completed-item count at which everything pushed so far has run.
  std::uint64_t pushed() const { return ring_.pushed(); }

  // Blocks until every item pushed before the call has run.
  void synchronize() { wait_until(ring_.pushed()); }

 private:
  template <class Ready>
  bool spin_until(Ready ready) const {
    return hyperoffload::spin_until(ready, spin_);
  }

  // The ring is full: wait for the worker to free a slot, then push.
  std::uint64_t wait_for_space(Task& task) {
    std::optional<std::uint64_t> position;
    auto pushed = [&] { return (position = ring_.try_push(task)).has_value(); };
    if (spin_until(pushed)) return *position;
    std::unique_lock lock(mu_);
    space_waiters_.fetch_add(1, std::memory_order_seq_cst);
    space_cv_.wait(lock, pushed);
    space_waiters_.fetch_sub(1, std::memory_order_relaxed);
    return *position;
  }

  // The ring is empty: wait for an item (true) or for the stop (false).
  bool wait_for_work() {
    auto ready = [&] { return ring_.front() != nullptr || stop_.load(std::memory_order_seq_cst); };
    if (!spin_until(ready)) {
      std::unique_lock lock(mu_);
      parked_.store(true, std::memory_order_seq_cst);
      work_cv_.wait(lock, ready);
      parked_.store(false, std::memory_order_relaxed);
    }
    return ring_.front() != nullptr;
  }

  void wake_waiters() {
    {
      std::lock_guard lock(mu_);
      wake_at_.store(kNobody, std::memory_order_relaxed);
    }
    done_cv_.notify_all();
  }

  void execute(Task& task) {
    switch (task.index()) {
      case 1: {
        const CopyTask& copy = *std::get_if<CopyTask>(&task);
        if (copy.link_ns == 0) {
          run_copy(copy, {});
          return;
        }
        // Note [Emulated link]: the virtual link clock.
        const Clock::time_point start = link_time(copy.enqueued);
        run_copy(copy, start);
        link_free_at_ = start + std::chrono::nanoseconds(copy.link_ns);
        return;
      }
      case 2:
        (*std::get_if<std::function<void()>>(&task))();
        return;
      case 3: {
        RecordNode& node = *std::get_if<RecordTask>(&task)->node;
        node.time = Clock::now();
        // Note [Emulated link]: on the link's virtual clock, so a copy's span
        // between two records is its time on the link even when the worker
        // reached the records late.
        if (emulated_link_) node.time = std::min(node.time, link_time(node.enqueued));
        node.done.store(true, std::memory_order_release);
        return;
      }
      case 4: {
        const RecordNode& node = *std::get_if<WaitTask>(&task)->node;
        const bool blocks = emulated_link_ && !node.done.load(std::memory_order_acquire) && node.stream != nullptr;
        wait_for(node);
        if (blocks) ready_at_ = Clock::now();  // later copies start on the link no earlier
        return;
      }
      default:
        return;
    }
  }

  // Note [Emulated link]: when something enqueued at `enqueued` gets the
  // link: after the previous copy has left it and the last blocking wait.
  Clock::time_point link_time(Clock::time_point enqueued) const {
    return std::max({enqueued, link_free_at_, ready_at_});
  }

  void run() {
#if defined(__linux__)
    // Note [Emulated link]: sleeps that pace the link end within 1 µs of their
    // deadline, not the default 50 µs slack.
    if (emulated_link_) (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
    std::uint64_t completed = 0;
    for (;;) {
      Task* task = ring_.front();
      if (task == nullptr) {
        if (!wait_for_work()) return;  // stopped and drained
        continue;
      }
      const std::uint64_t next = completed + 1;
      // Early wake-up (Note [Spin before sleep]): an optimisation only; the
      // check after the item is the one that cannot miss a sleeper.
      if (next >= wake_at_.load(std::memory_order_seq_cst)) wake_waiters();
      execute(*task);
      // Completes the item: destroys it (a host function's captures) and
      // frees its slot with one seq_cst store that waiters poll.
      ring_.pop();
      completed = next;
      if (space_waiters_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard lock(mu_); }
        space_cv_.notify_all();
      }
      if (completed >= wake_at_.load(std::memory_order_seq_cst)) wake_waiters();
    }
  }

  static constexpr std::uint64_t kNobody = ~std::uint64_t{0};
  // pushed() when run_if_idle() last ran a copy (kNobody: never).
  std::atomic<std::uint64_t> ran_inline_at_{kNobody};

  const std::chrono::microseconds spin_;
  internal::MpscRing<Task> ring_;
  // Sleep bookkeeping: read on the fast paths, written only around sleeps.
  alignas(64) std::atomic<bool> parked_{false};  // the worker sleeps on work_cv_
  std::atomic<std::uint64_t> wake_at_{kNobody};  // lowest target of a sleeping wait_until()
  std::atomic<int> space_waiters_{0};            // producers sleeping on space_cv_
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards sleeping only
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::condition_variable space_cv_;
  // The emulated link (Note [Emulated link]); the worker's own.
  const bool emulated_link_;
  Clock::time_point link_free_at_;  // when the last copy leaves the link
  Clock::time_point ready_at_;      // when the last wait that blocked returned
  std::thread thread_;  // last: starts after the fields it uses
};

void wait_for(const RecordNode& node) {
  if (node.done.load(std::memory_order_acquire) || node.stream == nullptr) return;
  node.stream->wait_until(node.target);
}

}  // namespace

// Lock order: no two of a stream's mu_, streams_mu_, events_mu_, host_mu_ and
// the arena's lock are ever held together. Enqueueing, completing and waiting
// take no lock unless a thread sleeps (Note [Lock-free hand-off]). No callback
// (host function) runs under a lock.
class HostBackend::Impl {
 public:
  Impl(std::unique_ptr<DeviceArena> arena, const HostBackendOptions& options)
      : arena_(std::move(arena)),
        link_ns_per_byte_(options.emulated_copy_bandwidth_gib_per_s
                              ? 1e9 / (*options.emulated_copy_bandwidth_gib_per_s * static_cast<double>(kBytesPerGiB))
                              : 0.0),
        spin_(options.spin_before_sleep_us),
        queue_capacity_(static_cast<std::size_t>(options.stream_queue_capacity)),
        inline_copy_max_bytes_(emulated_link() ? 0 : options.inline_copy_max_bytes) {
    streams_.push_back(std::make_unique<WorkerStream>(spin_, queue_capacity_, emulated_link()));
    if (options.copy_engines == CopyEngines::kTwo) {
      streams_.push_back(std::make_unique<WorkerStream>(spin_, queue_capacity_, emulated_link()));
    }
    d2h_ = streams_.front().get();
    h2d_ = streams_.back().get();
  }

  ~Impl() {
    // Every stream is drained before any is joined: a queued wait may still
    // read the stream it waits on. Events and memory go last.
    std::vector<std::unique_ptr<WorkerStream>> streams;
    {
      std::lock_guard lock(streams_mu_);
      streams.swap(streams_);
    }
    for (const auto& s : streams) s->synchronize();
    streams.clear();
    for (auto& [ptr, size] : host_allocations_) std::free(ptr);
  }

  // The compute stream is handle 1 (the caller thread); worker streams are
  // their object's address.
  static constexpr std::uintptr_t kComputeHandle = 1;

  static Stream handle_of(const WorkerStream* s) { return Stream{reinterpret_cast<std::uintptr_t>(s)}; }

  // nullptr for the compute stream; error for an unknown handle. The role
  // streams never change, so they resolve without the lock.
  Result<WorkerStream*> resolve(Stream stream) {
    if (stream.handle == kComputeHandle) return static_cast<WorkerStream*>(nullptr);
    if (stream == handle_of(d2h_)) return d2h_;
    if (stream == handle_of(h2d_)) return h2d_;
    std::lock_guard lock(streams_mu_);
    for (const auto& s : streams_) {
      if (reinterpret_cast<std::uintptr_t>(s.get()) == stream.handle) return s.get();
    }
    return make_error(ErrorCode::kInvalidArgument, fmt::format("host backend: unknown stream {:#x}", stream.handle));
  }

  static std::unexpected<Error> unknown_event(Event event) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("host backend: unknown event {:#x}", event.handle));
  }

  // The event's latest record (null: never recorded), or an error for an
  // unknown event; one lock for both.
  Result<std::shared_ptr<RecordNode>> latest_record(Event event) {
    auto* e = reinterpret_cast<HostEvent*>(event.handle);
    std::lock_guard lock(events_mu_);
    if (!live_events_.contains(e)) return unknown_event(event);
    return e->latest;
  }

  // Enqueues a record of `node` on `worker`, or completes it at once on the
  // compute stream (worker == nullptr) or on an idle worker stream when small
  // items run inline (Note [Small copies on an idle stream]). Sets the node's
  // stream and target, which the worker never reads; the caller shares the
  // node only afterwards.
  void record(const std::shared_ptr<RecordNode>& node, WorkerStream* worker) const {
    if (worker == nullptr || (inline_copy_max_bytes_ > 0 && worker->idle_after_inline_copy())) {
      node->time = Clock::now();
      node->done.store(true, std::memory_order_release);
      return;
    }
    node->stream = worker;
    node->enqueued = Clock::now();
    node->target = worker->enqueue(RecordTask{node});
  }

  // The emulated duration of a copy of `bytes` of `kind`, in ns (0: none).
  std::int64_t link_ns(std::int64_t bytes, CopyKind kind) const {
    if (link_ns_per_byte_ <= 0.0 || (kind != CopyKind::kDeviceToHost && kind != CopyKind::kHostToDevice)) return 0;
    return std::max<std::int64_t>(1, std::llround(static_cast<double>(bytes) * link_ns_per_byte_));
  }

  bool emulated_link() const { return link_ns_per_byte_ > 0.0; }

  // Note [Small copies on an idle stream]: runs `copy` at once on the
  // caller's thread when it may and `worker` is idle; whether it did.
  bool ran_inline(const CopyTask& copy, WorkerStream& worker) const {
    return copy.link_ns == 0 && copy.bytes <= static_cast<std::size_t>(inline_copy_max_bytes_) &&
           worker.run_if_idle(copy);
  }

  std::unique_ptr<DeviceArena> arena_;
  const double link_ns_per_byte_;  // Note [Emulated link]; 0: no emulated link
  const std::chrono::microseconds spin_;
  const std::size_t queue_capacity_;
  // Note [Small copies on an idle stream]; 0 with an emulated link.
  const std::int64_t inline_copy_max_bytes_;

  std::mutex streams_mu_;
  std::vector<std::unique_ptr<WorkerStream>> streams_;
  WorkerStream* d2h_ = nullptr;
  WorkerStream* h2d_ = nullptr;

  std::mutex events_mu_;
  std::vector<std::unique_ptr<HostEvent>> events_;
  std::vector<HostEvent*> free_events_;
  std::unordered_set<HostEvent*> live_events_;

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
  if (options.inline_copy_max_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument, "host backend: inline_copy_max_bytes must be >= 0");
  }
  if (const std::optional<double> link = options.emulated_copy_bandwidth_gib_per_s;
      link && !(std::isfinite(*link) && *link > 0.0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("host backend: emulated_copy_bandwidth_gib_per_s must be a finite number > 0, got {}",
                                  *link));
  }
  const std::int64_t capacity = options.stream_queue_capacity;
  if (capacity < 2 || capacity > (std::int64_t{1} << 24) || (capacity & (capacity - 1)) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("host backend: stream_queue_capacity {} must be a power of two in [2, 2^24]", capacity));
  }
  return std::unique_ptr<HostBackend>(new HostBackend(std::move(arena), options));
}

HostBackend::HostBackend(std::unique_ptr<DeviceArena> arena, const HostBackendOptions& options)
    : impl_(std::make_unique<Impl>(std::move(arena), options)), copy_engines_(options.copy_engines) {}

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
  auto stream = std::make_unique<WorkerStream>(impl_->spin_, impl_->queue_capacity_, impl_->emulated_link());
  Stream handle = impl_->handle_of(stream.get());
  std::lock_guard lock(impl_->streams_mu_);
  impl_->streams_.push_back(std::move(stream));
  return handle;
}

Status HostBackend::copy_async(Stream stream, void* dst, const void* src, std::int64_t bytes, CopyKind kind) {
  if (bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("copy of {} bytes: size must be >= 0", bytes));
  }
  if (bytes == 0) return ok_status();
  if (dst == nullptr || src == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "copy: null source or destination");
  }
  HO_ASSIGN_OR_RETURN(WorkerStream * worker, impl_->resolve(stream));
  CopyTask copy{dst, src, static_cast<std::size_t>(bytes), impl_->link_ns(bytes, kind), {}};
  if (copy.link_ns > 0) copy.enqueued = Clock::now();
  if (worker == nullptr) {
    run_copy(copy, copy.enqueued);  // the compute stream is the caller (a fault: Note [Emulated link])
    return ok_status();
  }
  if (impl_->ran_inline(copy, *worker)) return ok_status();
  worker->enqueue(copy);
  return ok_status();
}

Status HostBackend::launch_host_function(Stream stream, std::function<void()> fn) {
  HO_ASSIGN_OR_RETURN(WorkerStream * worker, impl_->resolve(stream));
  if (worker == nullptr) {
    fn();
    return ok_status();
  }
  worker->enqueue(std::move(fn));
  return ok_status();
}

Status HostBackend::synchronize_stream(Stream stream) {
  HO_ASSIGN_OR_RETURN(WorkerStream * worker, impl_->resolve(stream));
  if (worker != nullptr) worker->synchronize();
  return ok_status();
}

Status HostBackend::stream_wait_stream(Stream waiter, Stream waited) {
  HO_ASSIGN_OR_RETURN(WorkerStream * waited_worker, impl_->resolve(waited));
  HO_ASSIGN_OR_RETURN(WorkerStream * waiter_worker, impl_->resolve(waiter));
  if (waited_worker == nullptr || waited_worker == waiter_worker) return ok_status();  // already ordered
  // No record is needed: waiting for `waited` to complete everything pushed so
  // far is waiting for a record pushed now.
  const std::uint64_t target = waited_worker->pushed();
  if (waiter_worker == nullptr) {
    waited_worker->wait_until(target);
    return ok_status();
  }
  if (waited_worker->reached(target)) return ok_status();
  auto node = std::make_shared<RecordNode>();
  node->stream = waited_worker;
  node->target = target;
  waiter_worker->enqueue(WaitTask{std::move(node)});
  return ok_status();
}

Status HostBackend::synchronize() {
  std::vector<WorkerStream*> streams;
  {
    std::lock_guard lock(impl_->streams_mu_);
    for (const auto& s : impl_->streams_) streams.push_back(s.get());
  }
  // A stream may wait on another's later work, so one pass in any order can
  // leave work behind only if new work is enqueued concurrently; that is the
  // caller's race, as with cudaDeviceSynchronize.
  for (WorkerStream* s : streams) s->synchronize();
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
  HO_ASSIGN_OR_RETURN(WorkerStream * worker, impl_->resolve(stream));
  // The record is enqueued before the event is looked up, so the node's target
  // is set before the node is shared; a record of an unknown event completes a
  // node nobody holds.
  auto node = std::make_shared<RecordNode>();
  impl_->record(node, worker);
  auto* e = reinterpret_cast<HostEvent*>(event.handle);
  std::lock_guard lock(impl_->events_mu_);
  if (!impl_->live_events_.contains(e)) return Impl::unknown_event(event);
  e->latest = std::move(node);
  return ok_status();
}

Result<bool> HostBackend::event_completed(Event event) {
  HO_ASSIGN_OR_RETURN(std::shared_ptr<RecordNode> node, impl_->latest_record(event));
  return node == nullptr || node->done.load(std::memory_order_acquire);
}

Status HostBackend::synchronize_event(Event event) {
  HO_ASSIGN_OR_RETURN(std::shared_ptr<RecordNode> node, impl_->latest_record(event));
  if (node != nullptr) wait_for(*node);
  return ok_status();
}

Status HostBackend::stream_wait_event(Stream stream, Event event) {
  HO_ASSIGN_OR_RETURN(std::shared_ptr<RecordNode> node, impl_->latest_record(event));
  HO_ASSIGN_OR_RETURN(WorkerStream * worker, impl_->resolve(stream));
  if (node == nullptr || node->done.load(std::memory_order_acquire)) return ok_status();
  if (worker == nullptr) {
    wait_for(*node);
    return ok_status();
  }
  worker->enqueue(WaitTask{std::move(node)});
  return ok_status();
}

Result<double> HostBackend::elapsed_ms(Event start, Event end) {
  HO_ASSIGN_OR_RETURN(std::shared_ptr<RecordNode> a, impl_->latest_record(start));
  HO_ASSIGN_OR_RETURN(std::shared_ptr<RecordNode> b, impl_->latest_record(end));
  if (a == nullptr || b == nullptr) {
    return make_error(ErrorCode::kFailedPrecondition, "elapsed_ms: an event was never recorded");
  }
  if (!a->done.load(std::memory_order_acquire) || !b->done.load(std::memory_order_acquire)) {
    return make_error(ErrorCode::kFailedPrecondition, "elapsed_ms: an event has not completed");
  }
  return std::chrono::duration<double, std::milli>(b->time - a->time).count();
}

}  // namespace hyperoffload
