// TorchSession: a hyperoffload Session driven by PyTorch ops.
//
// The Python layer (a TorchDispatchMode) calls, for every op of a step,
// begin_op() with the storages of the op's tensor arguments before the op runs
// and end_op() with the storages of its results after; this class maps them to
// runtime storage ids (StorageRegistry), reports deaths, and drives the
// runtime's Session (warmup → plan → replay) on a backend for the session's
// device: the HostBackend for CPU tensors, the CUDA backend on a GPU.
//
// Rules (docs/PYTHON.md):
//  - Tracked storages are those an op of the step produced: a result whose
//    StorageImpl is neither an argument's nor tracked, on the session's device,
//    with bytes. Views and in-place results share their storage's id.
//    Everything else (parameters, the batch, optimizer state) is left alone.
//  - The device is OffloadConfig's, or that of the first storage a step
//    produces; ops before it are reported once it is known. A CPU result in a
//    GPU session is left alone; any other device is a kDeviceMismatch error.
//  - A failed op, a divergence or a runtime error ends offloading for the rest
//    of the step: every tracked storage is brought back first (so every tensor
//    keeps its data; see Note [Lost storages] for the exception), then the
//    runtime forgets them; the rest of the step runs as plain PyTorch
//    ("passthrough").
//  - Re-warmup (RewarmPolicy::kOnce, exec/session.h): the first step of a
//    training loop often differs from the later ones (AccumulateGrad creates
//    .grad in step 1, keeps it on the device to the end of the step and adds
//    into it afterwards; optimizers create their state). So when the first
//    replay after a warmup diverges, the step finishes in passthrough without
//    an error, and when a warmup's plan fails because the budget is below the
//    floor, that is a warning; either way the next step warms up again. Other
//    divergences and budget failures are errors.
//  - Recompute (Note [Recompute in PyTorch] in torch_session.cc): in a replay,
//    the interception layer records the call of every op the plan re-runs
//    later (an OpCall) when it first runs; a recompute runs it again and
//    installs each regenerated result's memory in the tracked StorageImpl.
//  - At the end of every step (also a failed one) the runtime lets go of the
//    storages the user still holds and their memory goes back to plain PyTorch
//    DataPtrs; nothing of the session stays attached to a tensor between steps.
//
// Thread-safety: one thread at a time drives it (PyTorch's autograd engine may
// run backward ops on its own thread while the caller waits).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hyperoffload/exec/session.h"
#include "hyperoffload/exec/step_log.h"
#include "hyperoffload/runtime/backend.h"
#include "storage_registry.h"

