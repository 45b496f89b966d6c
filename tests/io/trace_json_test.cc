// Trace file format: parsing, defaults, round trips and every input error.
#include "hyperoffload/io/trace_json.h"

#include <cmath>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hyperoffload/gen/random_trace.h"
#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kExample = R"({"format": "hyperoffload.trace", "version": 1,
 "memory_limit_bytes": 1048576, "d2h_bandwidth_gbps": 12.5, "h2d_bandwidth_gbps": 8,
 "storages": [{"id": 7, "size_bytes": 4096, "retained": false}, {"id": 3, "size_bytes": 10, "retained": true}],
 "ops": [{"name": "aten::mm", "duration_ms": 0.25, "accesses": [{"storage": 7, "kind": "write"}]},
         {"name": "aten::add", "accesses": [{"storage": 7, "kind": "read"}, {"storage": 3, "kind": "write"}],
          "extra": {"ignored": true}}],
 "meta": {"anything": [1, 2, 3]}})";

std::string parse_error(std::string_view json) {
  Result<Trace> trace = parse_trace_json(json, "t.json");
  EXPECT_FALSE(trace.has_value());
  return trace ? std::string() : trace.error().message;
}

std::string with_ops(std::string_view ops, std::string_view storages = R"([{"id": 1, "size_bytes": 8}])") {
  return std::string(R"({"format": "hyperoffload.trace", "version": 1, "storages": )") + std::string(storages) +
         R"(, "ops": )" + std::string(ops) + "}";
}

TEST(TraceJson, ParsesEveryField) {
  Result<Trace> parsed = parse_trace_json(kExample);
  ASSERT_TRUE(parsed) << parsed.error().message;
  const Trace& trace = *parsed;
  EXPECT_EQ(trace.memory_limit_bytes(), 1048576);
  EXPECT_EQ(trace.d2h_bandwidth_gib_per_s(), 12.5);
  EXPECT_EQ(trace.h2d_bandwidth_gib_per_s(), 8.0);
  ASSERT_EQ(trace.storage_count(), 2);
  EXPECT_EQ(trace.storage(0).id, 7);
  EXPECT_EQ(trace.storage(0).size_bytes, 4096);
  EXPECT_FALSE(trace.storage(0).retained());
  EXPECT_TRUE(trace.storage(1).retained());
  ASSERT_EQ(trace.op_count(), 2);
  EXPECT_EQ(trace.op_name(0), "aten::mm");
  EXPECT_EQ(trace.op_duration_ms(0), 0.25);
  EXPECT_EQ(trace.op_duration_ms(1), 0.0);  // default
  ASSERT_EQ(trace.accesses(1).size(), 2u);
  EXPECT_EQ(trace.accesses(1)[0].storage, 0);  // dense index of id 7
  EXPECT_EQ(trace.accesses(1)[0].kind, AccessKind::kRead);
  EXPECT_EQ(trace.accesses(1)[1].storage, 1);
  EXPECT_EQ(trace.accesses(1)[1].kind, AccessKind::kWrite);
  EXPECT_EQ(trace.find_storage(3), 1);
  EXPECT_EQ(trace.find_storage(4), std::nullopt);
}

TEST(TraceJson, AppliesDefaultsForOptionalFields) {
  Result<Trace> trace = parse_trace_json(with_ops(R"([{"accesses": [{"storage": 1, "kind": "write"}]}])"));
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_EQ(trace->memory_limit_bytes(), std::nullopt);
  EXPECT_EQ(trace->d2h_bandwidth_gib_per_s(), 16.0);
  EXPECT_EQ(trace->h2d_bandwidth_gib_per_s(), 16.0);
  EXPECT_FALSE(trace->storage(0).retained());
  EXPECT_EQ(trace->op_name(0), "");
}

TEST(TraceJson, TreatsANullLimitAsUnlimited) {
  std::string json = with_ops("[]");
  json.insert(json.size() - 1, R"(, "memory_limit_bytes": null)");
  Result<Trace> trace = parse_trace_json(json);
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_EQ(trace->memory_limit_bytes(), std::nullopt);
}

