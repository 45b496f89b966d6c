#include "hyperoffload/exec/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "hyperoffload/exec/internal/fnv1a.h"
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
  if (options.op_time_store && options.op_time_store->directory.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "op_time_store.directory must not be empty");
  }
  if (options.op_time_store && options.op_time_store->max_files < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("op_time_store.max_files must be >= 1, got {}", options.op_time_store->max_files));
  }
  if (options.max_plans < 1) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("max_plans must be >= 1, got {}", options.max_plans));
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
                                                    ResidencyOptions{options_.rematerialize, RecordCopies::kNo, std::nullopt})),
      cache_(options_.max_plans) {
  target_.budget_bytes = options_.budget_bytes;
  target_.host_budget_bytes = options_.planner_options.host_budget_bytes;
  if (!target_.host_budget_bytes && options_.host_capacity_bytes != std::numeric_limits<std::int64_t>::max()) {
    target_.host_budget_bytes = options_.host_capacity_bytes / 5 * 4;
  }
  target_.device_memory = options_.planner_options.device_memory;
  target_.copy_engines = backend_.copy_engines();
}

Session::~Session() { (void)abort_step(); }

StepHooks* Session::active() {
  if (warmup_ != nullptr) return warmup_.get();
  return replay_.get();
}

Status Session::fail(Error error) {
  if (!failure_ && error.code == ErrorCode::kDiverged && replay_ != nullptr) ++cache_.stats().misses;
  if (!failure_) failure_ = error;
  return std::unexpected(std::move(error));
}

Status Session::begin_step() {
  if (in_step()) return make_error(ErrorCode::kFailedPrecondition, "begin_step: a step is already running");
  failure_.reset();
  HO_RETURN_IF_ERROR(residency_->reset());  // storages held over from the last step
  pool_->reset_peak();  // the step's own pool peak (Note [Pinned pool between steps])
  step_kind_ = next_step_kind();
  miss_reason_.clear();
  log_.clear();
  call_asked_.clear();
  unregenerable_.clear();
  logging_ = false;
  program_tag_ = 0;
  op_seen_ = false;
  // Note [Step start] in exec/plan_cache.h: the tag is not known yet.
  const CachedPlan* chosen = cache_.choose(std::nullopt, log_);
  if (chosen == nullptr) return start_warmup();
  HO_RETURN_IF_ERROR(start_replay(*chosen));
  logging_ = true;
  return ok_status();
}

Status Session::start_replay(const CachedPlan& cached, std::optional<StepOrigin> continues) {
  plan_ = cached.plan;
  plan_result_ = cached.result;
  floor_ = cached.floor;
  budget_outcome_ = cached.outcome;
  HO_ASSIGN_OR_RETURN(replay_, ReplayExecutor::start(*residency_, plan_,
                                                     ReplayOptions{options_.record_timeline, options_.recompute,
                                                                   continues}));
  return ok_status();
}

Status Session::start_warmup(std::optional<StepOrigin> continues) {
  ++cache_.stats().warmups;
  ++cache_.stats().misses;
  step_kind_ = StepKind::kWarmup;
  logging_ = false;
  plan_.reset();
  HO_ASSIGN_OR_RETURN(warmup_, WarmupExecutor::start(*residency_, WarmupOptions{target_.budget_bytes,
                                                                                options_.calibration_bytes,
                                                                                options_.copy_bandwidth_gib_per_s,
                                                                                options_.op_times,
                                                                                options_.op_time_store, continues}));
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

Status Session::set_program_tag(std::uint64_t tag) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("set_program_tag"));
  if (op_seen_) {
    return make_error(ErrorCode::kFailedPrecondition, "set_program_tag after the step's first op");
  }
  program_tag_ = tag;
  if (replay_ == nullptr) return ok_status();  // a warmup: its plan gets the tag
  if (const CachedPlan* current = cache_.find(plan_.get()); current != nullptr && current->program_tag == tag) {
    return ok_status();
  }
  // Nothing has run yet: the ladder again, with the tag (Note [Step start]).
  const CachedPlan* chosen = cache_.choose(tag, log_);
  replay_.reset();
  return chosen != nullptr ? start_replay(*chosen) : start_warmup();
}

