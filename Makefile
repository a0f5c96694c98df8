# Two commands do all set-up: `make run` and `make test` (see README.md).
# Both are idempotent: the virtualenv is (re)built only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint typecheck bench bench-synth install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# the C kernel of the samplers is built by the install: rebuild when it changes
$(STAMP): pyproject.toml src/dpcurator/random/samplers/_kernel.c | $(PY)
	$(PY) -m pip install --quiet -e '.[all,test]'
	touch $(STAMP)

$(SYSTEM_STAMP): scripts/ensure-system-deps.sh | $(PY)
	bash scripts/ensure-system-deps.sh
	touch $(SYSTEM_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dpcurator serve --demo --host $(HOST) --port $(PORT)

test: $(STAMP) $(SYSTEM_STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks
	$(PY) -m mypy
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir "$$(mktemp -d)"
	$(PY) -m pytest -n 2 --dist loadgroup

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/noise.py

# The synthetic-data grid; the peers' virtualenv (.synth-venv/) is created first (idempotent).
# Options go in SYNTH_ARGS, e.g. SYNTH_ARGS="--datasets titanic --epsilons 1 --peers --repeats 4".
SYNTH_ARGS ?= --datasets titanic --epsilons 0.1 1 10 --repeats 4
bench-synth: $(STAMP)
	$(PY) benchmarks/synth.py --setup-peers
	$(PY) benchmarks/synth.py $(SYNTH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
