#include "hyperoffload/io/op_times_json.h"

#include <cmath>
#include <cstddef>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hyperoffload {
namespace {

Error invalid(std::string message) { return Error{ErrorCode::kInvalidInput, std::move(message)}; }

// The number at `key` (an integer or a floating-point number), named by `path`.
Result<double> number_at(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end()) return std::unexpected(invalid(fmt::format("{}: missing", key)));
  if (!found->is_number()) return std::unexpected(invalid(fmt::format("{}: must be a number", key)));
  return found->get<double>();
}

Result<std::string> string_at(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end()) return std::unexpected(invalid(fmt::format("{}: missing", key)));
  if (!found->is_string()) return std::unexpected(invalid(fmt::format("{}: must be a string", key)));
  return found->get<std::string>();
}

Result<double> bandwidth_at(const nlohmann::json& object, const char* key) {
  HO_ASSIGN_OR_RETURN(const double value, number_at(object, key));
  if (!std::isfinite(value) || value <= 0.0) {
    return std::unexpected(invalid(fmt::format("{}: must be a finite number > 0, got {}", key, value)));
  }
  return value;
}

}  // namespace

std::string op_times_to_json(const OpTimesRecord& record) {
  nlohmann::ordered_json json;
  json["format"] = kOpTimesFormat;
  json["version"] = kOpTimesVersion;
  json["machine"] = record.machine;
  json["program"] = fmt::format("{:016x}", record.program);
  json["op_count"] = record.durations_ms.size();
  json["d2h_gib_per_s"] = record.d2h_gib_per_s;
  json["h2d_gib_per_s"] = record.h2d_gib_per_s;
  json["durations_ms"] = record.durations_ms;  // nlohmann writes the shortest form that reads back exactly
  return json.dump() + "\n";
}

Result<OpTimesRecord> parse_op_times_json(std::string_view text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return std::unexpected(invalid("not a JSON document"));
  if (!json.is_object()) return std::unexpected(invalid("the document must be an object"));
  HO_ASSIGN_OR_RETURN(const std::string format, string_at(json, "format"));
  if (format != kOpTimesFormat) {
    return std::unexpected(invalid(fmt::format("format: expected \"{}\", got \"{}\"", kOpTimesFormat, format)));
  }
  HO_ASSIGN_OR_RETURN(const double version, number_at(json, "version"));
  if (version != kOpTimesVersion) {
    return std::unexpected(invalid(fmt::format("version: {} is not supported (this build reads {})", version,
                                               kOpTimesVersion)));
  }
  OpTimesRecord record;
  HO_ASSIGN_OR_RETURN(record.machine, string_at(json, "machine"));
  HO_ASSIGN_OR_RETURN(const std::string program, string_at(json, "program"));
  if (program.size() != 16 || program.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return std::unexpected(invalid(fmt::format("program: must be 16 lower-case hex digits, got \"{}\"", program)));
  }
  record.program = std::stoull(program, nullptr, 16);
  HO_ASSIGN_OR_RETURN(const double op_count, number_at(json, "op_count"));
  HO_ASSIGN_OR_RETURN(record.d2h_gib_per_s, bandwidth_at(json, "d2h_gib_per_s"));
  HO_ASSIGN_OR_RETURN(record.h2d_gib_per_s, bandwidth_at(json, "h2d_gib_per_s"));
  const auto durations = json.find("durations_ms");
  if (durations == json.end()) return std::unexpected(invalid("durations_ms: missing"));
  if (!durations->is_array()) return std::unexpected(invalid("durations_ms: must be an array"));
  if (static_cast<double>(durations->size()) != op_count) {
    return std::unexpected(invalid(
        fmt::format("durations_ms: {} durations for op_count {}", durations->size(), op_count)));
  }
  record.durations_ms.reserve(durations->size());
  for (std::size_t i = 0; i < durations->size(); ++i) {
    const nlohmann::json& value = (*durations)[i];
    const double ms = value.is_number() ? value.get<double>() : -1.0;
    if (!value.is_number() || !std::isfinite(ms) || ms < 0.0) {
      return std::unexpected(invalid(fmt::format("durations_ms[{}]: must be a finite number >= 0, got {}", i,
                                                 value.dump())));
    }
    record.durations_ms.push_back(ms);
  }
  return record;
}

}  // namespace hyperoffload