namespace hyperoffload::python {

// What a failure means to the user; the binding picks the Python exception.
enum class ErrorKind : std::uint8_t {
  kRuntime,         // HyperoffloadError
  kDivergence,      // DivergenceError
  kBudget,          // BudgetError
  kDeviceMismatch,  // DeviceMismatchError
  kInvalidConfig,   // ValueError
};

struct TorchError {
  ErrorKind kind = ErrorKind::kRuntime;
  std::string message;
};

template <class T>
using TorchResult = std::expected<T, TorchError>;
using TorchStatus = TorchResult<void>;

// Whether a storage is one of a set (OpCall::changed_argument).
using StorageFilter = std::function<bool(const c10::StorageImpl*)>;

// A recorded op call that can run again (Note [Recompute in PyTorch]).
class OpCall {
 public:
  virtual ~OpCall() = default;
  // Runs the op again with the arguments it first ran with; the storages of
  // its tensor results, in order. Throws on failure (what() explains).
  virtual std::vector<c10::Storage> run() = 0;
  // The storages of its tensor arguments (results sharing one are not fresh).
  virtual void argument_storages(std::vector<c10::StorageImpl*>& out) const = 0;
  // Empty, or which tensor argument was written in place since the call was
  // recorded (its version counter moved): re-running would compute something
  // else. Tensors of a storage `exempt` holds are not checked (an in-place
  // follower's rewritten storage, which its unit's head makes again: Note
  // [In-place units] in ir/trace.h); null checks every one.
  virtual std::string changed_argument(const StorageFilter& exempt) const = 0;
};


struct TorchSessionOptions {
  // The runtime session's own options (exec/session.h, with their defaults):
  // the activation budget, planner, pinned host capacity, re-warm policy,
  // calibration copy, planning bandwidth and timeline recording. Its framework
  // hooks (rematerialize, recompute) are the TorchSession's, set when it makes
  // the session.
  SessionOptions session;
  CopyEngines copy_engines = kDefaultCopyEngines;
  // The session's device; nullopt: the first storage a step produces decides.
  std::optional<c10::Device> device;
  // CPU sessions only: the HostBackend's copies take bytes / this bandwidth
  // (GiB/s; runtime/host_backend.h, Note [Emulated link]), so a CPU step runs
  // in time as on a device with that link. A CUDA session refuses it.
  std::optional<double> emulated_copy_bandwidth_gib_per_s;
};

// The options' values: validate_session_options (exec/session.h) and an
// emulated bandwidth that is a finite number > 0; kInvalidConfig (ValueError)
// naming the field. TorchSession::create checks them too, so a binding that
// skips this still fails before the first step.
TorchStatus validate(const TorchSessionOptions& options);

// How ops run in the current step.
enum class StepMode : std::uint8_t {
  kIdle,         // between steps
  kTracking,     // ops go to the runtime
  kPassthrough,  // plain PyTorch for the rest of the step (see above)
};

class TorchSession {
 public:
  // The compute stream for a CUDA device: torch.cuda.current_stream(device).
  using ComputeStreamFn = std::function<Result<std::uintptr_t>(c10::Device)>;

  // Fails where validate() does, or on an unsupported device.
  static TorchResult<std::unique_ptr<TorchSession>> create(TorchSessionOptions options, ComputeStreamFn stream_fn);
  ~TorchSession();
  TorchSession(const TorchSession&) = delete;
  TorchSession& operator=(const TorchSession&) = delete;

  TorchStatus begin_step();
  // `inputs`: the StorageImpl of every tensor argument, in argument order (any
  // device, tracked or not). `written`: those the op writes in place.
  // `recomputable`: re-running the op on the same inputs gives the same
  // results bit for bit (hyperoffload.session._op_info reads it from the
  // schema); the warmup's trace records it (exec/hooks.h, mark_recomputable).
  TorchStatus begin_op(std::string_view name, std::span<c10::StorageImpl* const> inputs,
                       std::span<c10::StorageImpl* const> written, Recomputable recomputable = Recomputable::kNo);
  // After begin_op: whether the plan re-runs the current op later in the
  // step, so the interception layer must record_call() it before it runs.
  bool wants_call() const;
  void record_call(std::unique_ptr<OpCall> call);
  // `outputs`: the storages of the op's tensor results, in order.
  TorchStatus end_op(std::span<const c10::Storage> outputs);
  // The op raised: stop offloading for the rest of the step (see above).
  void op_failed();
  // Ends the step: plans after a warmup. Also on failure the step is over.
  TorchStatus end_step();
  // Abandons the step (an exception escaped it); every tensor keeps its data.
  void abort_step();

  StepMode mode() const { return mode_; }
  bool tracking() const { return mode_ == StepMode::kTracking; }
  // Whether the interception layer must report the current op: while
  // tracking, and in passthrough while some tensor's data is lost (Note [Lost
  // storages]: begin_op refuses an op that reads one before it runs).
  bool intercepts() const { return mode_ == StepMode::kTracking || (mode_ == StepMode::kPassthrough && !lost_.empty()); }
  std::optional<c10::Device> device() const { return device_; }
  const TorchSessionOptions& options() const { return options_; }
  // The runtime session, once the device is known.
  const Session* session() const { return session_.get(); }
  // Storages tracked now.
  std::size_t tracked_storages() const { return registry_ ? registry_->live_count() : 0; }
  // Messages for warnings.warn (a re-warmup), taken once.
  std::vector<std::string> take_warnings() { return std::exchange(warnings_, {}); }
  // Whether the last completed step was finished in passthrough.
  bool last_step_passthrough() const { return last_step_passthrough_; }
  std::int64_t steps() const { return steps_; }
  // Fault injection for tests: the n-th recompute from now (1 = the next)
  // throws as a failing kernel would; 0 disarms.
  void fail_recompute_after(std::int64_t n) { fail_recompute_in_ = n; }