Status Session::on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                            std::span<const StorageId> written) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("on_op_begin"));
  op_seen_ = true;
  // Nothing reads what a left plan dropped and could not regenerate (Note
  // [Leaving a plan]); the first check runs before any switch can fill it.
  auto begin = [&]() -> Status {
    if (!unregenerable_.empty()) HO_RETURN_IF_ERROR(check_readable(inputs, fmt::format("op \"{}\"", name)));
    return active()->on_op_begin(name, inputs, written);
  };
  Status status = begin();
  if (!status && can_switch(status.error())) {
    log_.op_begin(name, inputs, written);  // matched with the rest, run below
    HO_RETURN_IF_ERROR(check(switch_executor(log_.events().size() - 1, false, status.error())));
    status = begin();
  }
  if (status && replay_ != nullptr) {
    const auto op = static_cast<std::size_t>(replay_->current_op());
    if (call_asked_.size() <= op) call_asked_.resize(op + 1, false);
    call_asked_[op] = wants_current_call();
  }
  if (status) log_call([&](StepLog& log) { log.op_begin(name, inputs, written); });
  return check(std::move(status));
}

Result<void*> Session::allocate_output(StorageId id, std::int64_t size_bytes) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("allocate_output"));
  Result<void*> ptr = active()->allocate_output(id, size_bytes);
  if (!ptr && can_switch(ptr.error())) {
    log_.allocate(id, size_bytes);
    HO_RETURN_IF_ERROR(check(switch_executor(log_.events().size() - 1, false, ptr.error())));
    ptr = active()->allocate_output(id, size_bytes);
  }
  if (ptr) log_call([&](StepLog& log) { log.allocate(id, size_bytes); });
  return check(std::move(ptr));
}

Status Session::on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("on_op_end"));
  Status status = active()->on_op_end(outputs, mutated);
  if (!status && can_switch(status.error())) {
    log_.op_end(outputs, mutated);
    HO_RETURN_IF_ERROR(check(switch_executor(log_.events().size() - 1, false, status.error())));
    status = active()->on_op_end(outputs, mutated);
  }
  if (status) log_call([&](StepLog& log) { log.op_end(outputs, mutated); });
  return check(std::move(status));
}

Status Session::mark_recomputable(Recomputable how) {
  if (failure_) return std::unexpected(already_failed(*failure_));
  if (!in_step()) return std::unexpected(not_in_step("mark_recomputable"));
  // A plan may recompute only what the framework can re-run.
  if (!options_.recompute) return ok_status();
  Status status = active()->mark_recomputable(how);
  if (status) log_call([how](StepLog& log) { log.recomputable(how); });
  return check(std::move(status));
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
  unregenerable_.erase(id);
  Status status = active()->on_storage_freed(id);
  if (status) log_call([&](StepLog& log) { log.freed(id); });
  return check(std::move(status));
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
  const StorageId ids[] = {id};
  HO_RETURN_IF_ERROR(check(check_readable(ids, "the framework")));
  return check(active()->device_ptr(id, access));
}

