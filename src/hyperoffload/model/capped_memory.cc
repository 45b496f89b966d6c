#include "hyperoffload/model/capped_memory.h"

#include <algorithm>

namespace hyperoffload {

double CappedMemory::allocate(double at_ms, std::int64_t bytes) {
  if (bytes == 0) return at_ms;
  retire_until(at_ms);
  while (allocated_bytes_ - retired_bytes_ + bytes > cap_bytes_ && !pending_.empty()) {
    at_ms = std::max(at_ms, pending_.top().time_ms);
    retire_until(at_ms);
  }
  allocated_bytes_ += bytes;
  return at_ms;
}

void CappedMemory::retire_until(double time_ms) {
  while (!pending_.empty() && pending_.top().time_ms <= time_ms) {
    retired_bytes_ += pending_.top().bytes;
    pending_.pop();
  }
}

}  // namespace hyperoffload
