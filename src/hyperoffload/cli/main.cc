// hyperoffload: plan, check and simulate activation-offloading schedules.
#include <algorithm>
#include <exception>
#include <iostream>

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

int run(int argc, char** argv) {
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
