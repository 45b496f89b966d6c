// Internal: typed, path-aware reading of simdjson DOM values for the file
// formats. Every error names the JSON path of the offending value
// ("ops[12].accesses[3].kind: expected a string, got number").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "hyperoffload/ir/status.h"

namespace hyperoffload::internal {

// The deepest nesting of arrays and objects the readers accept. Trace and
// schedule files need 5 (document, ops, op, accesses, access); the rest is for
// producers' own keys (unknown keys are ignored). docs/FORMATS.md, "Limits".
inline constexpr std::size_t kMaxJsonDepth = 64;

// Parses `json` (a whole document) into `parser`'s DOM. A syntax error is
// reported as "<source>:<line>:<column>: malformed JSON: <reason>", nesting
// deeper than kMaxJsonDepth as "<source>:<line>:<column>: JSON nested deeper
// than 64 levels ...", pointing at the bracket that goes too deep.
Result<simdjson::dom::element> parse_document(simdjson::dom::parser& parser,
                                              const simdjson::padded_string& json,
                                              std::string_view source);

const char* json_type_name(simdjson::dom::element_type type);

// Returns the member or nullopt when absent.
std::optional<simdjson::dom::element> member(simdjson::dom::object object, std::string_view key);

Result<simdjson::dom::object> as_object(simdjson::dom::element value, const std::string& path);
Result<simdjson::dom::array> as_array(simdjson::dom::element value, const std::string& path);
Result<std::int64_t> as_int64(simdjson::dom::element value, const std::string& path);
Result<double> as_number(simdjson::dom::element value, const std::string& path);
Result<bool> as_bool(simdjson::dom::element value, const std::string& path);
Result<std::string_view> as_string(simdjson::dom::element value, const std::string& path);

// Checks the "format" and "version" members of a file's top-level object and
// returns the version, which must be in [min_version, max_version].
Result<std::int64_t> check_header(simdjson::dom::object root, std::string_view expected_format,
                                  std::int64_t min_version, std::int64_t max_version);

// Appends `text` as a JSON string literal (with quotes) to `out`.
void append_json_string(std::string& out, std::string_view text);

}  // namespace hyperoffload::internal