Status Session::leave_short_replay() {
  if (!in_step() || failure_ || replay_ == nullptr || replay_->in_op() || replay_->reversible()) return ok_status();
  if (replay_->current_op() == plan_->trace().op_count()) return ok_status();
  Result<ReplayResult> replayed = replay_->finish();
  if (replayed) return make_error(ErrorCode::kInternal, "leave_short_replay: a replay that ended early finished");
  Status left = can_switch(replayed.error())
                    ? switch_executor(log_.events().size(), true, replayed.error())
                    : Status(std::unexpected(std::move(replayed.error())));
  if (!left) {
    if (left.error().code == ErrorCode::kDiverged) ++cache_.stats().misses;
    (void)abort_step();
  }
  return left;
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
  if (!unregenerable_.empty()) {
    const auto& [id, why] = *unregenerable_.begin();
    Error error{ErrorCode::kDiverged,
                fmt::format("the step left its plan and ends holding {} tensor(s) whose data the plan had dropped and "
                            "that cannot be regenerated, among them storage {}: {}",
                            unregenerable_.size(), id, why)};
    ++cache_.stats().misses;
    (void)abort_step();
    return std::unexpected(std::move(error));
  }
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
  // The plan is made for the session's target (its host budget bounded by
  // the pinned pool: target()).
  PlannerOptions planner_options = options_.planner_options;
  planner_options.host_budget_bytes = target_.host_budget_bytes;
  planner_options.device_memory = target_.device_memory;
  Result<BudgetedPlan> planned =
      plan_within_budget(warmed->trace, target_.budget_bytes, options_.planner, planner_options);
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
                      format_bytes(*target_.budget_bytes), *target_.budget_bytes, format_bytes(floor_->bytes),
                      floor_->bytes, floor_->op, warmed->trace.op_name(floor_->op)));
    case BudgetOutcome::kBelowHostFloor:
      return make_error(ErrorCode::kInvalidArgument,
                        describe_host_shortfall(*planned, *target_.budget_bytes, *planner_options.host_budget_bytes));
  }
  for (std::string& note : planned->result.notes) notes_.push_back(std::move(note));
  Schedule schedule = std::move(planned->result.schedule);
  schedule.budget_bytes = target_.budget_bytes;  // as `hyperoffload plan` records it
  plan_result_ = std::move(planned->result);
  plan_result_.schedule = Schedule{schedule.planner, {}};
  HO_ASSIGN_OR_RETURN(plan_, ReplayPlan::create(std::move(warmed->trace), std::move(schedule)));
  unplanned_trace_.reset();
  // The pinned pool keeps what the replays reuse: the blocks the warmup
  // cached beyond the plan's needs go back (the replay's first step acquires
  // the plan's peak host bytes, in size classes, and later steps reuse them).
  HO_RETURN_IF_ERROR(pool_->trim());
  // A plan of the same program is replaced (keeping its number); beyond
  // max_plans the least recently used goes.
  cache_.insert(CachedPlan{plan_, plan_result_, floor_, budget_outcome_, program_tag_});
  const std::string left =
      miss_reason_.empty() ? "" : fmt::format("; the step began as a replay and left it: {}", miss_reason_);
  plan_notes_.push_back(fmt::format("plan {} cached for a step program of {} ops (peak {} planned; {} of at most {} plans "
                                    "cached, {} evicted so far{})",
                                    cache_.stats().warmups, plan_->trace().op_count(),
                                    format_bytes(plan_result_.planned_peak_bytes), cache_.size(), cache_.max_plans(),
                                    cache_.stats().evictions, left));
  if (plan_notes_.size() > kMaxPlanNotes) plan_notes_.erase(plan_notes_.begin());
  notes_.insert(notes_.end(), plan_notes_.begin(), plan_notes_.end());
  return ok_status();
}

bool Session::wants_current_call() const {
  if (replay_ == nullptr) return false;
  if (replay_->wants_current_call()) return true;
  if (!replay_->in_op() || !replay_->reversible()) return false;
  const OpIndex op = replay_->current_op();
  return cache_.any_recomputes(program_tag_, op);
}

template <class Log>
void Session::log_call(Log log) {
  if (logging_ && replay_ != nullptr) log(log_);
}

bool Session::can_switch(const Error& error) const {
  // After irreversible actions the step can still become a warmup (Note
  // [Leaving a plan]).
  return error.code == ErrorCode::kDiverged && replay_ != nullptr && logging_ &&
         (replay_->reversible() || options_.after_actions == AfterActions::kContinueAsWarmup);
}

