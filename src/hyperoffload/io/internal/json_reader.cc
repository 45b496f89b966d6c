#include "hyperoffload/io/internal/json_reader.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hyperoffload::internal {
namespace {

// nlohmann's SAX parser stops at the first syntax error and tells the byte
// position and reason; simdjson (fast path) does not. Used only after simdjson
// has already rejected the document.
class SyntaxErrorFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    position_ = position;
    reason_ = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix;
    // we print the position ourselves.
    if (auto colon = reason_.find(": "); colon != std::string::npos) reason_ = reason_.substr(colon + 2);
    found_ = true;
    return false;
  }
  bool found() const { return found_; }
  std::size_t position() const { return position_; }
  const std::string& reason() const { return reason_; }

 private:
  bool found_ = false;
  std::size_t position_ = 0;
  std::string reason_;
};

// "<line>:<column>" (1-based) of byte `offset` of `text`.
std::string line_column(std::string_view text, std::size_t offset) {
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < std::min(offset, text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("{}:{}", line, column);
}

// Offset of the first '[' or '{' (outside strings) that opens level
// kMaxJsonDepth + 1; text.size() when there is none.
std::size_t too_deep_offset(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return text.size();
}

}  // namespace

Result<simdjson::dom::element> parse_document(simdjson::dom::parser& parser,
                                              const simdjson::padded_string& json,
                                              std::string_view source) {
  simdjson::dom::element root;
  simdjson::error_code error = simdjson::SUCCESS;
  // Capacity for this document and the depth limit, in one allocation; a
  // document above simdjson's 4 GiB maximum is left to parse() to reject.
  if (parser.max_depth() != kMaxJsonDepth && json.size() <= parser.max_capacity()) {
    error = parser.allocate(std::max<std::size_t>(json.size(), simdjson::dom::MINIMAL_DOCUMENT_CAPACITY),
                            kMaxJsonDepth);
  }
  if (!error) error = parser.parse(json).get(root);
  if (!error) return root;
  if (error == simdjson::MEMALLOC || error == simdjson::CAPACITY) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("{}: document too large to parse: {}", source, simdjson::error_message(error)));
  }
  const std::string_view text(json.data(), json.size());
  if (error == simdjson::DEPTH_ERROR) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("{}:{}: JSON nested deeper than {} levels of arrays and objects (trace and "
                                  "schedule files need 5)",
                                  source, line_column(text, too_deep_offset(text)), kMaxJsonDepth));
  }
  SyntaxErrorFinder finder;
  nlohmann::json::sax_parse(text.begin(), text.end(), &finder, nlohmann::json::input_format_t::json, true);
  std::size_t position = finder.found() ? finder.position() : 0;
  std::string reason = finder.found() ? finder.reason() : simdjson::error_message(error);
  // nlohmann's position is one past the offending character (1-based count).
  const std::size_t offset = position > 0 ? position - 1 : 0;
  return make_error(ErrorCode::kInvalidInput,
                    fmt::format("{}:{}: malformed JSON: {}", source, line_column(text, offset), reason));
}

const char* json_type_name(simdjson::dom::element_type type) {
  switch (type) {
    case simdjson::dom::element_type::ARRAY: return "array";
    case simdjson::dom::element_type::OBJECT: return "object";
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
    case simdjson::dom::element_type::DOUBLE: return "number";
    case simdjson::dom::element_type::STRING: return "string";
    case simdjson::dom::element_type::BOOL: return "boolean";
    case simdjson::dom::element_type::NULL_VALUE: return "null";
  }
  return "unknown";
}

std::optional<simdjson::dom::element> member(simdjson::dom::object object, std::string_view key) {
  simdjson::dom::element value;
  if (object.at_key(key).get(value)) return std::nullopt;
  return value;
}

namespace {
std::unexpected<Error> type_error(simdjson::dom::element value, const std::string& path, const char* expected) {
  return make_error(ErrorCode::kInvalidInput,
                    fmt::format("{}: expected {}, got {}", path, expected, json_type_name(value.type())));
}
}  // namespace

Result<simdjson::dom::object> as_object(simdjson::dom::element value, const std::string& path) {
  if (!value.is_object()) return type_error(value, path, "an object");
  return simdjson::dom::object(value);
}

Result<simdjson::dom::array> as_array(simdjson::dom::element value, const std::string& path) {
  if (!value.is_array()) return type_error(value, path, "an array");
  return simdjson::dom::array(value);
}

Result<std::int64_t> as_int64(simdjson::dom::element value, const std::string& path) {
  switch (value.type()) {
    case simdjson::dom::element_type::INT64: return std::int64_t(value);
    case simdjson::dom::element_type::UINT64:
      return make_error(ErrorCode::kInvalidInput, fmt::format("{}: integer {} is out of range", path,
                                                              std::uint64_t(value)));
    case simdjson::dom::element_type::DOUBLE:
      return make_error(ErrorCode::kInvalidInput,
                        fmt::format("{}: expected an integer, got {}", path, double(value)));
    default: return type_error(value, path, "an integer");
  }
}

Result<double> as_number(simdjson::dom::element value, const std::string& path) {
  switch (value.type()) {
    case simdjson::dom::element_type::INT64: return static_cast<double>(std::int64_t(value));
    case simdjson::dom::element_type::UINT64: return static_cast<double>(std::uint64_t(value));
    case simdjson::dom::element_type::DOUBLE: return double(value);
    default: return type_error(value, path, "a number");
  }
}

Result<bool> as_bool(simdjson::dom::element value, const std::string& path) {
  if (!value.is_bool()) return type_error(value, path, "a boolean");
  return bool(value);
}

Result<std::string_view> as_string(simdjson::dom::element value, const std::string& path) {
  if (!value.is_string()) return type_error(value, path, "a string");
  return std::string_view(value);
}

Result<std::int64_t> check_header(simdjson::dom::object root, std::string_view expected_format,
                                  std::int64_t min_version, std::int64_t max_version) {
  std::optional<simdjson::dom::element> format = member(root, "format");
  if (!format) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("format: missing; expected \"{}\"", expected_format));
  }
  Result<std::string_view> format_text = as_string(*format, "format");
  if (!format_text) return std::unexpected(format_text.error());
  if (*format_text != expected_format) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("format: expected \"{}\", got \"{}\"", expected_format, *format_text));
  }
  std::optional<simdjson::dom::element> version = member(root, "version");
  if (!version) {
    return make_error(ErrorCode::kInvalidInput, fmt::format("version: missing; expected {}", max_version));
  }
  Result<std::int64_t> version_number = as_int64(*version, "version");
  if (!version_number) return std::unexpected(version_number.error());
  if (*version_number < min_version || *version_number > max_version) {
    return make_error(ErrorCode::kInvalidInput,
                      min_version == max_version
                          ? fmt::format("version: unsupported version {}; this build reads version {}",
                                        *version_number, max_version)
                          : fmt::format("version: unsupported version {}; this build reads versions {} to {}",
                                        *version_number, min_version, max_version));
  }
  return *version_number;
}

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace hyperoffload::internal
