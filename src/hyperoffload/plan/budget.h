// Budget expressions as users type them: "1048576", "2GiB", "512MB", "40%".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/ir/byte_format.h"  // format_bytes: budgets in messages
#include "hyperoffload/ir/status.h"

namespace hyperoffload {

struct BudgetSpec {
  enum class Unit { kBytes, kPercentOfPeak };
  Unit unit = Unit::kBytes;
  double value = 0.0;  // bytes, or a percentage (40 for "40%")
};

// Parses a byte count with an optional unit — B, KB/MB/GB/TB (powers of 1000),
// KiB/MiB/GiB/TiB (powers of 1024), case-insensitive, fractions allowed
// ("1.5GiB") — or a percentage of the unplanned peak ("40%", "12.5%").
Result<BudgetSpec> parse_budget(std::string_view text);

// Bytes for a spec; percentages are of `unplanned_peak_bytes`, rounded down.
// Byte values saturate at 0 and at the largest int64.
std::int64_t resolve_budget_bytes(const BudgetSpec& spec, std::int64_t unplanned_peak_bytes);

// A ladder of budgets for an unplanned peak and a floor (both >= 0): the
// floor, then k * step_percent% of the peak (resolve_budget_bytes) for each k
// whose budget is above the floor, the last one the peak itself. Ascending, no
// duplicates; {peak} when floor >= peak. step_percent in (0, 100]. The rungs
// at which planners also plan (Note [Plans for lower budgets],
// plan/common/lower_budgets.h) and the budgets of `compare --sweep`.
std::vector<std::int64_t> budget_ladder(std::int64_t floor_bytes, std::int64_t unplanned_peak_bytes,
                                        double step_percent);

// Parses a plain byte quantity ("2GiB"); percentages are rejected.
Result<std::int64_t> parse_bytes(std::string_view text);


}  // namespace hyperoffload
