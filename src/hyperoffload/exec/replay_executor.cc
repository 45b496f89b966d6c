#include "hyperoffload/exec/replay_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/exec/internal/hook_util.h"
#include "hyperoffload/exec/internal/step_skeleton.h"
#include "hyperoffload/model/residency_rules.h"

namespace hyperoffload {
using internal::contains;
using internal::in_context;

// ---- ReplayPlan -------------------------------------------------------------------

ReplayPlan::ReplayPlan(Trace trace, ReplayGuide guide, Schedule schedule)
    : trace_(std::move(trace)), guide_(std::move(guide)), schedule_(std::move(schedule)) {}

namespace {

// Op `op`'s unit (head first) and the unit's tracked inputs: each member's
// guide inputs, less a follower's reads of what the head makes.
void fill_unit(const Trace& trace, const ReplayGuide& guide, OpIndex op, std::vector<OpIndex>& members,
               std::vector<StorageIndex>& inputs) {
  unit_members(trace, op, members);
  inputs.clear();
  const std::span<const Access> head = trace.accesses(members.front());
  for (std::size_t m = 0; m < members.size(); ++m) {
    for (StorageIndex input : guide.inputs(members[m])) {
      if (unit_access_counts(m == 0, head, Access{input, AccessKind::kRead})) inputs.push_back(input);
    }
  }
}

}  // namespace

void ReplayPlan::unit_of(OpIndex op, std::vector<OpIndex>& members, std::vector<StorageIndex>& inputs) const {
  fill_unit(trace_, guide_, op, members, inputs);
}

Result<std::shared_ptr<const ReplayPlan>> ReplayPlan::create(Trace trace, Schedule schedule) {
  HO_ASSIGN_OR_RETURN(ReplayGuide guide, ReplayGuide::from_trace(trace));
  // The executors' rules for which actions a schedule may hold
  // (model/residency_rules.h): the first problem is the error.
  std::string first_problem;
  const std::vector<ResolvedAction> resolved = resolve_actions(trace, schedule, [&](std::string text) {
    if (first_problem.empty()) first_problem = std::move(text);
  });
  if (!first_problem.empty()) return make_error(ErrorCode::kInvalidInput, std::move(first_problem));
  // Execution order is schedule order (resolve_actions reported any other).
  std::vector<StorageIndex> action_storage;
  action_storage.reserve(resolved.size());
  std::vector<std::int64_t> last_recompute_of(static_cast<std::size_t>(trace.op_count()), -1);
  std::vector<std::int64_t> last_recompute_read(static_cast<std::size_t>(trace.storage_count()), -1);
  std::vector<std::int64_t> output_bytes(static_cast<std::size_t>(trace.op_count()), 0);
  std::vector<OpIndex> producer(static_cast<std::size_t>(trace.storage_count()), -1);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (StorageIndex output : guide.outputs(op)) {
      output_bytes[static_cast<std::size_t>(op)] += trace.storage(output).size_bytes;
      producer[static_cast<std::size_t>(output)] = op;
    }
  }
  std::int64_t recomputes = 0;
  std::unordered_map<OpIndex, Unit> units;
  for (const ResolvedAction& action : resolved) {
    action_storage.push_back(action.storage);
    if (action.action().kind != ActionKind::kRecompute) continue;
    ++recomputes;
    const auto position = static_cast<std::int64_t>(action.index);
    const OpIndex source = action.action().source_op;
    auto [it, added] = units.try_emplace(source);
    Unit& unit = it->second;
    if (added) fill_unit(trace, guide, source, unit.members, unit.inputs);
    for (const OpIndex member : unit.members) last_recompute_of[static_cast<std::size_t>(member)] = position;
    for (StorageIndex input : unit.inputs) last_recompute_read[static_cast<std::size_t>(input)] = position;
  }
  if (recomputes > 0) {
    // The runtime re-runs the op on whatever its inputs hold: a schedule that
    // recomputes from a stale input, or over a later version, would silently
    // compute something else. The validator's rules say when it cannot.
    const ValidationReport report = validate_schedule(trace, schedule);
    if (!report.valid()) {
      return make_error(ErrorCode::kInvalidInput,
                        fmt::format("the schedule recomputes ops but is not valid for the trace: {}",
                                    report.problems.empty() ? std::string("(no details)") : report.problems.front()));
    }
  }
  auto plan = std::shared_ptr<ReplayPlan>(new ReplayPlan(std::move(trace), std::move(guide), std::move(schedule)));
  plan->by_op_ = std::make_unique<ActionsByOp>(plan->schedule_.actions, plan->trace_.op_count());
  plan->action_storage_ = std::move(action_storage);
  plan->recompute_count_ = recomputes;
  plan->last_recompute_of_ = std::move(last_recompute_of);
  plan->last_recompute_read_ = std::move(last_recompute_read);
  plan->output_bytes_ = std::move(output_bytes);
  plan->producer_ = std::move(producer);
  plan->units_ = std::move(units);
  if (plan->trace_.has_in_place_units()) {  // (trace was moved into the plan)
    const Trace& kept = plan->trace_;
    std::vector<bool> rewritten(static_cast<std::size_t>(kept.storage_count()), false);
    for (OpIndex op = 0; op < kept.op_count(); ++op) {
      if (kept.op_unit_previous(op) >= 0) rewritten[static_cast<std::size_t>(rewritten_storage(kept, op))] = true;
    }
    for (OpIndex op = 0; op < kept.op_count(); ++op) {
      for (const Access& access : kept.accesses(op)) {
        const StorageIndex s = access.storage;
        if (access.kind != AccessKind::kWrite || !rewritten[static_cast<std::size_t>(s)] ||
            plan->producer_[static_cast<std::size_t>(s)] == op) {
          continue;
        }
        std::vector<OpIndex>& list = plan->rewriters_[s];
        if (list.empty() || list.back() != op) list.push_back(op);
      }
    }
  }
  return std::shared_ptr<const ReplayPlan>(std::move(plan));
}

