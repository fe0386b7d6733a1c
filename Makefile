# The two commands of the README:
#   make run   installs what is missing, builds Release, runs the main job on the built-in default
#   make test  installs what is missing, builds, runs every test through ctest (below: which build runs which)
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=
# Ninja where installed: the Makefile generator compiles no file of a layer before the library
# of the layer below is archived, so on 2 cores one long file (or link) leaves the other core
# idle; Ninja only orders the links. A build folder keeps the generator it was made with.
GENERATOR ?= $(if $(shell command -v ninja 2>/dev/null),Ninja)
generator_for = $(if $(GENERATOR),$(if $(wildcard $(1)/CMakeCache.txt),,-G '$(GENERATOR)'))

.PHONY: help run test test-release test-sanitize build deps deps-runtime bench clean

help:
	@echo "make run           build the loom binary only (Release, $(BUILD)/) and run the demo: a model generates,"
	@echo "                   one load under sp=2, tp=2 and Shift side by side, a plan set migrating KV, the"
	@echo "                   simulator on 8 H200 (installs only what building loom needs)"
	@echo "make test          every test once: the paper sweeps in Release ($(BUILD)/), the rest under ASan+UBSan"
	@echo "                   ($(BUILD)-asan/, a second build tree); what CI runs"
	@echo "make test-release  every test in the Release build (quicker, no sanitizers)"
	@echo "make test-sanitize SANITIZE_TARGETS=... SANITIZE_LABELS=...  a sanitized subset (tests/sanitize/README.md)"
	@echo "make build         everything (loom, tests, benchmarks) in Release"
	@echo "make bench         build and run every benchmark of bench/ (ratios, not CI)"
	@echo "make clean         remove $(BUILD)/"
	@echo "GPU: scripts/gpu-check.sh build|run (tests/gpu/README.md)"

deps:
	@bash scripts/install-deps.sh

deps-runtime:
	@bash scripts/install-deps.sh --runtime

build: deps
	@cmake -S . -B $(BUILD) $(call generator_for,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DLOOM_TESTS=ON -DLOOM_BENCH=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The demo needs the loom binary alone: no tests, no benchmarks, none of their packages.
run: deps-runtime
	@cmake -S . -B $(BUILD) $(call generator_for,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DLOOM_TESTS=OFF -DLOOM_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target loom
	@bash scripts/run-default.sh $(BUILD)/loom

# `make test` runs every test once, each in one of two builds:
#   1. Release ($(BUILD)): only the tests of RELEASE_ONLY below (only test_sim is built for them);
#   2. ASan + UBSan ($(BUILD)-asan, `make test-sanitize`): every other test of every area, MPI
#      runs, servers, the CLI and the fuzz harnesses' corpora included; the benchmarks are
#      compiled there (at -O0, never run) so CI still catches one that stops compiling.
# Nothing runs twice; CI (`.ci/run`) is `make test` (times: tests/sanitize/README.md).
# `make test-release` runs the whole suite in the Release build instead (no sanitizers): quicker
# on a developer machine, and what `make test` was before issue 19.
#
# RELEASE_ONLY, one ctest regex, the one list of tests that do not run sanitized, each for its
# reason (their code paths are those of the sim unit tests, which do run sanitized):
#   SeesawFig10/13/14.*  paper-figure sweeps of the simulator (Seesaw, issue 13): ~40 s of Release
#                        CPU, several times that under ASan
#   SidpExperiments.*    paper-figure sweeps (SiDP, issue 14): ~60 s of Release CPU
#   NitsumPaper.*        paper-figure sweeps (Nitsum, issue 15): ~15 s of Release CPU
#   SimSpeed.*           timing: bounds the simulator's wall time on a 19k-request trace, which
#                        only means something for the optimized build
#   SimValidate.A100*    the calibration's out-of-sample validation over every a100 measurement
#                        file: ~12 s of Release CPU, 102 s under ASan (CI of 2026-11-29); the
#                        other SimValidate tests run `loom profile`, which the Release part
#                        does not build
RELEASE_ONLY ?= ^((SeesawFig10|SeesawFig13|SeesawFig14|SidpExperiments|NitsumPaper|SimSpeed)\.|SimValidate\.A100)
RELEASE_ONLY_TARGETS ?= test_sim

test: deps
	@echo "make test: Release build ($(BUILD)): the tests of RELEASE_ONLY (Makefile); then ASan + UBSan build ($(BUILD)-asan): every other test"
	@cmake -S . -B $(BUILD) $(call generator_for,$(BUILD)) -DCMAKE_BUILD_TYPE=Release -DLOOM_TESTS=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target $(RELEASE_ONLY_TARGETS)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 --no-tests=error -R '$(RELEASE_ONLY)'
	@$(MAKE) --no-print-directory test-sanitize

test-release: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The sanitized build (issue 19): ASan + UBSan in $(BUILD)-asan (-O1 -g1, test programs -O0:
# CMakeLists.txt; UBSan halts on the first report), MPI tests included, with LeakSanitizer
# suppressions only for OpenMPI's own allocations (tests/sanitize/lsan_openmpi.supp). Compiled
# by clang++ where it is installed (about 60% of g++'s CPU for this build:
# tests/sanitize/README.md), else by g++ with the same flags. SANITIZE_TARGETS / SANITIZE_LABELS /
# SANITIZE_EXCLUDE choose what is built and run (ctest labels = test areas,
# tests/CMakeLists.txt); the default is every test but RELEASE_ONLY. A quicker subset, e.g.:
#   make test-sanitize SANITIZE_TARGETS="test_core test_comm_mpi" SANITIZE_LABELS='^(core|comm)$$'
SANITIZE_TARGETS ?= all
SANITIZE_LABELS ?= .
SANITIZE_EXCLUDE ?= $(RELEASE_ONLY)
SANITIZE_CXX ?= $(shell command -v clang++ 2>/dev/null)
SANITIZE_CC ?= $(shell command -v clang 2>/dev/null)
# Precompiled headers for the test programs (CMakeLists.txt LOOM_PCH).
SANITIZE_PCH ?= ON
ifneq ($(SANITIZE_CXX),)
ifneq ($(SANITIZE_CC),)
sanitize_compilers := -DCMAKE_CXX_COMPILER=$(SANITIZE_CXX) -DCMAKE_C_COMPILER=$(SANITIZE_CC)
endif
endif
test-sanitize: deps
	@$(if $(sanitize_compilers),echo "make test-sanitize: compiler $(SANITIZE_CXX)",\
	  echo "make test-sanitize: clang++ not found: building with the default compiler (g++), about 1.6x the CPU time (apt-get install clang)")
	@cmake -S . -B $(BUILD)-asan $(call generator_for,$(BUILD)-asan) $(sanitize_compilers) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=ON -DLOOM_BENCH=ON -DLOOM_FUZZ=ON -DLOOM_PCH=$(SANITIZE_PCH) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS) --target $(SANITIZE_TARGETS)
	@cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) --timeout 900 --no-tests=error -L '$(SANITIZE_LABELS)' \
	  $(if $(SANITIZE_EXCLUDE),-E '$(SANITIZE_EXCLUDE)')

bench: build
	@for b in $(BUILD)/bench/bench_*; do echo "== $$b"; $$b; done

clean:
	rm -rf $(BUILD)
