// hyperoffload._C: the binding between the Python layer (hyperoffload/*.py)
// and TorchSession. A step's ops reach the Runtime through the dispatcher
// fallback (interception.h, Note [Op interception]) or, where that is not
// available, through the session's TorchDispatchMode, which hands over the
// op's arguments and results as Python objects; either way finding their
// tensors and storages happens here, in C++. Errors become the exception
// classes of hyperoffload.errors — the only place where the library's error
// values turn into exceptions.
#include <ATen/core/LegacyTypeDispatch.h>
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "hyperoffload/io/file.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/report/plan_summary.h"
#include "interception.h"
#include "rng_replay.h"
#include "torch_session.h"

namespace py = pybind11;

namespace hyperoffload::python {
namespace {

// The exception class for an error kind, from hyperoffload.errors.
py::handle error_class(ErrorKind kind) {
  static PyObject* classes[5] = {};
  const auto index = static_cast<std::size_t>(kind);
  if (classes[index] == nullptr) {
    if (kind == ErrorKind::kInvalidConfig) {
      classes[index] = PyExc_ValueError;
    } else {
      static const char* names[] = {"HyperoffloadError", "DivergenceError", "BudgetError", "DeviceMismatchError"};
      py::object cls = py::module_::import("hyperoffload.errors").attr(names[index]);
      classes[index] = cls.release().ptr();  // kept for the interpreter's lifetime
    }
  }
  return classes[index];
}

[[noreturn]] void raise(const TorchError& error) {
  PyErr_SetString(error_class(error.kind).ptr(), error.message.c_str());
  throw py::error_already_set();
}

// The same from inside the dispatcher (the fallback, on any thread, usually
// without the GIL): PyTorch's bindings and its autograd engine carry a
// python_error through and re-raise the Python exception it holds.
[[noreturn]] void raise_in_dispatcher(const TorchError& error) {
  py::gil_scoped_acquire gil;
  PyErr_SetString(error_class(error.kind).ptr(), error.message.c_str());
  python_error pending;
  pending.persist();
  throw std::move(pending);
}

void check(const TorchStatus& status) {
  if (!status) raise(status.error());
}

void check(const Status& status) {
  if (!status) raise(TorchError{ErrorKind::kRuntime, status.error().message});
}

template <class T>
T check(Result<T> result) {
  if (!result) raise(TorchError{ErrorKind::kRuntime, result.error().message});
  return std::move(*result);
}

// An op's identity and its in-place arguments, built once per operator.
struct OpInfo {
  std::string name;
  // Schema arguments the op writes (alias_info.is_write): position, name.
  std::vector<std::pair<std::size_t, std::string>> written;
  // A skip_offload region: any tracked input may be written.
  bool all_written = false;
  // Re-running the op on the same inputs gives the same results bit for bit
  // (recomputable_op below): the warmup's trace marks it `recomputable`;
  // kWithRngReplay when that needs its generator's state (Note [RNG replay]).
  Recomputable recomputable = Recomputable::kNo;
  // A batch norm (writes_undeclared): the position of its `training` flag and
  // of its running statistics; -1 and none for other ops. Note [Batch norm
  // re-runs].
  int training_argument = -1;
  std::vector<std::size_t> running_stats;
  // The schema's argument and result counts (the boxed form's stack slots).
  std::size_t arguments = 0;
  std::size_t returns = 0;
};

// An operator's OpInfo: its overload name ("aten::add_.Tensor") and the
// arguments its schema declares written (add_, relu_, out=).
// Ops that return memory they never wrote (uninitialised): re-running one gives
// other bytes, so none is recomputable whatever its schema says.
bool returns_uninitialised_memory(const std::string& name) {
  static const std::unordered_set<std::string> names = {
      "aten::empty",          "aten::empty_like", "aten::empty_strided", "aten::new_empty",
      "aten::new_empty_strided", "aten::empty_permuted", "aten::resize_", "aten::set_"};
  return names.contains(name);
}

// Whether an in-place op may be re-run after the op that made what it
// rewrites (Note [In-place units] in ir/trace.h): it writes the data of one
// tensor argument (add_, relu_, masked_fill_, an out= argument), not its
// metadata (`inplace_view`: t_, unsqueeze_, as_strided_), and draws no random
// numbers (bernoulli_ is left to the RNG replay of out-of-place ops). The
// warmup keeps the mark only where the op rewrote one storage that it read
// and whose version a recomputable op made (exec/warmup_executor.cc).
Recomputable in_place_follower(const c10::OperatorHandle& op, const OpInfo& info) {
  if (info.written.size() != 1 || op.hasTag(at::Tag::inplace_view) || op.hasTag(at::Tag::nondeterministic_seeded)) {
    return Recomputable::kNo;
  }
  const c10::Argument& written = op.schema().arguments()[info.written.front().first];
  return written.type()->kind() == c10::TypeKind::TensorType ? Recomputable::kYes : Recomputable::kNo;
}

// Whether re-running the op on the same inputs regenerates its results bit for
// bit, from its schema and tags: an aten op (another namespace may have side
// effects its schema does not show) that writes no argument and is not
// mutable, may not vary bit-wise from run to run (`nondeterministic_bitwise`:
// atomics on CUDA), returns no uninitialised memory, and returns at least one
// fresh tensor (a result aliasing no argument). One that draws random numbers
// (`nondeterministic_seeded`: native_dropout, bernoulli, rand_like, randn) does
// so when re-run with its generator's state: kWithRngReplay (Note [RNG
// replay]). In-place ones are recomputable as followers (in_place_follower);
// random in-place ones (bernoulli_, the CPU dropout's mask) are not. The
// warmup keeps the mark only where the op produced a tracked storage and
// wrote no input, or is a follower there (exec/hooks.h, mark_recomputable).
Recomputable recomputable_op(const c10::OperatorHandle& op, const OpInfo& info) {
  const c10::FunctionSchema& schema = op.schema();
  // hyperoffload::dropout_noise: the CPU dropout's mask (Note [Dropout on the CPU] in dropout.cc).
  const bool ours = schema.name() == "hyperoffload::dropout_noise";
  if (!(schema.name().starts_with("aten::") || ours) || returns_uninitialised_memory(schema.name()) ||
      op.hasTag(at::Tag::nondeterministic_bitwise)) {
    return Recomputable::kNo;
  }
  if (!info.written.empty() || schema.is_mutable()) return in_place_follower(op, info);
  const Recomputable how =
      op.hasTag(at::Tag::nondeterministic_seeded) ? Recomputable::kWithRngReplay : Recomputable::kYes;
  for (const c10::Argument& result : schema.returns()) {
    if (result.alias_info() == nullptr && result.type()->kind() == c10::TypeKind::TensorType) return how;
  }
  return Recomputable::kNo;
}

// Note [Batch norm re-runs]. The batch norms that train write their running
// statistics in place (running_mean.mul_(1 - momentum).add_(...)) under
// schemas that declare no write: `native_batch_norm(..., Tensor? running_mean,
// Tensor? running_var, bool training, ...)`, and the cuDNN and MIOpen ones
// alike (writes_undeclared). Taken at their schema's word, a re-run updated
// the statistics a second time (a ResNet's running_mean then differed from
// eager's). So their running statistics count as written, and a call that
// trains is recorded with them left out (None): training, the results depend
// only on the batch, the weight and the bias, so the re-run regenerates them
// bit for bit and updates nothing. A call in eval mode reads the statistics
// and is not recomputable (recomputable_call): a later training call could
// update them below autograd, where no version counter tells.
bool writes_undeclared(const c10::FunctionSchema& schema, const c10::Argument& argument) {
  static const std::unordered_set<std::string> batch_norms = {"aten::native_batch_norm", "aten::cudnn_batch_norm",
                                                              "aten::miopen_batch_norm"};
  return batch_norms.contains(schema.name()) &&
         (argument.name() == "running_mean" || argument.name() == "running_var");
}

// Whether this call of the op is recomputable (Note [Batch norm re-runs]): a
// batch norm only when it trains.
Recomputable recomputable_call(const OpInfo& info, bool training) {
  return info.training_argument < 0 || training ? info.recomputable : Recomputable::kNo;
}

// The arguments a recorded call passes as None on a re-run: a training batch
// norm's running statistics (Note [Batch norm re-runs]); none otherwise.
std::span<const std::size_t> left_out(const OpInfo& info, bool training) {
  return training ? std::span<const std::size_t>(info.running_stats) : std::span<const std::size_t>{};
}

OpInfo op_info_of(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  OpInfo info;
  info.name = schema.overload_name().empty() ? schema.name() : schema.name() + "." + schema.overload_name();
  const std::vector<c10::Argument>& arguments = schema.arguments();
  for (std::size_t index = 0; index < arguments.size(); ++index) {
    const c10::AliasInfo* alias = arguments[index].alias_info();
    if (alias != nullptr && alias->isWrite()) info.written.emplace_back(index, arguments[index].name());
  }
  info.arguments = arguments.size();
  info.returns = schema.returns().size();
  // From the declared writes: a training batch norm's undeclared ones are
  // left out of its re-runs (Note [Batch norm re-runs]).
  info.recomputable = recomputable_op(op, info);
  for (std::size_t index = 0; index < arguments.size(); ++index) {
    if (writes_undeclared(schema, arguments[index])) {
      info.written.emplace_back(index, arguments[index].name());
      info.running_stats.push_back(index);
    }
    if (arguments[index].name() == "training") info.training_argument = static_cast<int>(index);
  }
  if (info.running_stats.empty()) info.training_argument = -1;
  return info;
}

// Calls visit(tensor) for a defined tensor argument with storage, or for each
// such tensor in a list argument (Tensor[], Tensor?[]).
template <class Visit>
void for_each_tensor_with_storage(PyObject* object, Visit visit) {
  auto add = [&visit](PyObject* item) {
    if (!THPVariable_Check(item)) return;
    const at::Tensor& tensor = THPVariable_Unpack(item);
    if (tensor.defined() && tensor.has_storage()) visit(tensor);
  };
  if (THPVariable_Check(object)) {
    add(object);
  } else if (PyList_Check(object) || PyTuple_Check(object)) {
    const Py_ssize_t size = PySequence_Fast_GET_SIZE(object);
    PyObject** items = PySequence_Fast_ITEMS(object);
    for (Py_ssize_t i = 0; i < size; ++i) add(items[i]);
  }
}

// Appends the storage of each tensor in an argument (borrowed: the argument
// keeps it alive for the op).
void collect_py_storages(PyObject* object, std::vector<c10::StorageImpl*>& out) {
  for_each_tensor_with_storage(object,
                               [&out](const at::Tensor& t) { out.push_back(t.storage().unsafeGetStorageImpl()); });
}

// Appends the storage of each tensor in an op's result (owned references).
void collect_py_results(PyObject* object, std::vector<c10::Storage>& out) {
  for_each_tensor_with_storage(object, [&out](const at::Tensor& t) { out.push_back(t.storage()); });
}

// The version counter of each tensor argument, so a recompute can tell that
// one was written in place since (Note [Recompute in PyTorch]).
struct ArgumentVersions {
  std::vector<std::pair<at::Tensor, std::uint32_t>> tensors;  // (tensor, version) for those with a counter