Status Session::check_readable(std::span<const StorageId> ids, std::string_view reader) const {
  if (unregenerable_.empty()) return ok_status();
  for (StorageId id : ids) {
    auto it = unregenerable_.find(id);
    if (it == unregenerable_.end()) continue;
    return make_error(ErrorCode::kDiverged,
                      fmt::format("the step left its plan, and {} reads a tensor whose data the plan had dropped: {}",
                                  reader, it->second));
  }
  return ok_status();
}

Status Session::bring_back_dropped(ReplayExecutor& left) {
  std::vector<StorageId> made_resident;
  // Each page-in and re-run first makes room under the budget; what came
  // back before it may be evicted for that room (the warmup's rule).
  auto make_room = [&](std::int64_t bytes, std::span<const StorageId> keep) {
    warmup_->brought_back(made_resident);
    made_resident.clear();
    return warmup_->make_room(bytes, keep);
  };
  HO_ASSIGN_OR_RETURN(std::vector<ReplayExecutor::Refusal> refusals, left.regenerate_dropped(made_resident, make_room));
  warmup_->brought_back(made_resident);
  for (ReplayExecutor::Refusal& refusal : refusals) unregenerable_.emplace(refusal.id, std::move(refusal.why));
  return ok_status();
}

Status Session::switch_executor(std::size_t feed, bool complete, const Error& why) {
  const StepOrigin origin = replay_->origin();
  // A plan that recomputes an op the framework was not asked to record a call
  // for (wants_current_call) cannot run.
  auto calls_cover = [&](const ReplayPlan& plan) {
    for (OpIndex op = 0; op < plan.trace().op_count(); ++op) {
      const auto i = static_cast<std::size_t>(op);
      if (i >= call_asked_.size()) break;
      if (plan.recomputed(op) && !call_asked_[i]) return false;
    }
    return true;
  };
  // Note [Step start]: another plan of the tag that fits what the step ran;
  // none once the replay acted.
  const bool reversible = replay_->reversible();
  const CachedPlan* target =
      reversible ? cache_.choose(program_tag_, log_, complete,
                                 [&](const CachedPlan& cached) {
                                   return cached.plan != plan_ && calls_cover(*cached.plan);
                                 })
                 : nullptr;
  // A replay that acted stays until what its plan dropped is back (Note
  // [Leaving a plan]); the executor continuing the step takes the
  // residency's settings.
  std::unique_ptr<ReplayExecutor> left = std::move(replay_);
  left->hand_over();
  if (reversible) left.reset();
  Status fed = ok_status();
  auto feed_into = [&](StepHooks& hooks) { return log_.replay_into(hooks, feed); };
  if (target != nullptr) {
    ++cache_.stats().switches;
    HO_RETURN_IF_ERROR(start_replay(*target, origin));
    replay_->set_catching_up(true);
    fed = feed_into(*replay_);
    replay_->set_catching_up(false);
    log_.truncate(feed);  // the live call, logged again if it succeeds
  } else {
    miss_reason_ = why.message;
    HO_RETURN_IF_ERROR(start_warmup(origin));
    warmup_->begin_catch_up();
    fed = feed_into(*warmup_);
    warmup_->end_catch_up();
    log_.clear();
    if (fed && left != nullptr) fed = bring_back_dropped(*left);
  }
  if (!fed) {
    return make_error(fed.error().code,
                      fmt::format("continuing the step after it differed from its plan: {}", fed.error().message));
  }
  return ok_status();
}

