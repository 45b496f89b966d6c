// Internal: AddressSanitizer poisoning of memory the runtime holds but nobody
// may touch (free arena ranges, pooled host blocks). No-ops without ASan.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace hyperoffload::internal {

inline void poison_memory(const void* ptr, std::int64_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  if (bytes > 0) ASAN_POISON_MEMORY_REGION(ptr, static_cast<std::size_t>(bytes));
#else
  (void)ptr;
  (void)bytes;
#endif
}

inline void unpoison_memory(const void* ptr, std::int64_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  if (bytes > 0) ASAN_UNPOISON_MEMORY_REGION(ptr, static_cast<std::size_t>(bytes));
#else
  (void)ptr;
  (void)bytes;
#endif
}

}  // namespace hyperoffload::internal
