#include "hyperoffload/check/validator.h"

#include "hyperoffload/check/internal/validation_observer.h"

namespace hyperoffload {

ValidationReport validate_schedule(const Trace& trace, const Schedule& schedule, const ValidatorOptions& options) {
  internal::ValidationObserver validation(trace, options);
  const std::vector<ResolvedAction> actions = validation.resolve(schedule);
  ScheduleWalk<internal::ValidationObserver> walk(trace, actions);
  validation.attach(walk.memory());
  walk.run(validation);
  return validation.finish();
}

}  // namespace hyperoffload
