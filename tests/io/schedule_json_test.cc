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
            "{\"format\": \"hyperoffload.schedule\", \"version\": 1, \"planner\": \"greedy\",\n"
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
            "actions[0].kind: unknown action kind \"evict\" (expected copy_d2h, release_device, copy_h2d or "
            "release_host)");
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

TEST(ScheduleJson, RejectsJsonNestedThousandsDeepPointingAtTheBracket) {
  // The 65th '[' (column 65, line 2) opens level 65, one beyond the limit.
  EXPECT_EQ(parse_error("\n" + std::string(3000, '[') + std::string(3000, ']')),
            "s.json:2:65: JSON nested deeper than 64 levels of arrays and objects (trace and schedule files need 5)");
}

}  // namespace
}  // namespace hyperoffload
