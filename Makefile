# Two entry points: `make run` builds the default target, `make test` runs the tests.
# Both create the virtual environment .venv first (Python 3.11; torch/torchvision pinned): `make run`
# installs the package alone, `make test` adds the test tools (the `test` extra: pytest, ruff, snakefmt, mkdocs,
# the SLURM plugins).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CORES ?= all

# pip does not byte-compile what it installs (--no-compile: 18,000 files, 61 of the 135 s a fresh test setup
# took); Python compiles the ~5,300 a test run imports at their first import and keeps them in __pycache__, also
# where PYTHONDONTWRITEBYTECODE is set (as on CI), or every Snakemake job, a fresh interpreter, would compile
# torch and transformers again
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test setup setup-test benchmark clean

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed-test

# the pip that comes with the venv (Python 3.11's is 23.x: PEP 660 editable installs), not a newer one
# fetched from PyPI on every fresh clone
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile -e .
	touch $@

# one resolve for the package and its test tools
$(VENV)/.installed-test: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile -e '.[test]'
	touch $@ $(VENV)/.installed

run: setup
	$(BIN)/snakemake --cores $(CORES) --keep-going

# a test module per worker (pytest-xdist): its module fixtures (tiny workflows) are built once, a project
# several modules read once per session (tests/conftest.py)
test: setup-test
	$(BIN)/python -m pytest -q -n auto --dist loadfile

benchmark: setup
	$(BIN)/python benchmarks/permutation_engine.py
	$(BIN)/python benchmarks/workflow.py
	$(BIN)/python benchmarks/regions.py
	$(BIN)/python benchmarks/grounded_embed.py
	$(BIN)/python benchmarks/bootstrap_ci.py

clean:
	rm -rf results/*/ .snakemake
