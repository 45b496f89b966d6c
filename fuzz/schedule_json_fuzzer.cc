// Schedule reader (io/schedule_json.h) on arbitrary bytes: a schedule or an
// error that names its place — never a crash, a hang, a leak or unbounded
// memory. An accepted schedule is in execution order, and written and read
// back it gives the same planner and actions.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "hyperoffload/io/schedule_json.h"

using namespace hyperoffload;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  Result<Schedule> schedule = parse_schedule_json(json, "<fuzz>");
  if (!schedule) {
    FUZZ_CHECK(schedule.error().code == ErrorCode::kInvalidInput, "error code {} for: {}",
               to_string(schedule.error().code), schedule.error().message);
    FUZZ_CHECK(fuzz::error_names_a_place(schedule.error().message, "<fuzz>"), "error names no place: {}",
               schedule.error().message);
    return 0;
  }
  FUZZ_CHECK(check_execution_order(schedule->actions).has_value(), "accepted actions out of execution order");
  for (const Action& action : schedule->actions) {
    if (action.kind == ActionKind::kRecompute) {
      FUZZ_CHECK(recompute_source_precedes(action.source_op, action.op, action.phase), "accepted {}",
                 describe(action));
    } else {
      FUZZ_CHECK(action.source_op == -1, "a storage action with a source op: {}", describe(action));
    }
  }
  const std::string written = schedule_to_json(*schedule);
  Result<Schedule> again = parse_schedule_json(written, "<written>");
  FUZZ_CHECK(again.has_value(), "the writer's output does not read back: {}\n{}",
             again ? "" : again.error().message, written);
  FUZZ_CHECK(again->planner == schedule->planner, "planner \"{}\" read back as \"{}\"", schedule->planner,
             again->planner);
  FUZZ_CHECK(again->actions == schedule->actions, "actions changed in the round trip:\n{}", written);
  return 0;
}
