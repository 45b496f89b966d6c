// Test helper: runs the hyperoffload CLI as a subprocess and captures its exit
// code, stdout and stderr; plus a scratch directory removed after the test.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace hyperoffload::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs build/bin/hyperoffload with `args` (no shell; arguments are passed as is).
// `stdin_text` is fed to its standard input.
CliRun run_cli(const std::vector<std::string>& args, const std::string& stdin_text = "");

// A fresh empty directory under the system temp dir, deleted on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes `contents` to `name` and returns the full path.
  std::string write(const std::string& name, const std::string& contents) const;

 private:
  std::filesystem::path path_;
};

std::string read_text(const std::filesystem::path& path);

}  // namespace hyperoffload::testing
