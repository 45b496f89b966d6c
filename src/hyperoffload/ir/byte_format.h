// Byte counts and other integers as reports print them, for every layer that
// words a report, a note or an error (plan/, exec/, report/, cli/). Units are
// binary (KiB = 2^10 bytes, MiB = 2^20, ...): what `--budget` calls KiB/MiB.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace hyperoffload {

// "1.50 GiB", "512.00 MiB", "4.00 KiB", "17 B".
std::string format_bytes(std::int64_t bytes);

// "1,234,567": counts and exact byte numbers.
std::string group_digits(std::int64_t value);

}  // namespace hyperoffload
