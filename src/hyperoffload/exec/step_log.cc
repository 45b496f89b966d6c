#include "hyperoffload/exec/step_log.h"

#include <algorithm>
#include <unordered_map>

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

bool matches_prefix(const ReplayPlan& plan, const StepLog& log, bool complete) {
  const Trace& trace = plan.trace();
  const ReplayGuide& guide = plan.guide();
  std::unordered_map<StorageId, StorageIndex> traced_of;
  OpIndex op = 0;
  bool in_op = false;
  std::size_t allocated = 0;
  auto traced = [&](StorageId id) -> StorageIndex {
    auto it = traced_of.find(id);
    return it == traced_of.end() ? -1 : it->second;
  };
  for (const StepEvent& event : log.events()) {
    switch (event.kind) {
      case StepEvent::Kind::kOpBegin: {
        if (op >= trace.op_count() || event.name != trace.op_name(op)) return false;
        const std::span<const StorageIndex> expected = guide.inputs(op);
        if (event.ids.size() != expected.size()) return false;
        for (std::size_t i = 0; i < expected.size(); ++i) {
          if (traced(event.ids[i]) != expected[i]) return false;
        }
        in_op = true;
        allocated = 0;
        break;
      }
      case StepEvent::Kind::kAllocate:
        if (!in_op || ++allocated > guide.outputs(op).size()) return false;
        break;
      case StepEvent::Kind::kRecomputable:
        break;
      case StepEvent::Kind::kOpEnd: {
        if (!in_op) return false;
        const std::span<const StorageIndex> expected = guide.outputs(op);
        if (event.outputs.size() != expected.size()) return false;
        for (std::size_t i = 0; i < expected.size(); ++i) {
          if (event.outputs[i].size_bytes != trace.storage(expected[i]).size_bytes) return false;
          traced_of[event.outputs[i].id] = expected[i];
        }
        const std::span<const StorageIndex> mutated = guide.mutated(op);
        if (event.ids.size() != mutated.size()) return false;
        for (std::size_t i = 0; i < mutated.size(); ++i) {
          if (traced(event.ids[i]) != mutated[i]) return false;
        }
        in_op = false;
        ++op;
        break;
      }
      case StepEvent::Kind::kFreed:
        traced_of.erase(event.id);
        break;
    }
  }
  return !complete || (!in_op && op == trace.op_count());
}

bool same_program(const ReplayPlan& a, const ReplayPlan& b) {
  const Trace& ta = a.trace();
  const Trace& tb = b.trace();
  if (ta.op_count() != tb.op_count() || ta.storage_count() != tb.storage_count()) return false;
  for (StorageIndex s = 0; s < ta.storage_count(); ++s) {
    if (ta.storage(s).size_bytes != tb.storage(s).size_bytes) return false;
  }
  auto same = [](std::span<const StorageIndex> x, std::span<const StorageIndex> y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
  };
  for (OpIndex op = 0; op < ta.op_count(); ++op) {
    if (ta.op_name(op) != tb.op_name(op)) return false;
    if (!same(a.guide().inputs(op), b.guide().inputs(op)) || !same(a.guide().outputs(op), b.guide().outputs(op)) ||
        !same(a.guide().mutated(op), b.guide().mutated(op))) {
      return false;
    }
  }
  return true;
}

}  // namespace hyperoffload
