#include "hyperoffload/io/trace_json.h"

#include <fmt/format.h>
#include <simdjson.h>

#include "hyperoffload/io/file.h"
#include "hyperoffload/io/internal/json_reader.h"
#include "hyperoffload/io/internal/trace_fast_reader.h"

namespace hyperoffload {
namespace {

using internal::as_array;
using internal::as_bool;
using internal::as_int64;
using internal::as_number;
using internal::as_object;
using internal::as_string;
using internal::member;

Status read_bandwidth(simdjson::dom::object root, const char* key, double* out) {
  std::optional<simdjson::dom::element> value = member(root, key);
  if (!value) return ok_status();
  Result<double> number = as_number(*value, key);
  if (!number) return std::unexpected(number.error());
  if (!(*number > 0.0)) {
    return make_error(ErrorCode::kInvalidInput, fmt::format("{}: must be a positive number, got {}", key, *number));
  }
  *out = *number;
  return ok_status();
}

Result<Trace> build_from_document(simdjson::dom::element document) {
  simdjson::dom::object root;
  HO_ASSIGN_OR_RETURN(root, as_object(document, "(document)"));
  std::int64_t version;
  HO_ASSIGN_OR_RETURN(version, internal::check_header(root, kTraceFormat, kOldestTraceVersion, kTraceVersion));

  TraceBuilder builder;
  if (std::optional<simdjson::dom::element> limit = member(root, "memory_limit_bytes");
      limit && !limit->is_null()) {
    std::int64_t bytes;
    HO_ASSIGN_OR_RETURN(bytes, as_int64(*limit, "memory_limit_bytes"));
    builder.set_memory_limit_bytes(bytes);
  }
  if (std::optional<simdjson::dom::element> limit = member(root, "host_memory_limit_bytes");
      limit && !limit->is_null()) {
    std::int64_t bytes;
    HO_ASSIGN_OR_RETURN(bytes, as_int64(*limit, "host_memory_limit_bytes"));
    builder.set_host_memory_limit_bytes(bytes);
  }
  double d2h = kDefaultBandwidthGiBPerS;
  double h2d = kDefaultBandwidthGiBPerS;
  HO_RETURN_IF_ERROR(read_bandwidth(root, "d2h_bandwidth_gbps", &d2h));
  HO_RETURN_IF_ERROR(read_bandwidth(root, "h2d_bandwidth_gbps", &h2d));
  builder.set_d2h_bandwidth_gib_per_s(d2h);
  builder.set_h2d_bandwidth_gib_per_s(h2d);

  std::optional<simdjson::dom::element> storages_value = member(root, "storages");
  if (!storages_value) return make_error(ErrorCode::kInvalidInput, "storages: missing (an array of storages)");
  simdjson::dom::array storages;
  HO_ASSIGN_OR_RETURN(storages, as_array(*storages_value, "storages"));
  std::optional<simdjson::dom::element> ops_value = member(root, "ops");
  if (!ops_value) return make_error(ErrorCode::kInvalidInput, "ops: missing (an array of ops)");
  simdjson::dom::array ops;
  HO_ASSIGN_OR_RETURN(ops, as_array(*ops_value, "ops"));
  builder.reserve(ops.size(), storages.size(), 3 * ops.size());

  std::size_t index = 0;
  for (simdjson::dom::element storage_value : storages) {
    // Paths are formatted only on the error path: these loops run a million times.
    auto path = [&index](std::string_view suffix) { return fmt::format("storages[{}]{}", index, suffix); };
    if (!storage_value.is_object()) return std::unexpected(as_object(storage_value, path("")).error());
    const simdjson::dom::object storage(storage_value);
    std::optional<simdjson::dom::element> id_value = member(storage, "id");
    if (!id_value) return make_error(ErrorCode::kInvalidInput, path(".id: missing"));
    std::int64_t id;
    HO_ASSIGN_OR_RETURN(id, id_value->is_int64() ? Result<std::int64_t>(std::int64_t(*id_value))
                                                 : as_int64(*id_value, path(".id")));
    std::optional<simdjson::dom::element> size_value = member(storage, "size_bytes");
    if (!size_value) return make_error(ErrorCode::kInvalidInput, path(".size_bytes: missing"));
    std::int64_t size_bytes;
    HO_ASSIGN_OR_RETURN(size_bytes, size_value->is_int64() ? Result<std::int64_t>(std::int64_t(*size_value))
                                                           : as_int64(*size_value, path(".size_bytes")));
    bool retained = false;
    if (std::optional<simdjson::dom::element> retained_value = member(storage, "retained")) {
      if (!retained_value->is_bool()) return std::unexpected(as_bool(*retained_value, path(".retained")).error());
      retained = bool(*retained_value);
    }
    HO_RETURN_IF_ERROR(builder.add_storage(id, size_bytes, retained ? Retention::kRetained : Retention::kReleasable));
    ++index;
  }

  index = 0;
  for (simdjson::dom::element op_value : ops) {
    auto path = [&index](std::string_view suffix) { return fmt::format("ops[{}]{}", index, suffix); };
    if (!op_value.is_object()) return std::unexpected(as_object(op_value, path("")).error());
    const simdjson::dom::object op(op_value);
    std::string_view name;
    if (std::optional<simdjson::dom::element> name_value = member(op, "name")) {
      if (!name_value->is_string()) return std::unexpected(as_string(*name_value, path(".name")).error());
      name = std::string_view(*name_value);
    }
    double duration_ms = 0.0;
    if (std::optional<simdjson::dom::element> duration_value = member(op, "duration_ms")) {
      if (!duration_value->is_number()) {
        return std::unexpected(as_number(*duration_value, path(".duration_ms")).error());
      }
      duration_ms = *as_number(*duration_value, "");
    }
    Recomputable recomputable = Recomputable::kNo;
    if (std::optional<simdjson::dom::element> recomputable_value = member(op, "recomputable")) {
      if (!recomputable_value->is_bool()) {
        return std::unexpected(as_bool(*recomputable_value, path(".recomputable")).error());
      }
      if (version < 2) {
        return make_error(ErrorCode::kInvalidInput,
                          path(".recomputable: needs trace format version 2 (this file says version 1)"));
      }
      if (bool(*recomputable_value)) recomputable = Recomputable::kYes;
    }
    if (std::optional<simdjson::dom::element> rng_value = member(op, "rng_replay")) {
      if (!rng_value->is_bool()) return std::unexpected(as_bool(*rng_value, path(".rng_replay")).error());
      if (version < 3) {
        return make_error(ErrorCode::kInvalidInput,
                          path(fmt::format(".rng_replay: needs trace format version 3 (this file says version {})",
                                           version)));
      }
      if (bool(*rng_value)) {
        if (recomputable != Recomputable::kYes) {
          return make_error(ErrorCode::kInvalidInput,
                            path(".rng_replay: true needs \"recomputable\": true (only a recomputable op is "
                                 "re-run with its generator's state)"));
        }
        recomputable = Recomputable::kWithRngReplay;
      }
    }
    HO_RETURN_IF_ERROR(builder.add_op(name, duration_ms, recomputable));
    if (std::optional<simdjson::dom::element> accesses_value = member(op, "accesses")) {
      if (!accesses_value->is_array()) return std::unexpected(as_array(*accesses_value, path(".accesses")).error());
      const simdjson::dom::array accesses(*accesses_value);
      std::size_t access_index = 0;
      for (simdjson::dom::element access_value : accesses) {
        auto access_path = [&](std::string_view suffix) {
          return fmt::format("ops[{}].accesses[{}]{}", index, access_index, suffix);
        };
        if (!access_value.is_object()) return std::unexpected(as_object(access_value, access_path("")).error());
        const simdjson::dom::object access(access_value);
        std::optional<simdjson::dom::element> storage_value = member(access, "storage");
        if (!storage_value) return make_error(ErrorCode::kInvalidInput, access_path(".storage: missing"));
        if (!storage_value->is_int64()) {
          return std::unexpected(as_int64(*storage_value, access_path(".storage")).error());
        }
        const std::int64_t storage_id = std::int64_t(*storage_value);
        std::optional<simdjson::dom::element> kind_value = member(access, "kind");
        if (!kind_value) return make_error(ErrorCode::kInvalidInput, access_path(".kind: missing"));
        if (!kind_value->is_string()) return std::unexpected(as_string(*kind_value, access_path(".kind")).error());
        const std::string_view kind_text(*kind_value);
        AccessKind kind;
        if (kind_text == "read") {
          kind = AccessKind::kRead;
        } else if (kind_text == "write") {
          kind = AccessKind::kWrite;
        } else {
          return make_error(ErrorCode::kInvalidInput,
                            fmt::format("{}: unknown access kind \"{}\" (expected \"read\" or \"write\")",
                                        access_path(".kind"), kind_text));
        }
        builder.add_access(storage_id, kind);
        ++access_index;
      }
    }
    ++index;
  }
  return std::move(builder).build();
}

// The DOM reader (Note [Two trace readers]).
Result<Trace> parse_padded(const simdjson::padded_string& json, std::string_view source) {
  simdjson::dom::parser parser;
  Result<simdjson::dom::element> document = internal::parse_document(parser, json, source);
  if (!document) return std::unexpected(document.error());
  return build_from_document(*document);
}

}  // namespace

Result<Trace> parse_trace_json(std::string_view json, std::string_view source) {
  // Note [Two trace readers]: the one-pass reader takes the files in the
  // writer's shape; the DOM reader every other file and every error.
  if (std::optional<Trace> fast = internal::read_trace_fast(json)) return std::move(*fast);
  return parse_padded(simdjson::padded_string(json), source);
}

Result<Trace> read_trace_file(const std::filesystem::path& path) {
  // Note [Two trace readers]: the one-pass reader reads the file where it
  // lies; anything else is read again, padded, for the DOM reader.
  if (Result<MappedFile> mapped = MappedFile::open(path)) {
    if (std::optional<Trace> fast = internal::read_trace_fast(mapped->text())) return std::move(*fast);
  }
  if (path == "-") {
    Result<std::string> text = read_file(path);
    if (!text) return std::unexpected(text.error());
    return parse_trace_json(*text, "<stdin>");
  }
  simdjson::padded_string json;
  if (simdjson::padded_string::load(path.string()).get(json)) {
    Result<std::string> probe = read_file(path);  // for a precise OS error message
    if (!probe) return std::unexpected(probe.error());
    return make_error(ErrorCode::kIo, fmt::format("cannot read {}", path.string()));
  }
  return parse_padded(json, path.string());
}

std::string trace_to_json(const Trace& trace) {
  std::string out;
  out.reserve(64 + static_cast<std::size_t>(trace.storage_count()) * 56 + static_cast<std::size_t>(trace.op_count()) * 64 +
              trace.access_count() * 36);
  auto buffer = std::back_inserter(out);
  fmt::format_to(buffer, "{{\"format\": \"{}\", \"version\": {},\n", kTraceFormat,
                 trace.has_rng_replay_ops() ? kTraceVersion : kTraceVersionWithoutRngReplay);
  if (trace.memory_limit_bytes()) {
    fmt::format_to(buffer, " \"memory_limit_bytes\": {},\n", *trace.memory_limit_bytes());
  } else {
    out += " \"memory_limit_bytes\": null,\n";
  }
  if (trace.host_memory_limit_bytes()) {
    fmt::format_to(buffer, " \"host_memory_limit_bytes\": {},\n", *trace.host_memory_limit_bytes());
  }
  fmt::format_to(buffer, " \"d2h_bandwidth_gbps\": {}, \"h2d_bandwidth_gbps\": {},\n",
                 trace.d2h_bandwidth_gib_per_s(), trace.h2d_bandwidth_gib_per_s());
  out += " \"storages\": [";
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const StorageInfo& info = trace.storage(s);
    fmt::format_to(buffer, "{}\n  {{\"id\": {}, \"size_bytes\": {}, \"retained\": {}}}", s == 0 ? "" : ",",
                   info.id, info.size_bytes, info.retained() ? "true" : "false");
  }
  out += trace.storage_count() > 0 ? "\n ],\n" : "],\n";
  out += " \"ops\": [";
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    out += op == 0 ? "\n  {\"name\": " : ",\n  {\"name\": ";
    internal::append_json_string(out, trace.op_name(op));
    fmt::format_to(buffer, ", \"duration_ms\": {}, ", trace.op_duration_ms(op));
    if (trace.op_recomputable(op)) out += "\"recomputable\": true, ";
    if (trace.op_rng_replay(op)) out += "\"rng_replay\": true, ";
    out += "\"accesses\": [";
    bool first = true;
    for (const Access& access : trace.accesses(op)) {
      fmt::format_to(buffer, "{}{{\"storage\": {}, \"kind\": \"{}\"}}", first ? "" : ", ",
                     trace.storage(access.storage).id, to_string(access.kind));
      first = false;
    }
    out += "]}";
  }
  out += trace.op_count() > 0 ? "\n ]}\n" : "]}\n";
  return out;
}

Status write_trace_file(const Trace& trace, const std::filesystem::path& path) {
  return write_file_atomically(path, trace_to_json(trace));
}

}  // namespace hyperoffload