 private:
  TorchSession(TorchSessionOptions options, ComputeStreamFn stream_fn);

  TorchStatus bind_device(c10::Device device);
  TorchStatus make_session();
  TorchStatus start_runtime_step();
  TorchStatus finish_runtime_step();
  // Reports queued deaths to the runtime.
  TorchStatus report_deaths();
  // Once per step, before its first op: the step's program tag (autograd on,
  // inference mode; Note [Plan per step program] in exec/session.h).
  TorchStatus send_program_tag();
  // begin_op while tracking.
  TorchStatus report_op_begin(std::string_view name, std::span<c10::StorageImpl* const> inputs,
                              std::span<c10::StorageImpl* const> written, Recomputable recomputable);
  void drop_calls_after_leaving_plan();
  // A runtime error from a hook: stop offloading (restoring every storage),
  // then report it as the session judges it (report_end).
  TorchStatus hook_failed(const Error& error);
  // What Python sees of how a step ended: one table (nothing, a warning when
  // the re-warmup policy forgave it, or the kind's exception).
  TorchStatus report_end(const StepEnd& end, Session::EndedBy by);
  // Tells the runtime the current op is recomputable, when begin_op said so.
  TorchStatus mark_if_recomputable();
  // Brings every tracked storage back, aborts the runtime step, hands the
  // memory back to PyTorch and switches to passthrough.
  void stop_tracking();
  TorchStatus check_lost(std::string_view name, std::span<c10::StorageImpl* const> inputs) const;
  TorchStatus check_lost_at_end();
  // The session's RecomputeFn: runs the recorded call of call.source_op().
  Status recompute(RecomputeCall& call);
  TorchError divergence_error(const Error& error) const;

  TorchSessionOptions options_;
  ComputeStreamFn stream_fn_;
  std::optional<c10::Device> device_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<StorageRegistry> registry_;
  std::unique_ptr<Session> session_;

  StepMode mode_ = StepMode::kIdle;
  bool in_runtime_step_ = false;
  bool program_tag_sent_ = false;  // send_program_tag ran in this runtime step
  bool in_op_ = false;
  // The current op is a collective (Note [Collective buffers] in torch_session.cc).
  bool collective_op_ = false;
  Recomputable op_recomputable_ = Recomputable::kNo;  // the current op's
  // Ops of this step run before the device was known (none of them touched a
  // tracked storage; the last may still be running), re-fed to the runtime
  // once it is, as every step is re-fed: through the step log.
  StepLog early_ops_;
  std::vector<c10::StorageImpl*> op_inputs_;  // all argument storages of the current op
  std::vector<StorageId> input_ids_;
  std::vector<StorageId> written_ids_;
  std::vector<OpOutput> outputs_;
  std::vector<StorageId> dead_;
  // Recorded calls of the ops the plan re-runs, by traced op index; each is
  // dropped after its last recompute of the step (or when the step ends).
  std::unordered_map<OpIndex, std::unique_ptr<OpCall>> calls_;
  std::vector<c10::StorageImpl*> call_arguments_;
  std::int64_t fail_recompute_in_ = 0;

  // Note [Lost storages]. A replay releases a storage after its last traced
  // use even while Python still holds it (the plan's memory counts on that);
  // nothing reads it again in a step that matches the trace. When a step stops
  // matching, such storages cannot be brought back: they get fresh memory (no
  // tensor is left without any) and are remembered here until the step ends,
  // so an op reading one, or the step ending while one is still held, is a
  // DivergenceError instead of silently wrong data.
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> lost_;
  std::unordered_set<const c10::StorageImpl*> lost_impls_;

  bool last_step_passthrough_ = false;
  std::int64_t steps_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace hyperoffload::python
