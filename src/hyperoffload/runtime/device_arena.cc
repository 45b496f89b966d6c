#include "hyperoffload/runtime/device_arena.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>

#include "hyperoffload/runtime/internal/sanitizers.h"

namespace hyperoffload {

Result<std::unique_ptr<DeviceArena>> DeviceArena::create(const DeviceArenaOptions& options) {
  const std::int64_t alignment = options.alignment_bytes;
  if (alignment < 8 || (alignment & (alignment - 1)) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("device arena alignment_bytes must be a power of two >= 8, got {}", alignment));
  }
  if (options.capacity_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("device arena capacity_bytes must be >= 0, got {}", options.capacity_bytes));
  }
  std::byte* base = nullptr;
  if (options.capacity_bytes > 0) {
    void* mapped = mmap(nullptr, static_cast<std::size_t>(options.capacity_bytes), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) {
      return make_error(ErrorCode::kOutOfMemory,
                        fmt::format("device arena: cannot reserve {} bytes of address space", options.capacity_bytes));
    }
    base = static_cast<std::byte*>(mapped);
    internal::poison_memory(base, options.capacity_bytes);
  }
  return std::unique_ptr<DeviceArena>(new DeviceArena(base, options.capacity_bytes, alignment));
}

DeviceArena::DeviceArena(std::byte* base, std::int64_t capacity, std::int64_t alignment)
    : base_(base), capacity_(capacity), alignment_(alignment) {
  if (capacity_ > 0) {
    blocks_.emplace(0, Block{capacity_, true});
    free_by_size_.emplace(capacity_, 0);
  }
}

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) {
    internal::unpoison_memory(base_, capacity_);
    munmap(base_, static_cast<std::size_t>(capacity_));
  }
}

std::int64_t DeviceArena::largest_free_locked() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

Result<void*> DeviceArena::allocate(std::int64_t size_bytes) {
  if (size_bytes <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("device allocation of {} bytes: size must be positive", size_bytes));
  }
  std::int64_t offset = 0;
  std::int64_t rounded = 0;
  {
    std::lock_guard lock(mu_);
    // Overflow-safe rounding: a request beyond the capacity cannot fit anyway.
    rounded = size_bytes > capacity_ ? size_bytes : reserved_size(size_bytes);
    auto it = free_by_size_.lower_bound({rounded, -1});
    if (it == free_by_size_.end()) {
      return make_error(ErrorCode::kOutOfMemory,
                        fmt::format("device out of memory: requested {} bytes, in use {} bytes, capacity {} bytes "
                                    "(largest free block {} bytes)",
                                    size_bytes, in_use_, capacity_, largest_free_locked()));
    }
    const auto [block_size, block_offset] = *it;
    free_by_size_.erase(it);
    offset = block_offset;
    Block& block = blocks_[offset];
    block.free = false;
    if (block_size > rounded) {
      block.size = rounded;
      blocks_.emplace(offset + rounded, Block{block_size - rounded, true});
      free_by_size_.emplace(block_size - rounded, offset + rounded);
    }
    in_use_ += rounded;
    peak_ = std::max(peak_, in_use_);
    ++live_;
  }
  std::byte* ptr = base_ + offset;
  internal::unpoison_memory(ptr, size_bytes);
  return static_cast<void*>(ptr);
}

Status DeviceArena::free(void* ptr) {
  auto* p = static_cast<std::byte*>(ptr);
  const std::int64_t offset = p - base_;
  std::int64_t poison_size = 0;
  {
    std::lock_guard lock(mu_);
    auto it =
        ptr == nullptr || base_ == nullptr || offset < 0 || offset >= capacity_ ? blocks_.end() : blocks_.find(offset);
    if (it == blocks_.end() || it->second.free) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("device free of {}: not a live allocation of this arena", ptr));
    }
    it->second.free = true;
    in_use_ -= it->second.size;
    --live_;
    poison_size = it->second.size;
    // Coalesce with the next block, then with the previous one.
    auto next = std::next(it);
    if (next != blocks_.end() && next->second.free) {
      free_by_size_.erase({next->second.size, next->first});
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.free) {
        free_by_size_.erase({prev->second.size, prev->first});
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    free_by_size_.emplace(it->second.size, it->first);
    // Poisoning happens under the lock: once the block is in the free set another
    // thread may allocate (and unpoison) it.
    internal::poison_memory(p, poison_size);
  }
  return ok_status();
}

DeviceMemoryStats DeviceArena::stats() const {
  std::lock_guard lock(mu_);
  return DeviceMemoryStats{in_use_, peak_, capacity_, live_};
}

std::int64_t DeviceArena::largest_free_block_bytes() const {
  std::lock_guard lock(mu_);
  return largest_free_locked();
}

}  // namespace hyperoffload
