// Session: the whole offloading loop behind one object — the first step runs
// under the warmup executor (trace + online eviction), then the session plans
// with the configured planner for the configured budget, and every later step
// replays that plan. A budget below the trace's unavoidable floor is an error
// naming both, whichever planner is configured.
//
//   auto backend = *HostBackend::create({.device_capacity_bytes = budget});
//   auto session = *Session::create(*backend, {.budget_bytes = budget});  // planner: hybrid
//   for (int step = 0; step < steps; ++step) {
//     session->begin_step();
//     ... the step's ops call session->on_op_begin / on_op_end (exec/hooks.h) ...
//     if (!session->end_step()) ...;      // after the first step: trace, plan
//   }
//
// Failure. When a hook fails, the step is marked failed: later hooks return the
// same error and end_step() returns it too. abort_step() (also what end_step()
// does when the step failed) drains in-flight transfers, returns every device
// buffer and host block and forgets the step's storages, so nothing leaks; the
// next step is of the same kind (a failed warmup is warmed up again; a failed
// replay replays again). When planning fails after a good warmup (a budget
// below the planner's unavoidable floor, say), end_step() reports it, the step
// counts as done and the next step warms up again.
//
// Re-warmup (RewarmPolicy::kOnce, the default; once per session). The first step of a
// training loop often differs from the later ones (PyTorch's AccumulateGrad
// creates .grad in step 1 and adds into it afterwards; optimizers create their
// state), so its trace does not describe them. forgive_and_rewarm() forgives,
// once, the two failures that follow from that — the first replay after a
// warmup diverging, and a warmup whose plan failed because the budget is below
// the floor (a first step often holds more) — and the next step warms up
// again. The framework decides what to do with the rest of the failed step.
//
// Note [Plan per step program]. A training loop runs several step programs:
// batches padded to different lengths, the last small batch, the first micro-
// batch of a gradient accumulation (which creates .grad) and the later ones
// (which add into it). The session keeps up to SessionOptions::max_plans
// warmed-up plans, least recently used evicted, and matches each step to one:
//  - A step starts as a replay of the plan predicted for it (Note [Next
//    program]; by default the most recently used plan), and the session
//    logs its hook calls while the replay has taken no irreversible action
//    (no schedule action ran: nothing offloaded, released or recomputed).
//  - When the step differs from that plan (an op's name, inputs, output count
//    or sizes, in-place writes, the op count) before such an action, the
//    session looks for another cached plan whose traced step begins with the
//    ops seen so far (StepLog, TraceMatcher) and that needs no recorded call
//    the framework was not asked for (while the step can still switch, the
//    framework is asked to record the call of every op any cached plan
//    re-runs: wants_current_call); found, the step switches to it (a hit).
//    Otherwise the step continues as a warmup from that op (a miss): the ops
//    seen so far are re-fed to it (their measured durations are lost: the
//    planner sees them as instant), it evicts online within the budget, and at
//    end_step its trace is planned and cached as a new plan (one note per plan).
//  - After an irreversible action the step cannot change plans, but it
//    continues exactly as a warmup from that op (a miss; Note [Leaving a
//    plan]). With AfterActions::kFail it fails with kDiverged instead,
//    naming what differed, with advice that fits (bucket shapes with
//    pad_to_multiple_of, raise max_plans, skip_offload only for
//    data-dependent control flow).
//  - Program tags. Before its first op the framework may name the step's
//    mode (set_program_tag; the PyTorch binding passes whether autograd
//    records and whether inference mode is on, at the first op). A step
//    replays and switches only to plans made under the same tag: an
//    evaluation step under torch.no_grad() runs the training forward's ops, so
//    its forward-only plan is a prefix of the training step's program, and a
//    training step replaying it would match until the plan ends, after the
//    plan had released what backward still reads. With tags the two never
//    share a plan. Without calls, every step has tag 0.
// A warmup's plan replaces a cached plan of the same program.
//
// Note [Leaving a plan]. A step that diverges from its plan after the plan
// acted continues as a warmup from the diverging op, and ends bit-identical to
// eager. Invariant: no op of the step ever reads a storage the plan dropped.
// At the hand-over the ops so far are only recorded (nothing is bound or paged
// again), then every storage the caller still holds is made readable again
// before the warmup runs another op:
//  - offloaded (a current host copy): left there; the warmup pages it in when
//    an op reads it (a fault), as any storage it evicted;
//  - dropped (released without a current host copy): regenerated now by the
//    diverged replay (ReplayExecutor::regenerate), which re-runs the traced op
//    that made it through the framework's recorded call, after bringing that
//    op's inputs back the same way, recursively, each with room made under
//    the budget first. It re-runs each op at most once per storage it makes,
//    and never an op whose result would differ: one whose output was written
//    in place since, whose input the step freed, or whose call the framework
//    no longer holds (RNG state and arguments written in place are the
//    framework's to check: the PyTorch binding refuses those calls). The
//    framework holds calls of the ops the plan re-runs, until their last
//    re-run, and of every recomputable op that reads no storage of the step
//    (casts of weights and masks, embeddings, factory ops;
//    ReplayPlan::sourced_outside), to the step's end: what those made is
//    released after its last traced use, and a step that leaves its plan
//    often reads it again.
// A step that ends early after its plan acted leaves its plan at its end
// (leave_short_replay), before the framework lets go of the calls.
// A storage that cannot be regenerated is remembered with the reason; an op
// that reads it, or a step that ends holding it, fails with kDiverged naming
// the op, the storage and why, before the op runs. So a loop whose steps
// leave their plans (gradient accumulation: the first micro-batch's
// AccumulateGrad detaches, the later ones add in place) never gets a wrong
// result, whatever the planner; it gets one warmup per new program.
//
// Which plan a step starts on, and which it switches to: one ladder in
// PlanCache::choose (Note [Step start] and Note [Next program] in
// exec/plan_cache.h).
//
// Note [Pinned pool between steps]. The pinned host pool is the session's,
// shared by every plan, and its freed blocks stay cached for reuse. After a
// warmup it is trimmed to nothing (the warmup's blocks are not the plan's);
// after a replay, to the largest footprint any cached plan's replays have had
// (CachedPlan::host_pool_peak_bytes: class-size bytes held at once), freeing
// the largest cached blocks first. So with one program the pool holds the
// plan's peak host bytes rounded to size classes, and over many programs it
// never holds more than the hungriest cached plan needs: it stays flat.
//
// Between steps. Storages the caller still held when a step ended stay tracked
// and resident until the caller frees them (on_storage_freed) or the next step
// begins; then runtime-allocated memory is freed and adopted buffers are left
// to their owners.
//
// Thread-safety: one thread drives a session.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/plan_cache.h"
#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/exec/step_log.h"
#include "hyperoffload/exec/step_stats.h"
#include "hyperoffload/exec/warmup_executor.h"
#include "hyperoffload/plan/budget_policy.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/runtime/backend.h"
#include "hyperoffload/runtime/event_pool.h"
#include "hyperoffload/runtime/pinned_host_pool.h"
#include "hyperoffload/runtime/residency_manager.h"
#include "hyperoffload/ir/timeline.h"