TEST(TraceJson, RoundTripsExactly) {
  Result<Trace> first = parse_trace_json(kExample);
  ASSERT_TRUE(first);
  const std::string text = trace_to_json(*first);
  Result<Trace> second = parse_trace_json(text);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(trace_to_json(*second), text);
}

TEST(TraceJson, RoundTripsRandomTracesIncludingDurations) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    RandomTraceOptions options;
    options.seed = seed;
    const Trace trace = generate_random_trace(options);
    const std::string text = trace_to_json(trace);
    Result<Trace> parsed = parse_trace_json(text);
    ASSERT_TRUE(parsed) << parsed.error().message;
    ASSERT_EQ(parsed->op_count(), trace.op_count());
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      ASSERT_EQ(parsed->op_duration_ms(op), trace.op_duration_ms(op));  // shortest round-trip formatting
    }
    EXPECT_EQ(trace_to_json(*parsed), text);
  }
}

TEST(TraceJson, EscapesOpNames) {
  TraceBuilder builder;
  ASSERT_TRUE(builder.add_op("quote\" backslash\\ newline\n tab\t bell\x07"));
  Result<Trace> trace = std::move(builder).build();
  ASSERT_TRUE(trace);
  Result<Trace> parsed = parse_trace_json(trace_to_json(*trace));
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->op_name(0), "quote\" backslash\\ newline\n tab\t bell\x07");
}

TEST(TraceJson, RejectsAWrongFormat) {
  EXPECT_EQ(parse_error(R"({"format": "other", "version": 1, "storages": [], "ops": []})"),
            "format: expected \"hyperoffload.trace\", got \"other\"");
  EXPECT_EQ(parse_error(R"({"version": 1, "storages": [], "ops": []})"),
            "format: missing; expected \"hyperoffload.trace\"");
}

TEST(TraceJson, RejectsAnUnsupportedVersion) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.trace", "version": 4, "storages": [], "ops": []})"),
            "version: unsupported version 4; this build reads versions 1 to 3");
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.trace", "version": 0, "storages": [], "ops": []})"),
            "version: unsupported version 0; this build reads versions 1 to 3");
}

// ---- Version 2: ops[].recomputable ---------------------------------------------------

std::string v2_with_ops(std::string_view ops) {
  return std::string(R"({"format": "hyperoffload.trace", "version": 2, "storages": [{"id": 1, "size_bytes": 8},
      {"id": 2, "size_bytes": 4}], "ops": )") + std::string(ops) + "}";
}

TEST(TraceJson, ReadsAndRoundTripsRecomputableOps) {
  const std::string json = v2_with_ops(R"([{"name": "x", "accesses": [{"storage": 1, "kind": "write"}]},
      {"name": "relu", "recomputable": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 2, "kind": "write"}]},
      {"name": "use", "recomputable": false, "accesses": [{"storage": 2, "kind": "read"}]}])");
  Result<Trace> trace = parse_trace_json(json);
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_FALSE(trace->op_recomputable(0));  // default
  EXPECT_TRUE(trace->op_recomputable(1));
  EXPECT_FALSE(trace->op_recomputable(2));
  EXPECT_TRUE(trace->has_recomputable_ops());
  const std::string text = trace_to_json(*trace);
  EXPECT_THAT(text, HasSubstr(R"("format": "hyperoffload.trace", "version": 2)"));
  EXPECT_THAT(text, HasSubstr(R"({"name": "relu", "duration_ms": 0, "recomputable": true, "accesses": [)"));
  EXPECT_THAT(text, HasSubstr(R"({"name": "use", "duration_ms": 0, "accesses": [)"));  // false is the default
  Result<Trace> again = parse_trace_json(text);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->op_recomputable(1));
  EXPECT_EQ(trace_to_json(*again), text);
}

TEST(TraceJson, ReadsVersion1TracesAsHavingNothingRecomputable) {
  Result<Trace> trace = parse_trace_json(kExample);
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_FALSE(trace->has_recomputable_ops());
}

TEST(TraceJson, RejectsRecomputableInAVersion1Trace) {
  EXPECT_EQ(parse_error(with_ops(R"([{"recomputable": true, "accesses": [{"storage": 1, "kind": "write"}]}])")),
            "ops[0].recomputable: needs trace format version 2 (this file says version 1)");
}

