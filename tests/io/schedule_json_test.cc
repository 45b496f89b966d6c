// Schedule file format: round trips and input errors.
#include "hyperoffload/io/schedule_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string parse_error(std::string_view json) {
  Result<Schedule> schedule = parse_schedule_json(json, "s.json");
  EXPECT_FALSE(schedule.has_value());
  return schedule ? std::string() : schedule.error().message;
}

TEST(ScheduleJson, RoundTrips) {
  Schedule schedule{"greedy", testing::actions("post 0 copy_d2h 7; post 0 release_device 7; pre 3 copy_h2d 7;"
                                               "post 3 release_host 7")};
  const std::string text = schedule_to_json(schedule);
  EXPECT_EQ(text,
            "{\"format\": \"hyperoffload.schedule\", \"version\": 2, \"planner\": \"greedy\",\n"
            " \"actions\": [\n"
            "  {\"op\": 0, \"phase\": \"post\", \"kind\": \"copy_d2h\", \"storage\": 7},\n"
            "  {\"op\": 0, \"phase\": \"post\", \"kind\": \"release_device\", \"storage\": 7},\n"
            "  {\"op\": 3, \"phase\": \"pre\", \"kind\": \"copy_h2d\", \"storage\": 7},\n"
            "  {\"op\": 3, \"phase\": \"post\", \"kind\": \"release_host\", \"storage\": 7}\n"
            " ]}\n");
  Result<Schedule> parsed = parse_schedule_json(text);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->planner, "greedy");
  EXPECT_THAT(parsed->actions, ElementsAreArray(schedule.actions));
}

TEST(ScheduleJson, RoundTripsTheBudgetItWasPlannedFor) {
  const Schedule schedule{"hybrid", {}, 4096};
  const std::string text = schedule_to_json(schedule);
  EXPECT_EQ(text, "{\"format\": \"hyperoffload.schedule\", \"version\": 2, \"planner\": \"hybrid\", "
                  "\"budget_bytes\": 4096,\n \"actions\": []}\n");
  Result<Schedule> parsed = parse_schedule_json(text);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->budget_bytes, std::optional<std::int64_t>(4096));
  // Absent or null: not recorded.
  EXPECT_FALSE(parse_schedule_json(schedule_to_json(Schedule{"peak", {}}))->budget_bytes.has_value());
  EXPECT_FALSE(parse_schedule_json(R"({"format": "hyperoffload.schedule", "version": 2, "budget_bytes": null,
                                       "actions": []})")
                   ->budget_bytes.has_value());
}

TEST(ScheduleJson, RejectsABudgetThatIsNotABytesCount) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "budget_bytes": -1, "actions": []})"),
            "budget_bytes: must be >= 0, got -1");
  EXPECT_THAT(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "budget_bytes": "1GiB",
                              "actions": []})"),
              HasSubstr("budget_bytes"));
}

TEST(ScheduleJson, RoundTripsAnEmptySchedule) {
  Result<Schedule> parsed = parse_schedule_json(schedule_to_json(Schedule{"peak", {}}));
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(parsed->actions.empty());
}

TEST(ScheduleJson, RejectsUnknownPhasesAndKinds) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 1,
      "actions": [{"op": 0, "phase": "during", "kind": "copy_d2h", "storage": 1}]})"),
            "actions[0].phase: unknown phase \"during\" (expected \"pre\" or \"post\")");
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 1,
      "actions": [{"op": 0, "phase": "pre", "kind": "evict", "storage": 1}]})"),
            "actions[0].kind: unknown action kind \"evict\" (expected copy_d2h, release_device, copy_h2d, "
            "release_host or recompute)");
}

TEST(ScheduleJson, RejectsMissingFields) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 1,
      "actions": [{"op": 0, "phase": "pre", "kind": "copy_h2d"}]})"),
            "actions[0].storage: missing");
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 1})"),
            "actions: missing (an array of actions)");
}

TEST(ScheduleJson, RejectsActionsOutOfExecutionOrder) {
  EXPECT_THAT(parse_error(R"({"format": "hyperoffload.schedule", "version": 1, "actions": [
      {"op": 2, "phase": "pre", "kind": "copy_h2d", "storage": 1},
      {"op": 1, "phase": "post", "kind": "release_device", "storage": 1}]})"),
              HasSubstr("actions[1]: out of execution order (op 1 post release_device storage 1 after op 2 pre "
                        "copy_h2d storage 1)"));
  EXPECT_THAT(parse_error(R"({"format": "hyperoffload.schedule", "version": 1, "actions": [
      {"op": 2, "phase": "post", "kind": "copy_d2h", "storage": 1},
      {"op": 2, "phase": "pre", "kind": "copy_h2d", "storage": 1}]})"),
              HasSubstr("actions[1]: out of execution order"));
}

TEST(ScheduleJson, RejectsAWrongFormat) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.trace", "version": 1, "actions": []})"),
            "format: expected \"hyperoffload.schedule\", got \"hyperoffload.trace\"");
}