// ---- RecomputeCall ------------------------------------------------------------------

Status RecomputeCall::check_needed(std::size_t j, std::string_view what) const {
  if (j >= outputs_.size()) {
    return make_error(ErrorCode::kInvalidArgument, fmt::format("recompute of op {} ({}): {} of output {}: the op has "
                                                               "{} tracked outputs",
                                                               source_op_, op_name_, what, j, outputs_.size()));
  }
  const Output& output = outputs_[j];
  if (!output.needed || output.regenerated) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("recompute of op {} ({}): {} of output {}: {}", source_op_, op_name_, what, j,
                                  output.regenerated ? "already regenerated" : "not needed (it is resident or gone)"));
  }
  return ok_status();
}

Result<void*> RecomputeCall::allocate_output(std::size_t j) {
  HO_RETURN_IF_ERROR(check_needed(j, "allocate_output"));
  HO_ASSIGN_OR_RETURN(void* ptr, residency_->regenerate(outputs_[j].id));
  outputs_[j].regenerated = true;
  return ptr;
}

Status RecomputeCall::adopt_output(std::size_t j, void* device_ptr, ReleaseCallback release) {
  HO_RETURN_IF_ERROR(check_needed(j, "adopt_output"));
  HO_RETURN_IF_ERROR(residency_->regenerate_adopted(outputs_[j].id, AdoptedBuffer{device_ptr, std::move(release)}));
  outputs_[j].regenerated = true;
  return ok_status();
}

// ---- ReplayExecutor -----------------------------------------------------------------

Result<std::unique_ptr<ReplayExecutor>> ReplayExecutor::start(ResidencyManager& residency,
                                                              std::shared_ptr<const ReplayPlan> plan,
                                                              ReplayOptions options) {
  if (plan == nullptr) return make_error(ErrorCode::kInvalidArgument, "replay: no plan");
  if (!options.continues) HO_RETURN_IF_ERROR(internal::check_fresh_residency(residency, "replay"));
  if (plan->recompute_count() > 0 && !options.recompute) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("replay: the plan has {} recompute actions but the framework gives no way to "
                                  "re-run an op (ReplayOptions::recompute)",
                                  plan->recompute_count()));
  }
  std::unique_ptr<ReplayExecutor> executor(new ReplayExecutor(residency, std::move(plan), options));
  if (executor->recording()) {
    HO_ASSIGN_OR_RETURN(executor->step_start_, residency.mark_compute());
    executor->sample_memory();
  }
  return executor;
}

ReplayExecutor::ReplayExecutor(ResidencyManager& residency, std::shared_ptr<const ReplayPlan> plan,
                               ReplayOptions options)
    : residency_(residency),
      plan_(std::move(plan)),
      options_(options),
      start_time_(std::chrono::steady_clock::now()),
      caller_of_(static_cast<std::size_t>(plan_->trace().storage_count()), kUnbound),
      matcher_(plan_->trace(), plan_->guide()) {
  // Note [Held bytes] in runtime/residency_manager.h: the step holds the
  // trace's budget in time, as the capped simulation of the plan does.
  residency_.set_held_budget(plan_->trace().memory_limit_bytes());
  if (options_.continues) {
    start_stats_ = options_.continues->stats;
    start_time_ = options_.continues->time;
  } else {
    residency_.reset_peak();
    start_stats_ = residency_.stats();
  }
  residency_.set_record_copies(recording() ? RecordCopies::kYes : RecordCopies::kNo);
  call_.residency_ = &residency_;
}

ReplayExecutor::~ReplayExecutor() {
  if (owns_settings_) hand_over();
}

void ReplayExecutor::hand_over() {
  owns_settings_ = false;
  residency_.cancel_reservation();
  residency_.set_held_budget(std::nullopt);
  residency_.set_record_copies(RecordCopies::kNo);
  residency_.take_spans();
}

std::string ReplayExecutor::op_label() const {
  if (op_ >= plan_->trace().op_count()) return fmt::format("op {}", op_);
  return fmt::format("op {} ({})", op_, plan_->trace().op_name(op_));
}

