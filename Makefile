# Everything runs from a local virtualenv that these targets create and refresh.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast test-image check bench dashboards screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/mirrorgate demo

# Python's own bytecode cache stays on for the tests even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE=1): compiling every module and assertion rewrite anew costs each run, and
# each test-fast worker, seconds. The cache lives in the gitignored __pycache__ folders.
TEST_ENV := PYTHONDONTWRITEBYTECODE=

# Everything: unit, in-process integration and tests/e2e (real processes, sockets, timeouts). The
# tests that are not e2e run on both cores, as test-fast runs them; the e2e tests (fixed ports'
# neighbours, timeouts, real processes, the browser, the image) then run one at a time. Both parts
# always run; the target fails if either does.
test: $(STAMP)
	@status=0; \
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not e2e" -n 2 --dist worksteal || status=1; \
	$(TEST_ENV) $(BIN)/python -m pytest -q -m e2e || status=1; \
	exit $$status

# Everything but tests/e2e and the fuzzers, on both cores (pytest-xdist; an idle worker takes tests queued for
# the other, so one long test does not hold the run up); `pytest -m "not e2e and not fuzz"` runs the same tests
# in one process.
test-fast: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not e2e and not fuzz" -n 2 --dist worksteal

# The container image only: build the Dockerfile on a local Debian base with buildah, run it with
# podman (docs/container.md); `make test` runs it too.
test-image: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -m image tests/e2e/test_image.py

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python bench/run.py

# Rewrite grafana/dashboards/*.json from grafana/generate.py (a test fails if they differ).
dashboards: $(STAMP)
	$(BIN)/python grafana/generate.py

# PNGs of every console page at 1280 and 390 px into docs/console/ (scripts/screenshots.py: a real
# gateway, a real rollback, Debian's Chromium).
screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
