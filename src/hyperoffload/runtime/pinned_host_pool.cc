#include "hyperoffload/runtime/pinned_host_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <utility>

#include "hyperoffload/runtime/internal/sanitizers.h"

namespace hyperoffload {

PinnedHostPool::SizeClass PinnedHostPool::size_class_of(std::int64_t size_bytes) {
  constexpr std::int64_t kExactUpTo = 64;
  if (size_bytes <= kExactUpTo) return {static_cast<std::int32_t>(size_bytes - 1), size_bytes};
  // 2^k <= size-1 < 2^(k+1); classes in (2^k, 2^(k+1)] are m * 2^(k-2), m = 5..8.
  const auto below = static_cast<std::uint64_t>(size_bytes - 1);
  const int k = static_cast<int>(std::bit_width(below)) - 1;
  const std::int64_t step = std::int64_t{1} << (k - 2);
  const std::int64_t m = (size_bytes + step - 1) / step;  // 5..8
  const auto index = static_cast<std::int32_t>(kExactUpTo + (k - 6) * 4 + (m - 5));
  return {index, m * step};
}

std::int64_t PinnedHostPool::size_class_of_index(std::int32_t index) {
  if (index < 64) return index + 1;
  const std::int32_t j = index - 64;
  const int k = 6 + j / 4;
  return std::int64_t{5 + j % 4} << (k - 2);
}

PinnedHostPool::PinnedHostPool(Backend& backend, const PinnedHostPoolOptions& options)
    : backend_(backend), capacity_(options.capacity_bytes) {
  stats_.capacity_bytes = capacity_;
}

PinnedHostPool::~PinnedHostPool() {
  // No caller to report to: a failed wait or free at teardown can only leak.
  (void)drain();
  (void)trim();
}

std::vector<void*>& PinnedHostPool::free_list_locked(std::int32_t size_class) {
  if (static_cast<std::size_t>(size_class) >= free_lists_.size()) {
    free_lists_.resize(static_cast<std::size_t>(size_class) + 1);
  }
  return free_lists_[static_cast<std::size_t>(size_class)];
}

void PinnedHostPool::cache_locked(const PinnedBlock& block) {
  internal::poison_memory(block.ptr, block.size_bytes);
  free_list_locked(block.size_class).push_back(block.ptr);
  stats_.cached_bytes += block.size_bytes;
}

void PinnedHostPool::poll_pending_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    bool passed = true;
    for (const Fence& fence : it->fences) {
      Result<bool> done = fence.completed();
      // A failing query leaves the block pending; drain() reports the error.
      if (!done || !*done) {
        passed = false;
        break;
      }
    }
    if (!passed) {
      ++it;
      continue;
    }
    stats_.pending_bytes -= it->block.size_bytes;
    cache_locked(it->block);
    it = pending_.erase(it);
  }
}

Error PinnedHostPool::exhausted_locked(std::int64_t request, std::int64_t class_size) const {
  return Error{ErrorCode::kOutOfMemory,
               fmt::format("pinned host pool exhausted: requested {} bytes (size class {} bytes), in use {} bytes "
                           "({} more awaiting copies), capacity {} bytes; raise the host pool capacity "
                           "(max offload bytes) or lower what is offloaded",
                           request, class_size, stats_.current_bytes, stats_.pending_bytes, capacity_)};
}

