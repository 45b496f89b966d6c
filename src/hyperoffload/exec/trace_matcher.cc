#include "hyperoffload/exec/trace_matcher.h"

#include <algorithm>

#include <fmt/format.h>

#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/exec/step_log.h"

namespace hyperoffload {

TraceMatcher::TraceMatcher(const Trace& trace, const ReplayGuide& guide) : trace_(&trace), guide_(&guide) {
  traced_of_.reserve(static_cast<std::size_t>(trace.storage_count()));
}

std::string TraceMatcher::op_label(OpIndex op) const {
  if (op >= trace_->op_count()) return fmt::format("op {}", op);
  return fmt::format("op {} ({})", op, trace_->op_name(op));
}

std::optional<Mismatch> TraceMatcher::check_begin(OpIndex op, std::string_view name,
                                                  std::span<const StorageId> inputs) const {
  if (op >= trace_->op_count()) {
    return Mismatch{Differs::kOps,
                    fmt::format("op {} (\"{}\"): the traced step has only {} ops", op, name, trace_->op_count())};
  }
  if (name != trace_->op_name(op)) {
    return Mismatch{Differs::kOps, fmt::format("op {}: the step runs \"{}\" where the traced step ran \"{}\"", op,
                                               name, trace_->op_name(op))};
  }
  const std::span<const StorageIndex> expected = guide_->inputs(op);
  if (inputs.size() != expected.size()) {
    return Mismatch{Differs::kOps, fmt::format("{}: it reads {} tracked storages; the traced op read {}",
                                               op_label(op), inputs.size(), expected.size())};
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<StorageIndex> index = traced(inputs[i]);
    if (!index) {
      return Mismatch{Differs::kUntracked,
                      fmt::format("{}: input storage {} is not tracked in this step; pass only storages produced by "
                                  "earlier ops of the step and not yet freed",
                                  op_label(op), inputs[i])};
    }
    if (*index != expected[i]) {
      return Mismatch{Differs::kOps,
                      fmt::format("{}: input {} is the storage traced as {}; the traced op read storage {} there",
                                  op_label(op), i, trace_->storage(*index).id, trace_->storage(expected[i]).id)};
    }
  }
  return std::nullopt;
}

std::optional<Mismatch> TraceMatcher::check_allocation(OpIndex op, std::size_t allocated) const {
  const std::size_t expected = guide_->outputs(op).size();
  if (allocated < expected) return std::nullopt;
  return Mismatch{Differs::kOps, fmt::format("{}: it allocates more than the {} outputs the traced op produced",
                                             op_label(op), expected)};
}

std::optional<Mismatch> TraceMatcher::check_outputs(OpIndex op, std::span<const OpOutput> outputs) const {
  const std::span<const StorageIndex> expected = guide_->outputs(op);
  if (outputs.size() != expected.size()) {
    return Mismatch{Differs::kOps, fmt::format("{}: it produced {} outputs; the traced op produced {}", op_label(op),
                                               outputs.size(), expected.size())};
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const std::int64_t traced_size = trace_->storage(expected[i]).size_bytes;
    if (outputs[i].size_bytes != traced_size) {
      return Mismatch{Differs::kShapes,
                      fmt::format("{}: output {} is {} bytes; the traced output (storage {}) was {}", op_label(op), i,
                                  outputs[i].size_bytes, trace_->storage(expected[i]).id, traced_size)};
    }
  }
  return std::nullopt;
}

std::optional<Mismatch> TraceMatcher::check_mutated(OpIndex op, std::span<const StorageId> mutated) const {
  const std::span<const StorageIndex> expected = guide_->mutated(op);
  bool same = mutated.size() == expected.size();
  for (std::size_t i = 0; same && i < mutated.size(); ++i) same = traced(mutated[i]) == expected[i];
  if (same) return std::nullopt;
  return Mismatch{Differs::kOps, fmt::format("{}: it wrote {} of its inputs in place; the traced op wrote {} "
                                             "(or different ones)",
                                             op_label(op), mutated.size(), expected.size())};
}

std::optional<Mismatch> TraceMatcher::check_end(OpIndex ops) const {
  if (ops == trace_->op_count()) return std::nullopt;
  return Mismatch{Differs::kOps,
                  ops < trace_->op_count()
                      ? fmt::format("it ended after {} ops; the traced step has {} (op {} was \"{}\")", ops,
                                    trace_->op_count(), ops, trace_->op_name(ops))
                      : fmt::format("it ran {} ops; the traced step has {}", ops, trace_->op_count())};
}

void TraceMatcher::bind_outputs(OpIndex op, std::span<const OpOutput> outputs) {
  const std::span<const StorageIndex> expected = guide_->outputs(op);
  for (std::size_t i = 0; i < outputs.size() && i < expected.size(); ++i) {
    traced_of_.insert_or_assign(outputs[i].id, expected[i]);
  }
}

std::optional<StorageIndex> TraceMatcher::unbind(StorageId id) {
  auto it = traced_of_.find(id);
  if (it == traced_of_.end()) return std::nullopt;
  const StorageIndex traced = it->second;
  traced_of_.erase(it);
  return traced;
}

std::optional<StorageIndex> TraceMatcher::traced(StorageId id) const {
  auto it = traced_of_.find(id);
  if (it == traced_of_.end()) return std::nullopt;
  return it->second;
}

bool matches_prefix(const ReplayPlan& plan, const StepLog& log, bool complete) {
  TraceMatcher matcher(plan.trace(), plan.guide());
  OpIndex op = 0;
  bool in_op = false;
  std::size_t allocated = 0;
  for (const StepEvent& event : log.events()) {
    switch (event.kind) {
      case StepEvent::Kind::kOpBegin:
        if (in_op || matcher.check_begin(op, log.name(event), log.ids(event))) return false;
        in_op = true;
        allocated = 0;
        break;
      case StepEvent::Kind::kAllocate:
        if (!in_op || matcher.check_allocation(op, allocated++)) return false;
        break;
      case StepEvent::Kind::kRecomputable:
        break;
      case StepEvent::Kind::kOpEnd:
        if (!in_op || matcher.check_outputs(op, log.outputs(event)) || matcher.check_mutated(op, log.ids(event))) {
          return false;
        }
        matcher.bind_outputs(op, log.outputs(event));
        in_op = false;
        ++op;
        break;
      case StepEvent::Kind::kFreed:
        matcher.unbind(event.id);
        break;
    }
  }
  return !complete || (!in_op && !matcher.check_end(op));
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