  void add(const at::Tensor& tensor) {
    if (tensor.defined() && !tensor.is_inference()) tensors.emplace_back(tensor, tensor._version());
  }
  // `exempt`: storages whose tensors may have moved (OpCall::changed_argument).
  std::string changed(std::string_view op, const StorageFilter& exempt) const {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto& [tensor, version] = tensors[i];
      if (exempt && tensor.has_storage() && exempt(tensor.storage().unsafeGetStorageImpl())) continue;
      if (tensor._version() != version) {
        return fmt::format("tensor argument {} of {} was written in place (version {} → {})", i, op, version,
                           tensor._version());
      }
    }
    return {};
  }
};

// The C++ fallback's recorded call: the operator, its dispatch keys and its
// boxed arguments (IValues hold their tensors).
class BoxedCall final : public OpCall {
 public:
  // Precondition: the op has not run yet (its generator's state is saved
  // now when `how` is kWithRngReplay).
  // `left_out`: argument positions passed as None on a re-run (a training
  // batch norm's running statistics: Note [Batch norm re-runs]).
  BoxedCall(const c10::OperatorHandle& op, c10::DispatchKeySet keys, c10::ArrayRef<c10::IValue> arguments,
            std::size_t returns, std::string name, Recomputable how, std::span<const std::size_t> left_out)
      : op_(op), keys_(keys), arguments_(arguments.begin(), arguments.end()), returns_(returns),
        name_(std::move(name)) {
    for (std::size_t position : left_out) arguments_[position] = c10::IValue();
    std::optional<at::Generator> generator;
    std::vector<c10::Device> devices;
    for (const c10::IValue& value : arguments_) {
      if (value.isTensor()) {
        versions_.add(value.toTensor());
        if (value.toTensor().defined()) devices.push_back(value.toTensor().device());
      } else if (value.isList()) {
        for (const c10::IValue& item : value.toListRef()) {
          if (item.isTensor()) versions_.add(item.toTensor());
          if (item.isTensor() && item.toTensor().defined()) devices.push_back(item.toTensor().device());
        }
      } else if (value.isGenerator()) {
        generator = value.toGenerator();
      } else if (value.isDevice()) {
        devices.push_back(value.toDevice());
      }
    }
    if (how == Recomputable::kWithRngReplay) generators_ = SavedGenerators(generator, devices);
  }
  std::vector<c10::Storage> run() override {
    SavedGenerators::Scope replay(generators_);  // Note [RNG replay]
    // Below autograd, as when the op first ran inside the dispatcher: a
    // regeneration also runs from outside any op (Note [Leaving a plan]).
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    torch::jit::Stack stack(arguments_.begin(), arguments_.end());
    run_below(op_, keys_, &stack);
    std::vector<c10::Storage> results;
    python::collect_results(torch::jit::last(stack, returns_), results);
    return results;
  }
  void argument_storages(std::vector<c10::StorageImpl*>& out) const override {
    python::collect_storages(c10::ArrayRef<c10::IValue>(arguments_), out);
  }
  std::string changed_argument(const StorageFilter& exempt) const override {
    return versions_.changed(name_, exempt);
  }

