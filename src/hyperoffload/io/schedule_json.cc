#include "hyperoffload/io/schedule_json.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>

#include <fmt/format.h>
#include <simdjson.h>

#include "hyperoffload/io/file.h"
#include "hyperoffload/io/internal/json_reader.h"

namespace hyperoffload {
namespace {

using internal::as_array;
using internal::as_int64;
using internal::as_object;
using internal::as_string;
using internal::member;

Result<Phase> parse_phase(std::string_view text, const std::string& path) {
  if (text == "pre") return Phase::kPre;
  if (text == "post") return Phase::kPost;
  return make_error(ErrorCode::kInvalidInput,
                    fmt::format("{}: unknown phase \"{}\" (expected \"pre\" or \"post\")", path, text));
}

Result<ActionKind> parse_kind(std::string_view text, const std::string& path) {
  if (text == "copy_d2h") return ActionKind::kCopyD2H;
  if (text == "release_device") return ActionKind::kReleaseDevice;
  if (text == "copy_h2d") return ActionKind::kCopyH2D;
  if (text == "release_host") return ActionKind::kReleaseHost;
  if (text == "recompute") return ActionKind::kRecompute;
  return make_error(ErrorCode::kInvalidInput,
                    fmt::format("{}: unknown action kind \"{}\" (expected copy_d2h, release_device, "
                                "copy_h2d, release_host or recompute)",
                                path, text));
}

Result<Schedule> build_from_document(simdjson::dom::element document) {
  simdjson::dom::object root;
  HO_ASSIGN_OR_RETURN(root, as_object(document, "(document)"));
  std::int64_t version;
  HO_ASSIGN_OR_RETURN(version,
                      internal::check_header(root, kScheduleFormat, kOldestScheduleVersion, kScheduleVersion));
  Schedule schedule;
  if (std::optional<simdjson::dom::element> planner = member(root, "planner"); planner && !planner->is_null()) {
    std::string_view name;
    HO_ASSIGN_OR_RETURN(name, as_string(*planner, "planner"));
    schedule.planner = std::string(name);
  }
  if (std::optional<simdjson::dom::element> budget = member(root, "budget_bytes"); budget && !budget->is_null()) {
    std::int64_t bytes = 0;
    HO_ASSIGN_OR_RETURN(bytes, as_int64(*budget, "budget_bytes"));
    if (bytes < 0) {
      return make_error(ErrorCode::kInvalidInput, fmt::format("budget_bytes: must be >= 0, got {}", bytes));
    }
    schedule.budget_bytes = bytes;
  }
  std::optional<simdjson::dom::element> actions_value = member(root, "actions");
  if (!actions_value) return make_error(ErrorCode::kInvalidInput, "actions: missing (an array of actions)");
  simdjson::dom::array actions;
  HO_ASSIGN_OR_RETURN(actions, as_array(*actions_value, "actions"));
  schedule.actions.reserve(actions.size());
  std::size_t index = 0;
  for (simdjson::dom::element value : actions) {
    const std::string path = fmt::format("actions[{}]", index);
    simdjson::dom::object action;
    HO_ASSIGN_OR_RETURN(action, as_object(value, path));
    auto required = [&](const char* key) -> Result<simdjson::dom::element> {
      std::optional<simdjson::dom::element> found = member(action, key);
      if (!found) return make_error(ErrorCode::kInvalidInput, fmt::format("{}.{}: missing", path, key));
      return *found;
    };
    simdjson::dom::element field;
    std::int64_t op;
    HO_ASSIGN_OR_RETURN(field, required("op"));
    HO_ASSIGN_OR_RETURN(op, as_int64(field, path + ".op"));
    if (op < std::numeric_limits<OpIndex>::min() || op > std::numeric_limits<OpIndex>::max()) {
      return make_error(ErrorCode::kInvalidInput, fmt::format("{}.op: {} is out of range", path, op));
    }
    std::string_view text;
    Phase phase;
    HO_ASSIGN_OR_RETURN(field, required("phase"));
    HO_ASSIGN_OR_RETURN(text, as_string(field, path + ".phase"));
    HO_ASSIGN_OR_RETURN(phase, parse_phase(text, path + ".phase"));
    ActionKind kind;
    HO_ASSIGN_OR_RETURN(field, required("kind"));
    HO_ASSIGN_OR_RETURN(text, as_string(field, path + ".kind"));
    HO_ASSIGN_OR_RETURN(kind, parse_kind(text, path + ".kind"));
    if (kind == ActionKind::kRecompute) {
      if (version < 2) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("{}.kind: recompute needs schedule format version 2 (this file says "
                                      "version {})",
                                      path, version));
      }
      std::int64_t source_op;
      std::optional<simdjson::dom::element> source = member(action, "source_op");
      if (!source) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("{}.source_op: missing (a recompute names the op it re-runs)", path));
      }
      HO_ASSIGN_OR_RETURN(source_op, as_int64(*source, path + ".source_op"));
      // Compared as int64 first, so an out-of-range source_op cannot wrap.
      if (source_op > op || !recompute_source_precedes(static_cast<OpIndex>(std::max<std::int64_t>(source_op, -1)),
                                                       static_cast<OpIndex>(op), phase)) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("{}.source_op: {} does not run before op {} {} (a recompute re-runs an "
                                      "earlier op: source_op < op, or source_op <= op for \"post\")",
                                      path, source_op, op, to_string(phase)));
      }
      if (member(action, "storage")) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("{}.storage: a recompute has no storage (it regenerates what op {} wrote)",
                                      path, source_op));
      }
      schedule.add_recompute(static_cast<OpIndex>(op), phase, static_cast<OpIndex>(source_op));
    } else {
      if (member(action, "source_op")) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("{}.source_op: only a recompute names a source op", path));
      }
      std::int64_t storage;
      HO_ASSIGN_OR_RETURN(field, required("storage"));
      HO_ASSIGN_OR_RETURN(storage, as_int64(field, path + ".storage"));
      schedule.add(static_cast<OpIndex>(op), phase, kind, storage);
    }
    ++index;
  }
  HO_RETURN_IF_ERROR(check_execution_order(schedule.actions));
  return schedule;
}

