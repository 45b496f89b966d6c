// Internal: a bounded, lock-free, multi-producer single-consumer FIFO ring.
//
// The queue behind each HostBackend worker stream. Any thread may push (the
// Backend contract lets every method be called from any thread); exactly one
// thread, the stream's worker, consumes. Items are used in place: the consumer
// reads the oldest item through front(), runs it, and pop() destroys it and
// hands the slot back, so an item is never moved out of the ring.
//
//   MpscRing<Task> ring(1024);
//   // any thread:                    // the one consumer thread:
//   Task task = ...;                  if (Task* t = ring.front()) {
//   if (!ring.try_push(task)) {...}     run(*t);
//                                       ring.pop();
//                                     }
//
// Design (Note [Sequenced slots]): each slot carries a sequence number that
// says whose turn it is. For the slot at position p (index p & mask):
//   seq == p               free: the producer that claims position p may fill it
//   seq == p + 1           published: the consumer may use it
//   seq == p + capacity    consumed: free for position p + capacity
// A producer claims a position with one compare-and-swap on `tail`, fills the
// slot, then publishes it by storing seq. Claiming and publishing are separate
// steps, so items become visible in claim order: the consumer never skips a
// claimed slot that is still being filled (it waits for it), which keeps FIFO
// across producers. A full ring makes try_push fail; the caller decides how to
// wait (HostBackend: spin, then sleep until the consumer frees a slot).
//
// Every access to a slot's seq is seq_cst, not merely release/acquire:
// HostBackend parks its threads with a Dekker-style handshake ("announce that I
// sleep, then re-check the ring" against "publish, then check for sleepers"),
// which is only correct if these accesses take part in the single total order
// of seq_cst operations. On x86 that costs one exchange per store; loads stay
// plain moves.
//
// Thread-safety: try_push(), pushed() and consumed() from any thread; front()
// and pop() only from the single consumer thread. T must be default constructible and
// move assignable; a popped slot is reset to T{}, so the resources an item
// holds are released at pop(), on the consumer thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <utility>

namespace hyperoffload::internal {

template <class T>
class MpscRing {
 public:
  // capacity: a power of two >= 2 (the caller validates it).
  explicit MpscRing(std::size_t capacity) : slots_(new Slot[capacity]), mask_(capacity - 1) {
    for (std::size_t i = 0; i < capacity; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }
  MpscRing(const MpscRing&) = delete;
  MpscRing& operator=(const MpscRing&) = delete;

  std::size_t capacity() const { return mask_ + 1; }

  // Any thread. Moves `item` into the ring and returns its position (0 for the
  // first item ever pushed, then 1, 2, ...), or returns nullopt and leaves
  // `item` untouched when every slot is in use.
  std::optional<std::uint64_t> try_push(T& item) {
    std::uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& slot = slots_[pos & mask_];
      const std::uint64_t seq = slot.seq.load(std::memory_order_seq_cst);
      if (seq == pos) {
        // Free for this position: claim it. On failure `pos` is reloaded.
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          slot.item = std::move(item);
          slot.seq.store(pos + 1, std::memory_order_seq_cst);
          return pos;
        }
      } else if (seq < pos) {
        // The slot still holds (or is being filled with) the item at position
        // pos - capacity, one lap behind: the ring is full.
        return std::nullopt;
      } else {
        // Another producer claimed `pos` first; catch up with the tail.
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Consumer only. The oldest item if it has been published, else nullptr
  // (the ring is empty, or its oldest position is claimed but still being
  // filled).
  T* front() {
    Slot& slot = slots_[head_ & mask_];
    if (slot.seq.load(std::memory_order_seq_cst) != head_ + 1) return nullptr;
    return &slot.item;
  }

  // Consumer only, after front() returned an item: destroys it and frees its
  // slot for the producer one lap ahead.
  void pop() {
    Slot& slot = slots_[head_ & mask_];
    slot.item = T{};
    slot.seq.store(head_ + mask_ + 1, std::memory_order_seq_cst);
    ++head_;
  }

  // Any thread: positions claimed so far (items pushed, including any still
  // being filled).
  std::uint64_t pushed() const { return tail_.load(std::memory_order_acquire); }

  // Any thread: whether the item at `position` has been popped. A slot's seq
  // only grows, and reaches position + capacity exactly when that item is
  // popped, so this holds for positions any number of laps behind. A waiter
  // polls the slot its item used, a line the consumer writes once per item,
  // rather than a shared counter the consumer would write after every item.
  bool consumed(std::uint64_t position) const {
    return slots_[position & mask_].seq.load(std::memory_order_seq_cst) >= position + mask_ + 1;
  }

 private:
  // One cache line per slot when T is small enough, so a producer filling one
  // slot does not bounce the line the consumer is reading.
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> seq{0};
    T item{};
  };

  std::unique_ptr<Slot[]> slots_;
  const std::uint64_t mask_;
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next position to claim; producers
  alignas(64) std::uint64_t head_ = 0;              // next position to consume; consumer only
};

}  // namespace hyperoffload::internal
