// Interception of a step's ops in C++: a boxed dispatcher fallback.
//
// Note [Op interception]. A session must see every aten op of a step at the
// level of PyTorch's Python key: below Autograd and Autocast (so the ops are
// the decomposed aten ops, backward ops included, autocast's casts visible)
// and above BackendSelect (so factory ops such as aten::empty are seen with
// their results). A TorchDispatchMode sits there, but PyTorch's mode machinery
// (IValues to Python objects and back, the mode stack, an OpOverload call)
// costs ~40 µs per op on this project's machine (BENCHMARKS.md, "PyTorch
// integration"), above the 10 µs the project allows per replayed op.
//
// So the session registers a boxed fallback on the dispatch key just below
// Python, DispatchKey::Fake (declared for a C++ FakeTensor mode that PyTorch
// 2.13 does not implement: no kernel or fallback is registered for it, no
// tensor carries it), and enables it for the step's thread in the
// thread-local include set. PyTorch copies that set, like the dispatch-mode
// stack, into every thread that runs work on the step's behalf (the autograd
// engine's device threads, future callbacks), so those ops are seen too. The
// fallback reports the op, runs it below the key with the key excluded (ops
// that its kernels call are not seen, as a mode does not see the ops its own
// __torch_dispatch__ runs) and reports its results; a Python frame is never
// entered.
//
// It is the only free key at that level: between Autograd and BackendSelect
// every other one has a fallback of PyTorch's own (ADInplaceOrView,
// ZeroTensor, Negative, Conjugate, Functionalize,
// FuncTorchDynamicLayerBackMode, Python); a key below BackendSelect misses
// factory ops, whose BackendSelect kernel redispatches to the backend alone;
// a key above Autograd sees ops before their decomposition (aten::linear, not
// aten::t and aten::addmm).
//
// Differences from a TorchDispatchMode: every TorchDispatchMode (whenever
// entered) and every tensor subclass with __torch_dispatch__ (DTensor) sees
// an op before the session, which sees the ops those run on plain tensors;
// and PyTorch runs the program eager PyTorch runs, where under any mode its
// composite kernels and autograd pick other ops (aten::add for aten::add_,
// extra aten::detach: at::impl::dispatch_mode_enabled()).
//
// The session uses its TorchDispatchMode instead (session.py) where the
// fallback is not available: a PyTorch older than 2.13 (no such key), a key
// that something else already took, or while another session's step holds
// the fallback (one at a time per process: concurrent steps on other threads,
// a step of one session inside another's).
//
// RecordFunction callbacks, the other C++ hook, cannot do this: they run
// around every Dispatcher::call, above Autograd, and never around a
// redispatch, so they see aten::linear and also the aten::t and aten::addmm
// it calls, and every op a kernel calls, with nothing to tell which of them
// is an op at the Python key's level.
//
// Thread-safety: attach/detach on the step's thread; the fallback runs on any
// thread with the key included.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <vector>

namespace hyperoffload::python {

// What the fallback hands each op to: the session that attached itself.
class OpHandler {
 public:
  // Reports the op, runs it (run_below) and reports its results; throws
  // (python_error) on a session error. Called on whatever thread runs the op.
  virtual void handle(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) = 0;

 protected:
  ~OpHandler() = default;
};

// Whether this PyTorch has a free key for the fallback; registers the
// fallback the first time (it then stays registered: with the key in no
// thread's include set it is never reached).
bool fallback_available();

// Routes the ops of this thread (and of threads working on its behalf) to
// `handler` until detach(). False, and nothing changed, when the fallback is
// unavailable, another handler is attached, or the key is already enabled on
// this thread.
bool attach(OpHandler& handler);
// Undoes attach() (on the same thread); a no-op for a handler not attached.
void detach(OpHandler& handler);
// The handler attached, when its interception is active on this thread (the
// key included and not excluded), else null.
OpHandler* active_handler();

// Excludes (true) or re-enables (false) the key on this thread: a
// skip_offload region. Returns the previous exclusion state.
bool set_excluded(bool excluded);

// Runs an intercepted op as if there were no session: below the key, with
// the key excluded for the ops its kernels call.
void run_below(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

// Appends the StorageImpl of each defined tensor with storage in `values`
// (a Tensor, or the tensors of a Tensor[] / Tensor?[]); borrowed (the stack
// keeps them alive).
void collect_storages(c10::ArrayRef<c10::IValue> values, std::vector<c10::StorageImpl*>& out);
// The same for one value.
void collect_storages(const c10::IValue& value, std::vector<c10::StorageImpl*>& out);
// The storages of an op's results, owned.
void collect_results(c10::ArrayRef<c10::IValue> values, std::vector<c10::Storage>& out);

// Benchmark probes (python/bench/dispatch_overhead.py): the floor of each C++
// hook. enable_empty_fallback(true) includes the key on this thread with no
// handler attached (each op is boxed and run below the key); it returns
// false when the fallback is unavailable or a handler is attached.
// enable_empty_record_function(true) adds a thread-local RecordFunction
// callback that takes each op's inputs and outputs and does nothing.
bool enable_empty_fallback(bool enabled);
void enable_empty_record_function(bool enabled);

}  // namespace hyperoffload::python