Error ReplayExecutor::diverged(Mismatch mismatch) const {
  if (mismatch.differs == Differs::kUntracked) return Error{ErrorCode::kInvalidArgument, std::move(mismatch.what)};
  // Advice that fits what differed (a shape change is not cured by skip_offload).
  const char* advice =
      mismatch.differs == Differs::kShapes
          ? "the shapes differ from the traced step's: the session keeps a plan per step program "
            "(OffloadConfig(max_plans=...)) but a step can change plans only before it offloads or releases anything; "
            "bucket sequence lengths (a tokenizer's or DataCollatorWithPadding's pad_to_multiple_of) so fewer "
            "programs occur and they differ early, and raise max_plans to hold them all"
          : "the step runs other ops than the traced step: the session keeps a plan per step program "
            "(OffloadConfig(max_plans=...)) but a step can change plans only before it offloads or releases anything; "
            "raise max_plans if more programs occur than it holds, and wrap data-dependent control flow in "
            "skip_offload so it runs as one opaque op";
  return Error{ErrorCode::kDiverged,
               fmt::format("the step diverged from the traced step at {}; {}", mismatch.what, advice)};
}

Result<StorageIndex> ReplayExecutor::traced_index(StorageId caller_id, std::string_view role) const {
  if (std::optional<StorageIndex> traced = matcher_.traced(caller_id)) return *traced;
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("{}: {} storage {} is not tracked in this step; pass only storages produced by "
                                "earlier ops of the step and not yet freed",
                                op_label(), role, caller_id));
}

void ReplayExecutor::sample_memory() {
  if (!recording()) return;
  const std::int64_t bytes = residency_.held_bytes();
  if (bytes == last_sampled_bytes_) return;
  last_sampled_bytes_ = bytes;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_time_).count();
  timeline_.memory.push_back(MemorySample{ms, bytes});
}

Status ReplayExecutor::collect_spans(OpIndex op) {
  if (!recording()) return ok_status();
  // Spans name the caller's ids; the timeline speaks of the traced ones.
  for (TimedSpan& span : residency_.take_spans()) {
    if (std::optional<StorageIndex> traced = matcher_.traced(span.storage)) {
      span.storage = plan_->trace().storage(*traced).id;
    }
    copy_spans_.emplace_back(op, std::move(span));
  }
  return ok_status();
}

Status ReplayExecutor::run_actions(std::span<const Action> actions) {
  for (const Action& action : actions) {
    committed_ = true;
    actions_run_ = static_cast<std::int64_t>(plan_->position_of(action)) + 1;
    if (action.kind == ActionKind::kRecompute) {
      HO_RETURN_IF_ERROR(run_recompute(action));
      continue;
    }
    const StorageId caller = caller_of_[static_cast<std::size_t>(plan_->storage_of(action))];
    if (caller == kFreed) continue;
    if (caller == kUnbound) {
      // As in the validator, releasing what is not there is a no-op.
      if (action.kind == ActionKind::kReleaseDevice || action.kind == ActionKind::kReleaseHost) continue;
      return make_error(ErrorCode::kFailedPrecondition,
                        fmt::format("{}: {}: the storage does not exist yet (no earlier op produced it)", op_label(),
                                    describe(action)));
    }
    Status status = ok_status();
    switch (action.kind) {
      case ActionKind::kCopyD2H:
        status = residency_.copy_d2h(caller);
        break;
      case ActionKind::kReleaseDevice:
        status = residency_.release_device(caller);
        break;
      case ActionKind::kCopyH2D:
        status = residency_.copy_h2d(caller);
        break;
      case ActionKind::kReleaseHost:
        status = residency_.release_host(caller);
        break;
      case ActionKind::kRecompute:  // handled above (no storage)
        break;
    }
    if (!status) return std::unexpected(in_context(std::move(status.error()), describe(action)));
    sample_memory();
  }
  return ok_status();
}

Status ReplayExecutor::run_recompute(const Action& action) {
  const OpIndex source = action.source_op;
  const Trace& trace = plan_->trace();
  const auto position = static_cast<std::int64_t>(plan_->position_of(action));
  auto context = [&] { return fmt::format("{}: {} ({})", op_label(), describe(action), trace.op_name(source)); };
  for (StorageIndex input : plan_->unit_inputs(source)) {
    const StorageId id = caller_of_[static_cast<std::size_t>(input)];
    // The validator guarantees residency for a step that matches the trace;
    // a storage freed while a recompute still reads it is held (on_storage_freed).
    if (id == kUnbound || id == kFreed || !residency_.resident(id)) {
      return make_error(ErrorCode::kFailedPrecondition,
                        fmt::format("{}: input storage {} (traced) is not resident", context(),
                                    trace.storage(input).id));
    }
  }
  HO_RETURN_IF_ERROR(rerun(source, position, context, nullptr));
  // Held inputs no later recompute reads are gone for good.
  for (StorageIndex input : plan_->unit_inputs(source)) {
    StorageId& id = caller_of_[static_cast<std::size_t>(input)];
    if (held(id) && plan_->last_recompute_read(input) <= position) {
      HO_RETURN_IF_ERROR(residency_.forget(id));
      id = kFreed;
    }
  }
  sample_memory();
  return ok_status();
}