Status Session::finish_replay() {
  Result<ReplayResult> replayed = replay_->finish();
  if (!replayed && can_switch(replayed.error())) {
    // It ended early: a shorter program.
    if (Status switched = switch_executor(log_.events().size(), true, replayed.error()); !switched) {
      (void)abort_step();
      return switched;
    }
    if (warmup_ != nullptr) return finish_warmup();
    replayed = replay_->finish();
  }
  if (!replayed) {
    if (replayed.error().code == ErrorCode::kDiverged) ++cache_.stats().misses;
    (void)abort_step();
    return std::unexpected(std::move(replayed.error()));
  }
  replay_.reset();
  logging_ = false;
  log_.clear();
  // Note [Pinned pool between steps].
  cache_.completed(plan_.get(), pool_->stats().peak_bytes);  // the most recently used now
  HO_RETURN_IF_ERROR(pool_->trim_to(cache_.host_pool_footprint_bytes()));
  ++cache_.stats().hits;
  ++steps_completed_;
  ++replays_since_warmup_;
  last_stats_ = replayed->stats;
  last_timeline_ = std::move(replayed->timeline);
  if (last_stats_.over_budget_allocations > 0 && !replay_over_budget_noted_ && target_.budget_bytes) {
    // Once per session: a replay that holds more than its plan knows of does
    // so every step.
    replay_over_budget_noted_ = true;
    notes_.push_back(fmt::format(
        "replay step {} held up to {} ({} bytes) of device memory, above the budget of {}: {} allocations went "
        "ahead with no copy left to wait for (the step holds memory its plan does not know of)",
        steps_completed_, format_bytes(last_stats_.peak_held_bytes), last_stats_.peak_held_bytes,
        format_bytes(*target_.budget_bytes), last_stats_.over_budget_allocations));
  }
  return ok_status();
}

std::string Session::plan_fingerprint_of(const ReplayPlan& plan) {
  // Over the values that make the plan what it is.
  internal::Fnv1a hash;
  auto mix = [&](std::uint64_t value) { hash.mix(value); };
  const Schedule& schedule = plan.schedule();
  for (char c : schedule.planner) mix(static_cast<unsigned char>(c));
  mix(static_cast<std::uint64_t>(schedule.budget_bytes.value_or(-1)));
  mix(static_cast<std::uint64_t>(plan.trace().op_count()));
  for (const Action& action : schedule.actions) {
    mix(static_cast<std::uint64_t>(action.op));
    mix(static_cast<std::uint64_t>(action.phase));
    mix(static_cast<std::uint64_t>(action.kind));
    mix(static_cast<std::uint64_t>(action.kind == ActionKind::kRecompute ? -1 : plan.storage_of(action)));
    mix(static_cast<std::uint64_t>(action.source_op));
  }
  return fmt::format("{:016x}", hash.value());
}

StepEnd Session::step_end(const Status& outcome, EndedBy by) {
  if (outcome) return StepEnd{};
  const Error& error = outcome.error();
  StepEnd end{StepEndKind::kFailed, error, false};
  if (error.code == ErrorCode::kDiverged) {
    end.kind = StepEndKind::kDiverged;
  } else if (by == EndedBy::kEndStep && plan_ == nullptr && budget_outcome_ == BudgetOutcome::kBelowFloor) {
    end.kind = StepEndKind::kBelowFloor;
  } else if (by == EndedBy::kEndStep && plan_ == nullptr && budget_outcome_ == BudgetOutcome::kBelowHostFloor) {
    end.kind = StepEndKind::kBelowHostFloor;
  }
  if (end.kind == StepEndKind::kDiverged || end.kind == StepEndKind::kBelowFloor) {
    end.forgiven = forgive_and_rewarm(error);
  }
  return end;
}

bool Session::forgive_and_rewarm(const Error& error) {
  if (options_.rewarm != RewarmPolicy::kOnce || rewarm_used_ || in_step()) return false;
  const bool diverged_first_replay = error.code == ErrorCode::kDiverged && in_first_replay();
  const bool warmup_below_floor =
      step_kind_ == StepKind::kWarmup && plan_ == nullptr && budget_outcome_ == BudgetOutcome::kBelowFloor;
  if (!diverged_first_replay && !warmup_below_floor) return false;
  rewarm_used_ = true;
  // The plan does not describe the steps to come.
  cache_.erase(plan_.get());
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
