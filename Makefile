# Developer tasks. Everything runs inside .venv, which is (re)built only when setup.cfg or
# pyproject.toml change (the stamp file .venv/.installed records the last install).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

# Test environment:
# - OPENBLAS_NUM_THREADS=1: on small machines a prange right after a BLAS call can stall for
#   milliseconds while OpenBLAS threads spin (docs: numba-notes.md, "Parallel CPU").
# - AUTODIFF_AST_STRICT_REWRITE=1: a bug in jit's scalarizing rewrite fails the test that
#   meets it instead of falling back to the slower plain build (autodiff_ast/jit.py, _build).
# - Numba's on-disk cache and our generated modules stay inside the project (.cache/), so
#   test runs and xdist workers share them and `make clean` removes them.
TEST_ENV := OPENBLAS_NUM_THREADS=1 \
	AUTODIFF_AST_STRICT_REWRITE=1 \
	NUMBA_CACHE_DIR=$(CURDIR)/.cache/numba \
	AUTODIFF_AST_CACHE=$(CURDIR)/.cache/modules

.PHONY: .venv demo test bench lint examples clean fuzz
.PRECIOUS: $(VENV)/.installed-%

.venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test,cuda,mpi]'  # the CUDA (PTX) and MPI tests need both
	touch $@

# Optional extras (bench, examples) get their own stamps, redone after a base reinstall.
$(VENV)/.installed-%: $(STAMP)
	$(PIP) install -q -e '.[$*]'
	touch $@

demo: $(STAMP)
	MPLBACKEND=Agg $(PY) examples/logistic_regression.py

test: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest -q -n 2

# Property-based fuzzing of the derivative code for FUZZ_SECONDS (default 10 minutes): random
# programs checked against finite differences in forward and reverse mode, order 1 and 2,
# every FUZZ_JIT_EVERY-th also under jit (at most FUZZ_JIT_SHARE of the time, 0.25 unless set in
# the environment). Prints programs tried, failures (minimized), refusals.
FUZZ_SECONDS ?= 600
FUZZ_JIT_EVERY ?= 10
fuzz: $(STAMP)
	$(TEST_ENV) NUMBA_BOUNDSCHECK=1 $(PY) tests/fuzzing.py --seconds $(FUZZ_SECONDS) \
		--jit-every $(FUZZ_JIT_EVERY)

bench: $(STAMP)
	@if [ ! -f benchmarks/run.py ]; then \
		echo "make bench: the benchmarks are not written yet (no benchmarks/run.py)." >&2; \
		exit 1; \
	fi
	$(MAKE) $(VENV)/.installed-bench
	$(PY) benchmarks/run.py  # writes BENCHMARKS.md

lint: $(STAMP)
	$(VENV)/bin/ruff check .

examples: $(VENV)/.installed-examples
	@set -e; found=0; \
	for script in examples/*.py; do \
		[ -e "$$script" ] || continue; \
		found=1; \
		echo "== $$script"; \
		MPLBACKEND=Agg $(PY) "$$script"; \
	done; \
	if [ "$$found" = 0 ]; then echo "make examples: no examples/*.py found" >&2; exit 1; fi

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
