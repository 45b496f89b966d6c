#include "storage_registry.h"

#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace hyperoffload::python {

// Ids of storages whose StorageImpl dropped our DataPtr; filled by the deleter
// on any thread, drained by the driving thread.
struct DeathQueue {
  std::mutex mutex;
  std::vector<StorageId> ids;
};

namespace {

// One allocation of a tracked storage; see Note [Storage memory].
struct MemBlock {
  c10::DataPtr real;
};

// Context of every DataPtr the registry puts into a StorageImpl: the wrapper of
// a MemBlock, or the sentinel of a released storage (no block).
struct Installed {
  std::shared_ptr<DeathQueue> deaths;
  StorageId id = 0;
  std::shared_ptr<MemBlock> block;
  // Set before the registry itself replaces this DataPtr; otherwise the
  // deleter running means the storage died or was given other memory.
  std::atomic<bool> replaced_by_registry{false};
};

void installed_deleter(void* context) {
  auto* installed = static_cast<Installed*>(context);
  if (!installed->replaced_by_registry.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(installed->deaths->mutex);
    installed->deaths->ids.push_back(installed->id);
  }
  delete installed;  // drops PyTorch's reference to the block
}

// The registry's context in `data_ptr`, or null when the DataPtr is not ours.
Installed* installed_of(const c10::DataPtr& data_ptr) {
  if (data_ptr.get_deleter() != &installed_deleter) return nullptr;
  return static_cast<Installed*>(data_ptr.get_context());
}

c10::DataPtr make_installed(const std::shared_ptr<DeathQueue>& deaths, StorageId id,
                            std::shared_ptr<MemBlock> block, c10::Device device) {
  void* data = block ? block->real.get() : nullptr;
  auto* context = new Installed{deaths, id, std::move(block)};
  return c10::DataPtr(data, context, &installed_deleter, device);
}

// Replaces a StorageImpl's DataPtr on the registry's behalf (the old one's
// deleter then reports no death).
void replace_data_ptr(c10::StorageImpl& impl, c10::DataPtr replacement) {
  if (Installed* current = installed_of(impl.data_ptr())) {
    current->replaced_by_registry.store(true, std::memory_order_release);
  }
  impl.set_data_ptr_noswap(std::move(replacement));
}

// The runtime's side of a MemBlock: called when it releases the device copy
// (after every copy touching it completed); dropped — without a call — when it
// stops tracking the storage. If the storage still holds this block, it gets
// the sentinel, so the block is freed once the callback is gone.
ReleaseCallback make_release(std::shared_ptr<MemBlock> block, c10::weak_intrusive_ptr<c10::StorageImpl> storage) {
  return [block = std::move(block), storage = std::move(storage)](void*) {
    c10::intrusive_ptr<c10::StorageImpl> impl = storage.lock();
    if (!impl) return;
    Installed* current = installed_of(impl->data_ptr());
    if (current == nullptr || current->block != block) return;  // rematerialized since, or not ours any more
    replace_data_ptr(*impl, make_installed(current->deaths, current->id, nullptr, impl->data_ptr().device()));
  };
}

}  // namespace

StorageRegistry::StorageRegistry(c10::Device device) : device_(device), deaths_(std::make_shared<DeathQueue>()) {}

StorageRegistry::~StorageRegistry() { (void)release_all(); }

OpOutput StorageRegistry::adopt(const c10::Storage& storage) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  const auto id = static_cast<StorageId>(tracked_.size());
  const auto size_bytes = static_cast<std::int64_t>(impl->nbytes());
  const c10::Device device = impl->data_ptr().device();
  auto block = std::make_shared<MemBlock>();
  // A placeholder takes the original out (nothing is freed); the block's
  // wrapper then replaces the placeholder.
  block->real = impl->set_data_ptr(c10::DataPtr(nullptr, device));
  impl->set_data_ptr_noswap(make_installed(deaths_, id, block, device));
  tracked_.push_back(Tracked{storage.getWeakStorageImpl(), impl->allocator(), true});
  ids_.emplace(impl, id);
  return OpOutput{id, size_bytes, block->real.get(), make_release(block, tracked_.back().storage)};
}

Result<AdoptedBuffer> StorageRegistry::rematerialize(StorageId id, std::int64_t size_bytes) {
  if (id < 0 || static_cast<std::size_t>(id) >= tracked_.size()) {
    return make_error(ErrorCode::kInternal, fmt::format("rematerializing storage {}: never adopted", id));
  }
  Tracked& tracked = tracked_[static_cast<std::size_t>(id)];
  auto block = std::make_shared<MemBlock>();
  try {
    c10::DeviceGuard guard(device_);
    block->real = allocator_of(tracked)->allocate(static_cast<std::size_t>(size_bytes));
  } catch (const std::exception& error) {
    return make_error(ErrorCode::kOutOfMemory,
                      fmt::format("bringing storage {} back ({} bytes) on {}: {}", id, size_bytes, device_.str(),
                                  error.what()));
  }
  void* ptr = block->real.get();
  if (c10::intrusive_ptr<c10::StorageImpl> impl = tracked.storage.lock()) {
    // A storage an op gave other memory (its death is queued) keeps it: the
    // bytes copied into this block are then simply dropped.
    if (installed_of(impl->data_ptr()) != nullptr) {
      replace_data_ptr(*impl, make_installed(deaths_, id, block, device_));
    }
  }
  return AdoptedBuffer{ptr, make_release(block, tracked.storage)};
}

