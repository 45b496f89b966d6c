// PinnedHostPool: reusable page-locked host blocks for offloaded copies.
//
// Size classes. A request is served from a class at most 25% larger than the
// request: sizes up to 64 bytes are their own class; above that there are four
// classes per power of two, (4+i) * 2^(k-2) for i = 0..3 (80, 96, 112, 128,
// 160, ...), so the next class is at most 5/4 of the previous one. (Power-of-two
// rounding would waste up to 100%.) Freed blocks go to their class's free list
// and are reused before anything is allocated from the backend.
//
// Deferred recycling. Note [Deferred recycling]: a block released while a copy
// may still read or write it (an in-flight D2H filling it, an H2D reading it) is
// released with that copy's Fence. It stays "pending" and returns to its free
// list only once every fence has passed; pending blocks are polled at the start
// of each acquire(), so recycling costs no thread and no callback. A released
// block is therefore never handed out while a copy still uses it.
//
// Capacity. `capacity_bytes` bounds the bytes held from the backend (in use +
// pending + cached). When an acquire would exceed it, the pool (1) reclaims
// pending blocks whose copies completed and frees cached blocks of other
// classes, then (2) waits for the oldest pending block that fits (one of the
// same class is reused; another is freed to make room), then (3) fails with
// kOutOfMemory naming the requested, in-use and capacity bytes.
//
// Lock discipline. One mutex guards all pool state. Public methods take it;
// private *_locked methods assume it. The lock is never held while blocking on
// a fence or while allocating or freeing backend memory (cudaHostAlloc can take
// milliseconds); it is held while polling fences (a non-blocking query). No
// callback ever runs under it.
//
//   PinnedHostPool pool(backend, {.capacity_bytes = 8ll << 30});
//   Result<PinnedBlock> block = pool.acquire(1000);   // a 1024-byte class block
//   ... enqueue a D2H into block->ptr, record `copied` ...
//   pool.release(*block, {&copied, 1});               // recycled after the copy
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <span>
#include <vector>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/runtime/backend.h"
#include "hyperoffload/runtime/event_pool.h"

namespace hyperoffload {

struct PinnedHostPoolOptions {
  // Bytes the pool may hold from the backend (in use + pending + cached).
  std::int64_t capacity_bytes = std::numeric_limits<std::int64_t>::max();
};

struct PinnedBlock {
  void* ptr = nullptr;
  std::int64_t size_bytes = 0;  // the class size: >= the request, at most 25% more
  std::int32_t size_class = -1;

  bool empty() const { return ptr == nullptr; }
};

// {current, peak, allocated, freed} as in PyTorch's caching allocator, in bytes
// of class sizes, plus the pool's own breakdown and counters.
struct PinnedPoolStats {
  std::int64_t current_bytes = 0;    // held by callers
  std::int64_t peak_bytes = 0;       // maximum of current_bytes
  std::int64_t allocated_bytes = 0;  // total handed out by acquire()
  std::int64_t freed_bytes = 0;      // total given back by release()
  std::int64_t pending_bytes = 0;    // released, waiting for their copies
  std::int64_t cached_bytes = 0;     // free, ready for reuse
  std::int64_t reserved_bytes = 0;   // held from the backend: current + pending + cached
  std::int64_t capacity_bytes = 0;
  std::int64_t hits = 0;    // acquires served by a recycled block
  std::int64_t misses = 0;  // acquires that had no recycled block at hand
  std::int64_t waits = 0;   // acquires that blocked on a pending block
};

class PinnedHostPool {
 public:
  PinnedHostPool(Backend& backend, const PinnedHostPoolOptions& options = {});
  // Waits for pending blocks and frees every block. Precondition: every
  // acquired block has been released.
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // size_bytes > 0.
  Result<PinnedBlock> acquire(std::int64_t size_bytes);
  // Gives a block back. Until every fence in `in_flight` has passed the block is
  // pending and not reused. Precondition: `block` came from acquire() and was
  // not released since.
  void release(const PinnedBlock& block, std::span<const Fence> in_flight = {});
  // Waits until no block is pending.
  Status drain();
  // Frees every cached block back to the backend.
  Status trim();
  // Frees cached blocks, largest class first, until the pool holds at most
  // `reserved_bytes` from the backend or nothing is cached. Blocks in use or
  // pending stay. reserved_bytes >= 0.
  Status trim_to(std::int64_t reserved_bytes);
  // Starts a new peak: stats().peak_bytes becomes current_bytes.
  void reset_peak();

  PinnedPoolStats stats() const;

  // The class serving a request: its index and size in bytes. size_bytes > 0.
  struct SizeClass {
    std::int32_t index = 0;
    std::int64_t size_bytes = 0;
  };
  static SizeClass size_class_of(std::int64_t size_bytes);
  // The size in bytes of class `index` (the inverse of size_class_of).
  static std::int64_t size_class_of_index(std::int32_t index);

 private:
  struct Pending {
    PinnedBlock block;
    std::vector<Fence> fences;
  };

  // Frees cached blocks, largest class first, until at most `reserved_bytes`
  // are held or nothing is cached (0: every cached block; blocks in use or
  // pending count toward reserved_bytes, so they never bring it to 0).
  // kYes first recycles pending blocks whose copies are done. Takes the lock.
  enum class PollPending : bool { kNo, kYes };
  Status free_cached(std::int64_t reserved_bytes, PollPending poll);
  // Moves pending blocks whose fences have all passed to their free lists.
  void poll_pending_locked();
  void cache_locked(const PinnedBlock& block);
  std::vector<void*>& free_list_locked(std::int32_t size_class);
  Error exhausted_locked(std::int64_t request, std::int64_t class_size) const;

  Backend& backend_;
  const std::int64_t capacity_;

  mutable std::mutex mu_;
  std::vector<std::vector<void*>> free_lists_;  // by class index
  std::deque<Pending> pending_;                 // oldest first
  PinnedPoolStats stats_;
};

}  // namespace hyperoffload
