#!/usr/bin/env bash
# The prepared GPU check (issue 35, part 5; docs/GPU.md): everything this project
# can check on one GPU, in one bounded run, written to $OUT as it goes.
#
#   scripts/gpu-check.sh                 # from any directory; results in $OUT
#   scripts/gpu-check.sh --fingerprint   # prints the fingerprint of the C++ sources
#
# It is meant for a lent GPU machine that has a compiler, CMake, nvcc and a python3
# with PyTorch, but none of the Debian packages the C++ build uses and no network:
# scripts/gpu-prepare.sh, run beforehand on a development machine, puts what is
# missing into .gpu/ (ignored by git), which travels with the working tree:
#   .gpu/sysroot/usr/...   headers, CMake and pkg-config files and shared libraries of
#                          fmt, simdjson, nlohmann-json, CLI11, COIN-OR CBC (with the
#                          LAPACK, BLAS and gfortran it loads), GoogleTest
#   .gpu/bin/pkg-config    pkgconf, reading only .gpu's .pc files (CBC is found through it)
#   .gpu/tests/            the *_cuda_tests GoogleTest binaries built there
#   .gpu/cudart/           the libcudart they were linked with (used only when the
#                          machine's own CUDA has none)
#   .gpu/MANIFEST.txt      what is in it, from which commit and sources
#
# The parts, in this order; each runs under `timeout`, limited by its own cap and by
# what is left of the whole run's deadline (GPU_CHECK_DEADLINE_S, 420 s by default;
# a part that would get under 10 s is skipped as out of time):
#   machine            the OS, glibc, g++, CMake, ninja, nvcc, python3, torch and whether
#                      torch sees a CUDA device (cap 60 s)
#   gpu                nvidia-smi: name, memory, driver (cap 30 s)
#   cuda-tests         the carried .gpu/tests/*_cuda_tests, --gtest_output=json (cap 90 s)
#   build              the library, the CLI, the Python extension against the machine's
#                      own torch, and the *_cuda_tests, configured with .gpu/sysroot and
#                      built with -j$(nproc) in $GPU_CHECK_BUILD_DIR (cap 300 s,
#                      GPU_CHECK_BUILD_LIMIT_S)
#   cuda-tests-device  the *_cuda_tests that build just made (cap 90 s)
#   python             pytest, each test under --timeout (pytest-timeout, when there):
#                      test_cuda.py (sessions on cuda:0, the real link),
#                      test_emulated_link.py (the emulated link, on the CPU) and
#                      test_semantics.py's CUDA test (cap 150 s)
#   frontier           python/bench/frontier.py --quick --offload, when that file exists
#                      (the rest of the deadline)
# Without a GPU (no nvidia-smi, or it lists none) the check still runs: machine, gpu
# (skipped), cuda-tests (the binaries load and skip their tests themselves), and
# build, python and frontier are skipped and the summary says so. GPU_CHECK_FORCE=1
# runs build and python all the same (the CUDA tests then skip themselves):
# scripts/gpu-prepare.sh --simulate uses that to rehearse the device's build here.
#
# Results, in $OUT (default ./gpu-check-out); at most 8 files come back from the
# device, and these are 6:
#   gpu-check.txt    the summary: one line per part (status, seconds, counts), the
#                    machine, and the verdict; rewritten when each part starts and ends,
#                    so a run cut short still says how far it got
#   gpu-check.log    every part's output
#   build.log        the device build's configure and compile output
#   cuda-tests.json  the GoogleTest results, {"carried/<binary>": ..., "device-built/<binary>": ...}
#   pytest.xml       the Python tests' JUnit XML (xunit1: with the measured link bandwidths)
#   frontier.txt     frontier.py's output
#
# Settings (environment): OUT, GPU_CHECK_DIR (.gpu), GPU_CHECK_BUILD_DIR
# (/tmp/hyperoffload-gpu-check), GPU_CHECK_DEADLINE_S (420), GPU_CHECK_JOBS (nproc),
# GPU_CHECK_PYTHON (/opt/torch/.venv/bin/python3, else .venv/bin/python, else python3),
# GPU_CHECK_TEST_TIMEOUT_S (60, per Python test), GPU_CHECK_BUILD_LIMIT_S (300),
# GPU_CHECK_FORCE (0).
#
# Exit status: 0 when every part passed or was skipped, 1 when one failed or timed
# out, 143 when the run itself was stopped.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2

