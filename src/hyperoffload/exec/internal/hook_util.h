// Internal: small helpers shared by the warmup and replay executors.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload::internal {

// Prefixes an error's message with where it happened ("op 12 (aten::mm): ...").
inline Error in_context(Error error, std::string_view context) {
  error.message = fmt::format("{}: {}", context, error.message);
  return error;
}

inline bool contains(std::span<const StorageId> ids, StorageId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace hyperoffload::internal
