// Internal: FNV-1a, 64 bits — the hash of the session's plan fingerprint
// (Session::plan_fingerprint_of) and of a step program's key in the op-time
// store (step_program_key). Stable across runs, builds and machines, which
// both need: they name things on disk and in logs.
#pragma once

#include <cstdint>
#include <string_view>

namespace hyperoffload::internal {

class Fnv1a {
 public:
  // The value's eight bytes, lowest first.
  void mix(std::uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash_ ^= (value >> (8 * byte)) & 0xffu;
      hash_ *= 1099511628211ull;
    }
  }
  // Its length, then its bytes: ("ab", "c") and ("a", "bc") differ.
  void mix(std::string_view text) {
    mix(static_cast<std::uint64_t>(text.size()));
    for (char c : text) {
      hash_ ^= static_cast<unsigned char>(c);
      hash_ *= 1099511628211ull;
    }
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

}  // namespace hyperoffload::internal
