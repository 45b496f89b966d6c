#include "hyperoffload/exec/op_time_store.h"

#include <algorithm>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hyperoffload/exec/internal/fnv1a.h"
#include "hyperoffload/io/file.h"

namespace hyperoffload {
namespace {

// Keeps the store.max_files most recently modified records. Best effort: a
// file that cannot be listed, dated or removed (another process removed it
// first) is passed over.
void remove_least_recently_used(const OpTimeStoreOptions& store) {
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> records;
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator(store.directory, error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("op-times-") || !name.ends_with(".json")) continue;
    std::error_code dated;
    const std::filesystem::file_time_type time = it->last_write_time(dated);
    if (!dated) records.emplace_back(time, it->path());
  }
  const auto keep = static_cast<std::size_t>(std::max<std::int64_t>(1, store.max_files));
  if (records.size() <= keep) return;
  // Oldest first; among equal times, by name, so the order does not depend on the listing's.
  std::sort(records.begin(), records.end());
  for (std::size_t i = 0; i + keep < records.size(); ++i) std::filesystem::remove(records[i].second, error);
}

}  // namespace

std::uint64_t step_program_key(const Trace& trace, std::string_view machine) {
  internal::Fnv1a hash;
  hash.mix(std::string_view("hyperoffload step program 1"));
  hash.mix(machine);
  hash.mix(static_cast<std::uint64_t>(trace.storage_count()));
  for (const StorageInfo& storage : trace.storages()) {
    hash.mix(static_cast<std::uint64_t>(storage.size_bytes));
    hash.mix(static_cast<std::uint64_t>(storage.retention));
  }
  hash.mix(static_cast<std::uint64_t>(trace.op_count()));
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    hash.mix(trace.op_name(op));
    hash.mix(static_cast<std::uint64_t>(trace.op_recomputability(op)));
    hash.mix(static_cast<std::uint64_t>(trace.op_unit_previous(op)));
    const std::span<const Access> accesses = trace.accesses(op);
    hash.mix(static_cast<std::uint64_t>(accesses.size()));
    for (const Access& access : accesses) {
      // The storage's position among the trace's storages, not its id.
      hash.mix(static_cast<std::uint64_t>(access.storage));
      hash.mix(static_cast<std::uint64_t>(access.kind));
    }
  }
  return hash.value();
}

std::filesystem::path op_times_path(const OpTimeStoreOptions& store, std::uint64_t key) {
  return store.directory / fmt::format("op-times-{:016x}.json", key);
}

Result<std::optional<OpTimesRecord>> load_op_times(const OpTimeStoreOptions& store, std::uint64_t key,
                                                   std::int64_t op_count) {
  const std::filesystem::path path = op_times_path(store, key);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    if (error) return make_error(ErrorCode::kIo, fmt::format("{}: {}", path.string(), error.message()));
    return std::optional<OpTimesRecord>();
  }
  Result<std::string> text = read_file(path);
  if (!text) return std::unexpected(std::move(text.error()));
  Result<OpTimesRecord> record = parse_op_times_json(*text);
  if (!record) {
    return make_error(record.error().code, fmt::format("{}: {}", path.string(), record.error().message));
  }
  if (record->program != key || record->machine != store.machine ||
      static_cast<std::int64_t>(record->durations_ms.size()) != op_count) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("{}: a record of another step program or machine (program {:016x}, {} ops, "
                                  "machine \"{}\"; expected {:016x}, {} ops, \"{}\")",
                                  path.string(), record->program, record->durations_ms.size(), record->machine, key,
                                  op_count, store.machine));
  }
  // Used: the store keeps it longest. A touch that fails changes nothing else.
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), error);
  return std::optional<OpTimesRecord>(std::move(*record));
}

Result<std::filesystem::path> save_op_times(const OpTimeStoreOptions& store, const OpTimesRecord& record) {
  std::error_code error;
  std::filesystem::create_directories(store.directory, error);
  if (error) {
    return make_error(ErrorCode::kIo, fmt::format("{}: cannot create the directory: {}", store.directory.string(),
                                                  error.message()));
  }
  const std::filesystem::path path = op_times_path(store, record.program);
  HO_RETURN_IF_ERROR(write_file_atomically(path, op_times_to_json(record)));
  remove_least_recently_used(store);
  return path;
}

}  // namespace hyperoffload
