// The trace file format, "hyperoffload.trace" version 1 (docs/FORMATS.md).
//
// Parsing uses simdjson (about 1 GB/s); a malformed document is re-scanned to
// report line and column. Every error is ErrorCode::kInvalidInput (or kIo for a
// file that cannot be read) and names the JSON path of the problem.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

inline constexpr std::string_view kTraceFormat = "hyperoffload.trace";
// Readers accept versions 1 to 3 (2 adds ops[].recomputable, a v1 trace has
// nothing recomputable; 3 adds ops[].rng_replay). Writers write the lowest
// version that holds the trace: 3 when an op needs RNG replay, else 2.
inline constexpr int kTraceVersion = 3;
inline constexpr int kTraceVersionWithoutRngReplay = 2;
inline constexpr int kOldestTraceVersion = 1;

// `source` names the document in syntax-error messages (usually the file path).
Result<Trace> parse_trace_json(std::string_view json, std::string_view source = "<trace>");
Result<Trace> read_trace_file(const std::filesystem::path& path);

// Serialises a trace; parse_trace_json(trace_to_json(t)) reproduces t exactly.
std::string trace_to_json(const Trace& trace);
Status write_trace_file(const Trace& trace, const std::filesystem::path& path);

}  // namespace hyperoffload
