// The framework-neutral hook API through which a step's ops reach the runtime.
//
// A framework layer (the PyTorch TorchDispatchMode layer, or plain C++ code)
// calls, for every op of a training step, in order:
//
//   on_op_begin(name, inputs, written)   before the op runs
//   allocate_output(id, size)            optional, while it runs: runtime memory
//   mark_recomputable()                  optional, while it runs: the op is deterministic
//   on_op_end(outputs, mutated)          after it ran
//
// and on_storage_freed(id) whenever it drops a storage. Storage ids are int64s
// the caller chooses (>= 0, unique among the storages alive in a step); sizes
// are in bytes. Only storages produced inside the step are tracked: an op's
// `inputs` name tracked storages only (parameters, the batch and anything else
// made outside the step are the caller's business and are never passed).
//
// After on_op_begin returns, every input is resident and the compute stream is
// ordered after the copies that brought it back; device_ptr(id) gives its
// current address (it changes when a storage was offloaded and brought back
// into runtime memory). Outputs live either in memory from allocate_output()
// or in the caller's own buffers, adopted at on_op_end with a release callback
// (see AdoptedBuffer in runtime/residency_manager.h).
//
//   hooks.on_op_begin("mlp.fc1", {{x_id}}, {});
//   const float* x = static_cast<const float*>(*hooks.device_ptr(x_id));
//   float* y = static_cast<float*>(*hooks.allocate_output(y_id, n * sizeof(float)));
//   fc1(x, y);
//   hooks.on_op_end({{OpOutput{y_id, n * sizeof(float)}}}, {});
//
// Every call is O(inputs + outputs + scheduled actions) with no allocation in
// the common case, so a Python layer can call it per op through pybind11.
//
// Thread-safety: one thread drives a StepHooks (the thread running the ops).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload {

struct OpOutput {
  StorageId id = 0;
  std::int64_t size_bytes = 0;
  // Null when the memory came from allocate_output(id, ...) during this op;
  // otherwise the caller's device buffer, which the runtime adopts.
  void* device_ptr = nullptr;
  // For an adopted buffer: called when the runtime releases it (offload).
  ReleaseCallback release;
};

class StepHooks {
 public:
  virtual ~StepHooks() = default;

  // `inputs`: tracked storages the op reads (or reads and writes), in argument
  // order; repeats allowed. `written`: those inputs the op writes in place, when
  // known before it runs (PyTorch schemas say). Only these wait for an
  // in-flight D2H of themselves; an undeclared in-place write can race such a
  // copy — harmless for data (on_op_end's `mutated` makes that host copy stale,
  // so it is never copied back) but a data race nonetheless.
  virtual Status on_op_begin(std::string_view name, std::span<const StorageId> inputs,
                             std::span<const StorageId> written) = 0;
  // Device memory for an output of the current op; null for 0 bytes.
  virtual Result<void*> allocate_output(StorageId id, std::int64_t size_bytes) = 0;
  // `outputs`: storages the op produced (new ids). `mutated`: inputs it wrote.
  virtual Status on_op_end(std::span<const OpOutput> outputs, std::span<const StorageId> mutated) = 0;
  // Declares the current op (after on_op_begin, before on_op_end) recomputable:
  // run again on the same inputs it produces the same outputs, bit for bit —
  // which only the framework can know (PyTorch: no nondeterministic tag, and
  // no argument written in place but the data of one tensor). The warmup
  // records the op as recomputable in its trace (ir/trace.h, Recomputable)
  // when it also produced at least one storage and wrote no input, or when it
  // produced nothing and rewrote one input it read whose version a
  // recomputable op made (an in-place follower, Note [In-place units]); a
  // replay ignores it (its plan says what to recompute).
  // Storages the op reads that the runtime does not track (parameters, the
  // batch) must not change during the step. `how`: kWithRngReplay for an op
  // that draws random numbers and regenerates its bytes only when the
  // framework re-runs it with its generator's state as it first ran (the trace
  // records `rng_replay`); kNo is the same as not calling this.
  virtual Status mark_recomputable(Recomputable how = Recomputable::kYes) = 0;
  // The caller dropped a tracked storage; its copies are released.
  virtual Status on_storage_freed(StorageId id) = 0;
  // Current device address of a tracked storage, paged in if needed. kRead use
  // does not wait for an in-flight D2H of it; kReadWrite does.
  virtual Result<void*> device_ptr(StorageId id, DeviceAccess access = DeviceAccess::kReadWrite) = 0;
};

}  // namespace hyperoffload