TEST(TraceJson, RejectsANonBooleanRecomputable) {
  EXPECT_THAT(parse_error(v2_with_ops(R"([{"recomputable": 1, "accesses": [{"storage": 1, "kind": "write"}]}])")),
              HasSubstr("ops[0].recomputable: expected a boolean"));
}

TEST(TraceJson, RejectsRecomputableOpsThatCannotBeReRunFromTheirInputs) {
  // In place on what no op of the step wrote (here its first access).
  EXPECT_EQ(parse_error(v2_with_ops(
                R"([{"recomputable": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 1, "kind": "write"}]}])")),
            "ops[0].recomputable: the op reads and writes storage 1 (accesses[1]), which no op of the step wrote "
            "before; an in-place op is recomputable only on what a recomputable op made");
  // In place on what an op that is not recomputable made.
  EXPECT_EQ(parse_error(v2_with_ops(R"([{"accesses": [{"storage": 1, "kind": "write"}]},
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 1, "kind": "write"}]}])")),
            "ops[1].recomputable: the op reads and writes storage 1 (accesses[1]), whose current version ops[0] "
            "made, which is not recomputable; an in-place op is recomputable only on what a recomputable op made");
  // In place and creating another storage as well.
  EXPECT_EQ(parse_error(v2_with_ops(R"([{"recomputable": true, "accesses": [{"storage": 1, "kind": "write"}]},
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 1, "kind": "write"},
                                          {"storage": 2, "kind": "write"}]}])")),
            "ops[1].recomputable: the op reads and writes storage 1 (accesses[1]) and writes another storage; an "
            "in-place op is recomputable only when that one storage is all it writes");
  // Writes a storage an earlier op created.
  EXPECT_EQ(parse_error(v2_with_ops(R"([{"accesses": [{"storage": 1, "kind": "write"}]},
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "write"}]}])")),
            "ops[1].recomputable: the op writes storage 1 (accesses[0]), which ops[0] created, without reading it; "
            "an op that overwrites a storage it did not create cannot be recomputed");
  // Writes nothing.
  EXPECT_EQ(parse_error(v2_with_ops(R"([{"accesses": [{"storage": 1, "kind": "write"}]},
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "read"}]}])")),
            "ops[1].recomputable: the op writes no storage, so there is nothing to recompute");
}

TEST(TraceJson, ReadsInPlaceFollowersAndTheirUnits) {
  // op 0 makes 1; op 1 rewrites it in place reading 2 (add_); op 2 rewrites it
  // again (relu_): a unit of three, op 2's previous member op 1, op 1's op 0.
  Result<Trace> trace = parse_trace_json(v2_with_ops(R"([
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "write"}]},
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 2, "kind": "read"},
                                          {"storage": 1, "kind": "write"}]},
      {"recomputable": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 1, "kind": "write"}]}])"));
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_TRUE(trace->has_in_place_units());
  EXPECT_EQ(trace->op_unit_previous(0), -1);
  EXPECT_EQ(trace->op_unit_previous(1), 0);
  EXPECT_EQ(trace->op_unit_previous(2), 1);
}

// ---- Version 3: ops[].rng_replay ------------------------------------------------------

std::string v3_with_ops(std::string_view ops) {
  std::string json = v2_with_ops(ops);
  json.replace(json.find("\"version\": 2"), 12, "\"version\": 3");
  return json;
}

TEST(TraceJson, ReadsAndRoundTripsOpsThatNeedRngReplayAsVersion3) {
  const std::string json = v3_with_ops(R"([{"name": "x", "accesses": [{"storage": 1, "kind": "write"}]},
      {"name": "dropout", "recomputable": true, "rng_replay": true, "accesses": [{"storage": 1, "kind": "read"}, {"storage": 2, "kind": "write"}]},
      {"name": "use", "accesses": [{"storage": 2, "kind": "read"}]}])");
  Result<Trace> trace = parse_trace_json(json);
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_TRUE(trace->op_recomputable(1));  // planners treat it as any recomputable op
  EXPECT_TRUE(trace->op_rng_replay(1));
  EXPECT_FALSE(trace->op_rng_replay(0));
  EXPECT_TRUE(trace->has_rng_replay_ops());
  const std::string text = trace_to_json(*trace);
  EXPECT_THAT(text, HasSubstr(R"("format": "hyperoffload.trace", "version": 3)"));
  EXPECT_THAT(text, HasSubstr(R"({"name": "dropout", "duration_ms": 0, "recomputable": true, "rng_replay": true, )"));
  Result<Trace> again = parse_trace_json(text);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(trace_to_json(*again), text);
}

