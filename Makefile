# gb: two commands on a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast bench-solvers paper clean

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
# about 9-14 minutes on the 2-core machine (README)
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# a quick loop for contributors: every module, the end-to-end subprocess cases (marked slow) left
# out; about 70 s on the idle machine
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not slurm"

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

clean:
	rm -rf runs $(VENV)
