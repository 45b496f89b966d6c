// Writes a Timeline as Chrome trace-event JSON (opens in Perfetto and
// chrome://tracing): a compute track, one track per copy engine and a
// device-memory counter track, times in microseconds.
#pragma once

#include <string>

#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

std::string timeline_to_chrome_json(const Trace& trace, const Timeline& timeline);

}  // namespace hyperoffload