TEST(TraceJson, WritesATraceWithoutRngReplayAsVersion2) {
  Result<Trace> trace = parse_trace_json(v3_with_ops(R"([{"recomputable": true, "rng_replay": false,
      "accesses": [{"storage": 1, "kind": "write"}]}])"));
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_FALSE(trace->has_rng_replay_ops());
  EXPECT_THAT(trace_to_json(*trace), HasSubstr(R"("version": 2)"));
}

TEST(TraceJson, RejectsRngReplayBeforeVersion3OrWithoutRecomputable) {
  EXPECT_EQ(parse_error(v2_with_ops(
                R"([{"recomputable": true, "rng_replay": true, "accesses": [{"storage": 1, "kind": "write"}]}])")),
            "ops[0].rng_replay: needs trace format version 3 (this file says version 2)");
  EXPECT_EQ(parse_error(v3_with_ops(R"([{"rng_replay": true, "accesses": [{"storage": 1, "kind": "write"}]}])")),
            "ops[0].rng_replay: true needs \"recomputable\": true (only a recomputable op is re-run with its "
            "generator's state)");
  EXPECT_THAT(parse_error(v3_with_ops(R"([{"rng_replay": 1, "accesses": [{"storage": 1, "kind": "write"}]}])")),
              HasSubstr("ops[0].rng_replay: expected a boolean"));
}

TEST(TraceJson, RejectsADuplicateStorageId) {
  EXPECT_EQ(parse_error(with_ops("[]", R"([{"id": 1, "size_bytes": 8}, {"id": 2, "size_bytes": 8},
                                          {"id": 1, "size_bytes": 4}])")),
            "storages[2].id: duplicate storage id 1 (also storages[0])");
}

TEST(TraceJson, RejectsANegativeSize) {
  EXPECT_EQ(parse_error(with_ops("[]", R"([{"id": 1, "size_bytes": -8}])")),
            "storages[0].size_bytes: must be non-negative, got -8");
}

TEST(TraceJson, RejectsSizesWhoseTotalOverflowsByteCounts) {
  // 2^62 = 4611686018427387904 is the most all storages may hold together:
  // 2^61 + 2^61 reaches it exactly and is accepted; one byte more is not.
  EXPECT_TRUE(parse_trace_json(with_ops("[]", R"([{"id": 1, "size_bytes": 2305843009213693952},
                                       {"id": 2, "size_bytes": 2305843009213693952}])"))
                  .has_value());
  EXPECT_EQ(parse_error(with_ops("[]", R"([{"id": 1, "size_bytes": 2305843009213693952},
                                          {"id": 2, "size_bytes": 2305843009213693952},
                                          {"id": 3, "size_bytes": 1}])")),
            "storages[2].size_bytes: 1 brings the storages' total above 2^62 bytes");
}

TEST(TraceJson, RejectsANegativeDuration) {
  EXPECT_EQ(parse_error(with_ops(R"([{"name": "a"}, {"name": "b", "duration_ms": -0.5}])")),
            "ops[1].duration_ms: must be a non-negative finite number, got -0.5");
}

// Found by fuzzing (fuzz/trace_json_fuzzer.cc): "-0e3" is -0, which the
// non-negative check lets through; kept as -0 it was written as "-0", read back
// as 0 and written as "0". Now a zero duration is +0 however it is spelled.
TEST(TraceJson, ReadsANegativeZeroDurationAsZero) {
  Result<Trace> trace = parse_trace_json(with_ops(R"([{"duration_ms": -0e3}, {"duration_ms": -0.0}])"));
  ASSERT_TRUE(trace) << trace.error().message;
  EXPECT_FALSE(std::signbit(trace->op_duration_ms(0)));
  EXPECT_FALSE(std::signbit(trace->op_duration_ms(1)));
  const std::string written = trace_to_json(*trace);
  EXPECT_THAT(written, Not(HasSubstr("-0")));
  EXPECT_EQ(trace_to_json(*parse_trace_json(written)), written);
}

