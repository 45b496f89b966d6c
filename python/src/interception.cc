#include "interception.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include <torch/version.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

namespace hyperoffload::python {
namespace {

// Note [Op interception] in interception.h.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
constexpr std::optional<c10::DispatchKey> kKey = c10::DispatchKey::Fake;
#else
constexpr std::optional<c10::DispatchKey> kKey = std::nullopt;
#endif

// The attached handler (one per process), the thread that attached it, and
// whether the benchmark's empty fallback holds the key.
std::atomic<OpHandler*> attached{nullptr};
std::thread::id attached_thread;  // set by attach() once it holds `attached`, read by detach()
std::atomic<bool> empty_fallback{false};

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  OpHandler* handler = attached.load(std::memory_order_acquire);
  if (handler == nullptr) {
    run_below(op, keys, stack);  // the empty fallback, or work a step started that outlived it
    return;
  }
  handler->handle(op, keys, stack);
}

template <class Visit>
void for_each_tensor(const c10::IValue& value, Visit visit) {
  auto add = [&visit](const c10::IValue& item) {
    if (!item.isTensor()) return;
    const at::Tensor& tensor = item.toTensor();
    if (tensor.defined() && tensor.has_storage()) visit(tensor);
  };
  if (value.isTensor()) {
    add(value);
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) add(item);
  }
}

std::unique_ptr<at::ObserverContext> empty_start(const at::RecordFunction&) { return nullptr; }
void empty_end(const at::RecordFunction&, at::ObserverContext*) {}

}  // namespace

bool fallback_available() {
  static const bool available = [] {
    if (!kKey) return false;
    if (c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(*kKey)) return false;  // taken
    try {
      auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "_", kKey, __FILE__, __LINE__);
      library->fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
      (void)library.release();  // never destroyed: deregistering at exit could run after the dispatcher is gone
    } catch (const c10::Error&) {
      return false;  // registered by someone else meanwhile: the session's mode intercepts
    }
    return true;
  }();
  return available;
}

bool attach(OpHandler& handler) {
  if (!fallback_available() || empty_fallback.load() || c10::impl::tls_is_dispatch_key_included(*kKey)) {
    return false;
  }
  OpHandler* expected = nullptr;
  if (!attached.compare_exchange_strong(expected, &handler, std::memory_order_acq_rel)) return false;
  attached_thread = std::this_thread::get_id();
  c10::impl::tls_set_dispatch_key_included(*kKey, true);
  return true;
}

void detach(OpHandler& handler) {
  if (attached.load(std::memory_order_acquire) != &handler) return;
  // Another thread (a session collected mid-step) cannot reach the step
  // thread's include set: there the key stays on and finds no handler.
  if (std::this_thread::get_id() == attached_thread) c10::impl::tls_set_dispatch_key_included(*kKey, false);
  attached.store(nullptr, std::memory_order_release);
}

OpHandler* active_handler() {
  OpHandler* handler = attached.load(std::memory_order_acquire);
  if (handler == nullptr || !c10::impl::tls_is_dispatch_key_included(*kKey) ||
      c10::impl::tls_is_dispatch_key_excluded(*kKey)) {
    return nullptr;
  }
  return handler;
}

bool set_excluded(bool excluded) {
  if (!kKey) return false;
  const bool previous = c10::impl::tls_is_dispatch_key_excluded(*kKey);
  c10::impl::tls_set_dispatch_key_excluded(*kKey, excluded);
  return previous;
}

void run_below(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard excluded(*kKey);
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, *kKey), stack);
}

void collect_storages(const c10::IValue& value, std::vector<c10::StorageImpl*>& out) {
  for_each_tensor(value, [&out](const at::Tensor& t) { out.push_back(t.storage().unsafeGetStorageImpl()); });
}

void collect_storages(c10::ArrayRef<c10::IValue> values, std::vector<c10::StorageImpl*>& out) {
  for (const c10::IValue& value : values) collect_storages(value, out);
}

void collect_results(c10::ArrayRef<c10::IValue> values, std::vector<c10::Storage>& out) {
  for (const c10::IValue& value : values) {
    for_each_tensor(value, [&out](const at::Tensor& t) { out.push_back(t.storage()); });
  }
}

bool enable_empty_fallback(bool enabled) {
  if (!enabled) {
    if (empty_fallback.exchange(false)) c10::impl::tls_set_dispatch_key_included(*kKey, false);
    return true;
  }
  if (!fallback_available() || attached.load() != nullptr || c10::impl::tls_is_dispatch_key_included(*kKey)) {
    return false;
  }
  empty_fallback.store(true);
  c10::impl::tls_set_dispatch_key_included(*kKey, true);
  return true;
}

void enable_empty_record_function(bool enabled) {
  static std::optional<at::CallbackHandle> handle;
  if (enabled && !handle) {
    handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&empty_start, &empty_end).needsInputs(true).needsOutputs(true));
  } else if (!enabled && handle) {
    at::removeCallback(*handle);
    handle.reset();
  }
}

}  // namespace hyperoffload::python