Status ReplayExecutor::rerun(OpIndex source, std::int64_t position, const std::function<std::string()>& context,
                             std::vector<StorageId>* regenerated) {
  const ReplayGuide& guide = plan_->guide();
  const Trace& trace = plan_->trace();
  // A plan's recompute re-runs its source's unit as the plan indexed it; a
  // regeneration may re-run any op's.
  std::vector<OpIndex> unit_scratch;
  std::vector<StorageIndex> inputs_scratch;
  if (position < 0) plan_->unit_of(source, unit_scratch, inputs_scratch);
  const std::span<const OpIndex> unit = position >= 0 ? plan_->unit(source) : std::span<const OpIndex>(unit_scratch);
  const std::span<const StorageIndex> inputs =
      position >= 0 ? plan_->unit_inputs(source) : std::span<const StorageIndex>(inputs_scratch);
  const OpIndex head = unit.front();
  // The storage the unit's followers rewrite, and how often (0 without any).
  const StorageIndex rewritten = unit.size() > 1 ? rewritten_storage(trace, unit[1]) : -1;
  const auto follower_writes = static_cast<std::int32_t>(unit.size() - 1);
  RecomputeCall& call = call_;
  call.source_op_ = source;
  call.op_name_ = trace.op_name(source);
  call.input_ids_.clear();
  call.input_ptrs_.clear();
  call.outputs_.clear();
  for (StorageIndex input : inputs) {
    const StorageId id = caller_of_[static_cast<std::size_t>(input)];
    Result<void*> ptr = residency_.device_ptr(id, DeviceAccess::kRead);
    if (!ptr) return std::unexpected(in_context(std::move(ptr.error()), context()));
    call.input_ids_.push_back(id);
    call.input_ptrs_.push_back(*ptr);
  }
  std::int64_t needed_bytes = 0;
  bool rewritten_needed = false;
  for (StorageIndex output : guide.outputs(head)) {
    const StorageId id = caller_of_[static_cast<std::size_t>(output)];
    RecomputeCall::Output out;
    out.size_bytes = trace.storage(output).size_bytes;
    if (id != kUnbound && id != kFreed && residency_.tracked(id)) {
      out.id = id;
      // A storage written in place since, other than by the unit's followers,
      // holds another version than the unit makes (the validator keeps a
      // plan's recomputes from such storages).
      out.needed = !residency_.resident(id) &&
                   residency_.writes_since_produced(id) == (output == rewritten ? follower_writes : 0);
      if (out.needed) needed_bytes += out.size_bytes;
      if (out.needed && output == rewritten) rewritten_needed = true;
    }
    call.outputs_.push_back(out);
  }
  // The followers run only on a regenerated storage (RecomputeCall::ops).
  call.ops_.assign(unit.begin(), rewritten_needed ? unit.end() : unit.begin() + 1);
  call.last_of_step_.clear();
  for (const OpIndex op : call.ops_) {
    // A call of an op sourced outside the step is kept to the step's end.
    call.last_of_step_.push_back(position >= 0 && plan_->last_recompute_of(op) == position &&
                                 !plan_->sourced_outside(op));
  }
  // Its regenerated outputs are allocated when it is issued: room first
  // (Note [Held bytes]), as the capped simulation has it.
  if (Status reserved = residency_.reserve(needed_bytes); !reserved) {
    return std::unexpected(in_context(std::move(reserved.error()), context()));
  }
  sample_memory();
  Stream compute = residency_.backend().stream(StreamRole::kCompute);
  HO_ASSIGN_OR_RETURN(Fence start, residency_.events().record(compute));
  Status ran = options_.recompute(call);
  residency_.cancel_reservation();
  if (!ran) return std::unexpected(in_context(std::move(ran.error()), context()));
  for (std::size_t j = 0; j < call.outputs_.size(); ++j) {
    if (!call.outputs_[j].needed) continue;
    if (!call.outputs_[j].regenerated) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: the recompute did not regenerate output {} (storage traced as {})", context(),
                                    j, trace.storage(guide.outputs(head)[j]).id));
    }
    if (regenerated != nullptr) regenerated->push_back(call.outputs_[j].id);
  }
  HO_ASSIGN_OR_RETURN(Fence end, residency_.events().record(compute));
  recompute_spans_.push_back(RecomputeSpan{op_, source, needed_bytes, std::move(start), std::move(end)});
  return ok_status();
}

// Note [Leaving a plan] in exec/session.h: the regeneration of what a plan
// dropped, for a step that continues without it.
std::vector<StorageId> ReplayExecutor::dropped_storages() const {
  std::vector<StorageId> dropped;
  for (StorageId id : caller_of_) {
    if (id < 0 || !residency_.tracked(id)) continue;  // never produced, freed, or kept for a recompute only
    if (!residency_.resident(id) && !residency_.has_current_host_copy(id)) dropped.push_back(id);
  }
  return dropped;
}

