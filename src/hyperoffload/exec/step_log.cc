#include "hyperoffload/exec/step_log.h"

#include <algorithm>

namespace hyperoffload {

void StepLog::clear() {
  events_.clear();
  names_.clear();
  ids_.clear();
  outputs_.clear();
}

std::string_view StepLog::name(const StepEvent& event) const {
  return std::string_view(names_).substr(event.name_at, event.name_size);
}

std::span<const StorageId> StepLog::ids(const StepEvent& event) const {
  return std::span<const StorageId>(ids_).subspan(event.ids_at, event.ids_size);
}

std::span<const StorageId> StepLog::written(const StepEvent& event) const {
  if (event.kind != StepEvent::Kind::kOpBegin) return {};
  return std::span<const StorageId>(ids_).subspan(event.written_at, event.written_size);
}

std::span<const OpOutput> StepLog::outputs(const StepEvent& event) const {
  if (event.kind != StepEvent::Kind::kOpEnd) return {};
  return std::span<const OpOutput>(outputs_).subspan(event.written_at, event.written_size);
}

std::uint32_t StepLog::append_ids(std::span<const StorageId> ids) {
  const auto at = static_cast<std::uint32_t>(ids_.size());
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  return at;
}

void StepLog::op_begin(std::string_view name, std::span<const StorageId> inputs, std::span<const StorageId> written) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kOpBegin;
  event.name_at = static_cast<std::uint32_t>(names_.size());
  event.name_size = static_cast<std::uint32_t>(name.size());
  names_.append(name);
  event.ids_at = append_ids(inputs);
  event.ids_size = static_cast<std::uint32_t>(inputs.size());
  event.written_at = append_ids(written);
  event.written_size = static_cast<std::uint32_t>(written.size());
}

void StepLog::allocate(StorageId id, std::int64_t size_bytes) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kAllocate;
  event.id = id;
  event.size_bytes = size_bytes;
}

void StepLog::recomputable(Recomputable how) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kRecomputable;
  event.how = how;
}

void StepLog::op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kOpEnd;
  event.written_at = static_cast<std::uint32_t>(outputs_.size());
  event.written_size = static_cast<std::uint32_t>(outputs.size());
  for (const OpOutput& output : outputs) outputs_.push_back(OpOutput{output.id, output.size_bytes, output.device_ptr, {}});
  event.ids_at = append_ids(mutated);
  event.ids_size = static_cast<std::uint32_t>(mutated.size());
}

void StepLog::freed(StorageId id) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kFreed;
  event.id = id;
}

void StepLog::truncate(std::size_t count) {
  if (count >= events_.size()) return;
  events_.resize(count);
  // The buffers keep what the kept events use: each event appends after the
  // one before it, so the ends of the last kept ones are the new sizes.
  std::size_t names = 0;
  std::size_t ids = 0;
  std::size_t outputs = 0;
  for (const StepEvent& event : events_) {
    if (event.kind == StepEvent::Kind::kOpBegin) {
      names = event.name_at + event.name_size;
      ids = event.written_at + event.written_size;
    } else if (event.kind == StepEvent::Kind::kOpEnd) {
      outputs = event.written_at + event.written_size;
      ids = event.ids_at + event.ids_size;
    }
  }
  names_.resize(names);
  ids_.resize(ids);
  outputs_.resize(outputs);
}

OpIndex StepLog::ops_begun() const {
  return static_cast<OpIndex>(std::count_if(events_.begin(), events_.end(), [](const StepEvent& event) {
    return event.kind == StepEvent::Kind::kOpBegin;
  }));
}

Status StepLog::replay_into(StepHooks& hooks, std::size_t count) const {
  for (std::size_t i = 0; i < count && i < events_.size(); ++i) {
    const StepEvent& event = events_[i];
    switch (event.kind) {
      case StepEvent::Kind::kOpBegin:
        HO_RETURN_IF_ERROR(hooks.on_op_begin(name(event), ids(event), written(event)));
        break;
      case StepEvent::Kind::kAllocate:
        if (Result<void*> ptr = hooks.allocate_output(event.id, event.size_bytes); !ptr) {
          return std::unexpected(std::move(ptr.error()));
        }
        break;
      case StepEvent::Kind::kRecomputable:
        HO_RETURN_IF_ERROR(hooks.mark_recomputable(event.how));
        break;
      case StepEvent::Kind::kOpEnd:
        HO_RETURN_IF_ERROR(hooks.on_op_end(outputs(event), ids(event)));
        break;
      case StepEvent::Kind::kFreed:
        HO_RETURN_IF_ERROR(hooks.on_storage_freed(event.id));
        break;
    }
  }
  return ok_status();
}

}  // namespace hyperoffload
