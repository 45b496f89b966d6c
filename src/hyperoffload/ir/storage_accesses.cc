#include "hyperoffload/ir/storage_accesses.h"

namespace hyperoffload {

StorageAccesses::StorageAccesses(const Trace& trace)
    : offsets_(static_cast<std::size_t>(trace.storage_count()) + 1, 0) {
  std::span<const Access> all = trace.all_accesses();
  for (const Access& access : all) ++offsets_[static_cast<std::size_t>(access.storage) + 1];
  for (std::size_t s = 1; s < offsets_.size(); ++s) offsets_[s] += offsets_[s - 1];

  entries_.resize(all.size());
  std::vector<std::uint32_t> cursor(offsets_.begin(), offsets_.end() - 1);
  first_appearance_.reserve(static_cast<std::size_t>(trace.storage_count()));
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (const Access& access : trace.accesses(op)) {
      std::uint32_t& at = cursor[static_cast<std::size_t>(access.storage)];
      if (at == offsets_[static_cast<std::size_t>(access.storage)]) first_appearance_.push_back(access.storage);
      entries_[at++] = StorageAccess{op, access.kind};
    }
  }
}

std::vector<OpIndex> recompute_producers(const Trace& trace, const StorageAccesses& accesses) {
  std::vector<OpIndex> producer(static_cast<std::size_t>(trace.storage_count()), -1);
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (!accesses.accessed(s)) continue;
    const StorageAccess& first = accesses.of(s).front();
    if (first.kind == AccessKind::kWrite && trace.op_recomputable(first.op)) {
      producer[static_cast<std::size_t>(s)] = first.op;
    }
  }
  return producer;
}

}  // namespace hyperoffload