namespace hyperoffload {

enum class RewarmPolicy : std::uint8_t { kNever, kOnce };
// The default plan cache size of every entry point (SessionOptions::max_plans,
// OffloadConfig(max_plans=...)).
inline constexpr std::int64_t kDefaultMaxPlans = 8;
// What a replay that diverges after an irreversible action does (Note [Plan per
// step program]): continue as a warmup (the default) or fail with kDiverged.
enum class AfterActions : std::uint8_t { kContinueAsWarmup, kFail };
// The one default of every entry point (the C++ session, Python's
// OffloadConfig(rewarm_once=True)): a training loop's first step usually
// differs from the rest (see above), so forgive it once.
inline constexpr RewarmPolicy kDefaultRewarmPolicy = RewarmPolicy::kOnce;

struct SessionOptions {
  // Device budget for tracked storages, in bytes: the warmup's online limit
  // and the planning budget. nullopt: unlimited (nothing is offloaded).
  std::optional<std::int64_t> budget_bytes;
  // Any name make_planner() accepts; plan/budget_policy.h says what happens to
  // a plan over the budget.
  std::string planner{kDefaultPlannerName};
  PlannerOptions planner_options;
  // Pinned host pool limit: the most bytes offloaded at once.
  std::int64_t host_capacity_bytes = std::numeric_limits<std::int64_t>::max();
  RecordTimeline record_timeline = RecordTimeline::kNo;  // for replayed steps
  // Device memory for adopted storages brought back (residency_manager.h).
  RematerializeFn rematerialize;
  // Re-runs ops for plans that recompute (exec/recompute.h). Without one, no
  // op of the warmup is recorded recomputable, so no plan recomputes.
  RecomputeFn recompute;
  std::int64_t calibration_bytes = kDefaultCalibrationBytes;  // see WarmupOptions
  std::optional<double> copy_bandwidth_gib_per_s;          // see WarmupOptions
  OpTimes op_times = kDefaultOpTimes;                      // see WarmupOptions, Note [Reproducible plans]
  std::optional<OpTimeStoreOptions> op_time_store;         // see WarmupOptions, Note [Reproducible plans]
  RewarmPolicy rewarm = kDefaultRewarmPolicy;              // see above
  // The most plans cached, one per step program (Note [Plan per step
  // program]); >= 1. Least recently used evicted.
  std::int64_t max_plans = kDefaultMaxPlans;
  AfterActions after_actions = AfterActions::kContinueAsWarmup;
};


// How a step ended, for a binding to map through one table to its own errors
// and warnings (Session::step_end).
enum class StepEndKind : std::uint8_t {
  kEnded,           // replayed, or warmed up and planned
  kDiverged,        // the step ran other ops than its plan and could not go on exactly (kDiverged)
  kBelowFloor,      // a warmup whose budget is below the unavoidable floor: no plan keeps it
  kBelowHostFloor,  // a warmup that no plan keeps within both budgets
  kFailed,          // any other error
};
struct StepEnd {
  StepEndKind kind = StepEndKind::kEnded;
  std::optional<Error> error;  // unset for kEnded
  // The re-warmup policy forgave it (Note [Re-warmup]): the next step warms
  // up again; a binding warns instead of raising.
  bool forgiven = false;
};

// The one check of a session's options, for every entry point (the C++
// session, Python's OffloadConfig through _C.SessionOptions.validate): a
// negative budget, host capacity or calibration size, a copy bandwidth that is
// not a finite number > 0, an unknown planner or options it rejects. Each
// message starts with the field's name. kInvalidArgument.
Status validate_session_options(const SessionOptions& options);

class Session final : public StepHooks {
 public:
  // Fails where validate_session_options does. `backend` outlives the session.
  static Result<std::unique_ptr<Session>> create(Backend& backend, SessionOptions options);
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Starts a step (warmup until a plan exists, then replay). Forgets the
  // storages held over from the previous step.
  Status begin_step();
  // Names the step's program tag (Note [Plan per step program], "Program
  // tags"); call it before the step's first op. A replay of a plan of another
  // tag becomes a replay of the most recently used plan of this tag, or a
  // warmup when none is cached. kFailedPrecondition outside a step or after its
  // first op.
  Status set_program_tag(std::uint64_t tag);
  // Before end_step, while the framework still holds its recorded calls: a
  // replay that acted and ended before its plan's last op (a forward-only
  // step on a training step's plan) continues as a warmup now, regenerating
  // what its plan dropped that the step still holds (Note [Leaving a plan]).
  // A step whose storages the framework frees afterwards is then reported as
  // usual; end_step fails only for a held storage that could not come back.
  // Nothing to do for any other step. On failure the step is aborted.
  Status leave_short_replay();
  // Ends the step; after a warmup, plans. On any failure the step is aborted.
  Status end_step();
  // Abandons the step (e.g. after an exception in the caller's code) without
  // leaking anything. Safe to call at any time; returns the first cleanup error.
  Status abort_step();
  // Between steps: stops tracking the storages held over from the last step now
  // rather than at the next begin_step() — waits for the copies still touching
  // them, completes deferred frees (running their release callbacks), frees
  // runtime memory and leaves adopted buffers to their owners, who may then
  // free them at once. Fails inside a step.
  Status forget_held_storages();