TEST(TraceJson, RejectsAnAccessToAnUndeclaredStorage) {
  EXPECT_EQ(parse_error(with_ops(R"([{"accesses": [{"storage": 1, "kind": "read"}, {"storage": 77, "kind": "read"}]}])")),
            "ops[0].accesses[1].storage: undeclared storage 77");
}

TEST(TraceJson, RejectsAnUnknownAccessKind) {
  EXPECT_EQ(parse_error(with_ops(R"([{"accesses": [{"storage": 1, "kind": "modify"}]}])")),
            "ops[0].accesses[0].kind: unknown access kind \"modify\" (expected \"read\" or \"write\")");
}

TEST(TraceJson, RejectsANonPositiveBandwidth) {
  std::string json = with_ops("[]");
  json.insert(json.size() - 1, R"(, "h2d_bandwidth_gbps": 0)");
  EXPECT_EQ(parse_error(json), "h2d_bandwidth_gbps: must be a positive number, got 0");
  json = with_ops("[]");
  json.insert(json.size() - 1, R"(, "d2h_bandwidth_gbps": -3.5)");
  EXPECT_EQ(parse_error(json), "d2h_bandwidth_gbps: must be a positive number, got -3.5");
}

TEST(TraceJson, RejectsDurationsWhoseTotalOverflowsTime) {
  // 1e15 ms is the most all durations may add up to: 5e14 + 5e14 reaches it
  // exactly and is accepted; one more millisecond is not (1e15 + 1 is exact in
  // a double, whose spacing there is 0.125).
  EXPECT_TRUE(parse_trace_json(with_ops(R"([{"duration_ms": 5e14}, {"duration_ms": 5e14}])")).has_value());
  EXPECT_EQ(parse_error(with_ops(R"([{"duration_ms": 5e14}, {"duration_ms": 5e14}, {"duration_ms": 1}])")),
            "ops[2].duration_ms: 1 ms brings the ops' total duration above 1e15 ms (about 31,700 years), the most a "
            "trace may hold");
  // The issue's case: each 1e308 is finite, their sum is not.
  EXPECT_EQ(parse_error(with_ops(R"([{"duration_ms": 1e308}, {"duration_ms": 1e308}])")),
            "ops[0].duration_ms: 1e+308 ms brings the ops' total duration above 1e15 ms (about 31,700 years), the "
            "most a trace may hold");
}

TEST(TraceJson, RejectsABandwidthTooSlowToCopyTheStorages) {
  // 2^62 bytes at 2^-7 GiB/s take 2^62 / 2^23 = 2^39 s = 5.5e14 ms: accepted.
  // At 2^-8 GiB/s they take 2^40 s = 1.1e15 ms, above the 1e15 ms limit.
  const std::string storages = R"([{"id": 1, "size_bytes": 4611686018427387904}])";
  std::string json = with_ops("[]", storages);
  json.insert(json.size() - 1, R"(, "d2h_bandwidth_gbps": 0.0078125, "h2d_bandwidth_gbps": 0.0078125)");
  EXPECT_TRUE(parse_trace_json(json).has_value());
  json = with_ops("[]", storages);
  json.insert(json.size() - 1, R"(, "d2h_bandwidth_gbps": 0.0078125, "h2d_bandwidth_gbps": 0.00390625)");
  EXPECT_EQ(parse_error(json),
            "h2d_bandwidth_gbps: 0.00390625 GiB/s is too slow for this trace: copying its storages' "
            "4611686018427387904 bytes would take more than 1e15 ms (about 31,700 years), the most a trace may hold");
  // The issue's case: 8 bytes at 1e-300 GiB/s would take 7.5e293 ms.
  json = with_ops("[]");
  json.insert(json.size() - 1, R"(, "d2h_bandwidth_gbps": 1e-300)");
  EXPECT_THAT(parse_error(json), HasSubstr("d2h_bandwidth_gbps: 1e-300 GiB/s is too slow for this trace"));
  // Without bytes to copy any positive bandwidth will do.
  json = with_ops("[]", "[]");
  json.insert(json.size() - 1, R"(, "d2h_bandwidth_gbps": 1e-300)");
  EXPECT_TRUE(parse_trace_json(json).has_value());
}

