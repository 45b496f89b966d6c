#include "hyperoffload/plan/common/stall_estimate.h"

#include <vector>

#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/model/schedule_walk.h"
#include "hyperoffload/model/step_player.h"

namespace hyperoffload::internal {

// Note [The estimate and the simulator]: the estimate is the simulator's step
// player (model/step_player.h) on the same schedule walk, recording nothing:
// for any schedule on two copy engines its stall is the simulator's, by
// construction. What it leaves out is what the simulator records (the memory
// curve and the timeline) and the validator's report.
double estimate_stall_ms(const Trace& trace, std::span<const Action> actions,
                         std::optional<std::int64_t> memory_cap_bytes) {
  const std::vector<ResolvedAction> resolved = resolve_actions(trace, actions, {});
  RecordNothing nothing;
  using Player = StepPlayer<RecordNothing>;
  Player player(trace, CopyEngines::kTwo, memory_cap_bytes, nothing);
  ScheduleWalk<Player> walk(trace, resolved);
  walk.run(player);
  return player.totals().stall_ms;
}

}  // namespace hyperoffload::internal