Result<Schedule> parse_padded(const simdjson::padded_string& json, std::string_view source) {
  simdjson::dom::parser parser;
  Result<simdjson::dom::element> document = internal::parse_document(parser, json, source);
  if (!document) return std::unexpected(document.error());
  return build_from_document(*document);
}

}  // namespace

Result<Schedule> parse_schedule_json(std::string_view json, std::string_view source) {
  return parse_padded(simdjson::padded_string(json), source);
}

Result<Schedule> read_schedule_file(const std::filesystem::path& path) {
  Result<std::string> text = read_file(path);
  if (!text) return std::unexpected(text.error());
  return parse_schedule_json(*text, path == "-" ? "<stdin>" : path.string());
}

namespace {

// Hands the schedule's JSON to sink(std::string_view) in pieces of about
// kPieceBytes: the header, then the actions, then the end. The actions are
// written by hand into room sized for the longest one: one fmt::format_to per
// action was 300 ns, a fifth of `plan`'s 2 s on a 1M-op trace (BENCHMARKS.md,
// "1M ops end to end"). In pieces, a 218 MB schedule goes to its file without
// being held whole (write_schedule_file); the text is the same.
template <typename Sink>
void emit_schedule_json(const Schedule& schedule, Sink&& sink) {
  constexpr std::size_t kMaxActionChars = 128;  // 74 of text, two integers of at most 20
  constexpr std::size_t kChunk = 4096;           // actions written between two resizes
  constexpr std::size_t kPieceBytes = 4 << 20;   // a piece is handed on once this large
  std::string out;
  auto buffer = std::back_inserter(out);
  fmt::format_to(buffer, "{{\"format\": \"{}\", \"version\": {}, \"planner\": ", kScheduleFormat, kScheduleVersion);
  internal::append_json_string(out, schedule.planner);
  if (schedule.budget_bytes) fmt::format_to(buffer, ", \"budget_bytes\": {}", *schedule.budget_bytes);
  out += ",\n \"actions\": [";
  out.reserve(std::min(out.size() + 80 * schedule.actions.size() + 16, kPieceBytes + kChunk * kMaxActionChars));
  char* p = nullptr;
  auto put = [&p](std::string_view text) {
    std::memcpy(p, text.data(), text.size());
    p += text.size();
  };
  auto put_int = [&p](std::int64_t value) {
    const fmt::format_int digits(value);
    std::memcpy(p, digits.data(), digits.size());
    p += digits.size();
  };
  const std::span<const Action> actions = schedule.actions;
  for (std::size_t chunk = 0; chunk < actions.size(); chunk += kChunk) {
    const std::size_t used = out.size();
    const std::size_t count = std::min(kChunk, actions.size() - chunk);
    out.resize(used + count * kMaxActionChars);
    p = out.data() + used;
    for (const Action& action : actions.subspan(chunk, count)) {
      put(chunk == 0 && &action == actions.data() ? std::string_view("\n  {\"op\": ")
                                                   : std::string_view(",\n  {\"op\": "));
      put_int(action.op);
      put(action.phase == Phase::kPre ? std::string_view(", \"phase\": \"pre\", \"kind\": \"")
                                      : std::string_view(", \"phase\": \"post\", \"kind\": \""));
      put(to_string(action.kind));
      if (action.kind == ActionKind::kRecompute) {
        put("\", \"source_op\": ");
        put_int(action.source_op);
      } else {
        put("\", \"storage\": ");
        put_int(action.storage);
      }
      put("}");
    }
    out.resize(static_cast<std::size_t>(p - out.data()));
    if (out.size() >= kPieceBytes) {
      sink(std::string_view(out));
      out.clear();
    }
  }
  out += schedule.actions.empty() ? "]}\n" : "\n ]}\n";
  sink(std::string_view(out));
}

}  // namespace

std::string schedule_to_json(const Schedule& schedule) {
  std::string text;
  text.reserve(80 * schedule.actions.size() + 256);  // ~72 bytes an action on 1M-op traces
  emit_schedule_json(schedule, [&text](std::string_view piece) { text += piece; });
  return text;
}

Status write_schedule_file(const Schedule& schedule, const std::filesystem::path& path) {
  HO_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  Status written = ok_status();
  emit_schedule_json(schedule, [&](std::string_view piece) {
    if (written) written = file.append(piece);
  });
  HO_RETURN_IF_ERROR(written);
  return std::move(file).commit();
}

}  // namespace hyperoffload
