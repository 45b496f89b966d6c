// The CLI's subcommands register themselves: each *_command.cc file defines a
// static CommandRegistration, so adding a command is adding one file.
//
// A registrar adds its CLI11 subcommand to the root app and returns the action
// to run when that subcommand is chosen; the action returns the exit status.
// Errors are thrown as HyperoffloadError and mapped to exit codes by main():
// kInvalidInput / kInvalidArgument / kNotFound / kIo → 2, others → 1.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace hyperoffload::cli {

// Exit statuses shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;    // e.g. an invalid schedule
inline constexpr int kExitBadInput = 2;  // unreadable or malformed input, bad options

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

using Registrar = Command (*)(CLI::App& root);

struct RegisteredCommand {
  std::string name;  // sorts the --help listing
  Registrar registrar;
};

std::vector<RegisteredCommand>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, Registrar registrar) {
    command_registry().push_back({std::move(name), registrar});
  }
};

}  // namespace hyperoffload::cli
