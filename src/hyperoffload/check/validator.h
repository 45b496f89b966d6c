// Validator: executes a schedule against a trace, op by op, and reports whether
// it is safe (no data is ever lost), how many synchronous demand pages (faults)
// it causes and its op-granular peak device memory.
//
// Semantics (docs/FORMATS.md, "Validator"):
//  - A storage becomes device-resident at its first access.
//  - Each write makes a new version; a host copy holds the version it copied.
//  - copy_d2h: no-op when the host already holds the current version; otherwise
//    the storage must be resident, and the host then holds the current version.
//  - copy_h2d: no-op when already resident; otherwise needs a current host copy,
//    and makes the storage resident.
//  - release_device / release_host drop the device / host copy (no-op if absent).
//  - An access to a non-resident storage with a current host copy is a fault: it
//    is allowed (a synchronous demand page), counted and reported. Without a
//    current host copy it is data loss, an error.
//  - recompute of op k (docs/FORMATS.md, "Recompute"): op k must be
//    recomputable and every storage it read resident at the version it read;
//    every storage it wrote is then resident at the version it produced
//    (allocated when it was released; an error when it has been written since).
//    A released storage without a host copy is not lost if a recompute
//    regenerates it before its next access.
//  - The bytes resident while an op runs are measured after its pre actions and
//    its accesses (first accesses and faults make storages resident), before its
//    post actions; those of a recompute once its outputs are allocated (its
//    inputs are resident too). The peak is the maximum over ops and recomputes.
// The rules themselves live in model/residency_rules.h, shared with the
// simulator.
// Errors: data loss, copy_h2d from a missing or stale host copy, copy_d2h of a
// non-resident storage, a recompute of a non-recomputable op, of a source op
// that is missing or does not run before it, with an input missing or stale
// (written since op k read it) or an output stale (written since op k wrote
// it), unknown storages, op ids out of range, actions out of execution order.
//
// Thread-safety: a pure function of its inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

struct Fault {
  OpIndex op = 0;
  StorageId storage = 0;
};

// Whether the validator keeps the per-op resident-bytes profile.
enum class KeepProfile : std::uint8_t { kNo, kYes };

struct ValidatorOptions {
  KeepProfile keep_profile = KeepProfile::kNo;
  // Problems beyond this many are counted but not described.
  std::size_t max_described_problems = 100;
  // Host bytes the schedule may hold in host copies (nullopt: unlimited); a
  // peak host bytes above it is a problem ("peak host bytes ... exceed the
  // host budget ..."), reported after the walk.
  std::optional<std::int64_t> host_budget_bytes;
};

struct ValidationReport {
  // One sentence per problem, naming the op, phase, action and storage, e.g.
  // "op 7 read of storage 3: data lost (released after op 4 without a host copy)".
  std::vector<std::string> problems;
  std::size_t problem_count = 0;  // including those not described
  std::vector<Fault> faults;      // in execution order
  std::int64_t peak_bytes = 0;    // op-granular peak
  OpIndex peak_op = -1;           // first op reaching it (-1 when there are no ops)
  // When the peak is first reached while a recompute runs (before or after
  // peak_op): the op re-run; -1 when an op reaches it.
  OpIndex peak_recompute_source = -1;
  std::int64_t recompute_count = 0;  // recompute actions run (those dropped as invalid excluded)
  std::int64_t regenerated_bytes = 0;  // bytes of the released storages they regenerated
  std::int64_t d2h_bytes = 0;     // bytes of effective (non-no-op) copies
  std::int64_t h2d_bytes = 0;     // includes faults
  std::int64_t d2h_count = 0;
  std::int64_t h2d_count = 0;     // excludes faults
  std::int64_t peak_host_bytes = 0;        // maximum bytes held in host copies
  std::int64_t resident_at_end_bytes = 0;  // device bytes still resident after the last op
  std::vector<std::int64_t> resident_bytes;  // per op; only with KeepProfile::kYes

  bool valid() const { return problem_count == 0; }
};

ValidationReport validate_schedule(const Trace& trace, const Schedule& schedule,
                                   const ValidatorOptions& options = {});

}  // namespace hyperoffload
