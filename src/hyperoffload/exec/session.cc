#include "hyperoffload/exec/session.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "hyperoffload/ir/byte_format.h"
#include "hyperoffload/plan/budget_policy.h"

namespace hyperoffload {

Status validate_session_options(const SessionOptions& options) {
  if (options.budget_bytes && *options.budget_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("budget_bytes must be >= 0, got {}", *options.budget_bytes));
  }
  if (options.host_capacity_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("host_capacity_bytes must be >= 0, got {}", options.host_capacity_bytes));
  }
  if (options.calibration_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("calibration_bytes must be >= 0, got {}", options.calibration_bytes));
  }
  if (const std::optional<double>& gib_per_s = options.copy_bandwidth_gib_per_s;
      gib_per_s && !(std::isfinite(*gib_per_s) && *gib_per_s > 0.0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("copy_bandwidth_gib_per_s must be a finite number > 0, got {}", *gib_per_s));
  }
  // Fails now on an unknown planner or bad options, not after the first step.
  if (Result<std::unique_ptr<Planner>> planner = make_planner(options.planner, options.planner_options); !planner) {
    return make_error(planner.error().code, fmt::format("planner: {}", planner.error().message));
  }
  return {};
}

Result<std::unique_ptr<Session>> Session::create(Backend& backend, SessionOptions options) {
  HO_RETURN_IF_ERROR(validate_session_options(options));
  return std::unique_ptr<Session>(new Session(backend, std::move(options)));
}

Session::Session(Backend& backend, SessionOptions options)
    : backend_(backend),
      options_(std::move(options)),
      events_(std::make_unique<EventPool>(backend)),
      pool_(std::make_unique<PinnedHostPool>(backend, PinnedHostPoolOptions{options_.host_capacity_bytes})),
      residency_(std::make_unique<ResidencyManager>(backend, *pool_, *events_,
                                                    ResidencyOptions{options_.rematerialize, RecordCopies::kNo, std::nullopt})) {}

Session::~Session() { (void)abort_step(); }

StepHooks* Session::active() {
  if (warmup_ != nullptr) return warmup_.get();
  return replay_.get();
}

Status Session::fail(Error error) {
  if (!failure_) failure_ = error;
  return std::unexpected(std::move(error));
}

Status Session::begin_step() {
  if (in_step()) return make_error(ErrorCode::kFailedPrecondition, "begin_step: a step is already running");
  failure_.reset();
  HO_RETURN_IF_ERROR(residency_->reset());  // storages held over from the last step
  step_kind_ = next_step_kind();
  if (plan_ != nullptr) {
    HO_ASSIGN_OR_RETURN(replay_, ReplayExecutor::start(*residency_, plan_,
                                                       ReplayOptions{options_.record_timeline, options_.recompute}));
  } else {
    HO_ASSIGN_OR_RETURN(
        warmup_, WarmupExecutor::start(*residency_, WarmupOptions{options_.budget_bytes, options_.calibration_bytes,
                                                                  options_.copy_bandwidth_gib_per_s}));
  }
  return ok_status();
}

namespace {
Error not_in_step(std::string_view hook) {
  return Error{ErrorCode::kFailedPrecondition, fmt::format("{} outside a step: call begin_step() first", hook)};
}
Error already_failed(const Error& failure) {
  return Error{failure.code, fmt::format("the step already failed: {}", failure.message)};
}
}  // namespace

Status Session::on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                            std::span<const StorageId> written) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("on_op_begin"));
  return check(active()->on_op_begin(name, inputs, written));
}

Result<void*> Session::allocate_output(StorageId id, std::int64_t size_bytes) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("allocate_output"));
  return check(active()->allocate_output(id, size_bytes));
}

Status Session::on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("on_op_end"));
  return check(active()->on_op_end(outputs, mutated));
}

Status Session::mark_recomputable(Recomputable how) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("mark_recomputable"));
  // A plan may recompute only what the framework can re-run.
  if (!options_.recompute) return ok_status();
  return check(active()->mark_recomputable(how));
}

Status Session::on_storage_freed(StorageId id) {
  if (!in_step()) {
    if (!residency_->tracked(id)) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("freeing storage {}: not tracked (not held over from the last step)", id));
    }
    return residency_->forget(id);
  }
  if (failure_) return std::unexpected(already_failed(*failure_));
  return check(active()->on_storage_freed(id));
}

Result<void*> Session::device_ptr(StorageId id, DeviceAccess access) {
  if (!in_step()) {
    if (!residency_->tracked(id)) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("storage {}: not tracked (not held over from the last step)", id));
    }
    return residency_->device_ptr(id, access);
  }
  if (failure_) return std::unexpected(already_failed(*failure_));
  return check(active()->device_ptr(id, access));
}

Status Session::end_step() {
  if (!in_step()) return make_error(ErrorCode::kFailedPrecondition, "end_step: no step is running");
  if (failure_) {
    Error failure = *failure_;
    (void)abort_step();
    return std::unexpected(std::move(failure));
  }
  return warmup_ != nullptr ? finish_warmup() : finish_replay();
}

