# Queuey: `make serve` and `make test` work on a fresh machine with nothing run first.
# `make help` lists the targets.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` and `make test-fast`: the tests mostly wait
# (on services, processes, timeouts), so a 2-core machine runs more than two at
# once (tests/parallel.py shares the work out). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 4
HARNESS := $(PY) -m harness

.DEFAULT_GOAL := help
.PHONY: help install java browser prometheus serve test test-fast lint format docs screenshots bench cassandra cassandra-cluster zookeeper services-stop clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip wheel
	$(PIP) install --quiet "setuptools>=68,<81"
	$(PIP) install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install Queuey with its test, Spark and docs dependencies

java: $(STAMP) ## resolve the Cassandra and ZooKeeper jars from Maven Central (cached in ~/.m2)
	$(HARNESS) classpath cassandra
	$(HARNESS) classpath zookeeper

browser: ## install Debian's chromium and chromium-driver for the admin pages' browser tests (needs root; skipped when present)
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then \
		echo "browser: /usr/bin/chromium and /usr/bin/chromedriver are installed"; \
	elif [ "$$(id -u)" -ne 0 ]; then \
		echo "browser: /usr/bin/chromium or /usr/bin/chromedriver is missing, and installing them needs root:" >&2; \
		echo "    sudo apt-get update && sudo apt-get install -y chromium chromium-driver" >&2; \
		exit 1; \
	else \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; \
	fi

prometheus: ## install Debian's prometheus (and promtool) for the alert rules' and autoscaling tests (needs root; skipped when present)
	@if [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; then \
		echo "prometheus: /usr/bin/prometheus and /usr/bin/promtool are installed"; \
	elif [ "$$(id -u)" -ne 0 ]; then \
		echo "prometheus: /usr/bin/prometheus or /usr/bin/promtool is missing, and installing them needs root:" >&2; \
		echo "    sudo apt-get update && sudo apt-get install -y --no-install-recommends prometheus" >&2; \
		exit 1; \
	else \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
	fi

serve: $(STAMP) ## run Queuey on the embedded SQLite store at http://127.0.0.1:5000
	$(VENV)/bin/queuey schema upgrade -c development.ini
	$(VENV)/bin/pserve development.ini

test: $(STAMP) java browser prometheus ## start Cassandra and ZooKeeper, run every test on parallel workers (TEST_WORKERS=4; the admin pages in headless Chromium, the alert rules in Prometheus too), stop them (even on failure)
	@set -u; status=0; \
	trap '$(HARNESS) stop-all' EXIT; \
	$(HARNESS) cassandra start && $(HARNESS) zookeeper start || status=$$?; \
	if [ $$status -eq 0 ]; then \
		PYSPARK_PYTHON=$(CURDIR)/$(PY) $(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS) || status=$$?; \
	fi; \
	exit $$status

test-fast: $(STAMP) ## run the quick tests: none that needs an external service or is marked slow (~2.5 min)
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not cassandra and not zookeeper and not spark and not slow" $(PYTEST_ARGS)

lint: $(STAMP) ## ruff lint and format check
	$(VENV)/bin/ruff check queuey harness tests bench examples
	$(VENV)/bin/ruff format --check queuey harness tests bench examples

format: $(STAMP) ## apply ruff's formatting and safe fixes
	$(VENV)/bin/ruff check --fix queuey harness tests bench examples
	$(VENV)/bin/ruff format queuey harness tests bench examples

docs: $(STAMP) ## build the Sphinx documentation into docs/_build/html
	$(VENV)/bin/sphinx-build -W -q -b html docs docs/_build/html

screenshots: $(STAMP) browser ## retake the admin pages' screenshots in docs/_static (headless Chromium, demo data)
	$(PY) docs/screenshots.py

bench: $(STAMP) java ## run the benchmarks; prints one JSON document
	PYSPARK_PYTHON=$(CURDIR)/$(PY) $(PY) bench/run.py

cassandra: $(STAMP) ## start the single development Cassandra node (CQL on 127.0.0.1:19042)
	$(HARNESS) cassandra start

cassandra-cluster: $(STAMP) ## start a 3-node Cassandra cluster on 127.0.0.1/2/3 (CQL port 19142)
	$(HARNESS) cassandra start --nodes 3

zookeeper: $(STAMP) ## start ZooKeeper on 127.0.0.1:12181
	$(HARNESS) zookeeper start

services-stop: $(STAMP) ## stop every Cassandra and ZooKeeper process this project started
	$(HARNESS) stop-all

clean: services-stop ## stop services and remove var/ and build output
	rm -rf var docs/_build build *.egg-info
