# The two commands of the README: `make run` and `make test`. Both set everything up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-quick checks services venv migrate lint bench clean

$(STAMP): pyproject.toml cli/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# maasctl, the command-line client: its own package (cli/), installable alone with pip
	$(PY) -m pip install -q -e ./cli
	touch $(STAMP)

venv: $(STAMP)

services:
	bash deploy/local/services.sh

migrate: venv services
	$(PY) manage.py migrate --noinput

run: migrate
	$(PY) manage.py runplatform

OIDC := deploy/local/oidc
# The test OpenID Connect provider (tests/identity) runs on node with these packages.
$(OIDC)/node_modules/.package-lock.json: $(OIDC)/package.json $(OIDC)/package-lock.json
	cd $(OIDC) && npm ci --no-audit --no-fund

# The tests run on both cores (pytest-xdist, a file's tests on one worker), then those that
# restart or hold a server every test shares (`serial`) on their own. PYTEST_ARGS: more options
# for both runs, e.g. PYTEST_ARGS="-x".
PYTEST := $(PY) -m pytest
PARALLEL := -n 2 --dist loadfile

test: checks
	$(PYTEST) $(PARALLEL) -m "not serial" $(PYTEST_ARGS)
	$(PYTEST) -m serial $(PYTEST_ARGS)

# The inner loop: every test not marked slow or serial, in a few minutes.
test-quick: checks
	$(PYTEST) $(PARALLEL) -m "not slow and not serial" $(PYTEST_ARGS)

checks: venv services $(OIDC)/node_modules/.package-lock.json
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache --no-logo

bench: migrate
	$(PY) tests/bench/bench_control_plane.py

clean:
	rm -rf $(VENV)
