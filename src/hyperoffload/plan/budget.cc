#include "hyperoffload/plan/budget.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

namespace hyperoffload {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

std::unexpected<Error> budget_error(std::string_view text) {
  return make_error(ErrorCode::kInvalidInput,
                    fmt::format("invalid budget \"{}\": expected bytes (1048576), a size with a unit "
                                "(512MiB, 2GiB, 1.5GB) or a percentage of the unplanned peak (40%)",
                                text));
}

}  // namespace

Result<BudgetSpec> parse_budget(std::string_view original) {
  std::string_view text = trim(original);
  double value = 0.0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [number_end, ec] = std::from_chars(begin, end, value, std::chars_format::fixed);
  if (ec != std::errc() || number_end == begin || !std::isfinite(value) || value < 0.0) {
    return budget_error(original);
  }
  std::string_view unit = trim(std::string_view(number_end, static_cast<std::size_t>(end - number_end)));
  if (unit == "%") {
    if (value > 1000.0) return budget_error(original);
    return BudgetSpec{BudgetSpec::Unit::kPercentOfPeak, value};
  }
  struct Suffix {
    std::string_view name;
    double multiplier;
  };
  static constexpr Suffix kSuffixes[] = {
      {"", 1.0},      {"b", 1.0},       {"kb", 1e3},       {"mb", 1e6},        {"gb", 1e9},
      {"tb", 1e12},   {"kib", 1024.0},  {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
  };
  for (const Suffix& suffix : kSuffixes) {
    if (iequals(unit, suffix.name)) {
      const double bytes = std::floor(value * suffix.multiplier);
      if (bytes > 9.0e18) return budget_error(original);
      return BudgetSpec{BudgetSpec::Unit::kBytes, bytes};
    }
  }
  return budget_error(original);
}

std::int64_t resolve_budget_bytes(const BudgetSpec& spec, std::int64_t unplanned_peak_bytes) {
  if (spec.unit == BudgetSpec::Unit::kBytes) {
    // parse_budget keeps bytes below 9e18; a spec built by hand may hold more,
    // and converting 2^63 or above to int64 is undefined (found by fuzzing).
    if (!(spec.value < 0x1p63)) return std::numeric_limits<std::int64_t>::max();
    return spec.value > 0 ? static_cast<std::int64_t>(spec.value) : 0;
  }
  // Integer arithmetic in hundredths of a percent avoids 0.1-style rounding drift:
  // 40% of 1000 is exactly 400.
  const auto basis_points = static_cast<std::int64_t>(std::llround(spec.value * 100.0));
  __extension__ using Int128 = __int128;
  return static_cast<std::int64_t>(static_cast<Int128>(unplanned_peak_bytes) * basis_points / 10000);
}

std::vector<std::int64_t> budget_ladder(std::int64_t floor_bytes, std::int64_t unplanned_peak_bytes,
                                        double step_percent) {
  if (floor_bytes >= unplanned_peak_bytes) return {unplanned_peak_bytes};
  std::vector<std::int64_t> ladder = {floor_bytes};
  // k * step rather than a running sum, so that 5% steps land on 5, 10, ...
  // exactly; the last step is the peak itself whatever the step.
  for (int k = 1;; ++k) {
    const double percent = std::min(100.0, static_cast<double>(k) * step_percent);
    const std::int64_t budget =
        resolve_budget_bytes(BudgetSpec{BudgetSpec::Unit::kPercentOfPeak, percent}, unplanned_peak_bytes);
    if (budget > ladder.back()) ladder.push_back(budget);
    if (percent >= 100.0) break;
  }
  return ladder;
}

Result<std::int64_t> parse_bytes(std::string_view text) {
  HO_ASSIGN_OR_RETURN(BudgetSpec spec, parse_budget(text));
  if (spec.unit != BudgetSpec::Unit::kBytes) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("invalid size \"{}\": a percentage is not allowed here", text));
  }
  return static_cast<std::int64_t>(spec.value);
}

}  // namespace hyperoffload
