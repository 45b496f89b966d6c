// HostBackend: an emulated device in host RAM, for CPU-only machines and tests.
//
//  - Device memory is a capacity-limited DeviceArena (runtime/device_arena.h);
//    an allocation beyond the capacity fails with kOutOfMemory naming the
//    requested, in-use and capacity bytes.
//  - The compute stream is the calling thread: work "enqueued" on it runs
//    inline, so the caller's ops (plain C++ over the buffers) run on it too.
//    Waiting on an event from the compute stream blocks the caller; an event
//    recorded on it completes at once.
//  - Every other stream (the D2H and H2D copy streams, and create_stream()'s) is
//    a worker thread executing its queue in FIFO order; copies are memcpy on
//    that thread and events complete when the worker reaches them. The
//    concurrency is real, so a missing wait shows up as a data race under
//    ThreadSanitizer and as wrong bytes in checksummed tests. The queue is a
//    bounded lock-free ring (runtime/internal/mpsc_ring.h) of
//    `stream_queue_capacity` items; enqueueing onto a full one blocks until
//    the worker frees a slot.
//  - Page-locked host memory is ordinary 64-byte-aligned memory.
//  - Optionally, an emulated copy link (emulated_copy_bandwidth_gib_per_s):
//    every device→host and host→device copy then takes bytes / bandwidth —
//    Note [Emulated link] in the .cc — so a CPU run behaves in time as a
//    device with that link would.
//
//   Result<std::unique_ptr<HostBackend>> backend =
//       HostBackend::create({.device_capacity_bytes = 64 << 20});
//
// Thread-safety: every method is thread-safe. Destruction drains every stream.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "hyperoffload/runtime/backend.h"
#include "hyperoffload/runtime/device_arena.h"

namespace hyperoffload {

struct HostBackendOptions {
  std::int64_t device_capacity_bytes = std::int64_t{1} << 30;  // emulated device memory, bytes
  std::int64_t device_alignment_bytes = 256;                   // power of two >= 8
  CopyEngines copy_engines = kDefaultCopyEngines;
  // How long a waiting thread (an idle worker, a synchronizing caller, a
  // producer facing a full queue) polls before it sleeps; see Note [Spin
  // before sleep]. 0: sleep at once.
  std::int64_t spin_before_sleep_us = 50;
  // Items a worker stream holds before enqueueing onto it blocks until its
  // worker frees a slot (as a full CUDA launch queue blocks the launching
  // thread). A power of two >= 2; each slot is one 64-byte cache line.
  std::int64_t stream_queue_capacity = 1024;
  // Note [Emulated link]: when set (GiB/s, GiB = 2^30 bytes; finite, > 0), each
  // device→host and host→device copy takes max(its memcpy, bytes / bandwidth).
  // A copy on a worker stream paces that stream's thread (one FIFO link per
  // copy stream: two with CopyEngines::kTwo, one shared with kOne), never the
  // caller's, on a virtual link clock so that a late wake-up does not delay
  // the copies queued behind it; a copy on the compute stream (a fault: a
  // synchronous demand page, as the simulator models it) paces the caller,
  // whose stream it is.
  // Device-to-device and host-to-host copies are not on the link. nullopt
  // (the default): copies take their memcpy time.
  std::optional<double> emulated_copy_bandwidth_gib_per_s;
  // Note [Small copies on an idle stream]: a copy of at most this many bytes
  // enqueued on a copy stream with nothing pending runs at once on the
  // caller's thread, as does an event recorded right after such a copy,
  // instead of waking the stream's worker. 0 (the default): every item goes to the
  // worker, so tests see the streams' concurrency in full. Not with an
  // emulated link, whose copies pace their stream. Bytes, >= 0.
  std::int64_t inline_copy_max_bytes = 0;
};

class HostBackend final : public Backend {
 public:
  static Result<std::unique_ptr<HostBackend>> create(const HostBackendOptions& options = {});
  ~HostBackend() override;
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

  std::string_view name() const override { return "host"; }
  CopyEngines copy_engines() const override { return copy_engines_; }

  Result<void*> allocate_device(std::int64_t size_bytes) override;
  Status free_device(void* ptr) override;
  DeviceMemoryStats device_memory_stats() const override;

  Result<void*> allocate_host(std::int64_t size_bytes) override;
  Status free_host(void* ptr) override;
  // Bytes currently allocated with allocate_host (for leak checks).
  std::int64_t host_bytes_in_use() const;

  Stream stream(StreamRole role) const override;
  Result<Stream> create_stream() override;
  Status copy_async(Stream stream, void* dst, const void* src, std::int64_t bytes, CopyKind kind) override;
  Status launch_host_function(Stream stream, std::function<void()> fn) override;
  Status synchronize_stream(Stream stream) override;
  Status stream_wait_stream(Stream waiter, Stream waited) override;
  Status synchronize() override;

  Result<Event> create_event() override;
  Status destroy_event(Event event) override;
  Status record_event(Event event, Stream stream) override;
  Result<bool> event_completed(Event event) override;
  Status synchronize_event(Event event) override;
  Status stream_wait_event(Stream stream, Event event) override;
  Result<double> elapsed_ms(Event start, Event end) override;

  class Impl;

 private:
  HostBackend(std::unique_ptr<DeviceArena> arena, const HostBackendOptions& options);

  std::unique_ptr<Impl> impl_;
  CopyEngines copy_engines_;
};

}  // namespace hyperoffload
