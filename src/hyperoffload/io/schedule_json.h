// The schedule file format, "hyperoffload.schedule" version 1 (docs/FORMATS.md).
//
// Parsing checks the document's shape and that actions are in execution order
// (kInvalidInput otherwise). Whether the actions make sense for a trace —
// storages that exist, ops in range, no data loss — is the validator's job
// (check/validator.h), so a schedule can be read without its trace.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "hyperoffload/ir/schedule.h"

namespace hyperoffload {

inline constexpr std::string_view kScheduleFormat = "hyperoffload.schedule";
// Readers accept versions 1 and 2 (2 adds the recompute action); writers write 2.
inline constexpr int kScheduleVersion = 2;
inline constexpr int kOldestScheduleVersion = 1;

Result<Schedule> parse_schedule_json(std::string_view json, std::string_view source = "<schedule>");
Result<Schedule> read_schedule_file(const std::filesystem::path& path);

std::string schedule_to_json(const Schedule& schedule);
Status write_schedule_file(const Schedule& schedule, const std::filesystem::path& path);

}  // namespace hyperoffload