std::string ReplayExecutor::storage_label(StorageIndex t) const {
  const Trace& trace = plan_->trace();
  const OpIndex producer = plan_->producer(t);
  return fmt::format("the tensor traced as storage {} ({} bytes, made by op {} ({}))", trace.storage(t).id,
                     trace.storage(t).size_bytes, producer, trace.op_name(producer));
}

OpIndex ReplayExecutor::regeneration_source(StorageIndex t) const {
  const std::optional<std::int32_t> writes = residency_.writes_since_produced(caller_of_[static_cast<std::size_t>(t)]);
  if (!writes || *writes == 0) return plan_->producer(t);
  // Version k came from the k-th rewrite since the producer: a unit of k + 1
  // ops made it when that rewrite is a follower whose unit is that long. The
  // count must agree with the trace's order, the k-th rewrite the last one
  // the step ran (an op that rewrote it twice would shift the count: then
  // nothing is regenerated rather than the wrong version).
  const std::span<const OpIndex> rewriters = plan_->rewriters(t);
  const auto k = static_cast<std::size_t>(*writes);
  const OpIndex ran_before = op_ + (in_op_ ? 1 : 0);
  if (k > rewriters.size() || rewriters[k - 1] >= ran_before ||
      (k < rewriters.size() && rewriters[k] < ran_before)) {
    return -1;
  }
  const OpIndex writer = rewriters[k - 1];
  return unit_size(plan_->trace(), writer) == k + 1 ? writer : -1;
}

std::string ReplayExecutor::why_not_regenerable(StorageIndex t) const {
  const OpIndex source = regeneration_source(t);
  if (source < 0) {
    return "it was written in place after its op made it, by an op that cannot be re-run after it, so re-running "
           "the op would give an older version";
  }
  std::vector<OpIndex> members;
  std::vector<StorageIndex> inputs;
  plan_->unit_of(source, members, inputs);
  if (members.size() == 1 && plan_->sourced_outside(source)) return {};  // its call is kept to the step's end
  for (const OpIndex member : members) {
    if (plan_->sourced_outside(member)) continue;
    const std::string_view which = members.size() == 1 ? "its op" : "an op of the unit that made it";
    if (!plan_->recomputed(member)) {
      return fmt::format("the plan never re-runs {} (op {}), so the framework kept no call of it (the plan released "
                         "the tensor after its last use in the traced step, which the step outlived)",
                         which, member);
    }
    if (plan_->last_recompute_of(member) < actions_run_) {
      return fmt::format("the plan's last re-run of {} (op {}) has passed, and the framework let go of the call",
                         which, member);
    }
  }
  for (StorageIndex input : inputs) {
    if (caller_of_[static_cast<std::size_t>(input)] == kFreed) {
      return fmt::format("its op reads storage {} (traced), which the step already freed",
                         plan_->trace().storage(input).id);
    }
  }
  return {};
}

