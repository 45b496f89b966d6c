// Test helper: a trace with every op that can be recomputed marked so (trace
// format v2, ir/trace.h Recomputable): it writes at least one storage, and
// each storage it writes is created by that op and not read by it. Used to
// turn random v1-style traces into v2 ones for property tests.
#pragma once

#include "hyperoffload/ir/trace.h"

namespace hyperoffload::testing {

// Fails the current test (and returns an empty trace) if the result does not build.
Trace with_recomputable_ops(const Trace& trace);

}  // namespace hyperoffload::testing
