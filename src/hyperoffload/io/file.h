// File helpers with the project's no-data-loss rule: outputs are written to a
// temporary file in the destination directory and renamed into place, so a
// failure never leaves a partial or truncated output behind.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "hyperoffload/ir/status.h"

namespace hyperoffload {

// Reads a whole file. `path` "-" reads standard input.
Result<std::string> read_file(const std::filesystem::path& path);

// A regular file's bytes, mapped read-only: a reader that needs neither a copy
// nor padding (the one-pass trace reader, Note [Two trace readers]) reads the
// page cache in place, which on a 262 MiB trace saves copying it and a fault
// per page of the copy. Move-only; unmaps on destruction.
class MappedFile {
 public:
  // Fails (kIo) for what cannot be mapped: "-", a missing file, a directory,
  // a pipe. Callers fall back to read_file, which names the error.
  static Result<MappedFile> open(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::string_view text() const { return {data_, size_}; }

 private:
  MappedFile(const char* data, std::size_t size) : data_(data), size_(size) {}
  const char* data_ = nullptr;  // nullptr for an empty file
  std::size_t size_ = 0;
};

// An output file written piece by piece and put in place only when complete:
// create() makes a temporary file beside `path`, append() writes through to
// it and starts its writeback to disk (Note [Writeback as the pieces come],
// file.cc), commit() fsyncs it, gives it the usual umask-based mode and renames it
// onto `path`. Destroyed uncommitted (an error, an exception), it removes the
// temporary file, so `path` is either untouched or whole. A large output (a
// 2.8M-action schedule is 218 MB) need not be held in memory at once.
// `path` "-" writes to standard output instead (commit() flushes it).
// Move-only. Thread-safety: one thread at a time.
class AtomicFile {
 public:
  static Result<AtomicFile> create(const std::filesystem::path& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  Status append(std::string_view text);
  // Precondition: no append() failed (after a failure, drop the AtomicFile).
  Status commit() &&;

 private:
  AtomicFile(std::filesystem::path path, std::string temp, int fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  void discard();                 // closes and removes the temporary file, if any
  Status fail(const char* what);  // discard(), and the error naming the output, `what` and errno

  std::filesystem::path path_;    // "-": standard output
  std::string temp_;  // the temporary file while it is ours to remove; empty otherwise
  int fd_ = -1;       // the temporary file while it is open; -1 otherwise
  off_t written_bytes_ = 0;  // bytes appended so far: where the next piece starts
};

// Writes `contents` to `path` atomically (AtomicFile in one piece). `path` "-"
// writes to standard output instead.
Status write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace hyperoffload
