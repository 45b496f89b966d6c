// Internal: the outputs the runtime allocated for the current op through
// allocate_output, until on_op_end claims them. Shared by the warmup and replay
// executors, which check an op's outputs against it the same way.
//
// Thread-safety: none; used from the executor's single caller thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload::internal {

class OpAllocations {
 public:
  void clear() { allocated_.clear(); }
  void add(StorageId id, std::int64_t size_bytes) { allocated_.emplace_back(id, size_bytes); }
  std::size_t size() const { return allocated_.size(); }

  bool contains(StorageId id) const { return find(id) != allocated_.end(); }

  // Claims `output` if the runtime allocated it: true, or an error when the
  // op reports another size than it allocated; false for a caller-owned
  // output. `op_label()` names the op in errors ("op 12 (aten::mm)"); it is
  // called only for an error (these run for every op of every step).
  template <class Label>
  Result<bool> claim(const OpOutput& output, const Label& op_label) {
    auto allocated = find(output.id);
    if (allocated == allocated_.end()) return false;
    if (allocated->second != output.size_bytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: output storage {} is {} bytes but was allocated with {}", op_label(),
                                    output.id, output.size_bytes, allocated->second));
    }
    allocated_.erase(allocated);
    return true;
  }

  // After every output was claimed: an error naming a storage allocated for
  // the op but not reported among its outputs.
  template <class Label>
  Status check_all_claimed(const Label& op_label) const {
    if (allocated_.empty()) return ok_status();
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: storage {} was allocated with allocate_output but is not among the outputs",
                                  op_label(), allocated_.front().first));
  }

 private:
  using Entry = std::pair<StorageId, std::int64_t>;  // (id, size_bytes)

  std::vector<Entry>::const_iterator find(StorageId id) const {
    return std::find_if(allocated_.begin(), allocated_.end(), [id](const Entry& e) { return e.first == id; });
  }
  std::vector<Entry>::iterator find(StorageId id) {
    return std::find_if(allocated_.begin(), allocated_.end(), [id](const Entry& e) { return e.first == id; });
  }

  std::vector<Entry> allocated_;
};

}  // namespace hyperoffload::internal
