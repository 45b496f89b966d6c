#include "torch_session.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "hyperoffload/runtime/cuda_backend.h"
#include "hyperoffload/runtime/host_backend.h"

namespace hyperoffload::python {
namespace {

TorchError runtime_error(const Error& error) { return TorchError{ErrorKind::kRuntime, error.message}; }

bool contains(std::span<const StorageId> ids, StorageId id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// Note [Collective buffers]. A c10d collective (c10d::allreduce_,
// _allgather_base_, _reduce_scatter_base_, ...; functional collectives) runs on
// the process group's own threads or streams after its op returns, until a
// Work.wait() or wait_tensor that is no op of the step, and its schemas declare
// no writes. FSDP2's copy-in/copy-out ops (fsdp::) fill and drain the
// all-gather and reduce-scatter buffers, which FSDP2 then frees and
// reallocates with UntypedStorage.resize_ (no op either). None of these buffers
// may be released, copied or overwritten behind the collective's back, so the
// storages such an op touches leave the session at that op: their memory goes
// back to PyTorch and the runtime hears them freed (warmup and replays alike,
// so the trace and its replays agree), and its results are never adopted.
bool is_collective(std::string_view name) {
  return name.starts_with("c10d::") || name.starts_with("_c10d_functional::") || name.starts_with("fsdp::");
}

// Note [Recompute in PyTorch]. A plan may re-run an op (a `recompute`
// action) only if the warmup marked it recomputable: an aten op that writes
// no argument, cannot vary bit-wise, and returns a fresh tensor (module.cc,
// recomputable_op), or an in-place follower, re-run after the op that made
// what it rewrites (Note [In-place units] in ir/trace.h; recompute() below).
// One that draws random numbers (tagged nondeterministic_seeded:
// native_dropout, bernoulli, rand_like, ...) is marked
// Recomputable::kWithRngReplay, and its recorded call re-runs it with its
// generator's state as it first ran (Note [RNG replay] in rng_replay.h). In a replay, when such an op first runs and the plan
// re-runs it later, the interception layer records its call (the operator,
// dispatch keys and boxed arguments on the C++ path; the OpOverload and its
// Python arguments on the TorchDispatchMode path). Its arguments are recorded
// in the step that runs — the batch changes every step — and hold their
// tensors until the op's last recompute, which is also how the runtime keeps
// inputs alive after the user dropped them. A recompute first checks that no
// argument was written in place since (version counters), runs the call
// again below the session (autograd does not see it), and moves each needed
// result's memory into the tracked StorageImpl (StorageRegistry::install), so
// every tensor and view of it keeps working; results not needed are dropped.
// A failure (the op throws, an argument changed) fails the step as any
// runtime error does: every storage is brought back, and the next step runs.

}  // namespace

TorchStatus validate(const TorchSessionOptions& options) {
  if (Status valid = validate_session_options(options.session); !valid) {
    return std::unexpected(TorchError{ErrorKind::kInvalidConfig, valid.error().message});
  }
  if (const std::optional<double>& gib_per_s = options.emulated_copy_bandwidth_gib_per_s;
      gib_per_s && !(std::isfinite(*gib_per_s) && *gib_per_s > 0.0)) {
    return std::unexpected(TorchError{
        ErrorKind::kInvalidConfig,
        fmt::format("emulated_copy_bandwidth_gib_per_s must be a finite number > 0, got {}", *gib_per_s)});
  }
  return {};
}

TorchResult<std::unique_ptr<TorchSession>> TorchSession::create(TorchSessionOptions options,
                                                                ComputeStreamFn stream_fn) {
  if (TorchStatus valid = validate(options); !valid) return std::unexpected(std::move(valid.error()));
  std::unique_ptr<TorchSession> session(new TorchSession(std::move(options), std::move(stream_fn)));
  if (session->options_.device) {
    if (TorchStatus bound = session->bind_device(*session->options_.device); !bound) {
      return std::unexpected(std::move(bound.error()));
    }
  }
  return session;
}

TorchSession::TorchSession(TorchSessionOptions options, ComputeStreamFn stream_fn)
    : options_(std::move(options)), stream_fn_(std::move(stream_fn)) {}

TorchSession::~TorchSession() { abort_step(); }

TorchStatus TorchSession::bind_device(c10::Device device) {
  if (device.is_cpu()) {
    // Tracked storages live in PyTorch's memory; the emulated device's own
    // arena only serves the warmup's bandwidth calibration copy.
    HostBackendOptions host;
    host.device_capacity_bytes = std::max<std::int64_t>(std::int64_t{64} << 20, 2 * options_.session.calibration_bytes);
    host.copy_engines = options_.copy_engines;
    host.emulated_copy_bandwidth_gib_per_s = options_.emulated_copy_bandwidth_gib_per_s;
    // Small copies on an idle copy stream run on the op's thread: cheaper than
    // waking the stream's worker (Note [Small copies on an idle stream],
    // runtime/host_backend.cc). Without effect on an emulated link.
    host.inline_copy_max_bytes = std::int64_t{256} << 10;
    Result<std::unique_ptr<HostBackend>> backend = HostBackend::create(host);
    if (!backend) return std::unexpected(runtime_error(backend.error()));
    backend_ = std::move(*backend);
  } else if (device.is_cuda()) {
    if (options_.emulated_copy_bandwidth_gib_per_s) {
      return std::unexpected(TorchError{
          ErrorKind::kInvalidConfig,
          fmt::format("emulate_copy_bandwidth applies to CPU sessions only; this session would be bound to {}, whose "
                      "copies run on its real link",
                      device.str())});
    }
    if (!stream_fn_) {
      return std::unexpected(TorchError{ErrorKind::kRuntime, "no way to ask PyTorch for the CUDA compute stream"});
    }
    Result<std::uintptr_t> stream = stream_fn_(device);
    if (!stream) return std::unexpected(runtime_error(stream.error()));
    CudaBackendOptions cuda;
    cuda.device = device.has_index() ? device.index() : 0;
    cuda.copy_engines = options_.copy_engines;
    cuda.compute_stream = *stream;
    Result<std::unique_ptr<Backend>> backend = make_cuda_backend(cuda);
    if (!backend) {
      return std::unexpected(TorchError{
          ErrorKind::kRuntime,
          fmt::format("offloading {} tensors needs hyperoffload's CUDA backend: {}", device.str(),
                      backend.error().message)});
    }
    backend_ = std::move(*backend);
  } else {
    return std::unexpected(TorchError{
        ErrorKind::kDeviceMismatch,
        fmt::format("hyperoffload offloads CPU or CUDA tensors; the session would be bound to {}", device.str())});
  }
  device_ = device;
  registry_ = std::make_unique<StorageRegistry>(device);
  return make_session();
}

TorchStatus TorchSession::make_session() {
  session_.reset();
  SessionOptions options = options_.session;
  StorageRegistry* registry = registry_.get();
  options.rematerialize = [registry](StorageId id, std::int64_t size_bytes) {
    return registry->rematerialize(id, size_bytes);
  };
  options.recompute = [this](RecomputeCall& call) { return recompute(call); };
  Result<std::unique_ptr<Session>> session = Session::create(*backend_, std::move(options));
  if (!session) return std::unexpected(runtime_error(session.error()));
  session_ = std::move(*session);
  return {};
}

TorchStatus TorchSession::start_runtime_step() {
  if (Status begun = session_->begin_step(); !begun) return std::unexpected(runtime_error(begun.error()));
  in_runtime_step_ = true;
  program_tag_sent_ = false;
  return {};
}

TorchStatus TorchSession::send_program_tag() {
  if (program_tag_sent_) return {};
  program_tag_sent_ = true;
  // An evaluation step under no_grad runs the training forward's ops: its own
  // tag keeps its forward-only plan from serving a training step.
  const std::uint64_t tag =
      (c10::GradMode::is_enabled() ? 1u : 0u) | (c10::InferenceMode::is_enabled() ? 2u : 0u);
  if (Status set = session_->set_program_tag(tag); !set) return hook_failed(set.error());
  return {};
}

TorchStatus TorchSession::begin_step() {
  if (mode_ != StepMode::kIdle) {
    return std::unexpected(
        TorchError{ErrorKind::kRuntime, "a step of this session is already running (steps do not nest)"});
  }
  early_ops_.clear();
  in_op_ = false;
  last_step_passthrough_ = false;
  mode_ = StepMode::kTracking;
  if (session_ != nullptr) {
    if (TorchStatus started = start_runtime_step(); !started) {
      mode_ = StepMode::kIdle;
      return started;
    }
  }
  return {};
}

TorchStatus TorchSession::report_deaths() {
  dead_.clear();
  registry_->take_dead(dead_);
  for (StorageId id : dead_) {
    if (Status freed = session_->on_storage_freed(id); !freed) return hook_failed(freed.error());
  }
  return {};
}

TorchStatus TorchSession::begin_op(std::string_view name, std::span<c10::StorageImpl* const> inputs,
                                   std::span<c10::StorageImpl* const> written, Recomputable recomputable) {
  if (mode_ != StepMode::kTracking) return lost_.empty() ? TorchStatus{} : check_lost(name, inputs);
  TorchStatus begun = report_op_begin(name, inputs, written, recomputable);
  // A failure forgiven into passthrough (Note [Re-warmup]) still runs this
  // op: it must not read a tensor whose data is lost.
  if (begun && mode_ == StepMode::kPassthrough && !lost_.empty()) return check_lost(name, inputs);
  return begun;
}

TorchStatus TorchSession::report_op_begin(std::string_view name, std::span<c10::StorageImpl* const> inputs,
                                          std::span<c10::StorageImpl* const> written, Recomputable recomputable) {
  in_op_ = true;
  collective_op_ = is_collective(name);
  op_recomputable_ = collective_op_ ? Recomputable::kNo : recomputable;
  op_inputs_.assign(inputs.begin(), inputs.end());
  if (session_ == nullptr) {
    early_ops_.op_begin(name, {}, {});  // nothing is tracked before the device is known
    return {};
  }
  if (TorchStatus tagged = send_program_tag(); !tagged || mode_ != StepMode::kTracking) return tagged;
  if (TorchStatus reported = report_deaths(); !reported || mode_ != StepMode::kTracking) return reported;
  input_ids_.clear();
  for (c10::StorageImpl* impl : inputs) {
    if (std::optional<StorageId> id = registry_->find(impl)) input_ids_.push_back(*id);
  }
  written_ids_.clear();
  for (c10::StorageImpl* impl : written) {
    std::optional<StorageId> id = registry_->find(impl);
    if (id && !contains(written_ids_, *id)) written_ids_.push_back(*id);
  }
  if (Status begun = session_->on_op_begin(name, input_ids_, written_ids_); !begun) return hook_failed(begun.error());
  drop_calls_after_leaving_plan();
  return mark_if_recomputable();
}

void TorchSession::drop_calls_after_leaving_plan() {
  // A step that left its plan for a warmup (Note [Leaving a plan] in
  // exec/session.h) re-runs nothing more: the recorded calls, and the
  // arguments they keep alive, go now rather than at the end of the step.
  if (!calls_.empty() && session_->step_kind() == StepKind::kWarmup) calls_.clear();
}

bool TorchSession::wants_call() const {
  return mode_ == StepMode::kTracking && session_ != nullptr && session_->wants_current_call();
}

void TorchSession::record_call(std::unique_ptr<OpCall> call) { calls_[session_->current_op()] = std::move(call); }

Status TorchSession::recompute(RecomputeCall& call) {
  // The recorded call of each op to re-run (Note [In-place units] in
  // ir/trace.h: the unit's head, then its in-place followers).
  std::vector<OpCall*> recorded;
  for (const OpIndex op : call.ops()) {
    auto found = calls_.find(op);
    if (found == calls_.end()) {
      // A step that ended early let go of its calls (finish_runtime_step): a
      // regeneration then cannot run (Note [Leaving a plan]).
      return make_error(ErrorCode::kDiverged,
                        fmt::format("op {} ({}): the framework holds no call of it", op, call.op_name()));
    }
    recorded.push_back(found->second.get());
  }
  // The head's arguments are checked as they are; a follower's are checked
  // but for what the head's re-run makes again (the storage it rewrites).
  const StorageFilter made_again = [&](const c10::StorageImpl* impl) {
    const std::optional<StorageId> id = registry_->find(impl);
    if (!id) return false;
    for (std::size_t j = 0; j < call.output_count(); ++j) {
      if (call.output_needed(j) && call.output_id(j) == *id) return true;
    }
    return false;
  };
  for (std::size_t m = 0; m < recorded.size(); ++m) {
    if (std::string changed = recorded[m]->changed_argument(m == 0 ? StorageFilter() : made_again);
        !changed.empty()) {
      return make_error(ErrorCode::kDiverged,
                        fmt::format("{} since the op ran, so re-running it would compute something else; keep "
                                    "in-place updates of what the step's ops read (parameters, the batch) out of "
                                    "the step, or use a planner that does not recompute",
                                    changed));
    }
  }
  std::vector<c10::Storage> results;
  try {
    if (fail_recompute_in_ > 0 && --fail_recompute_in_ == 0) throw std::runtime_error("injected recompute failure");
    results = recorded.front()->run();
  } catch (const std::exception& error) {
    return make_error(ErrorCode::kInternal, fmt::format("re-running the op raised: {}", error.what()));
  }
  // The op's tracked outputs are its fresh results, in order, once each (as
  // end_op adopts them).
  call_arguments_.clear();
  recorded.front()->argument_storages(call_arguments_);
  std::vector<const c10::StorageImpl*> fresh;
  std::size_t j = 0;
  for (const c10::Storage& storage : results) {
    const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    if (impl == nullptr || impl->nbytes() == 0 || impl->data_ptr().get() == nullptr) continue;
    if (std::find(call_arguments_.begin(), call_arguments_.end(), impl) != call_arguments_.end()) continue;
    if (std::find(fresh.begin(), fresh.end(), impl) != fresh.end()) continue;
    fresh.push_back(impl);
    if (j < call.output_count() && call.output_needed(j)) {
      HO_ASSIGN_OR_RETURN(AdoptedBuffer buffer, registry_->install(call.output_id(j), storage));
      HO_RETURN_IF_ERROR(call.adopt_output(j, buffer.device_ptr, std::move(buffer.release)));
    }
    ++j;
  }
  results.clear();  // results not installed go back to PyTorch now
  if (j != call.output_count()) {
    return make_error(ErrorCode::kDiverged, fmt::format("re-running the op gave {} new tensors; it first gave {}", j,
                                                        call.output_count()));
  }
  // The followers rewrite, in place, what the head's re-run just installed
  // (their recorded arguments hold the tracked tensors).
  for (std::size_t m = 1; m < recorded.size(); ++m) {
    try {
      results = recorded[m]->run();
    } catch (const std::exception& error) {
      return make_error(ErrorCode::kInternal, fmt::format("re-running the in-place op {} raised: {}", call.ops()[m],
                                                          error.what()));
    }
    results.clear();
  }
  for (std::size_t m = 0; m < recorded.size(); ++m) {
    if (call.last_of_step(m)) calls_.erase(call.ops()[m]);
  }
  return ok_status();
}

TorchStatus TorchSession::mark_if_recomputable() {
  if (op_recomputable_ == Recomputable::kNo) return {};
  if (Status marked = session_->mark_recomputable(op_recomputable_); !marked) return hook_failed(marked.error());
  return {};
}

TorchStatus TorchSession::end_op(std::span<const c10::Storage> outputs) {
  if (mode_ != StepMode::kTracking) {
    in_op_ = false;
    return {};
  }
  auto is_input = [this](const c10::StorageImpl* impl) {
    return std::find(op_inputs_.begin(), op_inputs_.end(), impl) != op_inputs_.end();
  };
  auto has_bytes = [](const c10::StorageImpl* impl) {
    return impl->nbytes() > 0 && impl->data_ptr().get() != nullptr && !impl->device().is_meta();
  };
  if (session_ == nullptr && collective_op_) {
    early_ops_.op_end({}, {});
    in_op_ = false;  // nothing is tracked yet, and a collective's results never are
    return {};
  }
  if (session_ == nullptr) {
    // The device is that of the first storage a step produces.
    const c10::Storage* first = nullptr;
    for (const c10::Storage& storage : outputs) {
      const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
      if (impl != nullptr && !is_input(impl) && has_bytes(impl)) {
        first = &storage;
        break;
      }
    }
    if (first == nullptr) {
      early_ops_.op_end({}, {});
      in_op_ = false;
      return {};
    }
    if (TorchStatus bound = bind_device(first->device()); !bound) {
      op_failed();
      return bound;
    }
    if (TorchStatus started = start_runtime_step(); !started) {
      op_failed();
      return started;
    }
    if (TorchStatus tagged = send_program_tag(); !tagged) return tagged;
    // The ops so far touched no tracked storage; the log ends with this op
    // begun.
    Status fed = early_ops_.replay_into(*session_, early_ops_.events().size());
    early_ops_.clear();
    if (!fed) return hook_failed(fed.error());
    if (TorchStatus marked = mark_if_recomputable(); !marked) return marked;
    written_ids_.clear();
  }
  if (TorchStatus reported = report_deaths(); !reported || mode_ != StepMode::kTracking) return reported;
  if (collective_op_) {
    // Note [Collective buffers]: on_op_begin made the inputs resident; the
    // runtime forgets them (waiting for copies touching them), then PyTorch
    // gets their memory back.
    ResidencyManager& residency = session_->residency();
    for (StorageId id : input_ids_) {
      if (!registry_->live(id) || !residency.tracked(id) || !residency.resident(id)) continue;
      if (Status freed = session_->on_storage_freed(id); !freed) return hook_failed(freed.error());
      registry_->hand_back(id);
    }
  }
  outputs_.clear();
  for (const c10::Storage& storage : outputs) {
    if (collective_op_) break;  // Note [Collective buffers]
    const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    if (impl == nullptr || registry_->find(impl) || is_input(impl) || !has_bytes(impl)) continue;
    const c10::Device device = impl->device();
    if (device != *device_) {
      if (device_->is_cuda() && device.is_cpu()) continue;  // host tensors in a GPU step are not offloaded
      stop_tracking();
      return std::unexpected(TorchError{
          ErrorKind::kDeviceMismatch,
          fmt::format("this session offloads {} tensors (the device of the first tensor its steps produced{}), but "
                      "an op produced a tensor on {}; a session works on one device: use one session per device, "
                      "or pass OffloadConfig(device=...) when a step creates tensors elsewhere first",
                      device_->str(), options_.device ? ", as configured" : "", device.str())});
    }
    outputs_.push_back(registry_->adopt(storage));
  }
  // Inputs written in place that an op gave other memory (resize_) were
  // reported freed above; the rest got a new version.
  std::erase_if(written_ids_, [this](StorageId id) { return !registry_->live(id); });
  Status ended = session_->on_op_end(outputs_, written_ids_);
  outputs_.clear();
  in_op_ = false;
  if (!ended) return hook_failed(ended.error());
  drop_calls_after_leaving_plan();
  return {};
}

void TorchSession::op_failed() {
  if (mode_ == StepMode::kTracking) stop_tracking();
  in_op_ = false;
}

TorchError TorchSession::divergence_error(const Error& error) const {
  std::string message = error.message;
  const bool first_replay = session_->in_first_replay();
  if (first_replay && session_->rewarm_used()) {
    message += ". The session already warmed up again once after its first replay diverged, and the step still "
               "differs from the one it traced: whatever changes from step to step belongs in skip_offload";
  } else if (first_replay) {
    message +=
        ". This was the first replay after the warmup step: when a training loop's first step runs other ops than "
        "the later ones (AccumulateGrad creates parameter .grad tensors in the first step and adds into them "
        "afterwards unless they are reset with optimizer.zero_grad(set_to_none=True); optimizers create their "
        "state), OffloadConfig(rewarm_once=True) lets the session warm up once more";
  }
  return TorchError{ErrorKind::kDivergence, std::move(message)};
}

TorchStatus TorchSession::hook_failed(const Error& error) {
  stop_tracking();  // the step is aborted: the session may judge it now
  return report_end(session_->step_end(std::unexpected(error), Session::EndedBy::kHook), Session::EndedBy::kHook);
}

TorchStatus TorchSession::report_end(const StepEnd& end, Session::EndedBy by) {
  // The one table from how a step ended (exec/session.h, StepEnd) to what
  // Python sees: nothing, a RuntimeWarning (forgiven once: Note [Re-warmup]),
  // or an exception of the kind's class.
  if (end.kind == StepEndKind::kEnded) return {};
  const Error& error = *end.error;
  const bool hook = by == Session::EndedBy::kHook;
  if (end.forgiven) {
    warnings_.push_back(
        end.kind == StepEndKind::kBelowFloor
            ? fmt::format("hyperoffload: {}. This was the first warmup step; the next step warms up again (once per "
                          "session; the first step of a training loop often holds more, e.g. the parameter .grad "
                          "tensors it creates)",
                          error.message)
            : fmt::format("hyperoffload: the first replayed step diverged from the warmup step ({}); {} (once per "
                          "session{})",
                          error.message,
                          hook ? "this step finishes without offloading and the next one warms up again"
                               : "the next step warms up again",
                          hook ? "; the first step of a training loop often differs, e.g. when parameter .grad "
                                 "tensors are created in it"
                               : ""));
    return {};
  }
  switch (end.kind) {
    case StepEndKind::kDiverged: return std::unexpected(divergence_error(error));
    case StepEndKind::kBelowFloor:      // no plan keeps the budget
    case StepEndKind::kBelowHostFloor:  // no plan keeps both budgets
      return std::unexpected(TorchError{ErrorKind::kBudget, error.message});
    case StepEndKind::kEnded:
    case StepEndKind::kFailed: break;
  }
  return std::unexpected(runtime_error(error));
}

void TorchSession::stop_tracking() {
  calls_.clear();  // their tensors die now: report_deaths is not called again this step
  if (session_ != nullptr && in_runtime_step_) {
    // Every storage comes back before the runtime forgets them, so every
    // tensor keeps its data. One the plan released after its last traced use
    // while Python still held it has no copy to come back from: it is "lost"
    // (Note [Lost storages] in torch_session.h).
    ResidencyManager& residency = session_->residency();
    for (StorageId id : registry_->live_ids()) {
      if (!residency.tracked(id) || residency.resident(id)) continue;
      if (!residency.device_ptr(id)) {
        c10::weak_intrusive_ptr<c10::StorageImpl> weak = registry_->weak_storage(id);
        lost_impls_.insert(weak._unsafe_get_target());
        lost_.push_back(std::move(weak));
      }
    }
    (void)session_->abort_step();
    in_runtime_step_ = false;
  }
  if (registry_ != nullptr) registry_->release_all();
  if (mode_ == StepMode::kTracking) {
    mode_ = StepMode::kPassthrough;
    last_step_passthrough_ = true;
  }
  in_op_ = false;
}

TorchStatus TorchSession::check_lost(std::string_view name, std::span<c10::StorageImpl* const> inputs) const {
  for (c10::StorageImpl* impl : inputs) {
    if (lost_impls_.contains(impl)) {
      return std::unexpected(TorchError{
          ErrorKind::kDivergence,
          fmt::format("after the step diverged from the traced step, op \"{}\" reads a tensor whose data the "
                      "replay had already dropped (the traced step never used it again); wrap dynamic regions in "
                      "skip_offload so they run as one opaque op",
                      name)});
    }
  }
  return {};
}

TorchStatus TorchSession::check_lost_at_end() {
  std::int64_t held = 0;
  for (const auto& weak : lost_) held += weak.expired() ? 0 : 1;
  lost_.clear();
  lost_impls_.clear();
  if (held == 0) return {};
  return std::unexpected(TorchError{
      ErrorKind::kDivergence,
      fmt::format("the step diverged from the traced step and still holds {} tensor(s) whose data the replay had "
                  "already dropped (the traced step never used them again); their contents are undefined",
                  held)});
}

TorchStatus TorchSession::finish_runtime_step() {
  // A step that matched its trace ran every recompute, and each dropped its
  // call at its last; the calls left are for ops of a step that ended early.
  // Such a step leaves its plan first, while they can still regenerate what
  // the plan dropped (Note [Leaving a plan] in exec/session.h); then they go,
  // so their arguments do not count as tensors the user holds at its end.
  // The deaths so far first: what the user let go is not regenerated.
  if (TorchStatus reported = report_deaths(); !reported || mode_ != StepMode::kTracking) return reported;
  Status ended = session_->leave_short_replay();
  calls_.clear();
  if (ended) {
    if (TorchStatus reported = report_deaths(); !reported || mode_ != StepMode::kTracking) return reported;
    // A storage the user still holds ends the step on the device; one the
    // plan dropped that could not be regenerated fails the step, naming it.
    ended = session_->end_step();
  }
  in_runtime_step_ = false;
  // Held storages ended the step resident; the runtime lets go of them now and
  // PyTorch gets their memory back.
  (void)session_->forget_held_storages();
  registry_->release_all();
  return report_end(session_->step_end(ended, Session::EndedBy::kEndStep), Session::EndedBy::kEndStep);
}

TorchStatus TorchSession::end_step() {
  if (mode_ == StepMode::kIdle) return std::unexpected(TorchError{ErrorKind::kRuntime, "no step is running"});
  TorchStatus result;
  // In passthrough the runtime step was already aborted (and its error, if
  // any, raised from the op); without a device nothing was tracked.
  if (mode_ == StepMode::kTracking && session_ != nullptr) result = finish_runtime_step();
  if (TorchStatus lost = check_lost_at_end(); !lost && result) result = std::move(lost);
  mode_ = StepMode::kIdle;
  in_op_ = false;
  early_ops_.clear();
  ++steps_;
  return result;
}

void TorchSession::abort_step() {
  if (mode_ == StepMode::kIdle) return;
  stop_tracking();
  lost_.clear();
  lost_impls_.clear();
  mode_ = StepMode::kIdle;
  early_ops_.clear();
}

}  // namespace hyperoffload::python
