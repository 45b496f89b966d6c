// hyperoffload: plan, check and simulate activation-offloading schedules.
#include <malloc.h>

#include <algorithm>
#include <exception>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload::cli {

std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> registry;
  return registry;
}

namespace {

int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidInput:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kNotFound:
    case ErrorCode::kIo: return kExitBadInput;
    default: return kExitFailed;
  }
}

// Keeps freed memory in the process for the next allocation. By default glibc
// gives blocks from 128 KiB up (the threshold grows to at most 32 MiB) their
// own mappings and returns them on free, and hands freed memory at the top of
// the heap back above 128 KiB: a planner that builds and drops per-op arrays
// then pays the kernel to zero fresh pages again and again — 27% of the CPU
// of `plan --planner peak` on the 1M-op random trace (450k page faults; 232k
// with these settings, 0.4-0.5 s less system time; BENCHMARKS.md, "1M ops end
// to end"). Arrays up to 32 MiB come from the heap, freed memory stays until
// the process ends (the CLI runs one command), and the heap grows 256 MiB at
// a time (address space; pages are touched only when used). A process-wide
// policy, so the command sets it and the library does not.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_TOP_PAD, 256 << 20);
}

int run(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{
      "hyperoffload — plan, validate and simulate activation offloading for deep-learning training.\n"
      "Trace one step, plan a residency schedule under a device-memory budget, check it, and see\n"
      "how much the step slows down. Formats: docs/FORMATS.md."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hyperoffload 0.1.0");
  std::vector<RegisteredCommand> registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const RegisteredCommand& a, const RegisteredCommand& b) { return a.name < b.name; });
  std::vector<Command> commands;
  for (const RegisteredCommand& entry : registry) commands.push_back(entry.registrar(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  for (const Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return kExitBadInput;
}

}  // namespace
}  // namespace hyperoffload::cli

int main(int argc, char** argv) {
  try {
    return hyperoffload::cli::run(argc, argv);
  } catch (const hyperoffload::HyperoffloadError& e) {
    std::cerr << "hyperoffload: error: " << e.what() << "\n";
    return hyperoffload::cli::exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::cerr << "hyperoffload: internal error: " << e.what() << "\n";
    return hyperoffload::cli::kExitFailed;
  }
}
