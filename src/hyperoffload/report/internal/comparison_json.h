// Internal: the JSON that `compare --json` and `compare --sweep --json` open
// with — the trace, its copy engines and the device — written once for both.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "hyperoffload/report/comparison.h"

namespace hyperoffload::internal {

// Sets root["trace"], root["copy_engines"] and root["memory_cap"].
void add_comparison_header(nlohmann::ordered_json& root, const Comparison& comparison, std::string_view trace_label);

}  // namespace hyperoffload::internal