 private:
  c10::OperatorHandle op_;
  c10::DispatchKeySet keys_;
  std::vector<c10::IValue> arguments_;
  std::size_t returns_;
  std::string name_;
  ArgumentVersions versions_;
  SavedGenerators generators_;
};

// The TorchDispatchMode path's recorded call: the OpOverload and its Python
// arguments. Run inside __torch_dispatch__ (where the mode is off), under the GIL.
class PyCall final : public OpCall {
 public:
  // Precondition: as BoxedCall's.
  // `left_out`: as BoxedCall's, by position or by name.
  PyCall(py::handle func, py::handle args, py::handle kwargs, const OpInfo& info, Recomputable how,
         std::span<const std::size_t> left_out)
      : func_(py::reinterpret_borrow<py::object>(func)),
        args_(py::reinterpret_borrow<py::object>(args)),
        kwargs_(py::reinterpret_borrow<py::object>(kwargs)),
        name_(info.name) {
    if (!left_out.empty()) leave_out(info, left_out);
    std::optional<at::Generator> generator;
    std::vector<c10::Device> devices;
    for_each_argument([&](PyObject* object) {
      for_each_tensor_with_storage(object, [&](const at::Tensor& t) {
        versions_.add(t);
        devices.push_back(t.device());
      });
      if (THPGenerator_Check(object)) generator = reinterpret_cast<THPGenerator*>(object)->cdata;
      if (THPDevice_Check(object)) devices.push_back(reinterpret_cast<THPDevice*>(object)->device);
    });
    if (how == Recomputable::kWithRngReplay) generators_ = SavedGenerators(generator, devices);
  }
  ~PyCall() override {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) {
      // Taking the GIL now would end this thread (or abort the process):
      // the objects are left to the interpreter's teardown.
      (void)func_.release();
      (void)args_.release();
      (void)kwargs_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    func_ = py::object();
    args_ = py::object();
    kwargs_ = py::object();
  }
  std::vector<c10::Storage> run() override {
    py::gil_scoped_acquire gil;
    SavedGenerators::Scope replay(generators_);  // Note [RNG replay]
    // Below autograd, as the TorchDispatchMode saw it first (Note [Leaving a plan]).
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    PyObject* out = PyObject_Call(func_.ptr(), args_.ptr(), kwargs_.is_none() ? nullptr : kwargs_.ptr());
    if (out == nullptr) throw py::error_already_set();
    py::object result = py::reinterpret_steal<py::object>(out);
    std::vector<c10::Storage> results;
    collect_py_results(result.ptr(), results);
    return results;
  }
  void argument_storages(std::vector<c10::StorageImpl*>& out) const override {
    py::gil_scoped_acquire gil;
    for_each_argument([&out](PyObject* object) { collect_py_storages(object, out); });
  }
  std::string changed_argument(const StorageFilter& exempt) const override {
    return versions_.changed(name_, exempt);
  }

