// hyperoffload generate random|transformer ...
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hyperoffload/cli/command.h"
#include "hyperoffload/cli/common.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/budget.h"

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

// Command-line values of `generate transformer`; the shape options override
// the preset's (or are all required without one).
struct TransformerArgs {
  std::string preset;
  TransformerOptions options;  // holds every explicitly given value after parsing
  std::string attention = "materialized";
  std::string recompute = "none";
  std::string optimizer = "none";
  bool dropout = false;
  bool untied_embeddings = false;
  std::string limit;
  std::string output = "-";
};

constexpr const char* kShapeOptions[] = {"--layers", "--hidden", "--heads", "--seq", "--batch"};

// The options to generate: the preset (or defaults), overridden by every
// option given on the command line.
TransformerOptions resolve_transformer_options(const TransformerArgs& args, const CLI::App& app) {
  TransformerOptions options = args.options;
  if (!args.preset.empty()) {
    const TransformerOptions preset = value_or_throw(transformer_preset(args.preset));
    if (app.count("--layers") == 0) options.layers = preset.layers;
    if (app.count("--hidden") == 0) options.hidden = preset.hidden;
    if (app.count("--heads") == 0) options.heads = preset.heads;
    if (app.count("--seq") == 0) options.seq = preset.seq;
    if (app.count("--batch") == 0) options.batch = preset.batch;
    if (app.count("--attention") == 0) options.attention = preset.attention;
  } else {
    std::vector<std::string> missing;
    for (const char* name : kShapeOptions) {
      if (app.count(name) == 0) missing.emplace_back(name);
    }
    if (!missing.empty()) {
      throw HyperoffloadError({ErrorCode::kInvalidArgument,
                               fmt::format("generate transformer: missing {} (or choose a --preset)",
                                           fmt::join(missing, ", "))});
    }
  }
  if (app.count("--attention") > 0 || args.preset.empty()) {
    options.attention = args.attention == "flash" ? AttentionKernel::kFlash : AttentionKernel::kMaterialized;
  }
  options.recompute = args.recompute == "full" ? Recompute::kFull : Recompute::kNone;
  options.optimizer = args.optimizer == "none" ? OptimizerStep::kNone : OptimizerStep::kAdamW;
  options.dropout = args.dropout ? Dropout::kOn : Dropout::kOff;
  options.embeddings = args.untied_embeddings ? EmbeddingTying::kUntied : EmbeddingTying::kTied;
  return options;
}

int run_transformer(const TransformerArgs& args, const CLI::App& app) {
  TransformerOptions options = resolve_transformer_options(args, app);
  std::optional<BudgetSpec> limit;
  if (!args.limit.empty()) {
    Result<BudgetSpec> parsed = parse_budget(args.limit);
    if (!parsed) throw HyperoffloadError({ErrorCode::kInvalidArgument, "--limit: " + parsed.error().message});
    limit = *parsed;
    if (limit->unit == BudgetSpec::Unit::kBytes) options.memory_limit_bytes = resolve_budget_bytes(*limit, 0);
  }
  Result<TransformerTrace> generated = generate_transformer(options);
  if (!generated) {
    throw HyperoffloadError({generated.error().code, "generate transformer: " + generated.error().message});
  }
  Trace& trace = generated->trace;
  const PeakBytes peak = unplanned_peak(trace);
  if (limit && limit->unit == BudgetSpec::Unit::kPercentOfPeak) {
    trace.set_memory_limit_bytes(resolve_budget_bytes(*limit, peak.bytes));
  }
  value_or_throw(write_trace_file(trace, args.output));
  if (args.output != "-") {
    fmt::print("wrote {}: {} layers x hidden {}, {} parameters; {} ops, {} storages, {:.3f} ms of compute\n",
               args.output, options.layers, options.hidden, group_digits(generated->parameter_count),
               group_digits(trace.op_count()), group_digits(trace.storage_count()), trace.total_compute_ms());
    fmt::print("unplanned peak {} at op {} ({})", format_bytes(peak.bytes), peak.op,
               peak.op >= 0 ? trace.op_name(peak.op) : "none");
    if (trace.memory_limit_bytes()) fmt::print("; memory_limit_bytes {}", format_bytes(*trace.memory_limit_bytes()));
    fmt::print("\n");
  }
  return kExitOk;
}