# What the carried binaries were built from: .gpu/MANIFEST.txt records it, and the
# summary says whether the tree here has the same C++ sources.
fingerprint() {
  find CMakeLists.txt cmake src tests -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 2>/dev/null |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}
if [[ ${1:-} == --fingerprint ]]; then
  fingerprint
  exit 0
fi
if [[ $# -gt 0 ]]; then
  echo "usage: scripts/gpu-check.sh [--fingerprint] (settings are environment variables: see the header)" >&2
  exit 2
fi

export REPO
export OUT=${OUT:-$REPO/gpu-check-out}
export GPU_DIR=${GPU_CHECK_DIR:-$REPO/.gpu}
export BUILD_DIR=${GPU_CHECK_BUILD_DIR:-/tmp/hyperoffload-gpu-check}
export JOBS=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 4)}
export TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT_S:-60}
export FORCE=${GPU_CHECK_FORCE:-0}
DEADLINE=${GPU_CHECK_DEADLINE_S:-420}
if [[ -n ${GPU_CHECK_PYTHON:-} ]]; then
  PY=$GPU_CHECK_PYTHON
elif [[ -x /opt/torch/.venv/bin/python3 ]]; then
  PY=/opt/torch/.venv/bin/python3
elif [[ -x $REPO/.venv/bin/python ]]; then
  PY=$REPO/.venv/bin/python
else
  PY=$(command -v python3 || echo python3)
fi
export PY
# The interpreter's own bin/ first: cmake, ninja and pytest come with it on the device.
export PATH="$(dirname "$PY"):$PATH"
export SYSROOT=$GPU_DIR/sysroot
export LIBDIR=$SYSROOT/usr/lib/x86_64-linux-gnu
export WORK=$BUILD_DIR/check
export LOG=$OUT/gpu-check.log
export SUMMARY=$OUT/gpu-check.txt
mkdir -p "$OUT" "$WORK" || exit 2
rm -f "$WORK"/result.* "$WORK"/*.json
: > "$LOG"

# The GPU, if any: nvidia-smi lists it.
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  HAVE_GPU=1
fi
export HAVE_GPU

# ---- helpers, run inside the parts ---------------------------------------------------

# result STATUS DETAIL: the part's verdict (PASS, FAIL or SKIP) and one line about it.
result() {
  printf '%s\t%s\n' "$1" "$2" > "$WORK/result.$PART"
}

# The CUDA test targets: one per layer with tests/<layer>/*_cuda_test.cc (tests/CMakeLists.txt).
cuda_test_targets() {
  local f layer seen=" "
  for f in tests/*/*_cuda_test.cc; do
    [[ -e $f ]] || continue
    layer=$(basename "$(dirname "$f")")
    [[ $seen == *" $layer "* ]] && continue
    seen+="$layer "
    echo "${layer}_cuda_tests"
  done
}

