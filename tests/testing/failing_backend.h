// Test helper: a Backend that forwards to another and makes one chosen call
// fail, once — a device or pinned allocation (kOutOfMemory, as an exhausted
// device reports it), or a copy, host function, event creation or event record
// (kInternal, as a failed CUDA call reports it). Every other call, and every
// call after the failure, is forwarded unchanged, so cleanup can proceed.
//
//   FailingBackend backend(*host);
//   backend.fail_call(BackendCall::kRecordEvent);     // the next record fails
//   backend.fail_call(BackendCall::kAny, 17);         // the 17th fallible call fails
//
// Used by tests/runtime/ and by the runtime fuzzer (fuzz/runtime_fuzzer.cc).
// Thread-safety: as the wrapped backend's; set the failure before use.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "hyperoffload/runtime/backend.h"

namespace hyperoffload::testing {

enum class BackendCall : std::uint8_t {
  kAny,  // any of the fallible calls below
  kAllocateDevice,
  kAllocateHost,
  kCopy,
  kHostFunction,
  kCreateEvent,
  kRecordEvent,
};

class FailingBackend final : public Backend {
 public:
  explicit FailingBackend(Backend& inner) : inner_(inner) {}

  // The `nth` (1-based) next call of kind `call` fails; nth <= 0: none does.
  void fail_call(BackendCall call, std::int64_t nth = 1) {
    target_ = call;
    countdown_ = nth;
  }
  // Whether the chosen call has failed.
  bool failed() const { return failed_; }

  std::string_view name() const override { return "failing"; }
  CopyEngines copy_engines() const override { return inner_.copy_engines(); }
  Result<void*> allocate_device(std::int64_t size_bytes) override {
    if (fail_now(BackendCall::kAllocateDevice)) return make_error(ErrorCode::kOutOfMemory, "injected: device allocation");
    return inner_.allocate_device(size_bytes);
  }
  Status free_device(void* ptr) override { return inner_.free_device(ptr); }
  DeviceMemoryStats device_memory_stats() const override { return inner_.device_memory_stats(); }
  Result<void*> allocate_host(std::int64_t size_bytes) override {
    if (fail_now(BackendCall::kAllocateHost)) return make_error(ErrorCode::kOutOfMemory, "injected: pinned allocation");
    return inner_.allocate_host(size_bytes);
  }
  Status free_host(void* ptr) override { return inner_.free_host(ptr); }
  Stream stream(StreamRole role) const override { return inner_.stream(role); }
  Result<Stream> create_stream() override { return inner_.create_stream(); }
  Status copy_async(Stream stream, void* dst, const void* src, std::int64_t bytes, CopyKind kind) override {
    if (fail_now(BackendCall::kCopy)) return make_error(ErrorCode::kInternal, "injected: copy failed to enqueue");
    return inner_.copy_async(stream, dst, src, bytes, kind);
  }
  Status launch_host_function(Stream stream, std::function<void()> fn) override {
    if (fail_now(BackendCall::kHostFunction)) {
      return make_error(ErrorCode::kInternal, "injected: host function failed to enqueue");
    }
    return inner_.launch_host_function(stream, std::move(fn));
  }
  Status synchronize_stream(Stream stream) override { return inner_.synchronize_stream(stream); }
  Status stream_wait_stream(Stream waiter, Stream waited) override { return inner_.stream_wait_stream(waiter, waited); }
  Status synchronize() override { return inner_.synchronize(); }
  Result<Event> create_event() override {
    if (fail_now(BackendCall::kCreateEvent)) return make_error(ErrorCode::kInternal, "injected: event creation");
    return inner_.create_event();
  }
  Status destroy_event(Event event) override { return inner_.destroy_event(event); }
  Status record_event(Event event, Stream stream) override {
    if (fail_now(BackendCall::kRecordEvent)) return make_error(ErrorCode::kInternal, "injected: event record");
    return inner_.record_event(event, stream);
  }
  Result<bool> event_completed(Event event) override { return inner_.event_completed(event); }
  Status synchronize_event(Event event) override { return inner_.synchronize_event(event); }
  Status stream_wait_event(Stream stream, Event event) override { return inner_.stream_wait_event(stream, event); }
  Result<double> elapsed_ms(Event start, Event end) override { return inner_.elapsed_ms(start, end); }

 private:
  bool fail_now(BackendCall call) {
    if (countdown_ <= 0 || (target_ != BackendCall::kAny && target_ != call)) return false;
    if (--countdown_ > 0) return false;
    failed_ = true;
    return true;
  }

  Backend& inner_;
  BackendCall target_ = BackendCall::kAny;
  std::int64_t countdown_ = 0;
  bool failed_ = false;
};

}  // namespace hyperoffload::testing
