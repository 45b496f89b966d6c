// Internal: the step skeleton the warmup and replay executors share — what
// every step checks and does around its own policy (online eviction for the
// warmup, the plan's actions for the replay), with one wording for errors.
//
// Thread-safety: none; used from the executor's single caller thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/internal/hook_util.h"
#include "hyperoffload/exec/internal/op_allocations.h"
#include "hyperoffload/ir/status.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload::internal {

// start(): a step begins with a residency manager that tracks nothing.
inline Status check_fresh_residency(const ResidencyManager& residency, std::string_view executor) {
  if (residency.stats().storages == 0) return ok_status();
  return make_error(ErrorCode::kFailedPrecondition,
                    fmt::format("{}: the residency manager still tracks storages from an earlier step", executor));
}

// on_op_begin(): not inside an op (`op_label()` names the op still running,
// "op 12 (aten::mm)")...
template <class Label>
Status check_not_in_op(bool in_op, std::string_view name, const Label& op_label) {
  if (!in_op) return ok_status();
  return make_error(ErrorCode::kFailedPrecondition,
                    fmt::format("on_op_begin(\"{}\") inside {}: the previous op did not end", name, op_label()));
}

// ... and `written` a subset of `inputs` (`op_label()` names the new op).
template <class Label>
Status check_written(std::span<const StorageId> inputs, std::span<const StorageId> written, const Label& op_label) {
  for (StorageId id : written) {
    if (!contains(inputs, id)) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: written storage {} is not among the op's inputs", op_label(), id));
    }
  }
  return ok_status();
}

// on_op_end(): binds one output — claimed when the runtime allocated it
// (allocate_output), else the caller's buffer, adopted.
template <class Label>
Status take_output(OpAllocations& allocated, ResidencyManager& residency, const OpOutput& output,
                   const Label& op_label) {
  HO_ASSIGN_OR_RETURN(const bool claimed, allocated.claim(output, op_label));
  if (claimed) return ok_status();
  if (Status adopted = residency.adopt(output.id, output.size_bytes, AdoptedBuffer{output.device_ptr, output.release});
      !adopted) {
    return std::unexpected(in_context(std::move(adopted.error()), op_label()));
  }
  return ok_status();
}

// finish(): a storage the caller still holds ends the step on the device with
// no host copy; paging one back counts as an end restore.
struct EndRestores {
  std::int64_t count = 0;
  std::int64_t bytes = 0;
};
inline Status restore_held(ResidencyManager& residency, StorageId id, std::int64_t size_bytes, EndRestores& restores) {
  if (!residency.resident(id)) {
    if (auto ptr = residency.device_ptr(id); !ptr) {
      return std::unexpected(in_context(std::move(ptr.error()), fmt::format("restoring held storage {}", id)));
    }
    ++restores.count;
    restores.bytes += size_bytes;
  }
  return residency.release_host(id);
}

}  // namespace hyperoffload::internal
