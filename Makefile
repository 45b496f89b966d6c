# hyperoffload — the two commands a newcomer needs are `make run` and `make test`.
# Every target installs what is missing first (scripts/install-deps.sh is
# idempotent): Debian packages, and for the release build the project's virtual
# environment .venv with PyTorch (python/requirements.txt); then it configures and
# builds with CMake presets (CMakePresets.json).

JOBS ?= $(shell nproc)
# Random-trace stress tests run this many traces under the sanitizers
# (tests/exec/replay_stress_test.cc; `make test` uses the small default).
STRESS_ITERATIONS ?= 2000
# `make fuzz` runs every libFuzzer harness (fuzz/) for this many seconds each.
FUZZ_SECONDS ?= 60
CLI := build/bin/hyperoffload

.PHONY: run test test-long test-pip build bench soak fuzz fuzz-loops deps deps-python test-asan test-tsan test-debug clean distclean gpu-prepare gpu-check

deps:
	@scripts/install-deps.sh

deps-python:
	@scripts/install-deps.sh --python

build: deps-python
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

run: build
	$(CLI) demo

# Also builds the fuzz harnesses (build-fuzz/, clang) and smoke-runs each for a
# few seconds: ctest's fuzz.* tests.
test: build
	ctest --preset release -j $(JOBS)

# The long checks `make test` leaves out: the budget sweep over every GPT
# preset and G10 trace (peak, hybrid and recompute monotone in the budget on
# the capped device; tests/report/budget_sweep_property_test.cc).
test-long: build
	HYPEROFFLOAD_LONG_SWEEP=1 build/bin/report_tests --gtest_filter='*LongSweep*'

# `pip install --no-build-isolation .` into a new virtual environment, then
# import hyperoffload and run the CLI from elsewhere (scripts/test-pip-install.sh).
test-pip: deps-python
	scripts/test-pip-install.sh

bench: build
	scripts/run-benchmarks.sh

# 1,000 steps of a varying-shape training loop under one session; fails if the
# plan cache, the runtime's tables, the pinned pool or RSS grow after the
# warmups (python/bench/soak.py; python/tests/test_soak.py runs 100 steps).
SOAK_STEPS ?= 1000
soak: build
	PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/bench/soak.py --steps $(SOAK_STEPS)

# Builds the libFuzzer harnesses with clang + ASan + UBSan (build-fuzz/) and fuzzes
# each for FUZZ_SECONDS; corpora grow in build-fuzz/corpus/, findings land in
# build-fuzz/artifacts/ (docs/FUZZING.md).
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) scripts/run-fuzzers.sh

# The prepared GPU check (docs/GPU.md): gpu-prepare fills .gpu/ (ignored) with what a
# lent GPU machine lacks; scripts/gpu-check.sh runs there with .gpu carried along.
# `make gpu-check` runs it here, where the GPU parts are skipped and said so.
gpu-prepare: deps
	JOBS=$(JOBS) scripts/gpu-prepare.sh

gpu-check:
	scripts/gpu-check.sh

# The differential training-loop fuzzer (python/tools/fuzz_loops.py, docs/FUZZING.md):
# LOOPS random training loops (seeds SEED, SEED+1, ...), each run eagerly and
# under an OffloadSession, every loss, gradient and weight compared bit for bit;
# prints the counts and, per finding, its seed, loop shape and the command that
# reruns it. `make test` runs seeds 0-49 (python/tests/test_loop_fuzz.py).
# FUZZ_LOOPS_FLAGS: more options of the script (--json FILE, --repeat K, --minimize).
LOOPS ?= 2000
SEED ?= 0
fuzz-loops: build
	PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/tools/fuzz_loops.py --loops $(LOOPS) --seed $(SEED) $(FUZZ_LOOPS_FLAGS)

test-debug: deps-python
	cmake --preset debug >/dev/null
	cmake --build --preset debug -j $(JOBS)
	ctest --preset debug -j $(JOBS)

test-asan: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)
	HYPEROFFLOAD_STRESS_ITERATIONS=$(STRESS_ITERATIONS) ctest --preset asan -j $(JOBS)

test-tsan: deps
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS)
	HYPEROFFLOAD_STRESS_ITERATIONS=$(STRESS_ITERATIONS) ctest --preset tsan -j $(JOBS)

clean:
	rm -rf build build-debug build-asan build-tsan build-fuzz

# Also removes the virtual environment (the next build makes it again).
distclean: clean
	rm -rf .venv
