// Internal: a one-pass reader for trace files in the shape the writer gives
// them, for large traces.
//
// Note [Two trace readers]
// The DOM reader (trace_json.cc) parses the whole document into simdjson's
// tape, then looks each member up by key; on the 1M-op, 1M-storage random
// trace (262 MiB) that was 1.3-1.5 s of the 2.0 s `plan` may take end to end
// (BENCHMARKS.md, "1M ops end to end"), most of it writing and reading the
// tape. This reader builds the trace straight from the bytes, in one pass
// with no intermediate tree, and accepts only a strict subset of valid trace
// files: the members the format defines, each once, storages before ops;
// strings without escapes; integers without sign, fraction or exponent and
// at most 18 digits; an op's "accesses" last among its members. Everything
// else — an unknown member, an escape, any malformed JSON or invalid value,
// any error the trace builder reports — makes it give up, and the caller
// reads the file with the DOM reader, which ignores unknown members and
// names every error with its JSON path and line. So the fast reader never
// decides what a file means or what its error is: where it returns a trace,
// the DOM reader returns the same trace (tests/io/trace_fast_reader_test.cc
// compares them on generated, example and corpus traces).
//
// Bound: O(bytes) time, and no memory beyond the trace it builds.
#pragma once

#include <optional>
#include <string_view>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload::internal {

// The trace in `json`, or nullopt when the text is not in the subset above
// (then the DOM reader decides what it is). `json` is the whole document.
std::optional<Trace> read_trace_fast(std::string_view json);

}  // namespace hyperoffload::internal
