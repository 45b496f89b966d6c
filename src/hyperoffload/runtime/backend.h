// Backend: the device abstraction the runtime executes schedules on.
//
// A backend owns device memory, page-locked ("pinned") host memory, streams and
// events, with CUDA semantics:
//   stream  an in-order queue of work (copies, host functions, event records,
//           waits). Work on one stream runs in FIFO order; different streams run
//           concurrently unless ordered by events.
//   event   a marker recorded on a stream; it completes when the stream reaches
//           it. Another stream can be made to wait for it, the host can poll or
//           block on it, and two completed events give the elapsed time between
//           them. An event never recorded counts as completed.
//
// Every backend has three role streams: the compute stream (where the caller's
// ops run), a device→host copy stream and a host→device copy stream. With one
// copy engine the two copy roles are the same stream.
//
//   std::unique_ptr<Backend> backend = std::make_unique<HostBackend>(HostBackendOptions{});
//   void* dev = *backend->allocate_device(4096);
//   void* host = *backend->allocate_host(4096);
//   Event done = *backend->create_event();
//   backend->copy_async(backend->stream(StreamRole::kDeviceToHost), host, dev, 4096,
//                       CopyKind::kDeviceToHost);
//   backend->record_event(done, backend->stream(StreamRole::kDeviceToHost));
//   backend->synchronize_event(done);   // host now holds the bytes
//
// Implementations: HostBackend (runtime/host_backend.h; an emulated device in
// host RAM, for CPU-only machines and tests) and the CUDA backend
// (runtime/cuda_backend.h).
//
// Thread-safety: every method may be called from any thread. The backend must
// outlive every object that holds its memory, streams or events.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/model/device.h"  // CopyEngines: the same knob the simulator models

namespace hyperoffload {

// Opaque handles; their values mean something only to the backend that made them.
struct Stream {
  std::uintptr_t handle = 0;
  friend bool operator==(const Stream&, const Stream&) = default;
};
struct Event {
  std::uintptr_t handle = 0;
  friend bool operator==(const Event&, const Event&) = default;
};

enum class StreamRole : std::uint8_t { kCompute, kDeviceToHost, kHostToDevice };
enum class CopyKind : std::uint8_t { kDeviceToHost, kHostToDevice, kDeviceToDevice, kHostToHost };

struct DeviceMemoryStats {
  std::int64_t in_use_bytes = 0;      // allocated by this backend and not yet freed
  std::int64_t peak_bytes = 0;        // maximum of in_use_bytes
  std::int64_t capacity_bytes = -1;   // limit, or -1 when the backend has none of its own
  std::int64_t allocation_count = 0;  // live allocations
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // kOne: D2H and H2D share one FIFO copy stream; kTwo: one stream each.
  virtual CopyEngines copy_engines() const = 0;

  // ---- Device memory --------------------------------------------------------
  // size_bytes > 0. Fails with kOutOfMemory naming requested, in-use and
  // capacity bytes.
  virtual Result<void*> allocate_device(std::int64_t size_bytes) = 0;
  // `ptr` came from allocate_device and no work still queued on a copy stream
  // uses it. Work already queued on the compute stream may (the CUDA backend
  // frees in compute-stream order).
  virtual Status free_device(void* ptr) = 0;
  virtual DeviceMemoryStats device_memory_stats() const = 0;

  // ---- Page-locked host memory ----------------------------------------------
  // size_bytes > 0. Addresses are aligned to at least 64 bytes.
  virtual Result<void*> allocate_host(std::int64_t size_bytes) = 0;
  // `ptr` came from allocate_host and no queued work uses it.
  virtual Status free_host(void* ptr) = 0;

  // ---- Streams ----------------------------------------------------------------
  virtual Stream stream(StreamRole role) const = 0;
  // An additional stream, owned by the backend until it is destroyed.
  virtual Result<Stream> create_stream() = 0;
  // Enqueues a copy of `bytes` (>= 0) bytes. Both ranges must stay valid until
  // the copy has run.
  virtual Status copy_async(Stream stream, void* dst, const void* src, std::int64_t bytes, CopyKind kind) = 0;
  // Enqueues `fn` to run when the stream reaches it. `fn` must not call into the
  // backend (the CUDA driver forbids it) and must not throw.
  virtual Status launch_host_function(Stream stream, std::function<void()> fn) = 0;
  // Blocks until all work enqueued on the stream so far has run.
  virtual Status synchronize_stream(Stream stream) = 0;
  // Work enqueued on `waiter` after this call runs after all work enqueued on
  // `waited` before it.
  virtual Status stream_wait_stream(Stream waiter, Stream waited) = 0;
  // Blocks until every stream is idle.
  virtual Status synchronize() = 0;

  // ---- Events -----------------------------------------------------------------
  virtual Result<Event> create_event() = 0;
  // The event may still be pending; its resources are reclaimed once it is not.
  virtual Status destroy_event(Event event) = 0;
  virtual Status record_event(Event event, Stream stream) = 0;
  // True when the event's latest record has been reached (or it was never recorded).
  virtual Result<bool> event_completed(Event event) = 0;
  virtual Status synchronize_event(Event event) = 0;
  virtual Status stream_wait_event(Stream stream, Event event) = 0;
  // Milliseconds between two completed, recorded events.
  virtual Result<double> elapsed_ms(Event start, Event end) = 0;
};

}  // namespace hyperoffload
