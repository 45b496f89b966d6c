// The op-time store: a directory of the op durations and copy bandwidths that
// warmups recorded, one file per step program and machine, so that every
// later warmup of the same program plans from the same times (Note
// [Reproducible plans], warmup_executor.h). The file format is io/op_times_json.h.
//
// A step program is what a plan depends on apart from times: the ops in order
// (names, whether each is recomputable and how), each op's accesses (kind, and
// the storage as the order in which the trace declares it, so that the ids a
// run happens to give its storages do not matter) and the storages (size,
// retained or not). The memory budgets are not part of it: a warmup's op
// times do not depend on the budget, so runs at other budgets plan from the
// same times too. The machine string names what the times were measured on
// (the Python session: the PyTorch version, the CPU, the thread count, the
// CUDA device; the warmup adds the backend's name and whether the copy
// bandwidth was given rather than measured); other machines get other files.
//
// Files are written atomically (temporary file and rename), so processes
// sharing a directory (ranks of one job, runs one after the other) read
// either a whole record or none; when two write the same program, the last
// rename wins and both records are of that program on that machine.
//
// Thread-safety: the functions are pure apart from the files they read and write.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "hyperoffload/io/op_times_json.h"
#include "hyperoffload/ir/status.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

// The most records a store keeps by default: a loop whose batches take many
// shapes (random sequence lengths) warms up once per shape, and each warmup
// writes a record.
inline constexpr std::int64_t kDefaultOpTimeStoreMaxFiles = 1024;

struct OpTimeStoreOptions {
  std::filesystem::path directory;  // created on the first write; not empty
  std::string machine;              // what the times are measured on; part of each program's key
  // After a write, the least recently used records (by modification time: a
  // read touches its file) beyond this many are removed; >= 1.
  std::int64_t max_files = kDefaultOpTimeStoreMaxFiles;
};

// The key of the trace's step program on `machine`: a 64-bit FNV-1a hash of
// what the header says a program is, and of the machine string. O(ops +
// accesses + storages).
std::uint64_t step_program_key(const Trace& trace, std::string_view machine);

// The file that holds a program's record: <directory>/op-times-<key as 16 hex digits>.json.
std::filesystem::path op_times_path(const OpTimeStoreOptions& store, std::uint64_t key);

// The record of program `key`, or nullopt when the store has none. A record
// read is touched (its modification time set to now), so the store keeps it
// longest. An error
// (kIo, kInvalidInput) for a file that cannot be read or is not a record of
// this program with `op_count` ops on this machine; the message names the file.
Result<std::optional<OpTimesRecord>> load_op_times(const OpTimeStoreOptions& store, std::uint64_t key,
                                                   std::int64_t op_count);

// Writes `record` (its program and machine as given) to its file, creating
// the directory; atomic. Then removes the least recently modified records
// beyond store.max_files (files another process removes first are passed
// over). Returns the path written. O(files in the directory).
Result<std::filesystem::path> save_op_times(const OpTimeStoreOptions& store, const OpTimesRecord& record);

}  // namespace hyperoffload