# run_gtests LABEL DIR: every *_cuda_tests binary in DIR, each result kept as
# $WORK/LABEL@<binary>.json and merged into $OUT/cuda-tests.json after each one.
run_gtests() {
  local label=$1 dir=$2 bin name json rc ran=0 broken=""
  local ld="$LIBDIR:/usr/local/cuda/lib64:$GPU_DIR/cudart"
  for bin in "$dir"/*_cuda_tests; do
    [[ -x $bin ]] || continue
    name=$(basename "$bin")
    json=$WORK/$label@$name.json
    ran=$((ran + 1))
    echo "== $label/$name"
    LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" --gtest_output="json:$json" 2> "$WORK/$name.stderr"
    rc=$?
    cat "$WORK/$name.stderr"
    if [[ ! -s $json ]]; then
      broken+="$name exited $rc before writing results: $(grep -m1 -v '^$' "$WORK/$name.stderr" | cut -c1-200); "
    fi
    merge_gtest_json
  done
  if ((ran == 0)); then
    result FAIL "no *_cuda_tests binary in $dir"
    return
  fi
  local counts
  counts=$("$PY" - "$WORK" "$label" <<'EOF'
import json, pathlib, sys
work, label = pathlib.Path(sys.argv[1]), sys.argv[2]
passed = failed = skipped = 0
failing = []
for path in sorted(work.glob(f"{label}@*.json")):
    for suite in json.loads(path.read_text()).get("testsuites", []):
        for test in suite.get("testsuite", []):
            if test.get("failures"):
                failed += 1
                failing.append(f"{suite['name']}.{test['name']}")
            elif test.get("result") == "SKIPPED":
                skipped += 1
            else:
                passed += 1
print(passed, failed, skipped, " ".join(failing[:5]))
EOF
  )
  local passed failed skipped failing
  read -r passed failed skipped failing <<< "$counts"
  local line="$passed passed, $failed failed, $skipped skipped"
  if [[ -n $broken ]]; then
    result FAIL "$line; $broken"
  elif [[ -z $passed ]]; then
    result FAIL "could not read the GoogleTest results"
  elif ((failed > 0)); then
    result FAIL "$line: $failing"
  elif ((passed == 0 && skipped > 0 && HAVE_GPU)); then
    result FAIL "$line: the tests found no CUDA device, but nvidia-smi lists one"
  elif ((passed == 0 && skipped > 0)); then
    result SKIP "$line (the tests skip themselves without a CUDA device)"
  else
    result PASS "$line"
  fi
}

merge_gtest_json() {
  "$PY" - "$WORK" "$OUT/cuda-tests.json" <<'EOF'
import json, pathlib, sys
work, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
merged = {}
for path in sorted(work.glob("*@*.json")):
    label, name = path.stem.split("@", 1)
    try:
        merged[f"{label}/{name}"] = json.loads(path.read_text())
    except ValueError as error:
        merged[f"{label}/{name}"] = {"unreadable": str(error)}
out.write_text(json.dumps(merged, indent=1))
EOF
}

extension_built() {
  compgen -G "$BUILD_DIR/python/hyperoffload/_C*.so" > /dev/null
}

# ---- the parts ------------------------------------------------------------------------

part_machine() {
  local os glibc gxx cmake_v ninja_v nvcc_v py
  os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)
  glibc=$(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')
  gxx=$(g++ -dumpfullversion 2>/dev/null || echo none)
  cmake_v=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}')
  ninja_v=$(ninja --version 2>/dev/null || echo none)
  nvcc_v=$( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null |
            grep -o 'V[0-9][0-9.]*' | head -1)
  echo "os=$os arch=$(uname -m) glibc=$glibc g++=$gxx cmake=${cmake_v:-none} ninja=$ninja_v nvcc=${nvcc_v:-none} nproc=$(nproc)"
  py=$("$PY" - <<'EOF' 2>&1
import os, platform, sysconfig
parts = [f"python {platform.python_version()}"]
header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
parts.append("Python.h " + ("yes" if os.path.exists(header) else f"MISSING ({header})"))
for name in ("pybind11", "pytest_timeout"):
    try:
        module = __import__(name)
        parts.append(f"{name} {getattr(module, '__version__', 'yes')}")
    except ImportError:
        parts.append(f"{name} missing")
try:
    import torch
    line = f"torch {torch.__version__} (CUDA {torch.version.cuda}"
    if torch.cuda.is_available():
        line += f", sees {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)})"
    else:
        line += ", no CUDA device)"
    parts.append(line)
except Exception as error:  # noqa: BLE001 - reported, not raised
    parts.append(f"torch import failed: {error!r}")
print(", ".join(parts))
EOF
  )
  echo "$py"
  result PASS "$os $(uname -m), glibc $glibc, g++ $gxx, cmake ${cmake_v:-none}, ninja $ninja_v, nvcc ${nvcc_v:-none}; $PY: $py"
}

part_gpu() {
  if ((!HAVE_GPU)); then
    result SKIP "no GPU on this machine (nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'lists none' || echo 'not found'))"
    return
  fi
  nvidia-smi
  local q
  q=$(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | head -1)
  result PASS "$q; $(nvidia-smi -L | grep -c '^GPU ') GPU(s)"
}

part_cuda_tests() {
  if [[ ! -d $GPU_DIR/tests ]]; then
    result SKIP "no carried binaries ($GPU_DIR/tests): scripts/gpu-prepare.sh makes them"
    return
  fi
  run_gtests carried "$GPU_DIR/tests"
}

part_build() {
  if ((!HAVE_GPU && !FORCE)); then
    result SKIP "no GPU (GPU_CHECK_FORCE=1 builds all the same)"
    return
  fi
  if [[ ! -d $SYSROOT ]]; then
    result FAIL "$SYSROOT is missing: run scripts/gpu-prepare.sh and carry .gpu"
    return
  fi
  local blog=$OUT/build.log generator=Ninja
  command -v ninja >/dev/null || generator="Unix Makefiles"
  mkdir -p "$BUILD_DIR"
  {
    echo "== configure ($(date -u +%T))"
    cmake -S "$REPO" -B "$BUILD_DIR" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
      -DHYPEROFFLOAD_BUILD_BENCHMARKS=OFF -DHYPEROFFLOAD_BUILD_TESTS=ON -DHYPEROFFLOAD_BUILD_PYTHON=ON \
      "-DPython3_EXECUTABLE=$PY" "-DCMAKE_PREFIX_PATH=$SYSROOT/usr" \
      "-DPKG_CONFIG_EXECUTABLE=$GPU_DIR/bin/pkg-config" \
      -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST
  } > "$blog" 2>&1
  local rc=$?
  cat "$blog"
  if ((rc != 0)); then
    result FAIL "configure failed: $(grep -m1 -A2 'CMake Error' "$blog" | tr '\n' ' ' | cut -c1-300)"
    return
  fi
  local python_line cuda_line
  python_line=$(grep -m1 'hyperoffload: .*Python extension' "$blog" | sed 's/^-- //')
  cuda_line=$(grep -m1 'hyperoffload: CUDA' "$blog" | sed 's/^-- //')
  local targets=(hyperoffload_cli)
  if [[ $python_line == *"Python extension against"* ]]; then
    targets+=(hyperoffload_python)
  fi
  if [[ $cuda_line == *enabled* ]]; then
    mapfile -t -O ${#targets[@]} targets < <(cuda_test_targets)
  fi
  echo "== build ${targets[*]} -j$JOBS ($(date -u +%T))" >> "$blog"
  local t0=$SECONDS
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}" >> "$blog" 2>&1
  rc=$?
  tail -n 30 "$blog"
  if ((rc != 0)); then
    result FAIL "build failed after $((SECONDS - t0)) s: $(grep -m1 -E 'error|Error' "$blog" | cut -c1-300)"
    return
  fi
  if [[ $python_line != *"Python extension against"* ]]; then
    result FAIL "built ${targets[*]}, but configure left the extension out: ${python_line:-no message}"
    return
  fi
  result PASS "${targets[*]} in $((SECONDS - t0)) s with -j$JOBS; ${python_line#hyperoffload: }; ${cuda_line#hyperoffload: }"
}

part_cuda_tests_device() {
  if ((!HAVE_GPU && !FORCE)); then
    result SKIP "no GPU"
    return
  fi
  if ! compgen -G "$BUILD_DIR/bin/*_cuda_tests" > /dev/null; then
    result SKIP "the device build made no *_cuda_tests (see build)"
    return
  fi
  run_gtests device-built "$BUILD_DIR/bin"
}

part_python() {
  if ((!HAVE_GPU && !FORCE)); then
    result SKIP "no GPU (GPU_CHECK_FORCE=1 runs them all the same)"
    return
  fi
  if ! extension_built; then
    result SKIP "no extension: the build failed or left it out (see build)"
    return
  fi
  local timeout_flag=()
  if "$PY" -c "import pytest_timeout" 2>/dev/null; then
    timeout_flag=(--timeout="$TEST_TIMEOUT")
  fi
  local xml=$OUT/pytest.xml
  PYTHONPATH="$BUILD_DIR/python" HYPEROFFLOAD_CLI="$BUILD_DIR/bin/hyperoffload" \
    LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OMP_NUM_THREADS=1 \
    CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1 \
    "$PY" -m pytest -q -p no:cacheprovider -o junit_family=xunit1 --junitxml="$xml" -rfEs "${timeout_flag[@]}" \
    python/tests/test_cuda.py python/tests/test_emulated_link.py \
    "python/tests/test_semantics.py::test_a_cpu_session_rejects_gpu_tensors"
  local rc=$?
  if [[ ! -s $xml ]]; then
    result FAIL "pytest exited $rc without a report"
    return
  fi
  local counts
  counts=$("$PY" - "$xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = root.iter("testcase")
passed = failed = skipped = cuda_run = cuda_skipped = 0
failing, props = [], {}
for case in cases:
    name = case.get("name")
    in_cuda = case.get("classname", "").endswith("test_cuda") or name == "test_a_cpu_session_rejects_gpu_tensors"
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
        failing.append(f"{case.get('classname', '').split('.')[-1]}::{name}")
    elif case.find("skipped") is not None:
        skipped += 1
        # Skipped for want of a device (the skipif), not for a reason of their own.
        cuda_skipped += in_cuda and "needs a CUDA device" in (case.find("skipped").get("message") or "")
    else:
        passed += 1
        cuda_run += in_cuda
    for prop in case.iter("property"):
        props.setdefault(prop.get("name"), []).append(prop.get("value"))
link = []
for key in ("d2h_bandwidth_gbps", "h2d_bandwidth_gbps"):
    if key in props:
        link.append(f"{key.split('_')[0]} {float(props[key][0]):.1f} GiB/s")
print(passed, failed, skipped, cuda_run, cuda_skipped, "|", ", ".join(link), "|", " ".join(failing[:6]))
EOF
  )
  local head link failing passed failed skipped cuda_run cuda_skipped
  IFS='|' read -r head link failing <<< "$counts"
  read -r passed failed skipped cuda_run cuda_skipped <<< "$head"
  link=$(echo "$link" | xargs)
  failing=$(echo "$failing" | xargs)
  local line="$passed passed, $failed failed, $skipped skipped (on CUDA: $cuda_run ran, $cuda_skipped skipped)"
  [[ -n $link ]] && line+="; the warmup measured $link"
  if ((failed > 0)) || ((rc != 0 && rc != 5)); then
    result FAIL "$line; pytest exit $rc: $failing"
  elif ((HAVE_GPU && cuda_skipped > 0)); then
    result FAIL "$line: nvidia-smi sees a GPU but torch.cuda.is_available() is false"
  elif ((cuda_run == 0)); then
    result SKIP "$line (no CUDA device for torch: the CUDA tests skipped themselves)"
  else
    result PASS "$line"
  fi
}

part_frontier() {
  local script=python/bench/frontier.py
  if [[ ! -f $script ]]; then
    result SKIP "$script is not in this tree yet"
    return
  fi
  if ((!HAVE_GPU)); then
    result SKIP "no GPU"
    return
  fi
  if ! extension_built; then
    result SKIP "no extension: the build failed or left it out (see build)"
    return
  fi
  PYTHONPATH="$BUILD_DIR/python" HYPEROFFLOAD_CLI="$BUILD_DIR/bin/hyperoffload" \
    LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUBLAS_WORKSPACE_CONFIG=:4096:8 \
    PYTHONUNBUFFERED=1 "$PY" "$script" --quick --offload > "$OUT/frontier.txt" 2>&1
  local rc=$?
  if ((rc != 0)); then
    result FAIL "exit $rc: $(grep -v '^$' "$OUT/frontier.txt" | tail -1 | cut -c1-300)"
  else
    result PASS "$(wc -l < "$OUT/frontier.txt") lines in frontier.txt; last: $(grep -v '^$' "$OUT/frontier.txt" | tail -1 | cut -c1-200)"
  fi
}

export -f result cuda_test_targets run_gtests merge_gtest_json extension_built \
  part_machine part_gpu part_cuda_tests part_build part_cuda_tests_device part_python part_frontier

# ---- the run and its summary ------------------------------------------------------------

PARTS=(machine gpu cuda-tests build cuda-tests-device python frontier)
declare -A STATUS SECS DETAIL
for p in "${PARTS[@]}"; do
  STATUS[$p]=PENDING SECS[$p]="" DETAIL[$p]=""
done
RUNNING=""
TREE=$(fingerprint)
CARRIED="not prepared (no $GPU_DIR/MANIFEST.txt)"
if [[ -f $GPU_DIR/MANIFEST.txt ]]; then
  carried_fp=$(sed -n 's/^sources: //p' "$GPU_DIR/MANIFEST.txt" | awk '{print $1}')
  carried_commit=$(sed -n 's/^commit: //p' "$GPU_DIR/MANIFEST.txt")
  if [[ $carried_fp == "$TREE" ]]; then
    CARRIED="prepared from the same C++ sources ($carried_commit)"
  else
    CARRIED="prepared from OTHER C++ sources ($carried_fp, $carried_commit): the carried binaries may be stale"
  fi
fi
STARTED=$(date -u +%FT%TZ)

render() {
  local verdict=$1 p files
  files=$(cd "$OUT" && ls | grep -v '\.tmp$' | tr '\n' ' ')
  {
    echo "hyperoffload GPU check, started $STARTED, $SECONDS s so far (deadline ${DEADLINE} s)"
    echo "tree: C++ sources $TREE; .gpu: $CARRIED"
    if ((HAVE_GPU)); then
      echo "GPU: yes (nvidia-smi lists one)"
    else
      echo "GPU: none on this machine: the GPU parts are skipped"
    fi
    echo
    printf '%-18s %-8s %5s  %s\n' part status sec detail
    for p in "${PARTS[@]}"; do
      printf '%-18s %-8s %5s  %s\n' "$p" "${STATUS[$p]}" "${SECS[$p]}" "${DETAIL[$p]}"
    done
    echo
    echo "verdict: $verdict"
    echo "files: $files"
  } > "$SUMMARY.tmp" && mv -f "$SUMMARY.tmp" "$SUMMARY"
}

on_signal() {
  [[ -n ${PART_PID:-} ]] && kill -TERM "$PART_PID" 2>/dev/null
  if [[ -n $RUNNING ]]; then
    STATUS[$RUNNING]=KILLED
    SECS[$RUNNING]=$((SECONDS - PART_T0))
    DETAIL[$RUNNING]="the check was stopped during this part; ${DETAIL[$RUNNING]}"
  fi
  render "stopped by a signal after $SECONDS s"
  exit 143
}
trap on_signal TERM INT HUP

# run_part NAME CAP FUNCTION
run_part() {
  local name=$1 cap=$2 fn=$3
  # One reading of the clock for the limit and for what the log says of it:
  # read twice, a second could tick between (a loaded machine once logged
  # "started at 1 s" beside a limit computed at 0 s).
  local start=$SECONDS
  local left=$((DEADLINE - start - 5))
  if ((left < 10)); then
    STATUS[$name]=SKIP SECS[$name]=0 DETAIL[$name]="out of time: ${start} s of the ${DEADLINE} s deadline gone"
    render "running"
    return
  fi
  local limit=$((cap < left ? cap : left))
  STATUS[$name]=RUNNING DETAIL[$name]="started at ${start} s, limit ${limit} s"
  RUNNING=$name
  PART_T0=$SECONDS
  render "running"
  echo "[gpu-check] $name: started (limit ${limit} s)"
  echo "===== $name (limit ${limit} s, started at ${start} s) =====" >> "$LOG"
  PART=$name timeout -k 10 "$limit" bash -c "$fn" >> "$LOG" 2>&1 &
  PART_PID=$!
  wait "$PART_PID"
  local rc=$?
  RUNNING="" PART_PID=""
  SECS[$name]=$((SECONDS - PART_T0))
  if [[ -f $WORK/result.$name ]]; then
    IFS=$'\t' read -r STATUS[$name] DETAIL[$name] < "$WORK/result.$name"
  else
    STATUS[$name]=FAIL DETAIL[$name]="ended (exit $rc) without a verdict"
  fi
  if ((rc == 124 || rc == 137)); then
    local last=$LOG
    [[ $name == build ]] && last=$OUT/build.log
    STATUS[$name]=TIMEOUT
    DETAIL[$name]="stopped at its limit of ${limit} s; its last output: $(grep -v '^$' "$last" | tail -1 | cut -c1-200)"
  fi
  echo "[gpu-check] $name: ${STATUS[$name]} (${SECS[$name]} s) ${DETAIL[$name]}"
  render "running"
}

run_part machine 60 part_machine
run_part gpu 30 part_gpu
run_part cuda-tests 90 part_cuda_tests
run_part build "${GPU_CHECK_BUILD_LIMIT_S:-300}" part_build
run_part cuda-tests-device 90 part_cuda_tests_device
run_part python 150 part_python
run_part frontier 100000 part_frontier

failed=()
for p in "${PARTS[@]}"; do
  case ${STATUS[$p]} in FAIL | TIMEOUT | KILLED) failed+=("$p") ;; esac
done
if ((${#failed[@]} > 0)); then
  verdict="FAILED: ${failed[*]}"
  code=1
elif ((HAVE_GPU)); then
  verdict="every part passed or was skipped"
  code=0
else
  verdict="no GPU on this machine: the GPU parts were skipped; the rest passed"
  code=0
fi
render "$verdict"
echo
cat "$SUMMARY"
exit $code
