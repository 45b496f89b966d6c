#include "hyperoffload/ir/byte_format.h"

#include <cmath>

#include <fmt/format.h>

namespace hyperoffload {

std::string format_bytes(std::int64_t bytes) {
  const double magnitude = std::fabs(static_cast<double>(bytes));
  if (magnitude >= 1099511627776.0) return fmt::format("{:.2f} TiB", static_cast<double>(bytes) / 1099511627776.0);
  if (magnitude >= 1073741824.0) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / 1073741824.0);
  if (magnitude >= 1048576.0) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / 1048576.0);
  if (magnitude >= 1024.0) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string group_digits(std::int64_t value) {
  const std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out = value < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace hyperoffload
