# aworld-gym: `make run` (the main job) and `make test` set up everything from nothing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMPS := .make-stamps
EXTRAS := dev,code,datasets

.PHONY: run test setup system-deps node-deps lint bench clean

run: setup
	$(VENV)/bin/aworld-gym rollout --env AWorld/Code-v0 --policy reference --episodes 32

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q -p no:cacheprovider

setup: $(STAMPS)/python $(STAMPS)/node $(STAMPS)/system

$(STAMPS)/python: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[$(EXTRAS)]"
	@touch $@

# Pinned third-party MCP servers (package.json); only the registry is reached.
$(STAMPS)/node: package.json
	@mkdir -p $(STAMPS)
	@if command -v npm >/dev/null; then npm install --no-audit --no-fund --loglevel=error; \
	  else echo "WARNING: npm not found: tests that need Node MCP servers will be skipped" >&2; fi
	@touch $@

# bubblewrap is the sandbox of AWorld/Code-v0 (network, PID and mount namespaces).
$(STAMPS)/system:
	@mkdir -p $(STAMPS)
	@if ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null; \
	  else echo "WARNING: bubblewrap (bwrap) is missing and cannot be installed here; the code sandbox falls back to rlimits only" >&2; fi; \
	fi
	@touch $@

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: setup
	$(PY) benchmarks/step_overhead.py

clean:
	rm -rf $(VENV) $(STAMPS) node_modules