 private:
  // The recorded arguments with those at `positions` (by position, or by
  // name among the op's written arguments) replaced by None (Note [Batch
  // norm re-runs]).
  void leave_out(const OpInfo& info, std::span<const std::size_t> positions) {
    py::tuple args(PyTuple_GET_SIZE(args_.ptr()));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args_.ptr()); ++i) {
      const bool out = std::find(positions.begin(), positions.end(), static_cast<std::size_t>(i)) != positions.end();
      args[static_cast<std::size_t>(i)] = out ? py::none() : py::reinterpret_borrow<py::object>(
                                                                  PyTuple_GET_ITEM(args_.ptr(), i));
    }
    args_ = std::move(args);
    if (kwargs_.is_none()) return;
    py::dict kwargs = py::reinterpret_borrow<py::dict>(kwargs_).attr("copy")();
    for (const auto& [index, name] : info.written) {
      const bool out = std::find(positions.begin(), positions.end(), index) != positions.end();
      if (out && kwargs.contains(name)) kwargs[py::str(name)] = py::none();
    }
    kwargs_ = std::move(kwargs);
  }
  // Calls visit(object) for each positional argument, then each keyword
  // argument's value. Precondition: the GIL is held.
  template <class Visit>
  void for_each_argument(Visit visit) const {
    const Py_ssize_t count = PyTuple_GET_SIZE(args_.ptr());
    for (Py_ssize_t i = 0; i < count; ++i) visit(PyTuple_GET_ITEM(args_.ptr(), i));
    if (kwargs_.is_none()) return;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t position = 0;
    while (PyDict_Next(kwargs_.ptr(), &position, &key, &value)) visit(value);
  }

  py::object func_;
  py::object args_;
  py::object kwargs_;
  std::string name_;
  ArgumentVersions versions_;
  SavedGenerators generators_;
};

py::dict stats_dict(const TorchSession& torch_session) {
  py::dict stats;
  const Session* session = torch_session.session();
  // A step finished without offloading (passthrough) has no runtime stats.
  const bool ran = session != nullptr && session->steps_completed() > 0 && !torch_session.last_step_passthrough();
  const StepStats empty;
  const StepStats& s = ran ? session->last_step_stats() : empty;
  stats["kind"] = ran ? py::object(py::str(to_string(s.kind))) : py::object(py::none());
  stats["passthrough"] = torch_session.last_step_passthrough();
  stats["plan_fingerprint"] = session != nullptr && session->schedule() != nullptr
                                  ? py::object(py::str(session->plan_fingerprint()))
                                  : py::object(py::none());
  stats["steps"] = torch_session.steps();
  stats["ops"] = s.ops;
  stats["peak_resident_bytes"] = s.peak_resident_bytes;
  stats["peak_held_bytes"] = s.peak_held_bytes;
  stats["memory_wait_ms"] = s.memory_wait_ms;
  stats["over_budget_allocations"] = s.over_budget_allocations;
  stats["resident_at_end_bytes"] = s.resident_at_end_bytes;
  stats["peak_host_bytes"] = s.peak_host_bytes;
  stats["offloaded_bytes"] = s.d2h_bytes;
  stats["d2h_count"] = s.d2h_count;
  stats["d2h_bytes"] = s.d2h_bytes;
  stats["h2d_count"] = s.h2d_count;
  stats["h2d_bytes"] = s.h2d_bytes;
  stats["faults"] = s.faults;
  stats["fault_bytes"] = s.fault_bytes;
  stats["evictions"] = s.evictions;
  stats["host_full_kept_storages"] = s.host_full_kept_storages;
  if (session != nullptr) {
    // The pinned pool after the step: bytes held from the backend (in use,
    // awaiting copies and cached for reuse, in size-class bytes) and the most
    // handed out at once.
    const PinnedPoolStats pool = session->host_pool().stats();
    stats["host_pool_reserved_bytes"] = pool.reserved_bytes;
    stats["host_pool_peak_bytes"] = pool.peak_bytes;
  }
  stats["end_restores"] = s.end_restores;
  stats["recompute_count"] = s.recompute_count;
  stats["recompute_ms"] = s.recompute_ms;
  stats["recomputed_bytes"] = s.regenerated_bytes;
  stats["step_ms"] = s.step_ms;
  // The plan cache (exec/session.h, Note [Plan per step program]).
  const PlanCacheStats cache = session != nullptr ? session->plan_cache_stats() : PlanCacheStats{};
  stats["plans_cached"] = cache.plans_cached;
  stats["plan_hits"] = cache.hits;
  stats["plan_misses"] = cache.misses;
  stats["warmups"] = cache.warmups;
  stats["plan_switches"] = cache.switches;
  stats["plan_evictions"] = cache.evictions;
  const auto& budget = torch_session.options().session.budget_bytes;
  stats["budget_bytes"] = budget ? py::object(py::int_(*budget)) : py::object(py::none());
  std::optional<c10::Device> device = torch_session.device();
  stats["device"] = device ? py::object(py::str(device->str())) : py::object(py::none());
  return stats;
}

class Runtime final : public OpHandler {
 public:
  // `options` is OffloadConfig's, bound field by field (SessionOptions below):
  // the one options struct from Python to the runtime session.
  Runtime(TorchSessionOptions options, py::object compute_stream) {
    TorchSession::ComputeStreamFn stream_fn;
    if (!compute_stream.is_none()) {
      stream_fn = [compute_stream](c10::Device d) -> Result<std::uintptr_t> {
        py::gil_scoped_acquire gil;
        try {
          return compute_stream(d.str()).cast<std::uintptr_t>();
        } catch (const std::exception& error) {
          return make_error(ErrorCode::kInternal,
                            std::string("asking PyTorch for the compute stream of ") + d.str() + ": " + error.what());
        }
      };
    }
    TorchResult<std::unique_ptr<TorchSession>> session = TorchSession::create(std::move(options), std::move(stream_fn));
    if (!session) raise(session.error());
    session_ = std::move(*session);
  }
  ~Runtime() { detach(); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  void begin_step() { check(session_->begin_step()); }
  void end_step() { check(session_->end_step()); }
  void abort_step() { session_->abort_step(); }
  bool tracking() const { return session_->tracking(); }

  // Starts intercepting this thread's ops through the dispatcher fallback
  // (Note [Op interception]); false where it is not available, and the
  // session's TorchDispatchMode intercepts instead.
  bool attach() {
    if (!attached_) attached_ = python::attach(*this);
    return attached_;
  }
  void detach() {
    if (attached_) python::detach(*this);
    attached_ = false;
  }
  bool intercepting() const { return attached_; }

  // The fallback's path: the boxed counterpart of dispatch() below.
  void handle(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) override {
    if (!session_->intercepts()) {
      run_below(op, keys, stack);
      return;
    }
    const OpInfo& info = op_info(op);
    const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, info.arguments);
    inputs_.clear();
    written_.clear();
    python::collect_storages(args, inputs_);
    for (const auto& [index, name] : info.written) python::collect_storages(args[index], written_);
    const bool training = info.training_argument >= 0 && args[info.training_argument].isBool() &&
                          args[info.training_argument].toBool();
    const Recomputable how = recomputable_call(info, training);
    if (TorchStatus begun = session_->begin_op(info.name, inputs_, written_, how); !begun) {
      raise_in_dispatcher(begun.error());
    }
    if (session_->wants_call()) {
      session_->record_call(std::make_unique<BoxedCall>(op, keys, args, info.returns, info.name, how,
                                                        left_out(info, training)));
    }
    try {
      run_below(op, keys, stack);
    } catch (...) {
      session_->op_failed();
      throw;
    }
    outputs_.clear();
    python::collect_results(torch::jit::last(*stack, info.returns), outputs_);
    const TorchStatus ended = session_->end_op(outputs_);
    outputs_.clear();
    if (!ended) raise_in_dispatcher(ended.error());
  }

