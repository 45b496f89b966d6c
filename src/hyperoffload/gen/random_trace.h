// Random traces for property tests, fuzzing and scale benchmarks.
//
// Each storage is written first at a random op, then accessed again a few
// times at increasing ops: mostly reads, some writes (new versions), some
// read+write pairs in one op (in-place updates; an op touching only that
// storage this way is "alias-forward"). Gaps mix short hops with long jumps so
// that traces have both adjacent and long-interior candidates. With
// recomputable_fraction > 0, that share of the ops that may be recomputed —
// those writing at least one storage and only storages they create (their
// first access), without reading them — is marked recomputable (trace format
// v2), and that share of the in-place followers (Note [In-place units] in
// ir/trace.h); the marks come from their own random streams, so the accesses
// do not depend on the fraction. Generation is O(ops + storages + accesses) and
// deterministic for a seed.
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

struct RandomTraceOptions {
  std::int32_t op_count = 100;
  std::int32_t storage_count = 50;
  std::uint64_t seed = 1;
  std::int64_t min_size_bytes = 4096;            // sizes are log-uniform in [min, max]
  std::int64_t max_size_bytes = 64ll << 20;
  double zero_size_fraction = 0.02;              // storages of size 0 (edge cases)
  double retained_fraction = 0.05;               // storages marked retained
  std::int32_t max_extra_accesses = 6;           // accesses after the first write
  double write_fraction = 0.2;                   // extra accesses that write
  double in_place_fraction = 0.05;               // extra accesses that read and write
  double max_duration_ms = 1.0;                  // op durations uniform in [0, max]
  // memory_limit_bytes = this fraction of the unplanned peak; nullopt = unlimited.
  std::optional<double> limit_fraction = 0.5;
  double bandwidth_gib_per_s = kDefaultBandwidthGiBPerS;
  // Share of the eligible ops (see above) marked recomputable, in [0, 1].
  double recomputable_fraction = 0.0;
};

// Precondition: op_count >= 0, storage_count >= 0, min <= max sizes.
Trace generate_random_trace(const RandomTraceOptions& options);

}  // namespace hyperoffload
