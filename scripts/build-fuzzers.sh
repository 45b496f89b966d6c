#!/usr/bin/env bash
# Configures (once) and builds the libFuzzer harnesses: the `fuzz` preset,
# build-fuzz/, clang + ASan + UBSan, only the library and fuzz/*_fuzzer.cc.
# Used by `make fuzz`, by scripts/run-fuzzers.sh and by the ctest test fuzz.build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build-fuzz/build.ninja ]]; then
  cmake --preset fuzz >/dev/null
fi
cmake --build --preset fuzz -j "${JOBS:-$(nproc)}"
