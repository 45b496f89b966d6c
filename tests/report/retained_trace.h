// Test helper: the five-op trace the comparison and budget-sweep tests derive
// by hand (their comments give the timelines). 100 bytes per ms each way, every
// op 1 ms:
//   op:          a    b    c    d    e
//   storage 1:   W    R    .    .    .     100 B, retained (stays to the end)
//   storage 2:   .    .    W    .    R     100 B
//   storage 3:   .    .    .    W    .     100 B
//   resident:   100  100  200  300  200    unplanned peak 300 at op d; floor 200
#pragma once

#include "hyperoffload/ir/trace.h"
#include "testing/trace_dsl.h"

namespace hyperoffload::testing {

inline Trace retained_trace() {
  return TraceDsl()
      .storage(1, 100, Retention::kRetained)
      .storage(2, 100)
      .storage(3, 100)
      .bandwidth(100.0 * 1000.0 / static_cast<double>(kBytesPerGiB))
      .op("a", "W1", 1)
      .op("b", "R1", 1)
      .op("c", "W2", 1)
      .op("d", "W3", 1)
      .op("e", "R2", 1)
      .build();
}

}  // namespace hyperoffload::testing
