#include "hyperoffload/exec/replay_guide.h"

#include <fmt/format.h>

namespace hyperoffload {

Result<ReplayGuide> ReplayGuide::from_trace(const Trace& trace) {
  ReplayGuide guide;
  std::vector<bool> produced(static_cast<std::size_t>(trace.storage_count()), false);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (const Access& access : trace.accesses(op)) {
      const auto s = static_cast<std::size_t>(access.storage);
      if (access.kind == AccessKind::kRead) {
        if (!produced[s]) {
          return make_error(ErrorCode::kInvalidInput,
                            fmt::format("ops[{}] ({}): storage {} is read before any op writes it; a replayable "
                                        "trace produces every storage it tracks inside the step",
                                        op, trace.op_name(op), trace.storage(access.storage).id));
        }
        guide.inputs_.items.push_back(access.storage);
      } else if (!produced[s]) {
        produced[s] = true;
        guide.outputs_.items.push_back(access.storage);
      } else {
        guide.mutated_.items.push_back(access.storage);
      }
    }
    guide.inputs_.offsets.push_back(static_cast<std::uint32_t>(guide.inputs_.items.size()));
    guide.outputs_.offsets.push_back(static_cast<std::uint32_t>(guide.outputs_.items.size()));
    guide.mutated_.offsets.push_back(static_cast<std::uint32_t>(guide.mutated_.items.size()));
  }
  return guide;
}

}  // namespace hyperoffload