  Status on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                     std::span<const StorageId> written) override;
  Result<void*> allocate_output(StorageId id, std::int64_t size_bytes) override;
  Status on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) override;
  Status mark_recomputable(Recomputable how = Recomputable::kYes) override;
  // Also valid between steps, for storages held over from the last one.
  Status on_storage_freed(StorageId id) override;
  // Also valid between steps.
  Result<void*> device_ptr(StorageId id, DeviceAccess access = DeviceAccess::kReadWrite) override;

  bool in_step() const { return warmup_ != nullptr || replay_ != nullptr; }
  // In a replay, inside an op: the framework must record the op's call,
  // because the plan re-runs it later in the step, or a step that leaves the
  // plan may regenerate what it made (ReplayExecutor::wants_current_call),
  // or, while the step can still change plans (nothing irreversible ran),
  // another cached plan re-runs it: a plan the step switches to can re-run
  // only ops whose calls were recorded.
  bool wants_current_call() const;
  // In a replay: the traced index of the current op (RecomputeCall::source_op
  // names ops by it); -1 outside a replay.
  OpIndex current_op() const { return replay_ != nullptr ? replay_->current_op() : -1; }
  // kReplay when a plan is cached (the step may still become a warmup).
  StepKind next_step_kind() const { return cache_.empty() ? StepKind::kWarmup : StepKind::kReplay; }
  // The kind of the step running (a replay may become a warmup mid-step), or
  // of the last step begun.
  StepKind step_kind() const { return step_kind_; }
  const PlanCacheStats& plan_cache_stats() const { return cache_.stats(); }
  std::int64_t steps_completed() const { return steps_completed_; }

  // The last step begun is the first replay after a warmup.
  bool in_first_replay() const { return step_kind_ == StepKind::kReplay && replays_since_warmup_ == 0; }
  // Whether the policy's one re-warmup was used.
  bool rewarm_used() const { return rewarm_used_; }
  // After `error` failed the last step begun (a hook's or end_step()'s): true
  // when the re-warmup policy forgives it (see above) — the plan, if any, is
  // dropped and the next step warms up; false otherwise, nothing changed.
  // Precondition: not inside a step (abort it first).
  bool forgive_and_rewarm(const Error& error);
  // What `outcome` means, with the re-warmup policy applied
  // (forgive_and_rewarm): of end_step() (kEndStep), or a hook's failure that
  // ended the step (kHook: never a budget's). Precondition: not inside a step
  // (a failed one is aborted).
  enum class EndedBy : std::uint8_t { kHook, kEndStep };
  StepEnd step_end(const Status& outcome, EndedBy by);

  // The recorded trace and the plan of the last replay or warmup (else null).
  // plan_result()'s schedule is empty: schedule() holds it.
  // trace() is also set when planning failed after a good warmup.
  const Trace* trace() const {
    if (plan_) return &plan_->trace();
    return unplanned_trace_ ? &*unplanned_trace_ : nullptr;
  }
  const Schedule* schedule() const { return plan_ ? &plan_->schedule() : nullptr; }
  const PlanResult* plan_result() const { return plan_ ? &plan_result_ : nullptr; }
  // 16 hex digits naming the current plan: its planner, budget, op count and
  // every action (op, phase, kind, storage by its place in the trace, op re-
  // run), so the same plan has the same fingerprint in every run (Note
  // [Reproducible plans] in exec/warmup_executor.h); empty without a plan.
  std::string plan_fingerprint() const { return plan_ ? plan_fingerprint_of(*plan_) : std::string(); }
  static std::string plan_fingerprint_of(const ReplayPlan& plan);
  // The lowest op-granular peak any schedule reaches on the last warmup's trace,
  // when the session had a budget: the planner's own floor when it computes
  // one, otherwise the offload-only floor (plan/planner.h, offload_floor).
  // Set also when planning failed because the budget is below it.
  const std::optional<UnavoidableFloor>& floor() const { return floor_; }
  // What the budget policy said of the last warmup's plan (plan/budget_policy.h;
  // kBelowFloor: planning failed because no schedule keeps the budget); unset
  // before the first warmup ends or when planning failed otherwise.
  const std::optional<BudgetOutcome>& budget_outcome() const { return budget_outcome_; }
  // Notes from the warmup (bandwidth calibration, held bytes over the budget),
  // the planner, and the first replay that held more than the budget.
  const std::vector<std::string>& notes() const { return notes_; }
  // Stats of the last completed step.
  const StepStats& last_step_stats() const { return last_stats_; }
  // Timeline of the last replayed step (with RecordTimeline::kYes).
  const Timeline& last_timeline() const { return last_timeline_; }

  const SessionOptions& options() const { return options_; }
  // The budgets, memory model and copy engines every plan of the session is
  // made for (built once from the options and the backend). The host budget
  // is the planner options' when they name one, else 4/5 of the pinned
  // pool's capacity when that is limited: the pool serves each request from a
  // size class at most 25% larger (runtime/pinned_host_pool.h), so a plan
  // whose host copies hold at most 4/5 of the capacity always fits in it.
  const StepTarget& target() const { return target_; }
  Backend& backend() const { return backend_; }
  PinnedHostPool& host_pool() { return *pool_; }
  const PinnedHostPool& host_pool() const { return *pool_; }
  ResidencyManager& residency() { return *residency_; }
  EventPool& events() { return *events_; }

 private:
  Session(Backend& backend, SessionOptions options);

  StepHooks* active();
  // Records a hook failure (the step is then failed) and passes it on.
  Status fail(Error error);
  template <class T>
  Result<T> check(Result<T> result) {
    if (!result) return std::unexpected(fail(std::move(result.error())).error());
    return result;
  }
  Status check(Status status) {
    if (!status) return fail(std::move(status.error()));
    return status;
  }
  Status finish_warmup();
  Status finish_replay();
  // The step (from `continues`, when it began as another executor's) as a
  // replay of `it`, or as a warmup: a miss, with no plan.
  Status start_replay(const CachedPlan& cached, std::optional<StepOrigin> continues = std::nullopt);
  Status start_warmup(std::optional<StepOrigin> continues = std::nullopt);
  // Note [Plan per step program]: after a divergence of a reversible replay,
  // hands the step to a replay of another cached plan matching the log, or to
  // a warmup, and re-feeds it the first `feed` logged events. `why`: the
  // replay's divergence, kept for the new plan's note.
  Status switch_executor(std::size_t feed, bool complete, const Error& why);
  bool can_switch(const Error& error) const;
  // Note [Leaving a plan]: brings back what `left` (the diverged replay) dropped.
  Status bring_back_dropped(ReplayExecutor& left);
  // Fails with kDiverged when `ids` holds a storage that could not be
  // brought back (Note [Leaving a plan]); `reader` names who reads it.
  Status check_readable(std::span<const StorageId> ids, std::string_view reader) const;
  // Logs a hook call that succeeded (while the replay is reversible).
  template <class Log>
  void log_call(Log log);

  Backend& backend_;
  SessionOptions options_;
  StepTarget target_;
  std::unique_ptr<EventPool> events_;
  std::unique_ptr<PinnedHostPool> pool_;
  std::unique_ptr<ResidencyManager> residency_;

  std::unique_ptr<WarmupExecutor> warmup_;
  std::unique_ptr<ReplayExecutor> replay_;
  std::optional<Error> failure_;

  std::shared_ptr<const ReplayPlan> plan_;  // of the current or last replay, or of the last warmup
  PlanCache cache_;
  StepLog log_;
  bool logging_ = false;
  std::vector<std::string> plan_notes_;  // one per plan cached, the last kMaxPlanNotes
  std::string miss_reason_;  // why this step left the plan it began replaying, if it did
  static constexpr std::size_t kMaxPlanNotes = 32;
  std::vector<bool> call_asked_;  // by op: wants_current_call() was true when it ran
  // Storages of the step that a left plan dropped and that could not be
  // regenerated, with the reason (Note [Leaving a plan]).
  std::unordered_map<StorageId, std::string> unregenerable_;
  std::uint64_t program_tag_ = 0;  // of the running step (set_program_tag)
  bool op_seen_ = false;           // the running step has begun an op
  std::optional<Trace> unplanned_trace_;  // the last warmup's trace when planning failed
  std::optional<UnavoidableFloor> floor_;
  std::optional<BudgetOutcome> budget_outcome_;
  PlanResult plan_result_;
  std::vector<std::string> notes_;
  StepStats last_stats_;
  Timeline last_timeline_;
  std::int64_t steps_completed_ = 0;
  StepKind step_kind_ = StepKind::kWarmup;  // of the last step begun
  std::int64_t replays_since_warmup_ = 0;   // completed
  bool rewarm_used_ = false;
  bool replay_over_budget_noted_ = false;  // a replay went over the budget (notes_)
};

}  // namespace hyperoffload
