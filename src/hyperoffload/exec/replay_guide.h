// ReplayGuide: what each traced op consumed and produced, so a replayed step
// can be matched to the traced one op by op.
//
// Per op: its inputs (the storages it reads, in argument order), its outputs
// (the storages it produced, in order: the ids a replayed op's outputs are
// bound to) and its mutated inputs. A trace recorded by the warmup executor
// lists each op's accesses as reads of its inputs, writes of its outputs, then
// writes of its mutated inputs, and an output is exactly a write that is its
// storage's first access — so the guide is derived from the trace alone, and a
// trace saved to a file and loaded back replays the same way.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

class ReplayGuide {
 public:
  // Fails when a storage is read before any op writes it (such a trace does not
  // come from a step that produces its storages).
  static Result<ReplayGuide> from_trace(const Trace& trace);

  OpIndex op_count() const { return static_cast<OpIndex>(inputs_.offsets.size()) - 1; }
  std::span<const StorageIndex> inputs(OpIndex op) const { return inputs_.of(op); }
  std::span<const StorageIndex> outputs(OpIndex op) const { return outputs_.of(op); }
  std::span<const StorageIndex> mutated(OpIndex op) const { return mutated_.of(op); }

 private:
  struct PerOp {
    std::vector<std::uint32_t> offsets{0};
    std::vector<StorageIndex> items;
    std::span<const StorageIndex> of(OpIndex op) const {
      const auto o = static_cast<std::size_t>(op);
      return std::span<const StorageIndex>(items).subspan(offsets[o], offsets[o + 1] - offsets[o]);
    }
  };
  PerOp inputs_;
  PerOp outputs_;
  PerOp mutated_;
};

}  // namespace hyperoffload
