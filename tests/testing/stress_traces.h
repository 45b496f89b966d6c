// The small random traces of the replay stress test (tests/exec/
// replay_stress_test.cc), by seed: 20-79 ops, 5-44 storages of 8 B to 16 KiB,
// a memory limit of 30-80% of the peak, and recomputable ops (60%) in the
// traces of even seeds. A planner test that reproduces one of its findings
// takes the same trace from here.
#pragma once

#include <cstdint>

#include "hyperoffload/gen/random_trace.h"

namespace hyperoffload::testing {

RandomTraceOptions stress_trace_options(std::uint64_t seed);

}  // namespace hyperoffload::testing
