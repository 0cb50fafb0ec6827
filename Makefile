# Replay: `make run` starts the dashboard with demo sessions, `make test` runs every test.
# Both set up everything they need on a fresh machine (a .venv, the project, Chromium, PostgreSQL).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-sqlite test-postgres install install-dev browser postgres migrate demo bench clean help

help:
	@echo "make run    start the dashboard (web + worker) with demo sessions on http://$(HOST):$(PORT)/"
	@echo "make test   ruff, then the suite on SQLite and on a throw-away PostgreSQL, and on a second CPython"
	@echo "make bench  the import and replay benchmarks (README.md, Benchmarks, lists all fifteen)"
	@echo "make test-sqlite ARGS=tests/test_x.py    one file (or any pytest arguments) on SQLite"
	@echo "make test-postgres ARGS=tests/test_x.py  the same on a throw-away PostgreSQL"
	@echo "make install      the project into .venv (install-dev: with the test tools and rlm-code)"
	@echo "make browser      Debian's chromium and chromium-driver for the browser tests (apt)"
	@echo "make postgres     Debian's postgresql for the PostgreSQL pass, where initdb is missing (apt)"
	@echo "make migrate      the database's tables; make demo: those and the demo sessions"
	@echo "make clean  the caches, the second CPython's venv and collected static files (var/'s data stays)"

$(PY):
	@PYBIN=$$(.ci/find-python) || exit 1; \
	echo "Creating $(VENV) with $$PYBIN"; \
	"$$PYBIN" -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $@

$(DEV_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev]'
	@# The reference library: its session_replay module needs only pyyaml and rich (in [dev]),
	@# while a full install pulls ~75 packages (dspy, litellm ...), so it comes without deps.
	$(PY) -m pip install --quiet --no-deps 'rlm-code==0.1.13'
	@touch $@

install: $(STAMP)
install-dev: $(DEV_STAMP)

# The suite runs on a second CPython too (3.12 beside 3.13, or the other way round) where the
# machine has one: the same code must run on every CPython >= 3.12. To stay inside CI's time,
# the browser journeys run once (first Python, SQLite: they test pages, not the database) and
# the second Python runs on SQLite only (the PostgreSQL code is the same on every Python),
# beside the PostgreSQL run: each is one process, and CI's machine has two cores.
ALT_VENV := .venv-alt
ALT_PY := $(ALT_VENV)/bin/python
ALT_STAMP := $(ALT_VENV)/.installed-dev

$(ALT_STAMP): pyproject.toml | $(PY)
	@PYBIN=$$(.ci/find-python --other $$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')) || \
	  { echo "note: no second Python >= 3.12 here; the suite runs on $$($(PY) --version) only"; exit 0; }; \
	echo "Creating $(ALT_VENV) with $$PYBIN"; \
	"$$PYBIN" -m venv $(ALT_VENV) && \
	$(ALT_PY) -m pip install --quiet --upgrade pip && \
	$(ALT_PY) -m pip install --quiet -e '.[dev]' && \
	$(ALT_PY) -m pip install --quiet --no-deps 'rlm-code==0.1.13' && \
	touch $@

# Browser tests drive Debian's Chromium (never a downloaded browser).
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO=sudo; else \
	    echo "error: Chromium is missing; install the Debian packages chromium and chromium-driver" >&2; exit 1; fi; \
	  echo "Installing Debian packages chromium chromium-driver"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# The PostgreSQL pass starts a throw-away server of its own (.ci/with_postgres.py) from the
# server's programs (initdb, pg_ctl, postgres): Debian's postgresql package where they are missing.
postgres:
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO=sudo; else \
	    echo "error: PostgreSQL is missing; install the Debian package postgresql" >&2; exit 1; fi; \
	  echo "Installing Debian package postgresql"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput -v 0

demo: migrate
	$(PY) manage.py setup_demo --url http://$(HOST):$(PORT)/

# The production server (docs/deployment.md), in demo mode: the development secret key is
# allowed. `manage.py serve` supervises granian's web processes and the job cluster, and stops
# them all on Ctrl-C or SIGTERM.
run: demo
	$(PY) manage.py collectstatic --noinput -v 0
	@echo "Starting Replay on http://$(HOST):$(PORT)/ (web + worker); Ctrl-C stops both."
	REPLAY_DEMO=1 $(PY) manage.py serve --host $(HOST) --port $(PORT)

# Three passes on two cores, two at a time: the SQLite pass with the browser tests beside the
# other Python's SQLite pass, then the PostgreSQL pass split in two halves (test files
# alternately by size), each with its own throw-away server. Each side's output is printed
# whole once it is done.
test: $(DEV_STAMP) $(ALT_STAMP) browser postgres
	@rc=0; mkdir -p var; \
	echo "=== ruff (lint and format) ==="; \
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . || rc=1; \
	version=$$($(PY) --version); \
	alt_pid=""; \
	if [ -x $(ALT_PY) ]; then \
	  $(ALT_PY) -m pytest -m "not browser" --durations=12 > var/test-alt-python.log 2>&1 & alt_pid=$$!; \
	fi; \
	echo "=== tests on SQLite, $$version (with the browser tests) ==="; \
	$(PY) -m pytest --durations=12 || rc=1; \
	if [ -n "$$alt_pid" ]; then \
	  echo "=== tests on SQLite, $$($(ALT_PY) --version) (without the browser tests; ran beside the pass above) ==="; \
	  wait $$alt_pid || rc=1; cat var/test-alt-python.log; \
	fi; \
	half_a=$$(ls -S tests/test_*.py | awk 'NR % 2 == 1'); half_b=$$(ls -S tests/test_*.py | awk 'NR % 2 == 0'); \
	$(PY) .ci/with_postgres.py -- $(PY) -m pytest -m "not browser" --durations=6 $$half_b > var/test-postgres-b.log 2>&1 & pg_pid=$$!; \
	echo "=== tests on PostgreSQL, $$version (without the browser tests), first half of the files ==="; \
	$(PY) .ci/with_postgres.py -- $(PY) -m pytest -m "not browser" --durations=6 $$half_a || rc=1; \
	echo "=== tests on PostgreSQL, $$version, second half of the files (ran beside the first) ==="; \
	wait $$pg_pid || rc=1; cat var/test-postgres-b.log; \
	if [ $$rc -ne 0 ]; then echo "make test: FAILED (see above)"; fi; \
	exit $$rc

test-sqlite: $(DEV_STAMP)
	$(PY) -m pytest $(ARGS)

test-postgres: $(DEV_STAMP) postgres
	$(PY) .ci/with_postgres.py -- $(PY) -m pytest $(ARGS)

bench: $(DEV_STAMP) postgres
	$(PY) bench/import_bench.py
	$(PY) bench/replay_bench.py

# Never var/ itself: it holds the SQLite database, the kept uploads and the bundle signing key
# (docs/deployment.md says to back them up), which a "clean" must not take.
clean:
	rm -rf var/static .pytest_cache $(ALT_VENV)
