# hyperoffload — the two commands a newcomer needs are `make run` and `make test`.
# Every target installs missing Debian packages first (scripts/install-deps.sh is
# idempotent), then configures and builds with CMake presets (CMakePresets.json).

JOBS ?= $(shell nproc)
# Random-trace stress tests run this many traces under the sanitizers
# (tests/exec/replay_stress_test.cc; `make test` uses the small default).
STRESS_ITERATIONS ?= 2000
CLI := build/bin/hyperoffload

.PHONY: run test build bench deps deps-python test-asan test-tsan test-debug clean

deps:
	@scripts/install-deps.sh

deps-python:
	@scripts/install-deps.sh --python

build: deps-python
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

run: build
	$(CLI) demo

test: build
	ctest --preset release -j $(JOBS)

bench: build
	scripts/run-benchmarks.sh

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
	rm -rf build build-debug build-asan build-tsan
