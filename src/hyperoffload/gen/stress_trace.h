// Random training steps built to stress the planners' work bounds (issue 34):
// the shapes on which a planner's work can run away — long recomputable
// chains with residual adds (what made DTR's walk thrash on vit_b_16), deep
// view graphs (runs of ops that only read one storage, as PyTorch's views
// of one storage are), many in-place writes (new versions that end a
// producer's validity), wide fan-out (a storage read by every layer; an op
// that reads dozens of storages, as DenseNet's concatenations do).
//
// The step: a forward of `layers` blocks over an activation x, each block a
// run of ops of random kinds —
//   compute    reads x (and, with fan-in, up to max_fan_in earlier
//              activations), writes a new storage: x becomes it; recomputable
//              with probability recomputable_fraction;
//   residual   reads x and the block's input, writes a new x (recomputable
//              likewise): chains that rejoin;
//   view       reads x only, `view_depth` ops in a row (a view of a view ...);
//   in-place   reads and writes x (a new version);
//   shared     reads the step's shared storage (written by op 0: a mask or
//              table every block reads);
// every activation a compute op writes is saved for the backward with
// probability save_fraction. Then the backward: per saved activation, last
// first, an op that reads the gradient so far and that activation and writes
// a new gradient, and an in-place accumulation into one of a few gradient
// buffers (reads and writes it). Sizes are log-uniform in [min, max] bytes,
// durations uniform in [0, max_duration_ms]. Deterministic for a seed; the
// trace is valid by construction (format v2 when something is recomputable).
// O(ops + accesses).
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

struct StressTraceOptions {
  std::int32_t layers = 8;           // forward blocks
  std::int32_t ops_per_layer = 12;   // ops per block, views counted one each
  std::uint64_t seed = 1;
  std::int64_t min_size_bytes = 4096;       // log-uniform sizes
  std::int64_t max_size_bytes = 16ll << 20;
  double recomputable_fraction = 0.8;  // of the compute and residual ops
  double residual_fraction = 0.2;      // of the ops: residual adds
  double view_fraction = 0.2;          // of the ops: a run of views
  std::int32_t view_depth = 8;         // views in a run
  double in_place_fraction = 0.15;     // of the ops: in-place writes of x
  double shared_fraction = 0.05;       // of the ops: reads of the shared storage
  std::int32_t max_fan_in = 4;         // earlier activations a compute op may read too
  double wide_fan_in_fraction = 0.02;  // compute ops that read up to 64 earlier activations
  double save_fraction = 0.7;          // activations the backward reads
  std::int32_t gradient_buffers = 4;   // in-place accumulation targets of the backward
  double max_duration_ms = 1.0;
  // memory_limit_bytes = this fraction of the unplanned peak; nullopt = unlimited.
  std::optional<double> limit_fraction;
};

// Precondition: layers >= 0, ops_per_layer >= 1, min <= max sizes.
Trace generate_stress_trace(const StressTraceOptions& options);

}  // namespace hyperoffload
