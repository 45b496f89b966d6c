// End-to-end tests of `hyperoffload generate random|transformer`.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::run_cli;
using testing::ScratchDir;

// The tiny model of tests/gen/transformer_trace_test.cc: 30 ops, 70 storages.
const std::vector<std::string> kTiny = {"generate", "transformer", "--layers", "1", "--hidden", "8", "--heads",
                                        "2",        "--seq",        "4",        "--batch", "1", "--vocab", "16"};

// kTiny with `extra` options: a value for an option kTiny has replaces it (the
// CLI rejects repeated options), others are appended.
std::vector<std::string> tiny_with(const std::vector<std::string>& extra) {
  std::vector<std::string> args = kTiny;
  for (std::size_t i = 0; i < extra.size(); ++i) {
    const auto same = std::find(args.begin() + 2, args.end(), extra[i]);
    if (same != args.end() && same + 1 != args.end() && i + 1 < extra.size() && extra[i].starts_with("--")) {
      *(same + 1) = extra[++i];
    } else {
      args.push_back(extra[i]);
    }
  }
  return args;
}

TEST(GenerateTransformerCli, WritesAParseableTraceAndASummary) {
  ScratchDir dir;
  const std::string path = (dir / "tiny.json").string();
  const testing::CliRun run = run_cli(tiny_with({"-o", path}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> trace = read_trace_file(path);
  ASSERT_TRUE(trace.has_value()) << trace.error().message;
  EXPECT_EQ(trace->op_count(), 30);
  EXPECT_EQ(trace->storage_count(), 70);
  EXPECT_EQ(trace->op_name(0), "embedding");
  EXPECT_FALSE(trace->memory_limit_bytes().has_value());
  EXPECT_THAT(run.out, HasSubstr("30 ops, 70 storages"));
  EXPECT_THAT(run.out, HasSubstr("1,048 parameters"));
  EXPECT_THAT(run.out, HasSubstr("unplanned peak"));
}

TEST(GenerateTransformerCli, WritesToStandardOutputByDefault) {
  const testing::CliRun run = run_cli(kTiny);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> trace = parse_trace_json(run.out);
  ASSERT_TRUE(trace.has_value()) << trace.error().message;
  // Same trace as the library makes.
  TransformerOptions options;
  options.layers = 1;
  options.hidden = 8;
  options.heads = 2;
  options.seq = 4;
  options.batch = 1;
  options.vocab = 16;
  Result<Trace> expected = generate_transformer_trace(options);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(trace_to_json(*trace), trace_to_json(*expected));
}

TEST(GenerateTransformerCli, PassesEveryModelOptionThrough) {
  const testing::CliRun run =
      run_cli(tiny_with({"--attention", "flash", "--dropout", "--recompute", "full", "--optimizer", "adamw",
                         "--untied-embeddings", "--mlp-ratio", "2", "--max-positions", "8", "--dtype-bytes", "4",
                         "--tflops", "100", "--matmul-efficiency", "0.5", "--memory-bandwidth", "1000",
                         "--d2h-bandwidth", "8", "--h2d-bandwidth", "12"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> trace = parse_trace_json(run.out);
  ASSERT_TRUE(trace.has_value()) << trace.error().message;
  TransformerOptions options;
  options.layers = 1;
  options.hidden = 8;
  options.heads = 2;
  options.seq = 4;
  options.batch = 1;
  options.vocab = 16;
  options.attention = AttentionKernel::kFlash;
  options.dropout = Dropout::kOn;
  options.recompute = Recompute::kFull;
  options.optimizer = OptimizerStep::kAdamW;
  options.embeddings = EmbeddingTying::kUntied;
  options.mlp_ratio = 2;
  options.max_positions = 8;
  options.dtype_bytes = 4;
  options.tflops = 100;
  options.matmul_efficiency = 0.5;
  options.memory_bandwidth_gb_per_s = 1000;
  options.d2h_bandwidth_gib_per_s = 8;
  options.h2d_bandwidth_gib_per_s = 12;
  Result<Trace> expected = generate_transformer_trace(options);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(trace_to_json(*trace), trace_to_json(*expected));
}

TEST(GenerateTransformerCli, PresetGivesTheShapeAndOptionsOverrideIt) {
  const testing::CliRun run = run_cli({"generate", "transformer", "--preset", "gpt2-medium", "--layers", "2",
                                       "--seq", "64", "--batch", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> trace = parse_trace_json(run.out);
  ASSERT_TRUE(trace.has_value()) << trace.error().message;
  // gpt2-medium's hidden 1024 and 16 heads, with 2 blocks: 1 + 2 * 12 + 3
  // forward and 3 + 2 * 10 + 1 backward ops.
  EXPECT_EQ(trace->op_count(), 52);
  TransformerOptions options = *transformer_preset("gpt2-medium");
  options.layers = 2;
  options.seq = 64;
  options.batch = 1;
  options.max_positions = 0;
  Result<Trace> expected = generate_transformer_trace(options);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(trace_to_json(*trace), trace_to_json(*expected));
}

TEST(GenerateTransformerCli, LimitTakesASizeOrAPercentageOfTheUnplannedPeak) {
  testing::CliRun run = run_cli(tiny_with({"--limit", "2KiB"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> trace = parse_trace_json(run.out);
  ASSERT_TRUE(trace.has_value());
  EXPECT_EQ(trace->memory_limit_bytes(), 2048);

  run = run_cli(tiny_with({"--limit", "50%"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  trace = parse_trace_json(run.out);
  ASSERT_TRUE(trace.has_value());
  // The tiny model's unplanned peak is 4612 bytes (tests/gen has its profile),
  // so 50% is 2306.
  EXPECT_EQ(unplanned_peak(*trace).bytes, 4612);
  EXPECT_EQ(trace->memory_limit_bytes(), 2306);
}

struct BadArgs {
  std::vector<std::string> extra;  // appended to (or replacing) the tiny model's options
  const char* message;             // expected in stderr
  bool replace = false;
};

TEST(GenerateTransformerCli, BadOptionsExitTwoNamingTheOptionAndWriteNoFile) {
  const std::vector<BadArgs> cases = {
      {{"--heads", "3"}, "hidden (8) must be divisible by heads (3)"},
      {{"--layers", "0"}, "layers must be between 1 and"},
      {{"--seq", "-4"}, "seq must be positive"},
      {{"--vocab", "0"}, "vocab must be positive"},
      {{"--dtype-bytes", "0"}, "dtype_bytes must be between 1 and 8"},
      {{"--tflops", "-1"}, "tflops must be a positive number"},
      {{"--matmul-efficiency", "2"}, "matmul_efficiency must be in (0, 1]"},
      {{"--memory-bandwidth", "0"}, "memory_bandwidth_gb_per_s"},
      {{"--d2h-bandwidth", "0"}, "d2h_bandwidth_gib_per_s"},
      {{"--max-positions", "2"}, "max_positions (2)"},
      {{"--hidden", "abc"}, "--hidden"},
      {{"--attention", "fancy"}, "--attention"},
      {{"--recompute", "some"}, "--recompute"},
      {{"--optimizer", "sgd"}, "--optimizer"},
      {{"--limit", "lots"}, "--limit: invalid budget \"lots\""},
      {{"--seq", "3000000000"}, "reduce batch, heads or seq"},
      {{"generate", "transformer", "--layers", "2", "--hidden", "8"}, "missing --heads, --seq, --batch", true},
      {{"generate", "transformer", "--preset", "gpt3"}, "--preset", true},
  };
  for (const BadArgs& c : cases) {
    ScratchDir dir;
    const std::string path = (dir / "out.json").string();
    std::vector<std::string> args = c.replace ? c.extra : tiny_with(c.extra);
    args.insert(args.end(), {"-o", path});
    const testing::CliRun run = run_cli(args);
    EXPECT_EQ(run.exit_code, 2) << c.message << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.message));
    EXPECT_FALSE(std::filesystem::exists(path)) << c.message;
    EXPECT_TRUE(run.out.empty()) << c.message << ": " << run.out;
  }
}

TEST(GenerateTransformerCli, UnwritableOutputExitsTwo) {
  ScratchDir dir;
  const testing::CliRun run = run_cli(tiny_with({"-o", (dir / "missing" / "t.json").string()}));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("missing"));
}

TEST(GenerateTransformerCli, HelpListsTheOptionsWithUnits) {
  const testing::CliRun run = run_cli({"generate", "transformer", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--layers", "--hidden", "--heads", "--seq", "--batch", "--vocab", "--dtype-bytes",
                             "--tflops", "--limit", "--attention", "--recompute", "GB/s", "GiB/s"}) {
    EXPECT_THAT(run.out, HasSubstr(option));
  }
}

TEST(GenerateRandomCli, StillWritesARandomTrace) {
  ScratchDir dir;
  const std::string path = (dir / "random.json").string();
  const testing::CliRun run =
      run_cli({"generate", "random", "--ops", "40", "--storages", "10", "--seed", "3", "-o", path});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> trace = read_trace_file(path);
  ASSERT_TRUE(trace.has_value()) << trace.error().message;
  EXPECT_EQ(trace->op_count(), 40);
  EXPECT_EQ(trace->storage_count(), 10);
  EXPECT_TRUE(trace->memory_limit_bytes().has_value());  // --limit-fraction defaults to 0.5
  EXPECT_TRUE(run.out.empty());
}

TEST(GenerateCli, WithoutAGeneratorExitsTwo) {
  const testing::CliRun run = run_cli({"generate"});
  EXPECT_EQ(run.exit_code, 2);
}

TEST(GenerateTransformerCli, UsesThePresetsAttentionKernelUnlessOverridden) {
  testing::ScratchDir dir;
  const std::string preset = (dir / "preset.json").string();
  ASSERT_EQ(testing::run_cli({"generate", "transformer", "--preset", "gpt3-1.3b", "-o", preset}).exit_code, 0);
  EXPECT_EQ(testing::read_text(preset), trace_to_json(*generate_transformer_trace(*transformer_preset("gpt3-1.3b"))));
  const std::string materialized = (dir / "materialized.json").string();
  ASSERT_EQ(testing::run_cli({"generate", "transformer", "--preset", "gpt3-1.3b", "--attention", "materialized",
                              "-o", materialized})
                .exit_code,
            0);
  TransformerOptions options = *transformer_preset("gpt3-1.3b");
  options.attention = AttentionKernel::kMaterialized;
  EXPECT_EQ(testing::read_text(materialized), trace_to_json(*generate_transformer_trace(options)));
}

}  // namespace
}  // namespace hyperoffload
