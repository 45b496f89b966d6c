#include "hyperoffload/ir/recompute_unit.h"

namespace hyperoffload {

void unit_members(const Trace& trace, OpIndex k, std::vector<OpIndex>& out) {
  out.clear();
  for (OpIndex member = k; member >= 0; member = trace.op_unit_previous(member)) out.push_back(member);
  std::reverse(out.begin(), out.end());
}

}  // namespace hyperoffload