  // Whether a call trains (Note [Batch norm re-runs]): its `training`
  // argument, by position or by name.
  static bool py_training(const OpInfo& info, py::handle args, py::handle kwargs) {
    if (info.training_argument < 0) return false;
    PyObject* value = nullptr;
    if (PyTuple_Check(args.ptr()) && info.training_argument < PyTuple_GET_SIZE(args.ptr())) {
      value = PyTuple_GET_ITEM(args.ptr(), info.training_argument);
    } else if (kwargs.ptr() != nullptr && PyDict_Check(kwargs.ptr())) {
      value = PyDict_GetItemString(kwargs.ptr(), "training");
    }
    return value != nullptr && PyObject_IsTrue(value) == 1;
  }

  void begin(const OpInfo& info, py::handle args, py::handle kwargs) {
    const bool training = py_training(info, args, kwargs);
    begin_call(info, args, kwargs, recomputable_call(info, training));
  }

  // `how`: recomputable_call(info, training), computed once by the caller.
  void begin_call(const OpInfo& info, py::handle args, py::handle kwargs, Recomputable how) {
    if (!session_->intercepts()) return;
    inputs_.clear();
    written_.clear();
    PyObject* arg_tuple = args.ptr();
    const bool is_tuple = PyTuple_Check(arg_tuple);
    const Py_ssize_t count = is_tuple ? PyTuple_GET_SIZE(arg_tuple) : 0;
    for (Py_ssize_t i = 0; i < count; ++i) collect_py_storages(PyTuple_GET_ITEM(arg_tuple, i), inputs_);
    PyObject* kwarg_dict = kwargs.ptr();
    const bool has_kwargs = kwarg_dict != nullptr && PyDict_Check(kwarg_dict) && PyDict_Size(kwarg_dict) > 0;
    if (has_kwargs) {
      PyObject* key = nullptr;
      PyObject* value = nullptr;
      Py_ssize_t position = 0;
      while (PyDict_Next(kwarg_dict, &position, &key, &value)) collect_py_storages(value, inputs_);
    }
    if (info.all_written) {
      written_ = inputs_;
    } else {
      for (const auto& [index, name] : info.written) {
        if (static_cast<Py_ssize_t>(index) < count) {
          collect_py_storages(PyTuple_GET_ITEM(arg_tuple, static_cast<Py_ssize_t>(index)), written_);
        } else if (has_kwargs) {
          if (PyObject* value = PyDict_GetItemString(kwarg_dict, name.c_str())) collect_py_storages(value, written_);
        }
      }
    }
    check(session_->begin_op(info.name, inputs_, written_, how));
  }

  void end(py::handle out) {
    if (!session_->tracking()) return;
    outputs_.clear();
    collect_py_results(out.ptr(), outputs_);
    const TorchStatus ended = session_->end_op(outputs_);
    outputs_.clear();
    check(ended);
  }

  void op_failed() { session_->op_failed(); }

  // A TorchDispatchMode's __torch_dispatch__(self, func, types, args, kwargs),
  // whole in C++, for steps that cannot use the fallback: the session's mode
  // binds it to itself as an instance attribute (PyTorch wants a plain
  // method), so PyTorch calls it with no Python frame of ours in between.
  // Reports the op around running it; an op that raises ends offloading for
  // the step (TorchSession::op_failed) and the error propagates.
  py::object dispatch(py::handle /*mode*/, py::handle func, py::handle /*types*/, py::handle args,
                      py::handle kwargs) {
    PyObject* kwarg_dict = kwargs.is_none() ? nullptr : kwargs.ptr();
    PyObject* arg_tuple = args.ptr();
    py::tuple empty;
    if (!PyTuple_Check(arg_tuple)) {
      empty = py::reinterpret_steal<py::tuple>(PySequence_Tuple(arg_tuple));  // PyTorch passes a tuple
      if (!empty) throw py::error_already_set();
      arg_tuple = empty.ptr();
    }
    if (!session_->intercepts()) return call(func, arg_tuple, kwarg_dict);
    const OpInfo& info = op_info(func);
    const py::handle kwarg_handle = kwarg_dict != nullptr ? py::handle(kwarg_dict) : py::handle(Py_None);
    const bool training = py_training(info, py::handle(arg_tuple), kwarg_handle);
    const Recomputable how = recomputable_call(info, training);
    begin_call(info, py::handle(arg_tuple), kwarg_handle, how);
    if (session_->wants_call()) {
      session_->record_call(std::make_unique<PyCall>(func, py::handle(arg_tuple), kwarg_handle, info, how,
                                                     left_out(info, training)));
    }
    PyObject* out = PyObject_Call(func.ptr(), arg_tuple, kwarg_dict);
    if (out == nullptr) {
      session_->op_failed();
      throw py::error_already_set();
    }
    py::object result = py::reinterpret_steal<py::object>(out);
    end(result);
    return result;
  }

