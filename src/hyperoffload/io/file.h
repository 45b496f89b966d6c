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

// Writes `contents` to `path` atomically (temp file + fsync + rename). `path` "-"
// writes to standard output instead.
Status write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace hyperoffload
