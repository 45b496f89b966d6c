// DeviceArena: a capacity-limited allocator over one reserved range of host
// memory; HostBackend's "device memory".
//
// Best fit with coalescing: free blocks are indexed by (size, offset), so an
// allocation takes the smallest free block that fits (lowest address among
// equals) and splits off the rest; a freed block merges with free neighbours.
// Both are O(log blocks). Sizes are rounded up to the alignment.
//
// The range is reserved with mmap(MAP_NORESERVE), so an arena only costs the
// pages that allocations actually touch. Under AddressSanitizer, free ranges are
// poisoned: a read or write of released "device" memory is reported.
//
// An allocation beyond the capacity fails with kOutOfMemory naming the
// requested, in-use and capacity bytes and the largest free block (which tells
// fragmentation from exhaustion).
//
// Thread-safety: all methods are thread-safe (one mutex; no callbacks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/runtime/backend.h"

namespace hyperoffload {

struct DeviceArenaOptions {
  std::int64_t capacity_bytes = std::int64_t{1} << 30;  // bytes; >= 0
  std::int64_t alignment_bytes = 256;                   // power of two, >= 8 (CUDA's is 256)
};

class DeviceArena {
 public:
  // Fails on invalid options or when the range cannot be reserved.
  static Result<std::unique_ptr<DeviceArena>> create(const DeviceArenaOptions& options);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // size_bytes > 0; the result is aligned to alignment_bytes.
  Result<void*> allocate(std::int64_t size_bytes);
  // Fails (kInvalidArgument) for a pointer that is not a live allocation.
  Status free(void* ptr);

  DeviceMemoryStats stats() const;
  std::int64_t largest_free_block_bytes() const;
  std::int64_t alignment_bytes() const { return alignment_; }
  // Size reserved for an allocation of `size_bytes` (rounded up to the alignment).
  std::int64_t reserved_size(std::int64_t size_bytes) const {
    return (size_bytes + alignment_ - 1) / alignment_ * alignment_;
  }

 private:
  DeviceArena(std::byte* base, std::int64_t capacity, std::int64_t alignment);

  struct Block {
    std::int64_t size = 0;
    bool free = true;
  };
  // Assumes mu_ is held.
  std::int64_t largest_free_locked() const;

  std::byte* const base_;
  const std::int64_t capacity_;
  const std::int64_t alignment_;

  mutable std::mutex mu_;
  std::map<std::int64_t, Block> blocks_;                          // by offset; covers [0, capacity)
  std::set<std::pair<std::int64_t, std::int64_t>> free_by_size_;  // (size, offset) of free blocks
  std::int64_t in_use_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t live_ = 0;
};

}  // namespace hyperoffload
