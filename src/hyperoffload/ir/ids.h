// Identifier vocabulary shared by every layer.
//
// Glossary (used throughout hyperoffload):
//   op        one operator of a training step, in execution order. Identified by
//             its position in the trace (`OpIndex`, 0-based).
//   storage   a block of device memory that ops read and write (a tensor's
//             storage; views share it). Identified in files by a user-chosen
//             non-negative integer (`StorageId`) and internally by its dense
//             position in Trace::storages (`StorageIndex`).
//   access    one op touching one storage, as a read or a write.
//   resident  a storage whose bytes occupy device memory.
//   offload   copy a storage device→host (D2H) and release its device memory.
//   prefetch  copy it back host→device (H2D) before its next access.
//   schedule  the actions (copy_d2h, release_device, copy_h2d, release_host) run
//             before ("pre") or after ("post") each op.
//   budget    the device-memory limit a schedule must keep to, in bytes.
#pragma once

#include <cstdint>

namespace hyperoffload {

using OpIndex = std::int32_t;       // position in Trace::ops
using StorageId = std::int64_t;     // external id, as written in trace/schedule files
using StorageIndex = std::int32_t;  // dense position in Trace::storages

inline constexpr std::int64_t kBytesPerGiB = std::int64_t{1} << 30;

}  // namespace hyperoffload
