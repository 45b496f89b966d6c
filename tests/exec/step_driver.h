// Test helper: drives StepHooks with byte-filled storages. Each output is
// filled with a byte derived from its id, each in-place write bumps it, and
// every input is checked before the op "runs" — so lost or stale data shows up
// as a failed expectation naming the op and storage.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "hyperoffload/exec/hooks.h"

namespace hyperoffload::testing {

class StepDriver {
 public:
  explicit StepDriver(StepHooks& hooks) : hooks_(hooks) {}

  struct Out {
    StorageId id;
    std::int64_t size_bytes;
  };

  // Returns the first error (and stops), or ok.
  Status op(const std::string& name, std::vector<StorageId> inputs, std::vector<Out> outputs,
            std::vector<StorageId> written = {}) {
    HO_RETURN_IF_ERROR(hooks_.on_op_begin(name, inputs, written));
    for (StorageId id : inputs) check(name, id);
    std::vector<OpOutput> reported;
    for (const Out& out : outputs) {
      HO_ASSIGN_OR_RETURN(void* ptr, hooks_.allocate_output(out.id, out.size_bytes));
      expected_[out.id] = static_cast<unsigned char>(out.id * 13 + 1);
      sizes_[out.id] = out.size_bytes;
      if (out.size_bytes > 0) std::memset(ptr, expected_[out.id], static_cast<std::size_t>(out.size_bytes));
      reported.push_back(OpOutput{out.id, out.size_bytes, nullptr, {}});
    }
    for (StorageId id : written) {
      HO_ASSIGN_OR_RETURN(void* ptr, hooks_.device_ptr(id));
      expected_[id] = static_cast<unsigned char>(expected_[id] + 1);
      if (sizes_[id] > 0) std::memset(ptr, expected_[id], static_cast<std::size_t>(sizes_[id]));
    }
    return hooks_.on_op_end(reported, written);
  }

  Status free(StorageId id) {
    expected_.erase(id);
    return hooks_.on_storage_freed(id);
  }

  // Checks a storage's bytes through device_ptr.
  void check(const std::string& where, StorageId id) {
    Result<void*> ptr = hooks_.device_ptr(id);
    ASSERT_TRUE(ptr.has_value()) << where << ": " << ptr.error().message;
    const auto* bytes = static_cast<const unsigned char*>(*ptr);
    for (std::int64_t i = 0; i < sizes_[id]; ++i) {
      ASSERT_EQ(bytes[i], expected_[id]) << where << ": storage " << id << " byte " << i;
    }
  }

 private:
  StepHooks& hooks_;
  std::map<StorageId, unsigned char> expected_;
  std::map<StorageId, std::int64_t> sizes_;
};

}  // namespace hyperoffload::testing