Status Session::finish_warmup() {
  Result<WarmupResult> warmed = warmup_->finish();
  if (!warmed) {
    (void)abort_step();
    return std::unexpected(std::move(warmed.error()));
  }
  warmup_.reset();
  ++steps_completed_;
  replays_since_warmup_ = 0;
  last_stats_ = warmed->stats;
  notes_ = std::move(warmed->notes);

  // Kept until a plan exists, so a failed planning still leaves the trace.
  unplanned_trace_ = warmed->trace;
  floor_.reset();
  budget_outcome_.reset();
  // The pinned pool's capacity bounds the plan's host budget (unless the
  // planner options name one): a plan that needs more host memory than the
  // pool holds would fail its replay. The pool serves each request from a size
  // class at most 25% larger (runtime/pinned_host_pool.h), so a plan whose
  // host copies hold at most 4/5 of the capacity always fits in it.
  PlannerOptions planner_options = options_.planner_options;
  if (!planner_options.host_budget_bytes && options_.host_capacity_bytes != std::numeric_limits<std::int64_t>::max()) {
    planner_options.host_budget_bytes = options_.host_capacity_bytes / 5 * 4;
  }
  Result<BudgetedPlan> planned =
      plan_within_budget(warmed->trace, options_.budget_bytes, options_.planner, planner_options);
  if (!planned) {
    return make_error(planned.error().code, fmt::format("planning the traced step with \"{}\": {}", options_.planner,
                                                        planned.error().message));
  }
  floor_ = planned->floor;
  budget_outcome_ = planned->outcome;
  switch (planned->outcome) {
    case BudgetOutcome::kWithinBudget: break;
    case BudgetOutcome::kRefused:
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("planning the traced step with \"{}\": the planner refused it: {}",
                                    options_.planner, planned->refusal));
    case BudgetOutcome::kOverBudget:  // the policy falls back to a plan that keeps it
      return make_error(ErrorCode::kInternal, "the budget policy returned a plan over the budget");
    case BudgetOutcome::kBelowFloor:
      return make_error(
          ErrorCode::kInvalidArgument,
          fmt::format("the budget of {} ({} bytes) is below the unavoidable floor of {} ({} bytes, "
                      "reached at op {} ({})): no schedule can keep the step within it; raise the budget",
                      format_bytes(*options_.budget_bytes), *options_.budget_bytes, format_bytes(floor_->bytes),
                      floor_->bytes, floor_->op, warmed->trace.op_name(floor_->op)));
    case BudgetOutcome::kBelowHostFloor:
      return make_error(ErrorCode::kInvalidArgument,
                        describe_host_shortfall(*planned, *options_.budget_bytes, *planner_options.host_budget_bytes));
  }
  for (std::string& note : planned->result.notes) notes_.push_back(std::move(note));
  Schedule schedule = std::move(planned->result.schedule);
  schedule.budget_bytes = options_.budget_bytes;  // as `hyperoffload plan` records it
  plan_result_ = std::move(planned->result);
  plan_result_.schedule = Schedule{schedule.planner, {}};
  HO_ASSIGN_OR_RETURN(plan_, ReplayPlan::create(std::move(warmed->trace), std::move(schedule)));
  unplanned_trace_.reset();
  // The pinned pool keeps what the replays reuse: the blocks the warmup
  // cached beyond the plan's needs go back (the replay's first step acquires
  // the plan's peak host bytes, in size classes, and later steps reuse them).
  HO_RETURN_IF_ERROR(pool_->trim());
  return ok_status();
}

Status Session::finish_replay() {
  Result<ReplayResult> replayed = replay_->finish();
  if (!replayed) {
    (void)abort_step();
    return std::unexpected(std::move(replayed.error()));
  }
  replay_.reset();
  ++steps_completed_;
  ++replays_since_warmup_;
  last_stats_ = replayed->stats;
  last_timeline_ = std::move(replayed->timeline);
  if (last_stats_.over_budget_allocations > 0 && !replay_over_budget_noted_ && options_.budget_bytes) {
    // Once per session: a replay that holds more than its plan knows of does
    // so every step.
    replay_over_budget_noted_ = true;
    notes_.push_back(fmt::format(
        "replay step {} held up to {} ({} bytes) of device memory, above the budget of {}: {} allocations went "
        "ahead with no copy left to wait for (the step holds memory its plan does not know of)",
        steps_completed_, format_bytes(last_stats_.peak_held_bytes), last_stats_.peak_held_bytes,
        format_bytes(*options_.budget_bytes), last_stats_.over_budget_allocations));
  }
  return ok_status();
}

bool Session::forgive_and_rewarm(const Error& error) {
  if (options_.rewarm != RewarmPolicy::kOnce || rewarm_used_ || in_step()) return false;
  const bool diverged_first_replay = error.code == ErrorCode::kDiverged && in_first_replay();
  const bool warmup_below_floor =
      step_kind_ == StepKind::kWarmup && plan_ == nullptr && budget_outcome_ == BudgetOutcome::kBelowFloor;
  if (!diverged_first_replay && !warmup_below_floor) return false;
  rewarm_used_ = true;
  plan_.reset();
  return true;
}

Status Session::forget_held_storages() {
  if (in_step()) return make_error(ErrorCode::kFailedPrecondition, "forget_held_storages inside a step");
  Status status = residency_->reset();
  if (Status drained = pool_->drain(); !drained && status) status = std::move(drained);
  return status;
}

Status Session::abort_step() {
  warmup_.reset();
  replay_.reset();
  failure_.reset();
  Status status = residency_->reset();
  if (Status drained = pool_->drain(); !drained && status) status = std::move(drained);
  return status;
}

}  // namespace hyperoffload