Result<AdoptedBuffer> StorageRegistry::install(StorageId id, const c10::Storage& fresh) {
  if (!live(id)) {
    return make_error(ErrorCode::kInternal, fmt::format("regenerating storage {}: it is not tracked", id));
  }
  Tracked& tracked = tracked_[static_cast<std::size_t>(id)];
  c10::intrusive_ptr<c10::StorageImpl> impl = tracked.storage.lock();
  c10::StorageImpl* source = fresh.unsafeGetStorageImpl();
  if (!impl) {
    // The storage died since the runtime last heard of deaths (its death is
    // queued: the next op's report_deaths tells the runtime). Nothing can read
    // it any more — the program let go of it, and a recorded call that reads
    // it would hold it — so the regenerated bytes are held for the runtime as
    // it asked, unseen, and go when it releases them or learns of the death
    // (docs/FUZZING.md, seed 8055).
    auto block = std::make_shared<MemBlock>();
    block->real = source->set_data_ptr(c10::DataPtr(nullptr, source->device()));
    void* ptr = block->real.get();
    return AdoptedBuffer{ptr, make_release(block, tracked.storage)};
  }
  if (source->nbytes() != impl->nbytes()) {
    return make_error(ErrorCode::kDiverged,
                      fmt::format("regenerating storage {}: the op re-run made {} bytes where it first made {}", id,
                                  source->nbytes(), impl->nbytes()));
  }
  // A sibling output of the re-run op released while its D2H is in flight
  // (say a layer norm's mean, offloaded to make room for this very re-run)
  // still holds its old block; the deferred free's callback then finds
  // another block and only lets the old one go (make_release).
  if (installed_of(impl->data_ptr()) == nullptr) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("regenerating storage {}: an op gave it memory the runtime does not track", id));
  }
  auto block = std::make_shared<MemBlock>();
  // The fresh storage's memory moves; the result tensors are dropped with none.
  block->real = source->set_data_ptr(c10::DataPtr(nullptr, source->device()));
  void* ptr = block->real.get();
  replace_data_ptr(*impl, make_installed(deaths_, id, block, device_));
  return AdoptedBuffer{ptr, make_release(block, tracked.storage)};
}

c10::Allocator* StorageRegistry::allocator_of(const Tracked& tracked) const {
  return tracked.allocator != nullptr ? tracked.allocator : c10::GetAllocator(device_.type());
}

void StorageRegistry::forget(StorageId id) {
  Tracked& tracked = tracked_[static_cast<std::size_t>(id)];
  if (!tracked.live) return;
  ids_.erase(tracked.storage._unsafe_get_target());
  tracked.live = false;
  tracked.storage.reset();
}

void StorageRegistry::take_dead(std::vector<StorageId>& out) {
  std::vector<StorageId> dead;
  {
    std::lock_guard<std::mutex> lock(deaths_->mutex);
    if (deaths_->ids.empty()) return;
    dead.swap(deaths_->ids);
  }
  for (StorageId id : dead) {
    if (id < 0 || static_cast<std::size_t>(id) >= tracked_.size() || !tracked_[static_cast<std::size_t>(id)].live) {
      continue;  // from an earlier step, or already forgotten
    }
    forget(id);
    out.push_back(id);
  }
}

std::vector<StorageId> StorageRegistry::live_ids() const {
  std::vector<StorageId> ids;
  ids.reserve(ids_.size());
  for (std::size_t id = 0; id < tracked_.size(); ++id) {
    if (tracked_[id].live) ids.push_back(static_cast<StorageId>(id));
  }
  return ids;
}

bool StorageRegistry::hand_back(StorageId id) {
  if (!live(id)) return false;
  Tracked& tracked = tracked_[static_cast<std::size_t>(id)];
  if (c10::intrusive_ptr<c10::StorageImpl> impl = tracked.storage.lock()) {
    if (Installed* current = installed_of(impl->data_ptr())) {
      if (current->block == nullptr) return false;
      replace_data_ptr(*impl, std::move(current->block->real));
    }
  }
  forget(id);
  return true;
}

std::int64_t StorageRegistry::release_all() {
  std::int64_t refilled = 0;
  for (std::size_t id = 0; id < tracked_.size(); ++id) {
    Tracked& tracked = tracked_[id];
    if (!tracked.live) continue;
    if (c10::intrusive_ptr<c10::StorageImpl> impl = tracked.storage.lock()) {
      if (Installed* current = installed_of(impl->data_ptr())) {
        c10::DataPtr real;
        if (current->block != nullptr) {
          real = std::move(current->block->real);
        } else {
          ++refilled;
          try {
            c10::DeviceGuard guard(device_);
            real = allocator_of(tracked)->allocate(impl->nbytes());
          } catch (const std::exception&) {
            real = c10::DataPtr(nullptr, impl->data_ptr().device());  // nothing left to give it
          }
        }
        replace_data_ptr(*impl, std::move(real));
      }
    }
    forget(static_cast<StorageId>(id));
  }
  tracked_.clear();
  ids_.clear();
  std::lock_guard<std::mutex> lock(deaths_->mutex);
  deaths_->ids.clear();
  return refilled;
}

}  // namespace hyperoffload::python
