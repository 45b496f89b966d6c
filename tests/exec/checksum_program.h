// Test helper: replays a trace's access pattern as a program through
// StepHooks, with checksummed data. Every output is filled with a pattern
// derived from (traced storage id, version); every in-place write makes a new
// version; every access first checks that the bytes are the current version's
// pattern. Storages that are not retained are freed right after their last
// access, like a framework dropping tensors.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload::testing {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The pattern of one version of one storage, 8 bytes at a time.
inline void fill_pattern(void* ptr, std::int64_t bytes, StorageId id, std::int32_t version) {
  const std::uint64_t seed =
      splitmix64(static_cast<std::uint64_t>(id) * 1000003u + static_cast<std::uint64_t>(version));
  auto* out = static_cast<unsigned char*>(ptr);
  for (std::int64_t i = 0; i < bytes; i += 8) {
    const std::uint64_t word = splitmix64(seed + static_cast<std::uint64_t>(i));
    std::memcpy(out + i, &word, static_cast<std::size_t>(std::min<std::int64_t>(8, bytes - i)));
  }
}

inline bool has_pattern(const void* ptr, std::int64_t bytes, StorageId id, std::int32_t version) {
  const std::uint64_t seed =
      splitmix64(static_cast<std::uint64_t>(id) * 1000003u + static_cast<std::uint64_t>(version));
  const auto* in = static_cast<const unsigned char*>(ptr);
  for (std::int64_t i = 0; i < bytes; i += 8) {
    const std::uint64_t word = splitmix64(seed + static_cast<std::uint64_t>(i));
    if (std::memcmp(in + i, &word, static_cast<std::size_t>(std::min<std::int64_t>(8, bytes - i))) != 0) return false;
  }
  return true;
}

class ChecksumProgram {
 public:
  explicit ChecksumProgram(const Trace& trace) : trace_(trace), accesses_(trace) {}

  // Runs the whole step with caller ids = traced id + id_offset. Returns the
  // first hook error; data corruption is reported as kInternal naming the op,
  // storage and version. `accesses_checked` counts verified accesses.
  Status run(StepHooks& hooks, StorageId id_offset) {
    versions_.assign(static_cast<std::size_t>(trace_.storage_count()), 0);
    freed_at_.assign(static_cast<std::size_t>(trace_.storage_count()), -1);
    for (OpIndex op = 0; op < trace_.op_count(); ++op) {
      std::vector<StorageId> inputs, written, mutated;
      std::vector<StorageIndex> outputs;
      std::vector<bool> produced_here(static_cast<std::size_t>(trace_.storage_count()), false);
      for (const Access& access : trace_.accesses(op)) {
        const StorageId caller = trace_.storage(access.storage).id + id_offset;
        const bool first =
            accesses_.first_op(access.storage) == op && !produced_here[static_cast<std::size_t>(access.storage)];
        if (access.kind == AccessKind::kRead) {
          inputs.push_back(caller);
        } else if (first) {
          outputs.push_back(access.storage);
          produced_here[static_cast<std::size_t>(access.storage)] = true;
        } else {
          mutated.push_back(caller);
        }
      }
      for (StorageId id : mutated) {
        if (std::find(inputs.begin(), inputs.end(), id) != inputs.end()) written.push_back(id);
      }
      HO_RETURN_IF_ERROR(hooks.on_op_begin(trace_.op_name(op), inputs, written));
      for (const Access& access : trace_.accesses(op)) {
        if (access.kind != AccessKind::kRead) continue;
        HO_RETURN_IF_ERROR(verify(hooks, op, access.storage, id_offset, DeviceAccess::kRead));
      }
      std::vector<OpOutput> reported;
      for (StorageIndex s : outputs) {
        const StorageInfo& info = trace_.storage(s);
        HO_ASSIGN_OR_RETURN(void* ptr, hooks.allocate_output(info.id + id_offset, info.size_bytes));
        versions_[static_cast<std::size_t>(s)] = 1;
        fill_pattern(ptr, info.size_bytes, info.id, 1);
        reported.push_back(OpOutput{info.id + id_offset, info.size_bytes, nullptr, {}});
      }
      for (StorageId caller : mutated) {
        const StorageIndex s = *trace_.find_storage(caller - id_offset);
        HO_RETURN_IF_ERROR(verify(hooks, op, s, id_offset, DeviceAccess::kReadWrite));
        HO_ASSIGN_OR_RETURN(void* ptr, hooks.device_ptr(caller, DeviceAccess::kReadWrite));
        const std::int32_t version = ++versions_[static_cast<std::size_t>(s)];
        fill_pattern(ptr, trace_.storage(s).size_bytes, trace_.storage(s).id, version);
      }
      HO_RETURN_IF_ERROR(hooks.on_op_end(reported, mutated));
      for (const Access& access : trace_.accesses(op)) {
        const StorageInfo& info = trace_.storage(access.storage);
        if (info.retained() || accesses_.last_op(access.storage) != op) continue;
        if (freed_at_[static_cast<std::size_t>(access.storage)] == op) continue;  // several accesses in one op
        freed_at_[static_cast<std::size_t>(access.storage)] = op;
        HO_RETURN_IF_ERROR(hooks.on_storage_freed(info.id + id_offset));
      }
    }
    return ok_status();
  }

  // Checks every retained storage (after the step ended, through the session
  // or the executor that still tracks it).
  Status verify_retained(StepHooks& hooks, StorageId id_offset) {
    for (StorageIndex s = 0; s < trace_.storage_count(); ++s) {
      if (!trace_.storage(s).retained() || !accesses_.accessed(s)) continue;
      HO_RETURN_IF_ERROR(verify(hooks, trace_.op_count(), s, id_offset, DeviceAccess::kRead));
    }
    return ok_status();
  }

  std::int64_t accesses_checked() const { return checked_; }

 private:
  Status verify(StepHooks& hooks, OpIndex op, StorageIndex s, StorageId id_offset, DeviceAccess access) {
    const StorageInfo& info = trace_.storage(s);
    HO_ASSIGN_OR_RETURN(void* ptr, hooks.device_ptr(info.id + id_offset, access));
    ++checked_;
    const std::int32_t version = versions_[static_cast<std::size_t>(s)];
    if (!has_pattern(ptr, info.size_bytes, info.id, version)) {
      return make_error(ErrorCode::kInternal, fmt::format("op {}: storage {} ({} bytes) does not hold version {}", op,
                                                          info.id, info.size_bytes, version));
    }
    return ok_status();
  }

  const Trace& trace_;
  StorageAccesses accesses_;
  std::vector<std::int32_t> versions_;
  std::vector<OpIndex> freed_at_;
  std::int64_t checked_ = 0;
};

}  // namespace hyperoffload::testing