  py::object trace_json() const {
    const Session* session = session_->session();
    if (session == nullptr || session->trace() == nullptr) return py::none();
    return py::str(trace_to_json(*session->trace()));
  }
  py::object schedule_json() const {
    const Session* session = session_->session();
    if (session == nullptr || session->schedule() == nullptr) return py::none();
    return py::str(schedule_to_json(*session->schedule()));
  }
  py::object unplanned_peak_bytes() const {
    const Session* session = session_->session();
    if (session == nullptr || session->trace() == nullptr) return py::none();
    return py::int_(unplanned_peak(*session->trace()).bytes);
  }
  py::object floor_bytes() const {
    const Session* session = session_->session();
    if (session == nullptr || !session->floor()) return py::none();
    return py::int_(session->floor()->bytes);
  }
  py::object next_step_kind() const {
    const Session* session = session_->session();
    if (session == nullptr) return py::str("warmup");
    return py::str(to_string(session->next_step_kind()));
  }
  py::object device() const {
    std::optional<c10::Device> device = session_->device();
    if (!device) return py::none();
    return py::str(device->str());
  }
  std::vector<std::string> notes() const {
    const Session* session = session_->session();
    if (session == nullptr) return {};
    return session->notes();
  }
  py::dict stats() const { return stats_dict(*session_); }

  // What the last warmup decided, for OffloadSession.summary(): the plan's
  // numbers and its simulated cost on the warmup's measured op times and copy
  // bandwidths (report/plan_summary.h, as `hyperoffload plan` prints them, on
  // the session's device and copy engines). None before a plan.
  py::object plan_summary() const {
    const Session* session = session_->session();
    if (session == nullptr || session->schedule() == nullptr) return py::none();
    const Trace& trace = *session->trace();
    const Schedule& schedule = *session->schedule();
    // The target the plan was made for, whole (host budget included).
    const StepTarget& target = session->target();
    const auto& budget = target.budget_bytes;
    const PlanSummary plan = summarize_plan(trace, schedule, session->floor(),
                                            {.budget_bytes = budget,
                                             .device_memory = target.device_memory,
                                             .copy_engines = target.copy_engines,
                                             .record_timeline = RecordTimeline::kNo,
                                             .host_budget_bytes = target.host_budget_bytes});
    const SimulationResult& simulated = plan.simulation;
    py::dict summary;
    summary["planner"] = plan.planner;
    summary["ops"] = plan.op_count;
    summary["storages"] = plan.storage_count;
    summary["budget_bytes"] = budget ? py::object(py::int_(*budget)) : py::object(py::none());
    summary["host_budget_bytes"] =
        target.host_budget_bytes ? py::object(py::int_(*target.host_budget_bytes)) : py::object(py::none());
    summary["floor_bytes"] = plan.floor ? py::object(py::int_(plan.floor->bytes)) : py::object(py::none());
    summary["unplanned_peak_bytes"] = plan.unplanned.bytes;
    summary["planned_peak_bytes"] = plan.op_peak_bytes();
    summary["planned_timed_peak_bytes"] = simulated.peak_bytes_timed;  // on the device that holds only the budget
    summary["offloaded_bytes"] = simulated.d2h_bytes;
    summary["offload_count"] = simulated.d2h_count;
    summary["recomputed_bytes"] = simulated.validation.regenerated_bytes;
    summary["recompute_count"] = simulated.recompute_count;
    summary["recompute_ms"] = simulated.recompute_ms;
    summary["compute_ms"] = simulated.compute_ms;
    summary["stall_ms"] = simulated.stall_ms;
    summary["overhead_percent"] = simulated.overhead_percent();
    py::list notes;
    for (const std::string& note : session->notes()) notes.append(note);
    summary["notes"] = notes;
    return summary;
  }
  // The last replayed step's timeline (record_timeline=True), in the
  // simulator's schema (ir/timeline.h), or None.
  py::object last_timeline() const {
    const Session* session = session_->session();
    if (session == nullptr || session_->options().session.record_timeline != RecordTimeline::kYes ||
        session->last_timeline().spans.empty()) {
      return py::none();
    }
    static constexpr const char* kKinds[] = {"op", "stall", "fault", "copy_d2h", "copy_h2d", "recompute"};
    static constexpr const char* kLanes[] = {"compute", "copy0", "copy1"};
    const Timeline& timeline = session->last_timeline();
    py::list spans;
    for (const TimelineSpan& span : timeline.spans) {
      py::dict entry;
      entry["kind"] = kKinds[static_cast<int>(span.kind)];
      entry["lane"] = kLanes[static_cast<int>(span.lane)];
      entry["op"] = span.op;
      entry["storage"] = span.storage;
      entry["bytes"] = span.bytes;
      entry["start_ms"] = span.start_ms;
      entry["end_ms"] = span.end_ms;
      spans.append(entry);
    }
    py::list memory;
    for (const MemorySample& sample : timeline.memory) memory.append(py::make_tuple(sample.time_ms, sample.device_bytes));
    py::dict result;
    result["spans"] = spans;
    result["memory"] = memory;
    result["budget_bytes"] = timeline.budget_bytes;
    return result;
  }
  std::vector<std::string> take_warnings() { return session_->take_warnings(); }
  void fail_recompute_after(std::int64_t n) { session_->fail_recompute_after(n); }
  std::size_t tracked_storages() const { return session_->tracked_storages(); }

 private:
  static py::object call(py::handle func, PyObject* args, PyObject* kwargs) {
    PyObject* out = PyObject_Call(func.ptr(), args, kwargs);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  }

  // The OpInfo of an operator, the first time this runtime sees it.
  const OpInfo& op_info(const c10::OperatorHandle& op) {
    auto found = op_infos_.find(op);
    if (found != op_infos_.end()) return found->second;
    return op_infos_.emplace(op, op_info_of(op)).first->second;
  }

  // The same for an OpOverload (the TorchDispatchMode's path), found in the
  // dispatcher by its schema's name (OpOverloads live as long as the
  // interpreter; the map holds a reference anyway).
  const OpInfo& op_info(py::handle func) {
    auto found = py_op_infos_.find(func.ptr());
    if (found != py_op_infos_.end()) return *found->second.second;
    py::object schema = func.attr("_schema");
    const c10::OperatorName name(schema.attr("name").cast<std::string>(),
                                 schema.attr("overload_name").cast<std::string>());
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema(name);
    if (!op) raise(TorchError{ErrorKind::kRuntime, "the dispatcher has no schema for op " + c10::toString(name)});
    const OpInfo* info = &op_info(*op);
    return *py_op_infos_.emplace(func.ptr(), std::make_pair(py::reinterpret_borrow<py::object>(func), info))
                .first->second.second;
  }

