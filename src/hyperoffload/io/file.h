// File helpers with the project's no-data-loss rule: outputs are written to a
// temporary file in the destination directory and renamed into place, so a
// failure never leaves a partial or truncated output behind.
#pragma once

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

// Writes `contents` to `path` atomically (temp file + fsync + rename). `path` "-"
// writes to standard output instead.
Status write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace hyperoffload