TEST(ScheduleJson, ReportsMalformedJsonWithLineAndColumn) {
  EXPECT_THAT(parse_error("{\"format\": \"hyperoffload.schedule\",\n\"version\": 1,,}"),
              HasSubstr("s.json:2:14: malformed JSON"));
}

// ---- Version 2: the recompute action ----------------------------------------------

TEST(ScheduleJson, RoundTripsARecomputeAction) {
  Schedule schedule{"hybrid", testing::actions("post 1 release_device 7; pre 3 recompute 1; post 3 recompute 3")};
  const std::string text = schedule_to_json(schedule);
  EXPECT_EQ(text,
            "{\"format\": \"hyperoffload.schedule\", \"version\": 2, \"planner\": \"hybrid\",\n"
            " \"actions\": [\n"
            "  {\"op\": 1, \"phase\": \"post\", \"kind\": \"release_device\", \"storage\": 7},\n"
            "  {\"op\": 3, \"phase\": \"pre\", \"kind\": \"recompute\", \"source_op\": 1},\n"
            "  {\"op\": 3, \"phase\": \"post\", \"kind\": \"recompute\", \"source_op\": 3}\n"
            " ]}\n");
  Result<Schedule> parsed = parse_schedule_json(text);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_THAT(parsed->actions, ElementsAreArray(schedule.actions));
  EXPECT_TRUE(parsed->has_recompute());
  EXPECT_EQ(parsed->actions[1].source_op, 1);
  EXPECT_EQ(parsed->actions[0].source_op, -1);  // storage actions name no source op
}

TEST(ScheduleJson, ReadsVersion1Files) {
  Result<Schedule> parsed = parse_schedule_json(R"({"format": "hyperoffload.schedule", "version": 1,
      "actions": [{"op": 0, "phase": "post", "kind": "copy_d2h", "storage": 1}]})");
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->actions.size(), 1u);
  EXPECT_FALSE(parsed->has_recompute());
}

TEST(ScheduleJson, RejectsARecomputeInAVersion1File) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 1, "actions": [
      {"op": 0, "phase": "post", "kind": "copy_d2h", "storage": 1},
      {"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1}]})"),
            "actions[1].kind: recompute needs schedule format version 2 (this file says version 1)");
}

TEST(ScheduleJson, RejectsARecomputeWithoutASourceOp) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "pre", "kind": "recompute"}]})"),
            "actions[0].source_op: missing (a recompute names the op it re-runs)");
  EXPECT_THAT(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "pre", "kind": "recompute", "source_op": "one"}]})"),
              HasSubstr("actions[0].source_op: expected an integer"));
}

TEST(ScheduleJson, RejectsASourceOpThatDoesNotRunBeforeTheAction) {
  const std::string rule =
      " (a recompute re-runs an earlier op: source_op < op, or source_op <= op for \"post\")";
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "pre", "kind": "recompute", "source_op": 3}]})"),
            "actions[0].source_op: 3 does not run before op 3 pre" + rule);
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "post", "kind": "recompute", "source_op": 4}]})"),
            "actions[0].source_op: 4 does not run before op 3 post" + rule);
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "post", "kind": "recompute", "source_op": -1}]})"),
            "actions[0].source_op: -1 does not run before op 3 post" + rule);
  // Too large for an op index: compared before narrowing, so it cannot wrap.
  EXPECT_THAT(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "post", "kind": "recompute", "source_op": 4294967296}]})"),
              HasSubstr("actions[0].source_op: 4294967296 does not run before op 3 post"));
  // The op itself, after it runs, is allowed.
  EXPECT_TRUE(parse_schedule_json(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "post", "kind": "recompute", "source_op": 3}]})"));
}

TEST(ScheduleJson, RejectsFieldsThatDoNotBelongToTheKind) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1, "storage": 7}]})"),
            "actions[0].storage: a recompute has no storage (it regenerates what op 1 wrote)");
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 2, "actions": [
      {"op": 3, "phase": "pre", "kind": "copy_h2d", "storage": 7, "source_op": 1}]})"),
            "actions[0].source_op: only a recompute names a source op");
}

TEST(ScheduleJson, RejectsAnUnsupportedVersion) {
  EXPECT_EQ(parse_error(R"({"format": "hyperoffload.schedule", "version": 3, "actions": []})"),
            "version: unsupported version 3; this build reads versions 1 to 2");
}

TEST(ScheduleJson, RejectsJsonNestedThousandsDeepPointingAtTheBracket) {
  // The 65th '[' (column 65, line 2) opens level 65, one beyond the limit.
  EXPECT_EQ(parse_error("\n" + std::string(3000, '[') + std::string(3000, ']')),
            "s.json:2:65: JSON nested deeper than 64 levels of arrays and objects (trace and schedule files need 5)");
}

}  // namespace
}  // namespace hyperoffload