TEST(TraceJson, RejectsJsonNestedDeeperThan64LevelsPointingAtTheBracket) {
  // 63 arrays inside the top-level object reach level 64 and are accepted as a
  // producer's own key; the 64th opens level 65, at column prefix + 64.
  const std::string prefix = R"({"format": "hyperoffload.trace", "version": 1, "storages": [], "ops": [], "meta": )";
  auto nested = [&](int depth) { return prefix + std::string(depth, '[') + std::string(depth, ']') + "}"; };
  EXPECT_TRUE(parse_trace_json(nested(63)).has_value());
  EXPECT_EQ(parse_error(nested(64)),
            fmt::format("t.json:1:{}: JSON nested deeper than 64 levels of arrays and objects (trace and schedule "
                        "files need 5)",
                        prefix.size() + 64));
  // Thousands deep: the same clear error, with the same position.
  EXPECT_EQ(parse_error(nested(5000)), parse_error(nested(64)));
  // Brackets inside strings do not count.
  EXPECT_TRUE(parse_trace_json(prefix + "\"" + std::string(100, '[') + "\"}").has_value());
}

TEST(TraceJson, ReportsMalformedJsonWithLineAndColumn) {
  // Line 3, column 14 is the stray 'x'.
  const std::string message = parse_error("{\"format\": \"hyperoffload.trace\",\n \"version\": 1,\n \"storages\": x}");
  EXPECT_THAT(message, HasSubstr("t.json:3:14: malformed JSON"));
  EXPECT_THAT(parse_error("{\"format\": "), HasSubstr("t.json:1:12: malformed JSON"));
}

TEST(TraceJson, RejectsWrongTypesNamingThePath) {
  EXPECT_EQ(parse_error(with_ops(R"([{"duration_ms": "fast"}])")), "ops[0].duration_ms: expected a number, got string");
  EXPECT_EQ(parse_error(with_ops(R"([{"accesses": [{"storage": 1.5, "kind": "read"}]}])")),
            "ops[0].accesses[0].storage: expected an integer, got 1.5");
  EXPECT_EQ(parse_error(with_ops("{}")), "ops: expected an array, got object");
  EXPECT_EQ(parse_error(with_ops("[]", R"([{"id": 1, "size_bytes": 8, "retained": "yes"}])")),
            "storages[0].retained: expected a boolean, got string");
  EXPECT_EQ(parse_error(with_ops("[]", R"([{"id": -1, "size_bytes": 8}])")),
            "storages[0].id: must be a non-negative integer, got -1");
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.trace", "version": 1, "ops": []})"),
            "storages: missing (an array of storages)");
  EXPECT_EQ(parse_error(with_ops(R"([{"accesses": [{"kind": "read"}]}])")), "ops[0].accesses[0].storage: missing");
  EXPECT_EQ(parse_error("[1, 2]"), "(document): expected an object, got array");
}

TEST(TraceJson, ReportsAMissingFile) {
  Result<Trace> trace = read_trace_file("/nonexistent/trace.json");
  ASSERT_FALSE(trace);
  EXPECT_EQ(trace.error().code, ErrorCode::kIo);
  EXPECT_THAT(trace.error().message, HasSubstr("cannot read /nonexistent/trace.json: No such file or directory"));
}

TEST(TraceJson, WritesFilesAtomically) {
  testing::ScratchDir dir;
  Result<Trace> trace = parse_trace_json(kExample);
  ASSERT_TRUE(trace);
  const auto path = dir / "out.json";
  ASSERT_TRUE(write_trace_file(*trace, path));
  EXPECT_EQ(testing::read_text(path), trace_to_json(*trace));
  // A failed write (missing directory) leaves nothing behind.
  EXPECT_FALSE(write_trace_file(*trace, dir / "missing" / "out.json"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
}

}  // namespace
}  // namespace hyperoffload