  std::unique_ptr<TorchSession> session_;
  bool attached_ = false;
  // unordered_map keeps its elements' addresses: py_op_infos_ points into op_infos_.
  std::unordered_map<c10::OperatorHandle, OpInfo> op_infos_;
  std::unordered_map<PyObject*, std::pair<py::object, const OpInfo*>> py_op_infos_;
  std::vector<c10::StorageImpl*> inputs_;
  std::vector<c10::StorageImpl*> written_;
  std::vector<c10::Storage> outputs_;
};

}  // namespace
}  // namespace hyperoffload::python

PYBIND11_MODULE(_C, m) {
  using hyperoffload::CopyEngines;
  using hyperoffload::RecordTimeline;
  using hyperoffload::OpTimes;
  using hyperoffload::RewarmPolicy;
  using hyperoffload::python::ErrorKind;
  using hyperoffload::python::OpInfo;
  using hyperoffload::python::raise;
  using hyperoffload::python::Runtime;
  using hyperoffload::python::TorchError;
  using hyperoffload::python::TorchSessionOptions;
  m.doc() = "hyperoffload's C++ runtime for PyTorch (see hyperoffload.OffloadSession)";

  py::class_<OpInfo>(m, "OpInfo")
      .def(py::init([](std::string name, std::vector<std::pair<std::size_t, std::string>> written, bool all_written) {
             OpInfo info;
             info.name = std::move(name);
             info.written = std::move(written);
             info.all_written = all_written;
             return info;
           }),
           py::arg("name"), py::arg("written"), py::arg("all_written") = false)
      .def_readonly("name", &OpInfo::name)
      .def_readonly("written", &OpInfo::written)
      .def_readonly("all_written", &OpInfo::all_written);

  // The session's options as one struct (python/src/torch_session.h,
  // TorchSessionOptions, around exec/session.h's SessionOptions and its
  // defaults); OffloadConfig
  // fills it (hyperoffload/session.py). Values a C++ type cannot hold are
  // ValueErrors naming the field.
  py::class_<TorchSessionOptions>(m, "SessionOptions")
      .def(py::init<>())
      .def_property(
          "budget_bytes", [](const TorchSessionOptions& o) { return o.session.budget_bytes; },
          [](TorchSessionOptions& o, std::optional<std::int64_t> bytes) { o.session.budget_bytes = bytes; })
      .def_property(
          "host_capacity_bytes",
          [](const TorchSessionOptions& o) -> std::optional<std::int64_t> {
            if (o.session.host_capacity_bytes == std::numeric_limits<std::int64_t>::max()) return std::nullopt;
            return o.session.host_capacity_bytes;
          },
          [](TorchSessionOptions& o, std::optional<std::int64_t> bytes) {
            o.session.host_capacity_bytes = bytes.value_or(std::numeric_limits<std::int64_t>::max());
          })
      .def_property(
          "planner", [](const TorchSessionOptions& o) { return o.session.planner; },
          [](TorchSessionOptions& o, std::string planner) { o.session.planner = std::move(planner); })
      .def_property(
          "copy_engines", [](const TorchSessionOptions& o) { return static_cast<int>(o.copy_engines); },
          [](TorchSessionOptions& o, std::int64_t engines) {
            if (engines != 1 && engines != 2) {
              raise(TorchError{ErrorKind::kInvalidConfig, "copy_engines must be 1 or 2, got " + std::to_string(engines)});
            }
            o.copy_engines = engines == 1 ? CopyEngines::kOne : CopyEngines::kTwo;
          })
      .def_property(
          "device",
          [](const TorchSessionOptions& o) -> std::optional<std::string> {
            if (!o.device) return std::nullopt;
            return o.device->str();
          },
          [](TorchSessionOptions& o, std::optional<std::string> device) {
            if (!device) {
              o.device.reset();
              return;
            }
            try {
              o.device = c10::Device(*device);
            } catch (const std::exception& error) {
              raise(TorchError{ErrorKind::kInvalidConfig, "device \"" + *device + "\": " + error.what()});
            }
          })
      .def_property(
          "rewarm_once", [](const TorchSessionOptions& o) { return o.session.rewarm == RewarmPolicy::kOnce; },
          [](TorchSessionOptions& o, bool once) {
            o.session.rewarm = once ? RewarmPolicy::kOnce : RewarmPolicy::kNever;
          })
      .def_property(
          "max_plans", [](const TorchSessionOptions& o) { return o.session.max_plans; },
          [](TorchSessionOptions& o, std::int64_t plans) { o.session.max_plans = plans; })
      .def_property(
          "calibration_bytes", [](const TorchSessionOptions& o) { return o.session.calibration_bytes; },
          [](TorchSessionOptions& o, std::int64_t bytes) { o.session.calibration_bytes = bytes; })
      .def_property(
          "copy_bandwidth_gib_per_s", [](const TorchSessionOptions& o) { return o.session.copy_bandwidth_gib_per_s; },
          [](TorchSessionOptions& o, std::optional<double> gib_per_s) { o.session.copy_bandwidth_gib_per_s = gib_per_s; })
      .def_readwrite("emulated_copy_bandwidth_gib_per_s", &TorchSessionOptions::emulated_copy_bandwidth_gib_per_s)
      .def_property(
          "op_times",
          [](const TorchSessionOptions& o) { return std::string(o.session.op_times == OpTimes::kQuantized ? "quantized" : "measured"); },
          [](TorchSessionOptions& o, const std::string& op_times) {
            if (op_times == "quantized") {
              o.session.op_times = OpTimes::kQuantized;
            } else if (op_times == "measured") {
              o.session.op_times = OpTimes::kMeasured;
            } else {
              raise(TorchError{ErrorKind::kInvalidConfig,
                               "op_times must be \"quantized\" or \"measured\", got \"" + op_times + "\""});
            }
          })
      .def_property(
          "op_time_store",
          [](const TorchSessionOptions& o) -> std::optional<std::pair<std::string, std::string>> {
            if (!o.session.op_time_store) return std::nullopt;
            return std::make_pair(o.session.op_time_store->directory.string(), o.session.op_time_store->machine);
          },
          [](TorchSessionOptions& o, const std::optional<std::pair<std::string, std::string>>& store) {
            o.session.op_time_store.reset();
            if (store) o.session.op_time_store = hyperoffload::OpTimeStoreOptions{store->first, store->second};
          },
          "(directory, machine) of the op-time store (exec/op_time_store.h), or None")
      .def_property(
          "record_timeline",
          [](const TorchSessionOptions& o) { return o.session.record_timeline == RecordTimeline::kYes; },
          [](TorchSessionOptions& o, bool record) {
            o.session.record_timeline = record ? RecordTimeline::kYes : RecordTimeline::kNo;
          })
      .def(
          "validate",
          [](const TorchSessionOptions& o) {
            if (hyperoffload::python::TorchStatus valid = hyperoffload::python::validate(o); !valid) raise(valid.error());
          },
          "Checks the values (python/src/torch_session.h, validate): a ValueError naming the field.");

  py::class_<Runtime>(m, "Runtime")
      .def(py::init<TorchSessionOptions, py::object>(), py::arg("options"), py::arg("compute_stream"))
      .def("begin_step", &Runtime::begin_step)
      .def("end_step", &Runtime::end_step)
      .def("abort_step", &Runtime::abort_step)
      .def("begin", &Runtime::begin, py::arg("info"), py::arg("args"), py::arg("kwargs"))
      .def("end", &Runtime::end, py::arg("out"))
      .def("op_failed", &Runtime::op_failed)
      .def("attach", &Runtime::attach)
      .def("detach", &Runtime::detach)
      .def_property_readonly("intercepting", &Runtime::intercepting)
      .def("dispatch", &Runtime::dispatch, py::arg("mode"), py::arg("func"), py::arg("types"),
           py::arg("args") = py::tuple(),
           py::arg("kwargs") = py::none())
      .def_property_readonly("tracking", &Runtime::tracking)
      .def("trace_json", &Runtime::trace_json)
      .def("schedule_json", &Runtime::schedule_json)
      .def("unplanned_peak_bytes", &Runtime::unplanned_peak_bytes)
      .def("floor_bytes", &Runtime::floor_bytes)
      .def("next_step_kind", &Runtime::next_step_kind)
      .def("device", &Runtime::device)
      .def("notes", &Runtime::notes)
      .def("stats", &Runtime::stats)
      .def("plan_summary", &Runtime::plan_summary)
      .def("last_timeline", &Runtime::last_timeline)
      .def("take_warnings", &Runtime::take_warnings)
      .def("tracked_storages", &Runtime::tracked_storages)
      .def("_fail_recompute_after", &Runtime::fail_recompute_after, py::arg("n"),
           "Tests: the n-th recompute from now throws, as a failing kernel would (0 disarms).");

  m.def(
      "intercepting_runtime",
      []() -> Runtime* { return dynamic_cast<Runtime*>(hyperoffload::python::active_handler()); },
      py::return_value_policy::reference,
      "The Runtime whose dispatcher fallback intercepts this thread's ops now (attached, not excluded), or None.");
  m.def("exclude_interception", &hyperoffload::python::set_excluded, py::arg("excluded"),
        "Excludes (True) or re-enables (False) the fallback's key on this thread; returns the previous state.");
  m.def("_empty_fallback", &hyperoffload::python::enable_empty_fallback, py::arg("enabled"),
        "Benchmark probe: routes this thread's ops through the fallback with no session (False: unavailable).");
  m.def("_empty_record_function", &hyperoffload::python::enable_empty_record_function, py::arg("enabled"),
        "Benchmark probe: a thread-local RecordFunction callback that takes inputs and outputs and does nothing.");
  m.def(
      "write_file_atomically",
      [](const std::string& path, const std::string& contents) {
        hyperoffload::python::check(hyperoffload::write_file_atomically(path, contents));
      },
      py::arg("path"), py::arg("contents"),
      "Writes a file through a temporary file and a rename: never a partial file.");
  m.def(
      "planner_names",
      [] {
        std::vector<std::string> names;
        for (std::string_view name : hyperoffload::planner_names()) names.emplace_back(name);
        names.emplace_back(hyperoffload::kOptimalPlannerName);
        return names;
      },
      "Every planner name OffloadConfig.planner accepts: the heuristic planners in the order reports list them, "
      "then the MILP planner (\"optimal\", for small steps).");
  m.def(
      "defaults",
      [] {
        py::dict defaults;
        defaults["planner"] = std::string(hyperoffload::kDefaultPlannerName);
        defaults["rewarm_once"] = hyperoffload::kDefaultRewarmPolicy == hyperoffload::RewarmPolicy::kOnce;
        defaults["max_plans"] = hyperoffload::kDefaultMaxPlans;
        defaults["memory_cap"] = std::string(hyperoffload::to_string(hyperoffload::kDefaultDeviceMemory));
        defaults["calibration_bytes"] = hyperoffload::kDefaultCalibrationBytes;
        defaults["copy_engines"] = static_cast<int>(hyperoffload::kDefaultCopyEngines);
        return defaults;
      },
      "The library's defaults, each one constant in C++: OffloadConfig's fields take theirs from here.");
  m.def(
      "unplanned_peak",
      [](const std::string& trace_json) {
        hyperoffload::Trace trace = hyperoffload::python::check(hyperoffload::parse_trace_json(trace_json));
        const hyperoffload::PeakBytes peak = hyperoffload::unplanned_peak(trace);
        return std::make_pair(peak.bytes, peak.op);
      },
      py::arg("trace_json"),
      "(bytes, op) of a hyperoffload.trace document's unplanned op-granular peak: storages resident from their "
      "first to their last access, retained ones to the end.");
}
