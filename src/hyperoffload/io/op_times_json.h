// The op-times file format, "hyperoffload.op_times" version 1 (docs/FORMATS.md):
// the op durations and copy bandwidths a warmup recorded for one step program
// on one machine, which later warmups of the same program plan from (Note
// [Reproducible plans], exec/warmup_executor.h; exec/op_time_store.h keeps
// the files).
//
//   {"format": "hyperoffload.op_times", "version": 2,
//    "machine": "torch 2.13.0+cpu; x86_64 ...; 1 thread(s); host backend",
//    "program": "9f2c0d4e1a7b3c55", "op_count": 3,
//    "d2h_gib_per_s": 16, "h2d_gib_per_s": 16,
//    "durations_ms": [0.25, 0.5, 0]}
//
// Parsing checks the shape and the values (kInvalidInput, naming the member:
// "durations_ms[2]: must be a finite number >= 0, got -1"); whether the record
// belongs to a step program is the store's question.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/ir/status.h"

namespace hyperoffload {

inline constexpr std::string_view kOpTimesFormat = "hyperoffload.op_times";
// Version 2: the durations leave out the room a warmup made inside an op
// (Note [Op times without the room they wait for], exec/warmup_executor.cc);
// version 1's, which count it, are not read (the warmup measures again and
// replaces the file).
inline constexpr int kOpTimesVersion = 2;

struct OpTimesRecord {
  std::string machine;  // what the times were measured on (OpTimeStoreOptions::machine)
  std::uint64_t program = 0;  // the step program's key (step_program_key, exec/op_time_store.h)
  std::vector<double> durations_ms;  // one per op, in op order; each finite, >= 0
  double d2h_gib_per_s = 0.0;  // finite, > 0
  double h2d_gib_per_s = 0.0;  // finite, > 0
};

// Doubles are written so that they read back exactly.
std::string op_times_to_json(const OpTimesRecord& record);
Result<OpTimesRecord> parse_op_times_json(std::string_view json);

}  // namespace hyperoffload