Result<std::vector<ReplayExecutor::Refusal>> ReplayExecutor::regenerate_dropped(
    std::vector<StorageId>& made_resident, const MakeRoom& make_room) {
  const Trace& trace = plan_->trace();
  // First pass, per dropped storage: a post-order over producers (a storage
  // comes after every input of its op; inputs are made by earlier ops, so
  // it ends). A storage with something on the way that cannot be regenerated
  // is refused before anything runs, and nothing is brought back for it.
  std::vector<Refusal> refusals;
  std::vector<StorageIndex> order;                 // of every storage not refused
  std::vector<std::uint8_t> state(static_cast<std::size_t>(trace.storage_count()), 0);  // 1: in this root's walk, 2: ordered
  std::vector<StorageIndex> walk;
  std::vector<std::pair<StorageIndex, bool>> stack;
  std::vector<OpIndex> members;         // of the unit regenerating a storage
  std::vector<StorageIndex> unit_inputs;
  for (StorageId id : dropped_storages()) {
    const StorageIndex root = *matcher_.traced(id);
    if (state[static_cast<std::size_t>(root)] == 2) continue;
    walk.clear();
    stack.assign(1, {root, false});
    std::string refused;
    while (!stack.empty() && refused.empty()) {
      const auto [t, expanded] = stack.back();
      stack.pop_back();
      std::uint8_t& seen = state[static_cast<std::size_t>(t)];
      if (expanded) {
        walk.push_back(t);
        continue;
      }
      if (seen != 0) continue;
      seen = 1;
      const StorageId caller = caller_of_[static_cast<std::size_t>(t)];
      if (caller == kUnbound || caller == kFreed || !residency_.tracked(caller)) {
        refused = fmt::format("{} cannot be regenerated: the step no longer holds it", storage_label(t));
      } else if (residency_.resident(caller) || residency_.has_current_host_copy(caller)) {
        walk.push_back(t);  // paged in when its turn comes
      } else if (std::string why = why_not_regenerable(t); !why.empty()) {
        refused = fmt::format("{} cannot be regenerated{}: {}", storage_label(t),
                              t == root ? "" : fmt::format(" (needed to regenerate {})", storage_label(root)), why);
      } else {
        stack.emplace_back(t, true);
        plan_->unit_of(regeneration_source(t), members, unit_inputs);
        for (StorageIndex input : unit_inputs) stack.emplace_back(input, false);
      }
    }
    for (StorageIndex t : walk) state[static_cast<std::size_t>(t)] = refused.empty() ? 2 : 0;
    for (const auto& [t, expanded] : stack) {
      if (state[static_cast<std::size_t>(t)] == 1) state[static_cast<std::size_t>(t)] = 0;
    }
    if (!refused.empty()) {
      // Storages this walk marked but did not order (the refused one, the
      // ones expanded above it) may still come back for another root.
      for (std::size_t i = 0; i < state.size(); ++i) {
        if (state[i] == 1) state[i] = 0;
      }
      refusals.push_back(Refusal{id, std::move(refused)});
      continue;
    }
    order.insert(order.end(), walk.begin(), walk.end());
  }
  // Kept storages no regeneration reads go now: their memory is the warmup's.
  for (std::size_t t = 0; t < caller_of_.size(); ++t) {
    if (held(caller_of_[t]) && state[t] != 2) {
      HO_RETURN_IF_ERROR(residency_.forget(caller_of_[t]));
      caller_of_[t] = kFreed;
    }
  }
  std::vector<StorageId> keep, paged;  // a re-run's inputs: resident, to page in
  for (StorageIndex t : order) {
    const StorageId caller = caller_of_[static_cast<std::size_t>(t)];
    if (residency_.resident(caller)) continue;  // regenerated with another output of its op
    if (residency_.has_current_host_copy(caller)) {
      HO_RETURN_IF_ERROR(make_room(trace.storage(t).size_bytes, {}));
      HO_RETURN_IF_ERROR(residency_.device_ptr(caller, DeviceAccess::kRead));
      made_resident.push_back(caller);
      continue;
    }
    const OpIndex source = regeneration_source(t);
    plan_->unit_of(source, members, unit_inputs);
    std::int64_t bytes = 0;
    for (StorageIndex output : plan_->guide().outputs(members.front())) {
      const StorageId out = caller_of_[static_cast<std::size_t>(output)];
      if (out != kUnbound && out != kFreed && residency_.tracked(out) && !residency_.resident(out)) {
        bytes += trace.storage(output).size_bytes;
      }
    }
    // Its inputs come back too: those resident stay (kept), the others are
    // paged in by rerun from their host copies, in the room made now.
    keep.clear();
    paged.clear();
    for (StorageIndex input : unit_inputs) {
      const StorageId in = caller_of_[static_cast<std::size_t>(input)];
      std::vector<StorageId>& into = residency_.resident(in) ? keep : paged;
      if (contains(into, in)) continue;
      into.push_back(in);
      if (&into == &paged) bytes += trace.storage(input).size_bytes;
    }
    HO_RETURN_IF_ERROR(make_room(bytes, keep));
    auto context = [&] { return fmt::format("regenerating {}", storage_label(t)); };
    if (Status ran = rerun(source, /*position=*/-1, context, &made_resident); !ran) {
      if (ran.error().code != ErrorCode::kDiverged) return std::unexpected(std::move(ran.error()));
      // The framework refused the re-run (an argument written in place since,
      // no call held): what is still dropped stays so, refused for that reason.
      for (StorageId id : dropped_storages()) refusals.push_back(Refusal{id, ran.error().message});
      break;
    }
  }
  for (StorageId& id : caller_of_) {
    if (!held(id)) continue;
    HO_RETURN_IF_ERROR(residency_.forget(id));
    id = kFreed;
  }
  return refusals;
}

Status ReplayExecutor::on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                                   std::span<const StorageId> written) {
  HO_RETURN_IF_ERROR(internal::check_not_in_op(in_op_, name, [this] { return op_label(); }));
  HO_RETURN_IF_ERROR(internal::check_written(inputs, written, [this] { return op_label(); }));
  if (std::optional<Mismatch> mismatch = matcher_.check_begin(op_, name, inputs)) {
    return std::unexpected(diverged(std::move(*mismatch)));
  }
  HO_RETURN_IF_ERROR(residency_.poll());
  HO_RETURN_IF_ERROR(run_actions(plan_->pre(op_)));
  for (StorageId id : inputs) {
    const DeviceAccess access = contains(written, id) ? DeviceAccess::kReadWrite : DeviceAccess::kRead;
    if (auto ptr = residency_.device_ptr(id, access); !ptr) {
      return std::unexpected(in_context(std::move(ptr.error()), fmt::format("{}: input storage {}", op_label(), id)));
    }
  }
  // The framework allocates the op's outputs while it runs and hands them over
  // at on_op_end; their room is made now, before the op starts, as the capped
  // simulation allocates an op's first accesses when it starts.
  if (Status reserved = catching_up_ ? ok_status() : residency_.reserve(plan_->output_bytes(op_)); !reserved) {
    return std::unexpected(in_context(std::move(reserved.error()), op_label()));
  }
  if (recording()) {
    sample_memory();
    HO_RETURN_IF_ERROR(collect_spans(op_));
    HO_ASSIGN_OR_RETURN(Fence start, residency_.mark_compute());
    op_spans_.push_back(OpSpan{op_, std::move(start), {}});
  }
  current_allocated_.clear();
  in_op_ = true;
  return ok_status();
}

