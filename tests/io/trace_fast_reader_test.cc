// The one-pass trace reader (Note [Two trace readers]): it gives the DOM
// reader's trace wherever it gives one, and gives up on everything outside
// its subset, which parse_trace_json then reads with the DOM reader.
#include "hyperoffload/io/internal/trace_fast_reader.h"

#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/io/file.h"
#include "hyperoffload/io/trace_json.h"

namespace hyperoffload {
namespace {

using internal::read_trace_fast;

// The DOM reader's trace of `json` (which has an op): an unknown member of an
// op, which the DOM reader ignores and the fast reader does not take, sends
// parse_trace_json there.
Result<Trace> read_with_dom(std::string_view json) {
  std::string text(json);
  const std::size_t open = text.find('{', text.find("\"ops\""));
  text.insert(open + 1, "\"comment\": \"read by the DOM reader\", ");
  EXPECT_FALSE(read_trace_fast(text).has_value());
  return parse_trace_json(text);
}

void expect_same_as_dom(std::string_view json, std::string_view what) {
  std::optional<Trace> fast = read_trace_fast(json);
  ASSERT_TRUE(fast.has_value()) << what;
  Result<Trace> dom = read_with_dom(json);
  ASSERT_TRUE(dom) << what << ": " << dom.error().message;
  EXPECT_EQ(trace_to_json(*fast), trace_to_json(*dom)) << what;
}

TEST(TraceFastReader, ReadsEveryFieldOfAWrittenTrace) {
  constexpr const char* kJson = R"({"format": "hyperoffload.trace", "version": 3,
 "memory_limit_bytes": 1048576, "host_memory_limit_bytes": 2048,
 "d2h_bandwidth_gbps": 12.5, "h2d_bandwidth_gbps": 8,
 "storages": [
  {"id": 7, "size_bytes": 4096, "retained": false},
  {"id": 3, "size_bytes": 10, "retained": true}
 ],
 "ops": [
  {"name": "aten::mm", "duration_ms": 2.5e-05, "recomputable": true, "rng_replay": true, "accesses": [{"storage": 7, "kind": "write"}]},
  {"name": "aten::add", "duration_ms": 3, "accesses": [{"storage": 7, "kind": "read"}, {"storage": 3, "kind": "write"}]},
  {"accesses": []}
 ]})";
  std::optional<Trace> trace = read_trace_fast(kJson);
  ASSERT_TRUE(trace.has_value());
  EXPECT_EQ(trace->memory_limit_bytes(), 1048576);
  EXPECT_EQ(trace->host_memory_limit_bytes(), 2048);
  EXPECT_EQ(trace->d2h_bandwidth_gib_per_s(), 12.5);
  EXPECT_EQ(trace->h2d_bandwidth_gib_per_s(), 8.0);
  ASSERT_EQ(trace->storage_count(), 2);
  EXPECT_EQ(trace->storage(0).id, 7);
  EXPECT_EQ(trace->storage(0).size_bytes, 4096);
  EXPECT_FALSE(trace->storage(0).retained());
  EXPECT_TRUE(trace->storage(1).retained());
  ASSERT_EQ(trace->op_count(), 3);
  EXPECT_EQ(trace->op_name(0), "aten::mm");
  EXPECT_EQ(trace->op_duration_ms(0), 2.5e-05);
  EXPECT_TRUE(trace->op_rng_replay(0));
  EXPECT_EQ(trace->op_duration_ms(1), 3.0);
  EXPECT_FALSE(trace->op_recomputable(1));
  ASSERT_EQ(trace->accesses(1).size(), 2u);
  EXPECT_EQ(trace->accesses(1)[0].storage, 0);
  EXPECT_EQ(trace->accesses(1)[0].kind, AccessKind::kRead);
  EXPECT_EQ(trace->accesses(1)[1].storage, 1);
  EXPECT_EQ(trace->accesses(1)[1].kind, AccessKind::kWrite);
  EXPECT_EQ(trace->op_name(2), "");
  EXPECT_EQ(trace->accesses(2).size(), 0u);
  expect_same_as_dom(kJson, "hand-written");
}

TEST(TraceFastReader, GivesTheDomReadersTraceOnGeneratedTraces) {
  RandomTraceOptions options;
  options.op_count = 3000;
  options.storage_count = 2000;
  options.recomputable_fraction = 0.5;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    options.seed = seed;
    expect_same_as_dom(trace_to_json(generate_random_trace(options)), "random");
  }
  Result<Trace> transformer = generate_transformer_trace(demo_transformer_options());
  ASSERT_TRUE(transformer);
  expect_same_as_dom(trace_to_json(*transformer), "transformer");
}

