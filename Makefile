# gb: two commands on a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast mutate mutate-auto bench-solvers paper clean data-dir

# MNIST for the tests and benchmarks: $GB_DATA_DIR when set, else ../shared/data when that folder
# exists (exported to every command below); otherwise the MNIST tests skip with the reason
ifeq ($(GB_DATA_DIR),)
ifneq ($(wildcard $(CURDIR)/../shared/data/.),)
export GB_DATA_DIR := $(abspath $(CURDIR)/../shared/data)
endif
endif

# torch is pinned and installed first: an unpinned torch would pull several GB of CUDA packages.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,mlflow]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/gb train-gd configs/quickstart.yaml
	$(BIN)/gb fit-svm configs/quickstart.yaml
	$(BIN)/gb compare runs/quickstart

# the whole suite on two workers, each file on one worker (a file's shared fixtures run once);
# the time measured in a fresh clone is in the README; the 20 slowest tests are listed at the end
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=20

# a quick loop for contributors on two workers: every module, the end-to-end and subprocess cases
# (marked slow) left out; it kills the planted one-line bugs of scripts/mutate.py (README)
test-fast: install
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not slurm"

# the mutation check over the modules that decide results (scripts/mutate.py; each mutation in a copy)
mutate: install
	$(BIN)/python scripts/mutate.py --pytest-args "tests/test_decisions.py tests/test_cache.py -x -q"

# every operator of those modules swapped in turn (about an hour); a survivor is a place to look
DECIDING = gbcli/programs/certify.py gbcli/programs/norms.py gbcli/metrics.py gbcli/models/gating.py \
	gbcli/data/datasets.py gbcli/store/identity.py gbcli/store/cache.py
mutate-auto: install
	$(BIN)/python scripts/mutate.py $(addprefix --auto ,$(DECIDING)) --pytest-args \
	  "-m 'not slow and not slurm' -x -q tests/test_decisions.py tests/test_cache.py tests/test_certificates.py \
	  tests/test_programs.py tests/test_dual.py tests/test_active_set.py tests/test_estimators.py tests/test_data.py"

# the solver benchmark of BENCHMARKS.md (needs MNIST: GB_DATA_DIR, about 10 minutes)
bench-solvers: install
	$(BIN)/python benchmarks/solvers.py --markdown runs/bench/solvers.md

# the three published grids on full MNIST (protocol section 8; hours on 2 cores, see results/paper/)
JOBS ?= 2
paper: install
	for g in fig2 shallow fig3; do \
	  $(BIN)/gb sweep configs/paper/$$g.yaml --jobs $(JOBS) -q; \
	  mkdir -p results/paper/$$g && cp -r runs/paper-$$g/tables runs/paper-$$g/figures results/paper/$$g/; \
	done

# the data folder the commands above see (empty: none; the MNIST tests skip)
data-dir:
	@echo "$${GB_DATA_DIR:-}"

clean:
	rm -rf runs $(VENV)