Result<void*> ReplayExecutor::allocate_output(StorageId id, std::int64_t size_bytes) {
  if (!in_op_) {
    return make_error(ErrorCode::kFailedPrecondition,
                      fmt::format("allocate_output of storage {}: not inside an op", id));
  }
  const bool bound_before = options_.continues && residency_.tracked(id) && !matcher_.bound(id);
  if (!bound_before && (matcher_.bound(id) || residency_.tracked(id))) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("{}: output storage id {} is already in use in this step", op_label(), id));
  }
  if (std::optional<Mismatch> mismatch = matcher_.check_allocation(op_, current_allocated_.size())) {
    return std::unexpected(diverged(std::move(*mismatch)));
  }
  // Continuing a step: the executor before this one bound it.
  Result<void*> ptr = bound_before ? residency_.device_ptr(id, DeviceAccess::kReadWrite) : residency_.bind(id, size_bytes);
  if (!ptr) return std::unexpected(in_context(std::move(ptr.error()), op_label()));
  current_allocated_.add(id, size_bytes);
  sample_memory();
  return ptr;
}

Status ReplayExecutor::mark_recomputable(Recomputable /*how*/) {
  // The plan already says what to recompute; only the precondition is checked.
  if (!in_op_) return make_error(ErrorCode::kFailedPrecondition, "mark_recomputable outside an op");
  return ok_status();
}

Status ReplayExecutor::on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) {
  if (!in_op_) return make_error(ErrorCode::kFailedPrecondition, "on_op_end without on_op_begin");
  if (recording()) {
    HO_ASSIGN_OR_RETURN(op_spans_.back().end, residency_.mark_compute());
  }
  if (std::optional<Mismatch> mismatch = matcher_.check_outputs(op_, outputs)) {
    return std::unexpected(diverged(std::move(*mismatch)));
  }
  const std::span<const StorageIndex> expected = plan_->guide().outputs(op_);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const OpOutput& output = outputs[i];
    if (matcher_.bound(output.id)) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("{}: output storage id {} is already in use in this step", op_label(), output.id));
    }
    if (!(options_.continues && residency_.tracked(output.id) && !current_allocated_.contains(output.id))) {
      HO_RETURN_IF_ERROR(
          internal::take_output(current_allocated_, residency_, output, [this] { return op_label(); }));
    }
    caller_of_[static_cast<std::size_t>(expected[i])] = output.id;
  }
  matcher_.bind_outputs(op_, outputs);
  HO_RETURN_IF_ERROR(current_allocated_.check_all_claimed([this] { return op_label(); }));
  residency_.cancel_reservation();  // what the outputs did not take (0-byte outputs take nothing)
  for (StorageId id : mutated) {
    if (Result<StorageIndex> index = traced_index(id, "mutated"); !index) return std::unexpected(std::move(index.error()));
    if (Status written = residency_.mark_written(id); !written) {
      return std::unexpected(in_context(std::move(written.error()), op_label()));
    }
  }
  if (std::optional<Mismatch> mismatch = matcher_.check_mutated(op_, mutated)) {
    return std::unexpected(diverged(std::move(*mismatch)));
  }
  sample_memory();
  HO_RETURN_IF_ERROR(run_actions(plan_->post(op_)));
  HO_RETURN_IF_ERROR(collect_spans(op_));
  ++op_;
  in_op_ = false;
  return ok_status();
}

Status ReplayExecutor::on_storage_freed(StorageId id) {
  const std::optional<StorageIndex> unbound = matcher_.unbind(id);
  if (!unbound) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("freeing storage {}: not tracked in this step (never produced, or already freed)", id));
  }
  const StorageIndex traced = *unbound;
  if (plan_->last_recompute_read(traced) >= actions_run_) {
    // A later recompute reads it: the runtime keeps it, under its own id so
    // the caller may use this one again.
    committed_ = true;
    HO_RETURN_IF_ERROR(residency_.rekey(id, held_id(traced)));
    caller_of_[static_cast<std::size_t>(traced)] = held_id(traced);
    return ok_status();
  }
  caller_of_[static_cast<std::size_t>(traced)] = kFreed;
  if (options_.continues && !residency_.tracked(id)) return ok_status();  // forgotten before the switch
  HO_RETURN_IF_ERROR(residency_.forget(id));
  sample_memory();
  return ok_status();
}

Result<void*> ReplayExecutor::device_ptr(StorageId id, DeviceAccess access) {
  HO_ASSIGN_OR_RETURN([[maybe_unused]] StorageIndex index, traced_index(id, "used"));
  return residency_.device_ptr(id, access);
}