void add_transformer_options(CLI::App& app, TransformerArgs& args) {
  TransformerOptions& o = args.options;
  app.add_option("--preset", args.preset,
                 fmt::format("Start from a model preset ({}); shape options override it",
                             fmt::join(transformer_preset_names(), ", ")))
      ->check(CLI::IsMember(std::vector<std::string>(transformer_preset_names().begin(),
                                                     transformer_preset_names().end())));
  app.add_option("--layers", o.layers, "Transformer blocks (required without --preset)");
  app.add_option("--hidden", o.hidden, "Hidden size H (required without --preset)");
  app.add_option("--heads", o.heads, "Attention heads; must divide --hidden (required without --preset)");
  app.add_option("--seq", o.seq, "Sequence length S (required without --preset)");
  app.add_option("--batch", o.batch, "Batch size B (required without --preset)");
  app.add_option("--vocab", o.vocab, "Vocabulary size V")->capture_default_str();
  app.add_option("--mlp-ratio", o.mlp_ratio, "MLP width as a multiple of --hidden")->capture_default_str();
  app.add_option("--max-positions", o.max_positions, "Rows of the position table (0 = --seq)")
      ->capture_default_str();
  app.add_option("--dtype-bytes", o.dtype_bytes, "Bytes per activation/parameter element (2 = fp16/bf16)")
      ->capture_default_str();
  app.add_option("--optimizer-state-bytes", o.optimizer_state_bytes, "Bytes per AdamW moment element")
      ->capture_default_str();
  app.add_option("--attention", args.attention,
                 "materialized (S x S scores and probabilities) or flash (fused, saves only output + logsumexp); "
                 "default: the preset's, else materialized")
      ->check(CLI::IsMember({"materialized", "flash"}));
  app.add_flag("--dropout", args.dropout, "Run dropout (its masks are saved for the backward pass)");
  app.add_option("--recompute", args.recompute, "none, or full (each block saves only its input and recomputes)")
      ->check(CLI::IsMember({"none", "full"}))
      ->capture_default_str();
  app.add_option("--optimizer", args.optimizer, "none, or adamw (an optimizer step after the backward)")
      ->check(CLI::IsMember({"none", "adamw"}))
      ->capture_default_str();
  app.add_flag("--untied-embeddings", args.untied_embeddings, "Give the LM head its own weight");
  app.add_option("--tflops", o.tflops, "Peak matmul throughput, 10^12 FLOP/s (A100 fp16: 312)")
      ->capture_default_str();
  app.add_option("--matmul-efficiency", o.matmul_efficiency, "Fraction of --tflops matmuls reach, in (0, 1]")
      ->capture_default_str();
  app.add_option("--memory-bandwidth", o.memory_bandwidth_gb_per_s,
                 "Device memory bandwidth for memory-bound ops, GB/s (A100: 1555)")
      ->capture_default_str();
  app.add_option("--d2h-bandwidth", o.d2h_bandwidth_gib_per_s, "Device-to-host copy bandwidth, GiB/s")
      ->capture_default_str();
  app.add_option("--h2d-bandwidth", o.h2d_bandwidth_gib_per_s, "Host-to-device copy bandwidth, GiB/s")
      ->capture_default_str();
  app.add_option("--limit", args.limit,
                 "memory_limit_bytes of the trace: bytes, a size (2GiB) or a percentage of its unplanned peak "
                 "(50%); default unlimited");
  app.add_option("-o,--output", args.output, "Output file (- for stdout)")->capture_default_str();
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
  random_app->add_option("--recomputable-fraction", random->options.recomputable_fraction,
                         "Share of the ops that may be recomputed (they write only storages they create) marked "
                         "recomputable, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  random_app->add_option("-o,--output", random->output, "Output file (- for stdout)")->capture_default_str();

  auto transformer = std::make_shared<TransformerArgs>();
  CLI::App* transformer_app = app->add_subcommand(
      "transformer",
      "A training step of a GPT-style decoder: forward (saving what autograd saves), backward in reverse, "
      "optionally an optimizer step; sizes from the shapes, durations from FLOPs and bytes (docs/GENERATORS.md)");
  add_transformer_options(*transformer_app, *transformer);

  return {app, [app, random_app, random, transformer_app, transformer] {
            if (random_app->parsed()) return run_random(*random);
            if (transformer_app->parsed()) return run_transformer(*transformer, *transformer_app);
            throw HyperoffloadError({ErrorCode::kInvalidArgument, fmt::format("unknown generator; see {} --help",
                                                                              app->get_name())});
          }};
}

const CommandRegistration kRegistration{"generate", &register_generate};

}  // namespace
}  // namespace hyperoffload::cli
