// Trace reader (io/trace_json.h) on arbitrary bytes: every input gives a trace
// or an error that names its place (a JSON path, or line:column for malformed
// JSON) — never a crash, a hang, a leak or unbounded memory (libFuzzer's limits,
// scripts/run-fuzzers.sh). An accepted trace survives the writer: written,
// read back and written again it gives the same bytes, and its totals stay
// within the trace limits (docs/FORMATS.md, "Limits"). Where the one-pass
// reader takes the input (Note [Two trace readers]), the DOM reader gives the
// same trace.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "hyperoffload/io/internal/trace_fast_reader.h"
#include "hyperoffload/io/trace_json.h"

using namespace hyperoffload;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  Result<Trace> trace = parse_trace_json(json, "<fuzz>");
  if (!trace) {
    FUZZ_CHECK(trace.error().code == ErrorCode::kInvalidInput, "error code {} for: {}",
               to_string(trace.error().code), trace.error().message);
    FUZZ_CHECK(fuzz::error_names_a_place(trace.error().message, "<fuzz>"), "error names no place: {}",
               trace.error().message);
    return 0;
  }
  if (internal::read_trace_fast(json)) {
    // A first member whose key has an escape sends the text to the DOM
    // reader, which ignores it (the one-pass reader took a document that is
    // an object with members).
    const std::size_t open = json.find('{');
    const std::string for_dom = "{\"\\u0078\": 0, " + std::string(json.substr(open + 1));
    Result<Trace> dom = parse_trace_json(for_dom, "<fuzz>");
    FUZZ_CHECK(dom.has_value(), "the one-pass reader took what the DOM reader rejects: {}",
               dom ? "" : dom.error().message);
    FUZZ_CHECK(trace_to_json(*dom) == trace_to_json(*trace), "the two readers read different traces");
  }
  FUZZ_CHECK(std::isfinite(trace->total_compute_ms()) && trace->total_compute_ms() <= TraceBuilder::kMaxTotalMs,
             "accepted a trace with {} ms of compute", trace->total_compute_ms());
  const std::string written = trace_to_json(*trace);
  Result<Trace> again = parse_trace_json(written, "<written>");
  FUZZ_CHECK(again.has_value(), "the writer's output does not read back: {}\n{}",
             again ? "" : again.error().message, written);
  const std::string rewritten = trace_to_json(*again);
  FUZZ_CHECK(rewritten == written, "write → read → write changed the trace:\n{}\n---\n{}", written, rewritten);
  return 0;
}
