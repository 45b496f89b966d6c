#include "testing/recomputable.h"

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

namespace hyperoffload::testing {

Trace with_recomputable_ops(const Trace& trace) {
  std::vector<OpIndex> first_access(static_cast<std::size_t>(trace.storage_count()), -1);
  TraceBuilder builder;
  builder.set_memory_limit_bytes(trace.memory_limit_bytes());
  builder.set_d2h_bandwidth_gib_per_s(trace.d2h_bandwidth_gib_per_s());
  builder.set_h2d_bandwidth_gib_per_s(trace.h2d_bandwidth_gib_per_s());
  for (const StorageInfo& info : trace.storages()) {
    EXPECT_TRUE(builder.add_storage(info.id, info.size_bytes, info.retention));
  }
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    const std::span<const Access> accesses = trace.accesses(op);
    bool eligible = false;
    for (const Access& access : accesses) {
      if (access.kind != AccessKind::kWrite) continue;
      eligible = true;
      const OpIndex first = first_access[static_cast<std::size_t>(access.storage)];
      const bool read_here = std::any_of(accesses.begin(), accesses.end(), [&](const Access& other) {
        return other.storage == access.storage && other.kind == AccessKind::kRead;
      });
      if ((first >= 0 && first != op) || read_here) {
        eligible = false;
        break;
      }
    }
    EXPECT_TRUE(builder.add_op(trace.op_name(op), trace.op_duration_ms(op),
                               eligible ? Recomputable::kYes : Recomputable::kNo));
    for (const Access& access : accesses) {
      builder.add_access(trace.storage(access.storage).id, access.kind);
      OpIndex& first = first_access[static_cast<std::size_t>(access.storage)];
      if (first < 0) first = op;
    }
  }
  Result<Trace> built = std::move(builder).build();
  EXPECT_TRUE(built) << built.error().message;
  return built ? std::move(*built) : Trace();
}

}  // namespace hyperoffload::testing