Result<PinnedBlock> PinnedHostPool::acquire(std::int64_t size_bytes) {
  if (size_bytes <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("pinned host pool: request of {} bytes; size must be positive", size_bytes));
  }
  const SizeClass cls = size_class_of(size_bytes);
  std::unique_lock lock(mu_);
  poll_pending_locked();
  auto take_cached = [&]() -> PinnedBlock {
    std::vector<void*>& list = free_list_locked(cls.index);
    PinnedBlock block{list.back(), cls.size_bytes, cls.index};
    list.pop_back();
    stats_.cached_bytes -= cls.size_bytes;
    internal::unpoison_memory(block.ptr, block.size_bytes);
    return block;
  };
  auto hand_out = [&](PinnedBlock block) {
    stats_.current_bytes += block.size_bytes;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    stats_.allocated_bytes += block.size_bytes;
    return block;
  };
  if (!free_list_locked(cls.index).empty()) {
    ++stats_.hits;
    return hand_out(take_cached());
  }
  ++stats_.misses;
  for (;;) {
    if (!free_list_locked(cls.index).empty()) return hand_out(take_cached());  // refilled while unlocked
    if (stats_.reserved_bytes <= capacity_ - cls.size_bytes) {
      stats_.reserved_bytes += cls.size_bytes;  // reserve, then allocate unlocked
      lock.unlock();
      Result<void*> ptr = backend_.allocate_host(cls.size_bytes);
      lock.lock();
      if (!ptr) {
        stats_.reserved_bytes -= cls.size_bytes;
        return std::unexpected(std::move(ptr.error()));
      }
      return hand_out(PinnedBlock{*ptr, cls.size_bytes, cls.index});
    }
    // (1) Free cached blocks of other classes, largest classes first.
    std::vector<std::pair<void*, std::int64_t>> to_free;
    for (std::size_t c = free_lists_.size(); c-- > 0 && stats_.reserved_bytes > capacity_ - cls.size_bytes;) {
      std::vector<void*>& list = free_lists_[c];
      while (!list.empty() && stats_.reserved_bytes > capacity_ - cls.size_bytes) {
        const std::int64_t size = size_class_of_index(static_cast<std::int32_t>(c));
        to_free.emplace_back(list.back(), size);
        list.pop_back();
        stats_.cached_bytes -= size;
        stats_.reserved_bytes -= size;
      }
    }
    if (!to_free.empty()) {
      lock.unlock();
      for (auto [ptr, size] : to_free) {
        internal::unpoison_memory(ptr, size);
        if (Status freed = backend_.free_host(ptr); !freed) return std::unexpected(std::move(freed.error()));
      }
      lock.lock();
      continue;
    }
    // (2) Wait for the oldest pending block that fits.
    auto fits = [&](const Pending& p) {
      return p.block.size_class == cls.index ||
             stats_.reserved_bytes - p.block.size_bytes <= capacity_ - cls.size_bytes;
    };
    auto it = std::find_if(pending_.begin(), pending_.end(), fits);
    if (it == pending_.end()) return std::unexpected(exhausted_locked(size_bytes, cls.size_bytes));
    Pending waited = std::move(*it);
    pending_.erase(it);
    stats_.pending_bytes -= waited.block.size_bytes;
    ++stats_.waits;
    lock.unlock();
    for (const Fence& fence : waited.fences) {
      if (Status done = fence.wait(); !done) {
        lock.lock();
        stats_.pending_bytes += waited.block.size_bytes;
        pending_.push_front(std::move(waited));
        return std::unexpected(std::move(done.error()));
      }
    }
    if (waited.block.size_class == cls.index) {
      lock.lock();
      return hand_out(waited.block);
    }
    if (Status freed = backend_.free_host(waited.block.ptr); !freed) {
      return std::unexpected(std::move(freed.error()));
    }
    lock.lock();
    stats_.reserved_bytes -= waited.block.size_bytes;
  }
}

void PinnedHostPool::release(const PinnedBlock& block, std::span<const Fence> in_flight) {
  std::lock_guard lock(mu_);
  stats_.current_bytes -= block.size_bytes;
  stats_.freed_bytes += block.size_bytes;
  Pending pending{block, {}};
  for (const Fence& fence : in_flight) {
    Result<bool> done = fence.completed();
    if (!done || !*done) pending.fences.push_back(fence);
  }
  if (pending.fences.empty()) {
    cache_locked(block);
    return;
  }
  stats_.pending_bytes += block.size_bytes;
  pending_.push_back(std::move(pending));
}

Status PinnedHostPool::drain() {
  for (;;) {
    Pending waited;
    {
      std::lock_guard lock(mu_);
      poll_pending_locked();
      if (pending_.empty()) return ok_status();
      waited = std::move(pending_.front());
      pending_.pop_front();
    }
    Status status = ok_status();
    for (const Fence& fence : waited.fences) {
      if (status = fence.wait(); !status) break;
    }
    std::lock_guard lock(mu_);
    if (!status) {
      pending_.push_front(std::move(waited));
      return status;
    }
    stats_.pending_bytes -= waited.block.size_bytes;
    cache_locked(waited.block);
  }
}

Status PinnedHostPool::trim() { return free_cached(0, PollPending::kNo); }

Status PinnedHostPool::trim_to(std::int64_t reserved_bytes) { return free_cached(reserved_bytes, PollPending::kYes); }

Status PinnedHostPool::free_cached(std::int64_t reserved_bytes, PollPending poll) {
  std::vector<std::pair<void*, std::int64_t>> to_free;
  {
    std::lock_guard lock(mu_);
    if (poll == PollPending::kYes) poll_pending_locked();
    for (std::size_t c = free_lists_.size(); c-- > 0 && stats_.reserved_bytes > reserved_bytes;) {
      const std::int64_t size = size_class_of_index(static_cast<std::int32_t>(c));
      std::vector<void*>& list = free_lists_[c];
      while (!list.empty() && stats_.reserved_bytes > reserved_bytes) {
        to_free.emplace_back(list.back(), size);
        list.pop_back();
        stats_.cached_bytes -= size;
        stats_.reserved_bytes -= size;
      }
    }
  }
  Status status = ok_status();
  for (auto [ptr, size] : to_free) {
    internal::unpoison_memory(ptr, size);
    if (Status freed = backend_.free_host(ptr); !freed && status) status = std::move(freed);
  }
  return status;
}

void PinnedHostPool::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
}

PinnedPoolStats PinnedHostPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace hyperoffload
