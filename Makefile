# The two commands of the README: `make run` and `make test`. Both set everything up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test services venv migrate lint bench clean

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

test: venv services $(OIDC)/node_modules/.package-lock.json
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest $(PYTEST_ARGS)

bench: migrate
	$(PY) tests/bench/bench_control_plane.py

clean:
	rm -rf $(VENV)
