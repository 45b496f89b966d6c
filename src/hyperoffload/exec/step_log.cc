#include "hyperoffload/exec/step_log.h"

#include <algorithm>

namespace hyperoffload {

void StepLog::op_begin(std::string_view name, std::span<const StorageId> inputs, std::span<const StorageId> written) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kOpBegin;
  event.name.assign(name);
  event.ids.assign(inputs.begin(), inputs.end());
  event.written.assign(written.begin(), written.end());
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
  for (const OpOutput& output : outputs) event.outputs.push_back(OpOutput{output.id, output.size_bytes, output.device_ptr, {}});
  event.ids.assign(mutated.begin(), mutated.end());
}

void StepLog::freed(StorageId id) {
  StepEvent& event = events_.emplace_back();
  event.kind = StepEvent::Kind::kFreed;
  event.id = id;
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
        HO_RETURN_IF_ERROR(hooks.on_op_begin(event.name, event.ids, event.written));
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
        HO_RETURN_IF_ERROR(hooks.on_op_end(event.outputs, event.ids));
        break;
      case StepEvent::Kind::kFreed:
        HO_RETURN_IF_ERROR(hooks.on_storage_freed(event.id));
        break;
    }
  }
  return ok_status();
}

}  // namespace hyperoffload
