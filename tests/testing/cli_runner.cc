#include "testing/cli_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

extern char** environ;

namespace hyperoffload::testing {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

ScratchDir::ScratchDir() {
  std::random_device device;
  const auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    path_ = base / ("hyperoffload-test-" + std::to_string(device()));
    if (std::filesystem::create_directory(path_)) return;
  }
  ADD_FAILURE() << "cannot create a scratch directory";
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ScratchDir::write(const std::string& name, const std::string& contents) const {
  const auto file = path_ / name;
  std::ofstream(file, std::ios::binary) << contents;
  return file.string();
}

CliRun run_cli(const std::vector<std::string>& args, const std::string& stdin_text) {
  ScratchDir io;
  const std::string in_path = io.write("stdin", stdin_text);
  const std::string out_path = (io / "stdout").string();
  const std::string err_path = (io / "stderr").string();

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);

  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.push_back(HYPEROFFLOAD_CLI_PATH);
  for (const std::string& arg : args) storage.push_back(arg);
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  CliRun run;
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ) != 0) {
    ADD_FAILURE() << "cannot start " << argv[0];
    posix_spawn_file_actions_destroy(&files);
    return run;
  }
  posix_spawn_file_actions_destroy(&files);
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_text(out_path);
  run.err = read_text(err_path);
  return run;
}

}  // namespace hyperoffload::testing
