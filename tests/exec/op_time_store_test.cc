// The op-time store (exec/op_time_store.h): what a step program's key depends
// on, and the files it reads and writes.
#include "hyperoffload/exec/op_time_store.h"

#include <chrono>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/cli_runner.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::TraceDsl;

// fwd writes a, bwd reads a and writes b; storage ids and op times as given.
Trace program(StorageId a, StorageId b, double fwd_ms = 1.0, std::int64_t b_bytes = 64,
              const char* bwd_name = "bwd", std::string_view bwd_accesses = "") {
  const std::string accesses = bwd_accesses.empty() ? fmt::format("R{} W{}", a, b) : std::string(bwd_accesses);
  return TraceDsl()
      .storage(a, 128)
      .storage(b, b_bytes, Retention::kRetained)
      .op("fwd", fmt::format("W{}", a), fwd_ms)
      .op(bwd_name, accesses, 2.0)
      .bandwidth(4.0)
      .build();
}

TEST(StepProgramKey, DependsOnTheProgramAndMachineNotOnIdsTimesOrBudgets) {
  const std::uint64_t key = step_program_key(program(1, 2), "m");
  // Other storage ids (declared in the same order), other times, bandwidths
  // or budgets: the same program.
  EXPECT_EQ(step_program_key(program(10, 20), "m"), key);
  EXPECT_EQ(step_program_key(program(1, 2, 5.0), "m"), key);
  Trace budgeted = program(1, 2);
  budgeted.set_memory_limit_bytes(100);
  EXPECT_EQ(step_program_key(budgeted, "m"), key);
  // Another machine, a size, an op's name or an access: another program.
  EXPECT_NE(step_program_key(program(1, 2), "m2"), key);
  EXPECT_NE(step_program_key(program(1, 2, 1.0, 65), "m"), key);
  EXPECT_NE(step_program_key(program(1, 2, 1.0, 64, "bwd2"), "m"), key);
  EXPECT_NE(step_program_key(program(1, 2, 1.0, 64, "bwd", "R2 W1"), "m"), key);
}

TEST(OpTimeStore, SavesAndLoadsARecordAndRefusesAnotherProgramsFile) {
  const testing::ScratchDir dir;
  const OpTimeStoreOptions store{dir / "a" / "b", "m"};  // created on the first write
  const std::uint64_t key = 0xabc;
  Result<std::optional<OpTimesRecord>> absent = load_op_times(store, key, 2);
  ASSERT_TRUE(absent.has_value());
  EXPECT_FALSE(absent->has_value());

  Result<std::filesystem::path> saved = save_op_times(store, OpTimesRecord{"m", key, {0.5, 0.25}, 2.0, 4.0});
  ASSERT_TRUE(saved.has_value()) << saved.error().message;
  EXPECT_EQ(*saved, dir / "a" / "b" / "op-times-0000000000000abc.json");
  Result<std::optional<OpTimesRecord>> loaded = load_op_times(store, key, 2);
  ASSERT_TRUE(loaded.has_value() && loaded->has_value());
  EXPECT_EQ((*loaded)->durations_ms, (std::vector<double>{0.5, 0.25}));
  EXPECT_EQ((*loaded)->h2d_gib_per_s, 4.0);

  // The file of `key` read for another op count or machine: not this program's.
  for (const auto& [other, ops] : {std::pair{store, std::int64_t{3}},
                                   std::pair{OpTimeStoreOptions{store.directory, "m2"}, std::int64_t{2}}}) {
    Result<std::optional<OpTimesRecord>> refused = load_op_times(other, key, ops);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidInput);
    EXPECT_THAT(refused.error().message, HasSubstr(saved->string() + ": a record of another step program"));
  }
  // A record renamed to another key's file: refused too.
  std::filesystem::copy_file(*saved, op_times_path(store, 0xdef));
  EXPECT_FALSE(load_op_times(store, 0xdef, 2).has_value());
}

TEST(OpTimeStore, KeepsTheMostRecentlyUsedRecordsUpToItsLimit) {
  const testing::ScratchDir dir;
  const OpTimeStoreOptions store{dir.path(), "m", /*max_files=*/3};
  auto save = [&](std::uint64_t key) {
    ASSERT_TRUE(save_op_times(store, OpTimesRecord{"m", key, {1.0}, 1.0, 1.0}).has_value());
  };
  auto kept = [&](std::uint64_t key) { return std::filesystem::exists(op_times_path(store, key)); };
  // Records 1, 2 and 3 dated 3, 2 and 1 hours ago: the order is the test's,
  // not the clock's resolution.
  const auto now = std::filesystem::file_time_type::clock::now();
  for (std::uint64_t key = 1; key <= 3; ++key) {
    save(key);
    std::filesystem::last_write_time(op_times_path(store, key), now - std::chrono::hours(4 - key));
  }
  // Reading 1 makes it the most recently used; writing 4 then removes the
  // least recently used, 2.
  Result<std::optional<OpTimesRecord>> read = load_op_times(store, 1, 1);
  ASSERT_TRUE(read.has_value() && read->has_value());
  save(4);
  EXPECT_TRUE(kept(1));
  EXPECT_FALSE(kept(2));
  EXPECT_TRUE(kept(3));
  EXPECT_TRUE(kept(4));
  // Writing 5 removes 3 (an hour old; 1 and 4 are from now). A file that is
  // not a record is neither counted nor removed.
  const std::string other = dir.write("notes.txt", "mine");
  save(5);
  EXPECT_TRUE(kept(1));
  EXPECT_FALSE(kept(3));
  EXPECT_TRUE(kept(4));
  EXPECT_TRUE(kept(5));
  EXPECT_TRUE(std::filesystem::exists(other));
}

}  // namespace
}  // namespace hyperoffload
