// hyperoffload generate random|transformer ...
#include <fmt/format.h>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/io/trace_json.h"

namespace hyperoffload::cli {
namespace {

struct RandomArgs {
  RandomTraceOptions options;
  double limit_fraction = 0.5;
  std::string output = "-";
};

int run_random(const RandomArgs& args) {
  RandomTraceOptions options = args.options;
  if (options.op_count < 0 || options.storage_count < 0) {
    throw HyperoffloadError({ErrorCode::kInvalidArgument, "--ops and --storages must be non-negative"});
  }
  options.limit_fraction = args.limit_fraction > 0 ? std::optional<double>(args.limit_fraction) : std::nullopt;
  const Trace trace = generate_random_trace(options);
  value_or_throw(write_trace_file(trace, args.output));
  return kExitOk;
}

Command register_generate(CLI::App& root) {
  CLI::App* app = root.add_subcommand("generate", "Generate a trace (random, or a GPT-style transformer step)");
  app->require_subcommand(1);

  auto random = std::make_shared<RandomArgs>();
  CLI::App* random_app = app->add_subcommand("random", "A random trace for tests and scale benchmarks");
  random_app->add_option("--ops", random->options.op_count, "Number of ops")->capture_default_str();
  random_app->add_option("--storages", random->options.storage_count, "Number of storages")->capture_default_str();
  random_app->add_option("--seed", random->options.seed, "Random seed")->capture_default_str();
  random_app->add_option("--limit-fraction", random->limit_fraction,
                         "memory_limit_bytes as a fraction of the unplanned peak (0 = unlimited)")
      ->capture_default_str();
  random_app->add_option("-o,--output", random->output, "Output file (- for stdout)")->capture_default_str();

  return {app, [app, random_app, random] {
            if (random_app->parsed()) return run_random(*random);
            throw HyperoffloadError({ErrorCode::kInvalidArgument, fmt::format("unknown generator; see {} --help",
                                                                              app->get_name())});
          }};
}

const CommandRegistration kRegistration{"generate", &register_generate};

}  // namespace
}  // namespace hyperoffload::cli