Result<ReplayResult> ReplayExecutor::finish() {
  if (in_op_) {
    return make_error(ErrorCode::kFailedPrecondition, fmt::format("finish inside {}: the op did not end", op_label()));
  }
  const Trace& trace = plan_->trace();
  // Storages the caller still holds end the step on the device — also a step
  // that ended early, so the caller keeps their data when it is aborted. Those
  // the plan dropped stay dropped: a warmup continuing the step regenerates
  // them (Note [Leaving a plan] in exec/session.h), and so do the storages kept
  // for recomputes the step did not reach.
  const std::optional<Mismatch> ended_early = matcher_.check_end(op_);
  internal::EndRestores restores;
  std::int64_t dropped = 0;
  // In traced order, so memory is laid out the same way every step.
  for (StorageIndex traced = 0; traced < trace.storage_count(); ++traced) {
    StorageId& caller = caller_of_[static_cast<std::size_t>(traced)];
    if (held(caller)) {
      if (!ended_early) {
        HO_RETURN_IF_ERROR(residency_.forget(caller));
        caller = kFreed;
      }
      continue;
    }
    if (caller < 0) continue;  // never produced, or freed
    if (!residency_.resident(caller) && !residency_.has_current_host_copy(caller)) {
      ++dropped;
      continue;
    }
    HO_RETURN_IF_ERROR(internal::restore_held(residency_, caller, trace.storage(traced).size_bytes, restores));
  }
  HO_RETURN_IF_ERROR(residency_.poll());
  if (ended_early) {
    return std::unexpected(Error{
        ErrorCode::kDiverged,
        fmt::format("the step diverged from the traced step: {}; raise OffloadConfig(max_plans=...) if more programs "
                    "occur than it holds, and wrap data-dependent control flow in skip_offload so it runs as one "
                    "opaque op",
                    ended_early->what)});
  }
  if (dropped > 0) {
    return std::unexpected(Error{
        ErrorCode::kDiverged,
        fmt::format("the step diverged from the traced step: it ends holding {} tensor(s) that the traced step freed "
                    "before its end, whose data the plan dropped after their last traced use",
                    dropped)});
  }
  HO_RETURN_IF_ERROR(collect_spans(op_));
  sample_memory();

  ReplayResult result;
  Backend& backend = residency_.backend();
  for (const RecomputeSpan& span : recompute_spans_) {
    HO_RETURN_IF_ERROR(span.end.wait());
    HO_ASSIGN_OR_RETURN(double ms, backend.elapsed_ms(span.start.event(), span.end.event()));
    result.stats.recompute_ms += std::max(0.0, ms);
    result.stats.regenerated_bytes += span.bytes;
  }
  if (recording()) {
    auto since_start = [&](const Fence& fence) -> Result<double> {
      HO_RETURN_IF_ERROR(fence.wait());
      return backend.elapsed_ms(step_start_.event(), fence.event());
    };
    for (const OpSpan& op : op_spans_) {
      HO_ASSIGN_OR_RETURN(double start_ms, since_start(op.start));
      HO_ASSIGN_OR_RETURN(double end_ms, since_start(op.end));
      timeline_.spans.push_back(TimelineSpan{SpanKind::kOp, Lane::kCompute, op.op, -1, 0, start_ms, end_ms});
    }
    for (const RecomputeSpan& span : recompute_spans_) {
      HO_ASSIGN_OR_RETURN(double start_ms, since_start(span.start));
      HO_ASSIGN_OR_RETURN(double end_ms, since_start(span.end));
      timeline_.spans.push_back(
          TimelineSpan{SpanKind::kRecompute, Lane::kCompute, span.source, -1, span.bytes, start_ms, end_ms});
    }
    const bool two_engines = backend.copy_engines() == CopyEngines::kTwo;
    for (const auto& [op, span] : copy_spans_) {
      HO_ASSIGN_OR_RETURN(double start_ms, since_start(span.start));
      HO_ASSIGN_OR_RETURN(double end_ms, since_start(span.end));
      Lane lane = Lane::kCompute;
      if (span.kind == SpanKind::kCopyD2H) lane = Lane::kCopy0;
      if (span.kind == SpanKind::kCopyH2D) lane = two_engines ? Lane::kCopy1 : Lane::kCopy0;
      timeline_.spans.push_back(TimelineSpan{span.kind, lane, op, span.kind == SpanKind::kStall ? -1 : span.storage,
                                             span.bytes, start_ms, end_ms});
    }
    std::stable_sort(timeline_.spans.begin(), timeline_.spans.end(),
                     [](const TimelineSpan& a, const TimelineSpan& b) { return a.start_ms < b.start_ms; });
    timeline_.budget_bytes = trace.memory_limit_bytes().value_or(-1);
    result.timeline = std::move(timeline_);
  }

  const double recompute_ms = result.stats.recompute_ms;
  const std::int64_t regenerated_bytes = result.stats.regenerated_bytes;
  result.stats = internal::step_stats_between(StepKind::kReplay, op_, start_stats_, residency_.stats(), restores.count,
                                             restores.bytes, start_time_);
  result.stats.recompute_count = static_cast<std::int64_t>(recompute_spans_.size());
  result.stats.recompute_ms = recompute_ms;
  result.stats.regenerated_bytes = regenerated_bytes;
  return result;
}

}  // namespace hyperoffload