// Note [Room for the ops before reading them]: from 8 MiB of storages or ops
// on, the builder reserves what the first MiB extrapolates to. Two traces past it:
// a random one, whose first MiB is like the rest (the estimate about right),
// and one whose first 50,000 ops have no accesses and the next 60,000 three
// each (nothing reserved for accesses, so they grow as before). Both read as
// the DOM reader reads them.
TEST(TraceFastReader, GivesTheDomReadersTraceWhereItReservesRoomForTheOps) {
  constexpr std::size_t kReserveFrom = std::size_t{8} << 20;
  RandomTraceOptions options;
  options.op_count = 80'000;
  options.storage_count = 40'000;
  options.recomputable_fraction = 0.5;
  options.seed = 7;
  const std::string random = trace_to_json(generate_random_trace(options));
  ASSERT_GT(random.size() - random.find("\"ops\""), kReserveFrom);
  expect_same_as_dom(random, "random, 80,000 ops");

  std::string skewed = R"({"format": "hyperoffload.trace", "version": 2, "storages": [)";
  for (int id = 0; id < 1000; ++id) {
    skewed += fmt::format(R"({}{{"id": {}, "size_bytes": {}}})", id ? ", " : "", id, 64 * (id + 1));
  }
  skewed += "],\n \"ops\": [";
  for (int op = 0; op < 50'000; ++op) {
    skewed += fmt::format(R"({}{{"name": "idle{}", "accesses": []}})", op ? ",\n  " : "\n  ", op);
  }
  for (int op = 0; op < 60'000; ++op) {
    skewed += ",\n  ";
    skewed += fmt::format(R"({{"name": "busy", "duration_ms": 0.5, "accesses": [{{"storage": {}, "kind": "read"}}, )"
                          R"({{"storage": {}, "kind": "read"}}, {{"storage": {}, "kind": "write"}}]}})",
                          op % 1000, (op + 1) % 1000, (op + 2) % 1000);
  }
  skewed += "\n ]}\n";
  ASSERT_GT(skewed.size() - skewed.find("\"ops\""), kReserveFrom);
  std::optional<Trace> trace = read_trace_fast(skewed);
  ASSERT_TRUE(trace.has_value());
  ASSERT_EQ(trace->op_count(), 110'000);
  EXPECT_EQ(trace->access_count(), 180'000u);
  EXPECT_EQ(trace->op_name(49'999), "idle49999");
  ASSERT_EQ(trace->accesses(109'999).size(), 3u);
  EXPECT_EQ(trace->storage(trace->accesses(109'999)[2].storage).id, (59'999 + 2) % 1000);
  expect_same_as_dom(skewed, "skewed, 110,000 ops");
}

// Note [Storages and ops read at once] (trace_fast_reader.cc): past 8 MiB
// the storages are read beside the ops. A trace of 30,000 storages with
// sparse ids (every seventh id, from 5) and 45,000 ops of three accesses
// each (about 9.4 MiB), with `between` after the storages and `ops_key` (the
// key, colon included) before the ops.
std::string beside_trace(std::string_view between, std::string_view ops_key) {
  std::string json = R"({"format": "hyperoffload.trace", "version": 2, "storages": [)";
  for (int s = 0; s < 30'000; ++s) {
    json += fmt::format(R"({}{{"id": {}, "size_bytes": {}, "retained": {}}})", s ? ",\n  " : "\n  ", 5 + 7 * s,
                        64 * (s % 97 + 1), s % 5 == 0 ? "true" : "false");
  }
  json += "\n ],";
  json += between;
  json += "\n ";
  json += ops_key;
  json += " [";
  for (int op = 0; op < 45'000; ++op) {
    json += fmt::format(R"({}{{"name": "op{}", "duration_ms": 0.25, "accesses": [{{"storage": {}, "kind": "read"}}, )"
                        R"({{"storage": {}, "kind": "read"}}, {{"storage": {}, "kind": "write"}}]}})",
                        op ? ",\n  " : "\n  ", op % 100, 5 + 7 * (op % 30'000), 5 + 7 * ((op + 11) % 30'000),
                        5 + 7 * ((op + 29'989) % 30'000));
  }
  json += "\n ]}\n";
  return json;
}

// Read beside, where the key is where the writer puts it; read after the
// storages, where the second thread finds no `"ops":` (a space before the
// colon); and left to the DOM reader where another member (unknown, or of
// the header) comes between the storages and the ops, or the ops do not read. The same trace every time:
// the ids resolved through the storages read on the other thread.
TEST(TraceFastReader, ReadsTheStoragesBesideTheOpsAsOneThreadReadsThem) {
  const std::string plain = beside_trace("", R"("ops":)");
  ASSERT_GT(plain.size() - plain.find("\"storages\""), std::size_t{8} << 20);
  std::optional<Trace> beside = read_trace_fast(plain);
  ASSERT_TRUE(beside.has_value());
  ASSERT_EQ(beside->storage_count(), 30'000);
  ASSERT_EQ(beside->op_count(), 45'000);
  // Op 44,999 reads ids 5 + 7 * 14,999 and 5 + 7 * (45,010 % 30,000) and
  // writes 5 + 7 * ((44,999 + 29,989) % 30,000) = 5 + 7 * 14,988: storages
  // 14,999, 15,010 (retained: 15,010 % 5 = 0) and 14,988, of size
  // 64 * (14,988 % 97 + 1) = 64 * 51.
  const std::span<const Access> last = beside->accesses(44'999);
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(last[0].storage, 14'999);
  EXPECT_EQ(last[1].storage, 15'010);
  EXPECT_EQ(last[2].storage, 14'988);
  EXPECT_EQ(beside->storage(14'988).size_bytes, 64 * 51);
  EXPECT_TRUE(beside->storage(15'010).retained());
  EXPECT_FALSE(beside->storage(14'988).retained());
  EXPECT_EQ(beside->op_name(44'999), "op99");
  expect_same_as_dom(plain, "read beside");

  const std::string spaced = beside_trace("", R"("ops" :)");
  std::optional<Trace> after = read_trace_fast(spaced);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(trace_to_json(*after), trace_to_json(*beside));

  const std::string between = beside_trace(R"( "comment": "x",)", R"("ops":)");
  EXPECT_FALSE(read_trace_fast(between).has_value());
  Result<Trace> dom = parse_trace_json(between);
  ASSERT_TRUE(dom) << dom.error().message;
  EXPECT_EQ(trace_to_json(*dom), trace_to_json(*beside));
  // A member of the header between them too: the DOM reader takes it.
  const std::string limit_between = beside_trace(R"( "memory_limit_bytes": 4096,)", R"("ops":)");
  EXPECT_FALSE(read_trace_fast(limit_between).has_value());
  Result<Trace> limited = parse_trace_json(limit_between);
  ASSERT_TRUE(limited) << limited.error().message;
  EXPECT_EQ(limited->memory_limit_bytes(), std::optional<std::int64_t>(4096));
  EXPECT_EQ(limited->op_count(), beside->op_count());

  std::string broken = plain;
  broken.replace(broken.rfind(R"("kind": "write")"), 15, R"("kind": "touch")");
  EXPECT_FALSE(read_trace_fast(broken).has_value());
  EXPECT_FALSE(parse_trace_json(broken).has_value());
}

// The second thread reads the ops up to the first line that starts like an
// op, `{"name"`, half the storages' and ops' text past the ops' start, and
// this one the ops from there (above, that line is inside the ops). Here the
// ops are short and an unknown member after them holds such lines, so the
// line is there: the ops' thread never meets it and reads every op, and what
// was read from it is dropped. The DOM reader's trace either way.
TEST(TraceFastReader, SplitsTheOpsOnlyWhereTheOpsThreadMeetsTheSplit) {
  std::string json = R"({"format": "hyperoffload.trace", "version": 2, "storages": [)";
  for (int s = 0; s < 50'000; ++s) {
    json += fmt::format(R"({}{{"id": {}, "size_bytes": 64, "retained": false}})", s ? ",\n  " : "\n  ", s);
  }
  json += "\n ],\n \"ops\": [";
  for (int op = 0; op < 2'000; ++op) {
    json += fmt::format(R"({}{{"name": "op{}", "duration_ms": 0.5, "accesses": [{{"storage": {}, "kind": "write"}}]}})",
                        op ? ",\n  " : "\n  ", op, op);
  }
  json += "\n ],\n \"meta\": [";
  for (int m = 0; m < 400'000; ++m) json += fmt::format(R"({}{{"name": "m{}"}})", m ? ",\n  " : "\n  ", m);
  json += "\n ]}\n";
  const std::size_t rest = json.size() - json.find("\"storages\"");
  const std::size_t split_target = json.find("\"ops\"") + rest / 2;
  ASSERT_GT(rest, std::size_t{8} << 20);
  ASSERT_LT(json.find("\"meta\""), split_target);
  ASSERT_GT(json.size(), split_target + 1000);
  std::optional<Trace> fast = read_trace_fast(json);
  ASSERT_TRUE(fast.has_value());
  EXPECT_EQ(fast->op_count(), 2'000);
  EXPECT_EQ(fast->op_name(1'999), "op1999");
  EXPECT_EQ(fast->total_compute_ms(), 1'000.0);
  expect_same_as_dom(json, "split in an unknown member");
}

TEST(TraceFastReader, GivesTheDomReadersTraceOnEveryExampleAndCorpusTrace) {
  const std::filesystem::path root = std::filesystem::path(HYPEROFFLOAD_SOURCE_DIR) / "examples" / "traces";
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".json") continue;
    Result<std::string> text = read_file(entry.path());
    ASSERT_TRUE(text);
    if (text->find("\"hyperoffload.trace\"") == std::string::npos) continue;
    expect_same_as_dom(*text, entry.path().string());
    ++files;
  }
  EXPECT_GE(files, 15);
}

// Each is outside the subset; parse_trace_json gives the DOM reader's answer.
TEST(TraceFastReader, GivesUpOutsideItsSubset) {
  const std::string head = R"({"format": "hyperoffload.trace", "version": 2, )";
  const std::string storages = R"("storages": [{"id": 1, "size_bytes": 8}], )";
  const std::string ops = R"("ops": [{"name": "a", "accesses": [{"storage": 1, "kind": "write"}]}]})";
  ASSERT_TRUE(read_trace_fast(head + storages + ops).has_value());
  const std::vector<std::string> outside = {
      head + storages + R"("ops": [{"name": "a\u0062", "accesses": []}]})",           // an escape
      head + storages + R"("ops": [{"name": "a", "extra": 1, "accesses": []}]})",     // an unknown member
      head + storages + R"("ops": [{"accesses": [], "name": "a"}]})",                  // accesses not last
      head + R"("ops": [], "storages": []})",                                          // ops first
      head + R"("storages": [{"id": 1, "id": 2, "size_bytes": 8}], "ops": []})",       // a duplicate member
      head + R"("storages": [{"id": -1, "size_bytes": 8}], "ops": []})",               // a sign
      head + R"("storages": [{"id": 1, "size_bytes": 1234567890123456789}], "ops": []})",  // 19 digits
      head + R"("storages": [{"id": 1.0, "size_bytes": 8}], "ops": []})",              // a fraction
      head + R"("storages": [{"id": 01, "size_bytes": 8}], "ops": []})",               // a leading zero
      head + R"("storages": [{"id": 1 "size_bytes": 8}], "ops": []})",                 // malformed
      head + storages + ops + " x",                                                    // trailing text
      head + storages + R"("ops": [{"name": "a", "duration_ms": 1e999, "accesses": []}]})",  // out of range
      head + storages + R"("ops": [{"name": "a", "accesses": [{"storage": 2, "kind": "write"}]}]})",  // undeclared
      head + storages + R"("ops": [{"name": "a", "accesses": [{"storage": 1, "kind": "touch"}]}]})",
      head + storages + R"("ops": [{"name": "a", "rng_replay": true, "accesses": []}]})",  // needs version 3
      std::string(R"({"format": "hyperoffload.trace", "version": 1, )") + storages +
          R"("ops": [{"name": "a", "recomputable": false, "accesses": []}]})",        // needs version 2
      std::string(R"({"format": "hyperoffload.trace", "version": 9, )") + storages + R"("ops": []})",
      std::string(R"({"format": "other", "version": 2, )") + storages + R"("ops": []})",
      head + storages + "\"ops\": [{\"name\": \"\xff\", \"accesses\": []}]}",          // invalid UTF-8
      // "true" then "false" with nothing between: two values, not false (the
      // fuzzer found the reader taking it when a failed literal moved on)
      head + storages + R"("ops": [{"name": "a", "recomputable": truefalse, "accesses": []}]})",
  };
  for (const std::string& json : outside) {
    EXPECT_FALSE(read_trace_fast(json).has_value()) << json;
  }
  // A member the DOM reader ignores still reads there.
  Result<Trace> unknown = parse_trace_json(outside[1]);
  ASSERT_TRUE(unknown) << unknown.error().message;
  EXPECT_EQ(unknown->op_name(0), "a");
  Result<Trace> escaped = parse_trace_json(outside[0]);
  ASSERT_TRUE(escaped) << escaped.error().message;
  EXPECT_EQ(escaped->op_name(0), "ab");
  EXPECT_FALSE(parse_trace_json(outside[12]).has_value());
}

// Captured traces carry a "meta" member at the top; the DOM reader ignores
// it, and so does the fast reader, whatever it holds.
TEST(TraceFastReader, SkipsUnknownTopLevelMembers) {
  const std::string json = R"({"meta": {"captured": ["a\"b\n", 1.5e3, -2, true, null, {}, []]}, "format": "hyperoffload.trace",
 "version": 2, "storages": [{"id": 1, "size_bytes": 8}], "ops": [{"name": "a", "accesses": []}], "x": 0})";
  expect_same_as_dom(json, "meta");
  EXPECT_FALSE(read_trace_fast(R"({"meta": "\u0041", "format": "hyperoffload.trace", "version": 2,
 "storages": [], "ops": []})").has_value());
}

}  // namespace
}  // namespace hyperoffload
