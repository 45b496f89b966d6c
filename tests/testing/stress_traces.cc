#include "testing/stress_traces.h"

#include <random>

namespace hyperoffload::testing {

RandomTraceOptions stress_trace_options(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  RandomTraceOptions options;
  options.seed = seed;
  options.op_count = 20 + static_cast<std::int32_t>(rng() % 60);
  options.storage_count = 5 + static_cast<std::int32_t>(rng() % 40);
  options.min_size_bytes = 8;
  options.max_size_bytes = 16 << 10;
  options.limit_fraction = 0.3 + 0.5 * static_cast<double>(rng() % 100) / 100.0;
  // Half the traces have recomputable ops, so the hybrid and recompute-only
  // planners' schedules re-run ops through the program (ChecksumProgram::recompute).
  options.recomputable_fraction = seed % 2 == 0 ? 0.6 : 0.0;
  return options;
}

}  // namespace hyperoffload::testing
