# Set-up and entry points. `make run` and `make test` are all a fresh machine needs
# (Python >= 3.11 and make). Both create or reuse .venv; nothing is reinstalled on a second run.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
# Extras installed for running and testing (see pyproject.toml for what needs each).
EXTRAS ?= dev,zoo,cluster,postgres,dashboard,saturate
# Tested versions of every dependency but torch; `make lock` refreshes it.
LOCK   := constraints.txt
STAMP  := $(VENV)/.rewrite-tuner-installed
PEERS_STAMP := $(VENV)/.rewrite-tuner-peers-installed
PYTEST_ARGS ?=

.PHONY: setup peers run test test-all lint bench lock clean

setup: $(STAMP)

## The peers the benchmarks compare with (Ax, SMAC3, Optuna), installed from the lock.
peers: $(PEERS_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned to the CPU wheel: a bare `torch` requirement on an empty
# environment would pull a multi-GB CUDA build. An importable torch is kept.
$(STAMP): pyproject.toml $(LOCK) | $(PY)
	@$(PY) -c "import torch" 2>/dev/null \
		&& echo "torch $$($(PY) -c 'import torch; print(torch.__version__)') found; keeping it" \
		|| $(PIP) install "torch==2.13.0"
	$(PIP) install -c $(LOCK) -e ".[$(EXTRAS)]"
	@touch $@

$(PEERS_STAMP): $(STAMP)
	$(PIP) install -c $(LOCK) -e ".[$(EXTRAS),peers]"
	@touch $@

## The main job: the default study on built-in workloads with embedded storage.
run: $(STAMP)
	$(VENV)/bin/tuner demo

## Every test not marked slow, and the notebooks (what CI runs). PostgreSQL tests run when
## RT_POSTGRES_URL is set (.ci/postgres.sh starts a throwaway server) and skip otherwise.
test: $(STAMP)
	$(PY) -m pytest -m "not slow" --nbmake tests notebooks $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest --nbmake tests notebooks $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(PEERS_STAMP)
	@for f in benchmarks/bench_*.py; do m=benchmarks.$$(basename $$f .py); echo "== $$m"; $(PY) -m $$m || exit 1; done

## Refresh the lock: the newest versions pyproject.toml allows, installed in a scratch environment
## (torch is kept out of it). Run `make clean test` on the result before committing it.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip --disable-pip-version-check install -q "torch==2.13.0"
	.venv-lock/bin/python -m pip --disable-pip-version-check install -q -e ".[$(EXTRAS),peers]"
	{ sed -n '/^#/p' $(LOCK); .venv-lock/bin/python -m pip freeze --exclude-editable \
		| grep -v -E '^(torch|triton|nvidia-)'; } > $(LOCK).new && mv $(LOCK).new $(LOCK)
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
