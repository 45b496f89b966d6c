// StorageRegistry: the PyTorch storages a step produced, as the runtime's
// storage ids, with their memory managed by the runtime.
//
// Identity. A tracked storage is keyed by its c10::StorageImpl, never by data
// pointer (PyTorch's allocators reuse addresses at once). The registry holds a
// weak reference to each tracked StorageImpl, which also keeps the object's
// memory from being reused while it is tracked, so pointer identity is safe.
//
// Memory (Note [Storage memory]). A tracked storage stays in PyTorch's memory
// (its device's allocator: the CUDA caching allocator on a GPU, the CPU
// allocator on the host) and is adopted by the runtime:
//  - adopt() moves the storage's DataPtr into a shared MemBlock and gives the
//    StorageImpl a wrapper DataPtr (same address, our deleter). The MemBlock is
//    freed when both the storage and the runtime are done with it: PyTorch's
//    side is the wrapper, the runtime's side is the release callback it holds.
//    So a storage that dies while a copy still reads it keeps its memory until
//    the runtime — which waits for the copy's fence before dropping a release
//    callback — lets go.
//  - The runtime releasing the device copy (an offload) calls the callback:
//    the StorageImpl gets a sentinel DataPtr (no data, nbytes unchanged).
//  - Bringing it back calls rematerialize(): nbytes from the allocator the
//    storage was made with (the CUDA caching allocator on a GPU, on PyTorch's
//    current stream), installed into the same StorageImpl, so every tensor and view
//    of it keeps working; the runtime copies the host copy in.
//  - Our deleter runs when the StorageImpl drops our DataPtr. Unless we replaced
//    it ourselves, that means the storage died (or an op such as resize_ gave it
//    other memory): its id goes on a queue that take_dead() drains, so a death
//    costs O(1) and finding the dead costs O(deaths), not a scan.
//  - release_all() (after the runtime stopped tracking everything) puts the
//    original DataPtrs back, so no wrapper outlives a step.
//
// Ids are dense, 0, 1, 2, ... in adoption order, fresh each step.
//
// Thread-safety: one thread drives the registry (the thread running the ops).
// The deleter may run on any thread (a tensor can die anywhere); it touches
// only the death queue (a mutex) and reference counts.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload::python {

struct DeathQueue;

class StorageRegistry {
 public:
  // Rematerialized memory comes from the allocator each storage was made with
  // (c10::GetAllocator(device.type()) for one made without), under a guard for
  // `device`.
  explicit StorageRegistry(c10::Device device);
  // Puts every live storage's memory back (release_all).
  ~StorageRegistry();
  StorageRegistry(const StorageRegistry&) = delete;
  StorageRegistry& operator=(const StorageRegistry&) = delete;

  c10::Device device() const { return device_; }

  // Id of a tracked storage, or nullopt.
  std::optional<StorageId> find(const c10::StorageImpl* impl) const {
    auto it = ids_.find(impl);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // Tracks `storage` (untracked, with nbytes > 0 and data) under the next id
  // and returns the output to report to the runtime (its buffer and release
  // callback).
  OpOutput adopt(const c10::Storage& storage);
  // Memory for a tracked storage being brought back (the RematerializeFn).
  Result<AdoptedBuffer> rematerialize(StorageId id, std::int64_t size_bytes);

  // Appends the storages that died (or lost our memory) since the last call and
  // stops tracking them. The caller tells the runtime (on_storage_freed).
  void take_dead(std::vector<StorageId>& out);
  bool live(StorageId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < tracked_.size() && tracked_[static_cast<std::size_t>(id)].live;
  }
  // The storage behind a tracked id (expired once it died).
  c10::weak_intrusive_ptr<c10::StorageImpl> weak_storage(StorageId id) const {
    return tracked_[static_cast<std::size_t>(id)].storage;
  }
  // Tracked storages, in id order.
  std::vector<StorageId> live_ids() const;
  std::size_t live_count() const { return ids_.size(); }

  // After the runtime forgot a resident storage: puts its memory back as a
  // plain PyTorch DataPtr and stops tracking it (a storage a collective uses;
  // Note [Collective buffers] in torch_session.cc). False, and nothing changed,
  // when it is not tracked or holds no memory (released).
  bool hand_back(StorageId id);

  // After the runtime stopped tracking every storage: gives each live storage
  // its memory back as a plain PyTorch DataPtr and forgets everything. A
  // storage the runtime left released (its data lost after a failure) gets
  // fresh, uninitialized memory so no tensor is left without any; returns how
  // many did.
  std::int64_t release_all();

 private:
  struct Tracked {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    // The allocator the storage came from (the CUDA caching allocator, the
    // CPU allocator); its memory comes back from the same one.
    c10::Allocator* allocator = nullptr;
    bool live = false;
  };

  c10::Allocator* allocator_of(const Tracked& tracked) const;

  void forget(StorageId id);

  c10::Device device_;
  std::shared_ptr<DeathQueue> deaths_;
  std::vector<Tracked> tracked_;  // by id
  std::unordered_map<const c10::StorageImpl*, StorageId> ids_;  // live storages only
};

}  // namespace hyperoffload::python
